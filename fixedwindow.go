package ratelimit

import (
	"context"
	"time"
)

// FixedWindow is a fixed window counter: it admits at most limit events in
// each window, and windows are aligned to multiples of the window length
// since the Unix epoch (a one-minute window starts on the minute).
//
// It is the cheapest algorithm and the easiest to explain to users, but it
// is not a smooth limit: a client can spend a full limit just before a
// window ends and another just after, so up to 2x limit events can pass in
// a span much shorter than one window. Use [SlidingLog] or [SlidingCounter]
// when that matters.
//
// Create one with [NewFixedWindow]; the zero value is not usable. A
// FixedWindow is safe for concurrent use.
type FixedWindow struct {
	c core[fwState, *fixedWindowAlg]
}

var _ Limiter = (*FixedWindow)(nil)

// NewFixedWindow returns a limiter that admits at most limit events per
// window. It returns an error wrapping [ErrInvalidConfig] when an argument
// is not positive, window is longer than 100 years, or an option is invalid
// (such as [WithClock] given a typed nil).
func NewFixedWindow(limit int, window time.Duration, opts ...Option) (*FixedWindow, error) {
	alg, err := newFixedWindowAlg(limit, window, argNames("ratelimit.NewFixedWindow", "limit", "", "window"))
	if err != nil {
		return nil, err
	}
	w := &FixedWindow{}
	if err := w.c.init("NewFixedWindow", FixedWindowAlgorithm, alg, opts); err != nil {
		return nil, err
	}
	return w, nil
}

// Allow reports whether one event may happen now, and counts it if so. It
// is shorthand for AllowN(1).Allowed.
func (w *FixedWindow) Allow() bool { return w.c.allow() }

// AllowN reports whether n events may happen now, and counts them if so:
// all n or nothing. It never blocks, and a denied request counts nothing.
// The Decision's RetryAfter is the end of the current window. When n <= 0 or n exceeds the limit the Decision is denied with
// RetryAfter set to [RetryNever].
func (w *FixedWindow) AllowN(n int) Decision { return w.c.allowN(n) }

// ReserveN is AllowN for work whose cost is known only once it ran: it
// charges an estimated n events as AllowN would, and holds them as a
// [Reservation] whose Settle charges the actual cost instead within
// expiry (see [ReserveAll]; it gives back only while the reservation's window is current, and charges an overrun to the window in force). A denied Reservation holds nothing. An
// expiry that is not positive or exceeds 24 hours is an error wrapping
// [ErrInvalidConfig]. The Reservation is never nil.
func (w *FixedWindow) ReserveN(n int, expiry time.Duration) (*Reservation, error) {
	return w.c.reserveN("ratelimit.FixedWindow.ReserveN", n, expiry)
}

// Peek reports the Decision that AllowN(n) would return now, without
// counting anything. Peek(0) reports the current quota: its Remaining is
// how many events would be admitted right now, and its Allowed is false
// only when [FixedWindow.SetLimit] lowered the limit below the events counted in the current window.
func (w *FixedWindow) Peek(n int) Decision { return w.c.peek(n) }

// Wait blocks until one event is admitted or ctx is done. It is shorthand
// for WaitN(ctx, 1).
func (w *FixedWindow) Wait(ctx context.Context) error { return w.c.waitN(ctx, 1) }

// WaitN blocks until n events are admitted, and returns nil once they are.
// It retries after each denied Decision's RetryAfter, so concurrent waiters
// are not served in arrival order.
//
// It returns an error at once when n <= 0 ([ErrInvalidN]) or n exceeds
// the limit ([ErrExceedsLimit]), and without sleeping when the wait before
// the next retry would outlast ctx's deadline ([ErrDeadline], which also
// matches context.DeadlineExceeded). If ctx is done while waiting it
// returns ctx.Err().
func (w *FixedWindow) WaitN(ctx context.Context, n int) error { return w.c.waitN(ctx, n) }

// SetLimit changes the number of events allowed per window. Events already
// counted in the current window still count against the new limit. The
// window length cannot change: it sets where windows start.
func (w *FixedWindow) SetLimit(limit int) error {
	alg, err := newFixedWindowAlg(limit, time.Duration(w.c.current().window), argNames("ratelimit.FixedWindow.SetLimit", "limit", "", "window"))
	if err != nil {
		return err
	}
	w.c.reconfigure(alg, func(*fwState, int64) {})
	return nil
}

// fixedWindowAlg is the fixed window's arithmetic.
type fixedWindowAlg struct {
	perWindow int64 // events per window
	window    int64 // ns
}

// fwState is one fixed window's state. The zero value is an unused window.
type fwState struct {
	k     int64 // index of the window that count belongs to: start = k*window
	count int64
}

// newFixedWindowAlg validates the parameters, which names tells how the caller
// calls, and returns the arithmetic of limit events per window.
func newFixedWindowAlg(limit int, window time.Duration, names paramNames) (*fixedWindowAlg, error) {
	if err := checkCount(names.count, limit); err != nil {
		return nil, err
	}
	if err := checkPeriod(names.period, window); err != nil {
		return nil, err
	}
	return &fixedWindowAlg{perWindow: int64(limit), window: int64(window)}, nil
}

func (a *fixedWindowAlg) limit() int64 { return a.perWindow }

func (a *fixedWindowAlg) decide(st *fwState, now, n int64, act action) verdict {
	k := floorDiv(now, a.window)
	count := st.count
	switch {
	case k > st.k:
		count = 0
	case k < st.k: // time ran backwards: stay in the newer window
		k = st.k
		now = k * a.window
	}
	untilEnd := (k+1)*a.window - now
	if count+n <= a.perWindow {
		if act == consume {
			st.k, st.count = k, count+n
		}
		d := verdict{ok: true, remaining: a.perWindow - count - n}
		if count+n > 0 {
			d.reset = untilEnd
		}
		return d
	}
	return verdict{
		remaining: max(a.perWindow-count, 0),
		retry:     untilEnd,
		reset:     untilEnd,
	}
}

func (a *fixedWindowAlg) refund(st *fwState, now, n int64) {
	if floorDiv(now, a.window) == st.k {
		st.count = max(st.count-n, 0)
	}
}

// settle gives back while the reservation's window is the current one, and
// charges an overrun to the current window, beyond the limit if need be.
func (a *fixedWindowAlg) settle(st *fwState, now, at, d int64) {
	settleWindow(st, floorDiv(now, a.window), floorDiv(at, a.window), d, a.perWindow)
}

// settleWindow settles d events of a reservation made in window k0 at a
// time in window k (fixed windows and quota periods alike), at most one
// limit over the limit: a garbage actual cannot lock a window for more than
// the rest of it.
func settleWindow(st *fwState, k, k0, d, limit int64) {
	if k > st.k {
		st.k, st.count = k, 0
	}
	switch {
	case k0 == st.k:
		st.count = max(st.count+d, 0)
	case d > 0:
		st.count += d
	}
	st.count = min(st.count, max(2*limit, st.count-max(d, 0)))
}

func (a *fixedWindowAlg) idle(st *fwState, now int64) bool {
	return st.count == 0 || floorDiv(now, a.window) > st.k
}
