package ratelimit

import (
	"context"
	"math"
	"time"
)

// SlidingCounter is a sliding window counter: it counts events in fixed
// windows aligned to the Unix epoch, like [FixedWindow], and estimates the
// events in the sliding window that ends now as
//
//	previous window's count x (1 - elapsed/window) + current window's count
//
// admitting n events when that estimate plus n is at most limit. The
// estimate is computed exactly, in rationals, without rounding that would
// over-admit.
//
// It needs constant memory (16 bytes of state) and is close on smooth
// traffic, but it is an estimate even there: evenly spread traffic that
// stays 3 events per window below the limit is all admitted, while at 1.01x
// the limit some window holds up to 2% more than limit and some events are
// denied that an exact window had room for. It assumes the previous
// window's events were spread evenly: on adversarial traffic (a burst at
// the end of one window, then another once the previous count has decayed)
// it can admit up to nearly 2x limit in one window length. Use
// [SlidingLog] when the bound must be exact. Its RetryAfter is computed
// from the same estimate: if no other traffic arrives, a retry after
// RetryAfter succeeds, and it is never 0 on a denial.
//
// Create one with [NewSlidingCounter]; the zero value is not usable. A
// SlidingCounter is safe for concurrent use.
type SlidingCounter struct {
	c core[scState, *slidingCounterAlg]
}

var _ Limiter = (*SlidingCounter)(nil)

// NewSlidingCounter returns a limiter that admits n events when the
// weighted estimate of events in the last window plus n is at most limit.
// It returns an error wrapping [ErrInvalidConfig] when an argument is not
// positive, window is longer than 100 years, or an option is invalid (such
// as [WithClock] given a typed nil).
func NewSlidingCounter(limit int, window time.Duration, opts ...Option) (*SlidingCounter, error) {
	alg, err := newSlidingCounterAlg(limit, window, argNames("ratelimit.NewSlidingCounter", "limit", "", "window"))
	if err != nil {
		return nil, err
	}
	s := &SlidingCounter{}
	if err := s.c.init("NewSlidingCounter", SlidingCounterAlgorithm, alg, opts); err != nil {
		return nil, err
	}
	return s, nil
}

// Allow reports whether one event may happen now, and counts it if so. It
// is shorthand for AllowN(1).Allowed.
func (s *SlidingCounter) Allow() bool { return s.c.allow() }

// AllowN reports whether n events may happen now, and counts them if so:
// all n or nothing. It never blocks, and a denied request counts nothing.
// The Decision's RetryAfter is when the estimate will leave room for n if
// nothing else arrives: an estimate, never 0. When n <= 0 or n exceeds the limit the Decision is denied with
// RetryAfter set to [RetryNever].
func (s *SlidingCounter) AllowN(n int) Decision { return s.c.allowN(n) }

// ReserveN is AllowN for work whose cost is known only once it ran: it
// charges an estimated n events as AllowN would, and holds them as a
// [Reservation] whose Settle charges the actual cost instead within
// expiry (see [ReserveAll]; it gives back while the reservation's window still counts, and charges an overrun there or to the current window). A denied Reservation holds nothing. An
// expiry that is not positive or exceeds 24 hours is an error wrapping
// [ErrInvalidConfig]. The Reservation is never nil.
func (s *SlidingCounter) ReserveN(n int, expiry time.Duration) (*Reservation, error) {
	return s.c.reserveN("ratelimit.SlidingCounter.ReserveN", n, expiry)
}

// Peek reports the Decision that AllowN(n) would return now, without
// counting anything. Peek(0) reports the current quota: its Remaining is
// how many events would be admitted right now, and its Allowed is false
// only when [SlidingCounter.SetLimit] lowered the limit below its current estimate of the events in the window.
func (s *SlidingCounter) Peek(n int) Decision { return s.c.peek(n) }

// Wait blocks until one event is admitted or ctx is done. It is shorthand
// for WaitN(ctx, 1).
func (s *SlidingCounter) Wait(ctx context.Context) error { return s.c.waitN(ctx, 1) }

// WaitN blocks until n events are admitted, and returns nil once they are.
// It retries after each denied Decision's RetryAfter, so concurrent waiters
// are not served in arrival order.
//
// It returns an error at once when n <= 0 ([ErrInvalidN]) or n exceeds
// the limit ([ErrExceedsLimit]), and without sleeping when the wait before
// the next retry would outlast ctx's deadline ([ErrDeadline], which also
// matches context.DeadlineExceeded). If ctx is done while waiting it
// returns ctx.Err().
func (s *SlidingCounter) WaitN(ctx context.Context, n int) error { return s.c.waitN(ctx, n) }

// SetLimit changes the number of events allowed per window. The counts of
// the current and previous windows carry over. The window length cannot
// change.
func (s *SlidingCounter) SetLimit(limit int) error {
	alg, err := newSlidingCounterAlg(limit, time.Duration(s.c.current().window), argNames("ratelimit.SlidingCounter.SetLimit", "limit", "", "window"))
	if err != nil {
		return err
	}
	s.c.reconfigure(alg, func(*scState, int64) {})
	return nil
}

