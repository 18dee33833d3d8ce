package ratelimit

import (
	"context"
	"time"

	"github.com/rlkit/ratelimit/internal/ring"
)

// SlidingLog is a sliding window log: it records the time of every admitted
// event and admits at most limit events in any interval of length window.
// An event leaves the log once it is window old. It is exact, with no burst
// across window boundaries, at the price of memory that grows with use: up
// to limit timestamps (16 bytes each, events at the same nanosecond share
// one), held in a ring buffer that grows on demand and shrinks as the log
// empties.
//
// Create one with [NewSlidingLog]; the zero value is not usable. A
// SlidingLog is safe for concurrent use.
type SlidingLog struct {
	c core[slState, *slidingLogAlg]
}

var _ Limiter = (*SlidingLog)(nil)

// NewSlidingLog returns a limiter that admits at most limit events in any
// interval of length window. It returns an error wrapping
// [ErrInvalidConfig] when an argument is not positive or window is longer
// than 100 years, or when an option is invalid (such as [WithClock] given
// a typed nil).
func NewSlidingLog(limit int, window time.Duration, opts ...Option) (*SlidingLog, error) {
	alg, err := newSlidingLogAlg(limit, window, argNames("ratelimit.NewSlidingLog", "limit", "", "window"))
	if err != nil {
		return nil, err
	}
	l := &SlidingLog{}
	if err := l.c.init("NewSlidingLog", SlidingLogAlgorithm, alg, opts); err != nil {
		return nil, err
	}
	return l, nil
}

// Allow reports whether one event may happen now, and counts it if so. It
// is shorthand for AllowN(1).Allowed.
func (l *SlidingLog) Allow() bool { return l.c.allow() }

// AllowN reports whether n events may happen now, and counts them if so:
// all n or nothing. It never blocks, and a denied request counts nothing.
// The Decision's RetryAfter is when enough logged events will have left
// the window for n. When n <= 0 or n exceeds the limit the Decision is denied with
// RetryAfter set to [RetryNever].
func (l *SlidingLog) AllowN(n int) Decision { return l.c.allowN(n) }

// Peek reports the Decision that AllowN(n) would return now, without
// counting anything. Peek(0) reports the current quota: its Remaining is
// how many events would be admitted right now, and its Allowed is false
// only when [SlidingLog.SetLimit] lowered the limit below the events in the log.
func (l *SlidingLog) Peek(n int) Decision { return l.c.peek(n) }

// Wait blocks until one event is admitted or ctx is done. It is shorthand
// for WaitN(ctx, 1).
func (l *SlidingLog) Wait(ctx context.Context) error { return l.c.waitN(ctx, 1) }

// WaitN blocks until n events are admitted, and returns nil once they are.
// It retries after each denied Decision's RetryAfter, so concurrent waiters
// are not served in arrival order.
//
// It returns an error at once when n <= 0 ([ErrInvalidN]) or n exceeds
// the limit ([ErrExceedsLimit]), and without sleeping when the wait before
// the next retry would outlast ctx's deadline ([ErrDeadline], which also
// matches context.DeadlineExceeded). If ctx is done while waiting it
// returns ctx.Err().
func (l *SlidingLog) WaitN(ctx context.Context, n int) error { return l.c.waitN(ctx, n) }

// SetLimit changes the number of events allowed per window. Events in the
// log still count against the new limit. The window length cannot change.
func (l *SlidingLog) SetLimit(limit int) error {
	alg, err := newSlidingLogAlg(limit, time.Duration(l.c.current().window), argNames("ratelimit.SlidingLog.SetLimit", "limit", "", "window"))
	if err != nil {
		return err
	}
	l.c.reconfigure(alg, func(*slState, int64) {})
	return nil
}

// slidingLogAlg is the sliding log's arithmetic.
type slidingLogAlg struct {
	perWindow int64 // events per window
	window    int64 // ns
}

// slState is one sliding log's state. The zero value is an empty log.
type slState struct {
	log   ring.Log
	total int64 // sum of the log's counts
}

// newSlidingLogAlg validates the parameters, which names tells how the caller
// calls, and returns the arithmetic of limit events per window.
func newSlidingLogAlg(limit int, window time.Duration, names paramNames) (*slidingLogAlg, error) {
	if err := checkCount(names.count, limit); err != nil {
		return nil, err
	}
	if err := checkPeriod(names.period, window); err != nil {
		return nil, err
	}
	return &slidingLogAlg{perWindow: int64(limit), window: int64(window)}, nil
}

func (a *slidingLogAlg) limit() int64 { return a.perWindow }

// evict drops the entries that are window old at now: an entry is kept
// while ts > now - window.
func (a *slidingLogAlg) evict(st *slState, now int64) {
	for st.log.Len() > 0 && st.log.Front().TS <= now-a.window {
		st.total -= st.log.Front().N
		st.log.PopFront()
	}
}

func (a *slidingLogAlg) decide(st *slState, now, n int64, act action) verdict {
	a.evict(st, now)
	if after := st.total + n; after <= a.perWindow {
		d := verdict{ok: true, remaining: a.perWindow - after}
		if after > 0 {
			newest := now
			if st.log.Len() > 0 && (n == 0 || st.log.Back().TS > now) {
				newest = st.log.Back().TS
			}
			d.reset = newest + a.window - now
		}
		if act == consume && n > 0 {
			st.log.AddBack(now, n, int(a.perWindow))
			st.total = after
		}
		return d
	}
	// Find the entry whose expiry frees enough room for n.
	free := st.total + n - a.perWindow
	var ts int64
	for i := 0; free > 0; i++ {
		e := st.log.At(i)
		free -= e.N
		ts = e.TS
	}
	return verdict{
		remaining: max(a.perWindow-st.total, 0),
		retry:     ts + a.window - now,
		reset:     st.log.Back().TS + a.window - now,
	}
}

// refund removes the newest n events. Under concurrent traffic on the same
// log these may be another request's events a moment younger than the
// refunded ones: the count is exact, the timestamps may differ by that
// moment.
func (a *slidingLogAlg) refund(st *slState, now, n int64) {
	a.evict(st, now)
	for n > 0 && st.log.Len() > 0 {
		back := st.log.Back()
		take := min(back.N, n)
		st.log.TrimBack(take)
		st.total -= take
		n -= take
	}
}

func (a *slidingLogAlg) idle(st *slState, now int64) bool {
	return st.log.Len() == 0 || st.log.Back().TS <= now-a.window
}
