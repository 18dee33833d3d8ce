package ratelimit

import (
	"context"
	"time"

	"github.com/rlkit/ratelimit/internal/typednil"
)

// Clock is the source of time for a limiter: the two things limiters ask
// of time, in the shape of the time package, so that any fake can
// implement it in a few lines. *clock.Mock from
// github.com/benbjohnson/clock satisfies it as it is, and so does the
// value clock.New returns.
//
// Without WithClock a limiter uses the time package directly, which also
// makes it run on the fake time of a testing/synctest bubble.
type Clock interface {
	// Now returns the current time. Limiters measure durations as
	// differences of Now values, so a clock whose times carry a monotonic
	// reading (as time.Now's do) is immune to wall-clock steps.
	Now() time.Time
	// After returns a channel that receives the time once d has passed on
	// this clock, as time.After does. A waiter that gives up early stops
	// listening, so the clock must not block sending on the channel: give
	// it a buffer of one, as time.After does.
	After(d time.Duration) <-chan time.Time
}

// Option configures a limiter. Options are applied in order after the
// required arguments; validation happens after all options are applied.
type Option interface {
	apply(*options)
}

// options holds every optional setting, with its default.
type options struct {
	clock      Clock // nil means the real clock (fast path)
	maxKeys    int   // Keyed only; meaningful when maxKeysSet
	maxKeysSet bool
	observer   Observer // nil: no reports
	name       string   // the limiter's name in Events
	err        error    // the first invalid option
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithClock makes the limiter read time from c instead of the real clock.
// Pass a fake clock of your own, or a *clock.Mock from
// github.com/benbjohnson/clock, for deterministic tests. A nil c selects the real clock; a typed nil (such as a nil
// *clock.Mock) is an error: the constructor returns an error wrapping
// [ErrInvalidConfig].
func WithClock(c Clock) Option {
	return optionFunc(func(o *options) {
		if c != nil && typednil.Is(c) {
			o.setErr(configError("WithClock: clock is a nil %T", c))
			return
		}
		o.clock = c
	})
}

// setErr records the first invalid option.
func (o *options) setErr(err error) {
	if o.err == nil {
		o.err = err
	}
}

// buildOptions applies opts in order. Its error is that of the first
// invalid option.
func buildOptions(opts []Option) (options, error) {
	var o options
	for _, opt := range opts {
		if !typednil.Is(opt) {
			opt.apply(&o)
		}
	}
	return o, o.err
}

// timeSource turns a Clock into integer nanoseconds on the Unix time scale:
// the wall time read once at creation plus the monotonic time elapsed since.
// Windows are therefore aligned to the Unix epoch, while a wall-clock step
// after creation neither mints nor destroys quota.
type timeSource struct {
	clock    Clock     // nil: the real clock
	base     time.Time // read at creation; carries a monotonic reading on the real clock
	baseUnix int64     // base as Unix nanoseconds
}

func newTimeSource(c Clock) timeSource {
	var base time.Time
	if c == nil {
		base = time.Now()
	} else {
		base = c.Now()
	}
	return timeSource{clock: c, base: base, baseUnix: base.UnixNano()}
}

// now returns the current time in Unix nanoseconds, measured monotonically
// from creation. On the real clock time.Since reads only the monotonic
// clock, which is about half the cost of time.Now.
func (t *timeSource) now() int64 {
	if t.clock == nil {
		return t.baseUnix + int64(time.Since(t.base))
	}
	return t.baseUnix + int64(t.clock.Now().Sub(t.base))
}

// sleep waits for d or until ctx is done, whichever comes first. On the
// real clock it stops its timer either way.
func (t *timeSource) sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	var c <-chan time.Time
	if t.clock == nil {
		tm := time.NewTimer(d)
		defer tm.Stop()
		c = tm.C
	} else {
		c = t.clock.After(d)
	}
	select {
	case <-c:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// checkDeadline returns an error when waiting d would outlast ctx's
// deadline. Deadlines are real time: they come from the context, not from
// the limiter's clock.
func checkDeadline(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok && d > time.Until(dl) {
		return deadlineError(d)
	}
	return nil
}