// slidingCounterAlg is the sliding counter's arithmetic.
type slidingCounterAlg struct {
	perWindow int64 // events per window
	window    int64 // ns
}

// scState is one sliding counter's state. The zero value has no events.
type scState struct {
	k    int64 // index of the current window: start = k*window
	cur  int32 // events in window k (limit <= math.MaxInt32)
	prev int32 // events in window k-1
}

// newSlidingCounterAlg validates the parameters, which names tells how the caller
// calls, and returns the arithmetic of limit events per window.
func newSlidingCounterAlg(limit int, window time.Duration, names paramNames) (*slidingCounterAlg, error) {
	if err := checkCount(names.count, limit); err != nil {
		return nil, err
	}
	if err := checkPeriod(names.period, window); err != nil {
		return nil, err
	}
	if limit > math.MaxInt32 {
		return nil, configError("limit must be at most %d, got %d", math.MaxInt32, limit)
	}
	return &slidingCounterAlg{perWindow: int64(limit), window: int64(window)}, nil
}

func (a *slidingCounterAlg) limit() int64 { return a.perWindow }

// roll returns the state as seen at now: the current window's index, its
// count, the previous window's count, and the time elapsed in the window.
func (a *slidingCounterAlg) roll(st *scState, now int64) (k, cur, prev, elapsed int64) {
	k = floorDiv(now, a.window)
	switch {
	case k == st.k:
		cur, prev = int64(st.cur), int64(st.prev)
	case k == st.k+1:
		prev = int64(st.cur)
	case k < st.k: // time ran backwards: stay at the start of the newer window
		return st.k, int64(st.cur), int64(st.prev), 0
	}
	return k, cur, prev, now - k*a.window
}

func (a *slidingCounterAlg) decide(st *scState, now, n int64, act action) verdict {
	k, cur, prev, e := a.roll(st, now)
	w := a.window
	// Remaining is the largest m with prev*(w-e)/w + cur + m <= perWindow.
	rem := a.perWindow - cur - mulDivCeil(prev, w-e, w)
	if n <= rem {
		if act == consume {
			st.k, st.cur, st.prev = k, int32(cur+n), int32(prev)
		}
		return verdict{
			ok:        true,
			remaining: rem - n,
			reset:     a.resetAfter(cur+n, prev, e),
		}
	}
	return verdict{
		remaining: max(rem, 0),
		retry:     max(a.retryAfter(cur, prev, e, n), 1),
		reset:     a.resetAfter(cur, prev, e),
	}
}

// retryAfter returns how long until n events fit if nothing else arrives.
func (a *slidingCounterAlg) retryAfter(cur, prev, e, n int64) int64 {
	w := a.window
	if cur+n <= a.perWindow {
		// In this window, at the first e2 with prev*(w-e2) <= (perWindow-cur-n)*w.
		e2 := w - min(mulDiv(a.perWindow-cur-n, w, prev), w)
		if e2 < w {
			return e2 - e
		}
	}
	// In the next window, where cur becomes the previous count.
	if cur == 0 {
		return w - e
	}
	e2 := w - min(mulDiv(max(a.perWindow-n, 0), w, cur), w)
	return w - e + e2
}

// resetAfter returns how long until the estimate decays to zero.
func (a *slidingCounterAlg) resetAfter(cur, prev, e int64) int64 {
	switch {
	case cur > 0:
		return 2*a.window - e
	case prev > 0:
		return a.window - e
	}
	return 0
}

func (a *slidingCounterAlg) refund(st *scState, now, n int64) {
	switch k := floorDiv(now, a.window); k {
	case st.k:
		st.cur = int32(max(int64(st.cur)-n, 0))
	case st.k + 1:
		st.k, st.prev, st.cur = k, int32(max(int64(st.cur)-n, 0)), 0
	}
}

// settle gives back while the reservation's window still counts (the
// current one or the previous, weighted), and charges an overrun to that
// window, or to the current one when the reservation's has passed; beyond
// the limit if need be.
func (a *slidingCounterAlg) settle(st *scState, now, at, d int64) {
	k, cur, prev, _ := a.roll(st, now)
	k0 := floorDiv(at, a.window)
	// An overrun leaves a window at most one limit over (or where it was).
	top := min(2*a.perWindow, math.MaxInt32)
	add := func(c int64) int64 { return min(max(c+d, 0), max(top, c)) }
	switch {
	case k0 == k:
		cur = add(cur)
	case k0 == k-1:
		prev = add(prev)
	case d > 0:
		cur = add(cur)
	}
	st.k, st.cur, st.prev = k, int32(cur), int32(prev)
}

func (a *slidingCounterAlg) idle(st *scState, now int64) bool {
	k := floorDiv(now, a.window)
	return (st.cur == 0 && st.prev == 0) || k >= st.k+2 || (k == st.k+1 && st.cur == 0)
}
