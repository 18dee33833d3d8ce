// Package timesrc is the one time source of every limiter in this
// repository: integer nanoseconds on the Unix time scale from an injectable
// clock, sleeps that end with their context, and the deadline check of the
// Wait methods.
package timesrc

import (
	"context"
	"time"
)

// Clock is the shape of ratelimit.Clock (the same method set, so every
// ratelimit.Clock is one).
type Clock interface {
	Now() time.Time
	After(d time.Duration) <-chan time.Time
}

// Source turns a Clock into integer nanoseconds on the Unix time scale: the
// wall time read once at creation plus the monotonic time elapsed since.
// Windows are therefore aligned to the Unix epoch, while a wall-clock step
// after creation neither mints nor destroys quota. The zero Source is not
// usable; make one with New.
type Source struct {
	clock    Clock     // nil: the real clock
	base     time.Time // read at creation; carries a monotonic reading on the real clock
	baseUnix int64     // base as Unix nanoseconds
}

// New returns a Source reading c, or the real clock when c is nil.
func New(c Clock) Source {
	if c == nil {
		return newReal(readReal)
	}
	base := c.Now()
	return Source{clock: c, base: base, baseUnix: base.UnixNano()}
}

// readReal reads the real clock: its wall time in Unix nanoseconds, and
// the reading, which carries the monotonic time.
func readReal() (int64, time.Time) {
	t := time.Now()
	return t.UnixNano(), t
}

// baseReadings is how many readings newReal takes its base from.
const baseReadings = 3

// newReal returns a Source on the real clock based on the reading of read
// (readReal, or a test's) whose wall and monotonic parts were read closest
// together. time.Now reads the wall clock, then the monotonic clock: a
// thread descheduled in between (on a loaded machine, about one reading in
// 10^5 by over 100µs, and by up to 100ms) gets a monotonic part that is
// late, and a Source based on it would run that far behind the wall clock
// all its life, off the Unix time scale it promises (windows aligned to
// the epoch, times comparable with Redis's TIME). A late monotonic part
// lowers the reading's wall minus monotonic time, which every true reading
// shares: the base is the reading where it is highest.
func newReal(read func() (int64, time.Time)) Source {
	wall, mono := read()
	for range baseReadings - 1 {
		w, m := read()
		// (w - wall) - (m - mono): how much higher w - m is than wall - mono.
		if w-wall > int64(m.Sub(mono)) {
			wall, mono = w, m
		}
	}
	return Source{base: mono, baseUnix: wall}
}

// Clock returns the clock s reads, nil for the real clock.
func (s *Source) Clock() Clock { return s.clock }

// Now returns the current time in Unix nanoseconds, measured monotonically
// from creation. On the real clock time.Since reads only the monotonic
// clock, which is about half the cost of time.Now.
func (s *Source) Now() int64 {
	if s.clock == nil {
		return s.baseUnix + int64(time.Since(s.base))
	}
	return s.baseUnix + int64(s.clock.Now().Sub(s.base))
}

// NowTimed is Now for a caller that also times its call on the real clock
// (for an observer's latency): it returns the time and a mark that Since
// turns into the real time elapsed. On the real clock the time itself is
// the mark, so timing the call costs one more monotonic reading (in Since)
// and no wall-clock reading at all.
func (s *Source) NowTimed() (now int64, mark time.Time) {
	if s.clock == nil {
		return s.Now(), time.Time{}
	}
	mark = time.Now()
	return s.Now(), mark
}

// Since returns the real time elapsed since NowTimed returned now and
// mark.
func (s *Source) Since(now int64, mark time.Time) time.Duration {
	if s.clock == nil {
		return time.Duration(s.Now() - now)
	}
	return time.Since(mark)
}

// Time returns the current time as a time.Time from the clock.
func (s *Source) Time() time.Time {
	if s.clock == nil {
		return time.Now()
	}
	return s.clock.Now()
}

// Sleep waits for d on the clock, or until ctx is done, whichever comes
// first. On the real clock it stops its timer either way.
func Sleep(ctx context.Context, c Clock, d time.Duration) error {
	return SleepOr(ctx, c, d, nil)
}

// SleepOr is Sleep that also ends, with a nil error, when wake is closed
// (a nil wake never is).
func SleepOr(ctx context.Context, c Clock, d time.Duration, wake <-chan struct{}) error {
	if d <= 0 {
		return ctx.Err()
	}
	var ch <-chan time.Time
	if c == nil {
		tm := time.NewTimer(d)
		defer tm.Stop()
		ch = tm.C
	} else {
		ch = c.After(d)
	}
	select {
	case <-ch:
		return nil
	case <-wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Sleep waits for d on s's clock, or until ctx is done.
func (s *Source) Sleep(ctx context.Context, d time.Duration) error {
	return Sleep(ctx, s.clock, d)
}

// Outlasts reports whether waiting d would outlast ctx's deadline.
// Deadlines are real time: they come from the context, not from a
// limiter's clock.
func Outlasts(ctx context.Context, d time.Duration) bool {
	dl, ok := ctx.Deadline()
	return ok && d > time.Until(dl)
}
