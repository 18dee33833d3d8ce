package ratelimit

import (
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
	core[fwState, *fixedWindowAlg]
}

// NewFixedWindow returns a limiter that admits at most limit events per
// window. It returns an error wrapping [ErrInvalidConfig] when an argument
// is not positive, window is longer than 100 years, or an option is invalid
// (such as [WithClock] given a typed nil).
func NewFixedWindow(limit int, window time.Duration, opts ...Option) (*FixedWindow, error) {
	alg, err := newFixedWindowAlg(limit, window)
	if err != nil {
		return nil, err
	}
	w := &FixedWindow{}
	if err := w.init(alg, opts); err != nil {
		return nil, err
	}
	return w, nil
}

// SetLimit changes the number of events allowed per window. Events already
// counted in the current window still count against the new limit. The
// window length cannot change: it sets where windows start.
func (w *FixedWindow) SetLimit(limit int) error {
	alg, err := newFixedWindowAlg(limit, time.Duration(w.current().window))
	if err != nil {
		return err
	}
	w.reconfigure(alg, func(*fwState, int64) {})
	return nil
}

// fixedWindowAlg is the fixed window's arithmetic.
type fixedWindowAlg struct {
	max    int64 // events per window
	window int64 // ns
}

// fwState is one fixed window's state. The zero value is an unused window.
type fwState struct {
	k     int64 // index of the window that count belongs to: start = k*window
	count int64
}

func newFixedWindowAlg(limit int, window time.Duration) (*fixedWindowAlg, error) {
	if err := checkCount("limit", limit); err != nil {
		return nil, err
	}
	if err := checkPeriod("window", window); err != nil {
		return nil, err
	}
	return &fixedWindowAlg{max: int64(limit), window: int64(window)}, nil
}

func (a *fixedWindowAlg) limit() int64 { return a.max }

func (a *fixedWindowAlg) decide(st *fwState, now, n int64, commit bool) verdict {
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
	if count+n <= a.max {
		if commit {
			st.k, st.count = k, count+n
		}
		d := verdict{ok: true, remaining: a.max - count - n}
		if count+n > 0 {
			d.reset = untilEnd
		}
		return d
	}
	return verdict{
		remaining: max(a.max-count, 0),
		retry:     untilEnd,
		reset:     untilEnd,
	}
}

func (a *fixedWindowAlg) refund(st *fwState, now, n int64) {
	if floorDiv(now, a.window) == st.k {
		st.count = max(st.count-n, 0)
	}
}

func (a *fixedWindowAlg) idle(st *fwState, now int64) bool {
	return st.count == 0 || floorDiv(now, a.window) > st.k
}
