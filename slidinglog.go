package ratelimit

import (
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
	core[slState, *slidingLogAlg]
}

// NewSlidingLog returns a limiter that admits at most limit events in any
// interval of length window. It returns an error wrapping
// [ErrInvalidConfig] when an argument is not positive or window is longer
// than 100 years, or when an option is invalid (such as [WithClock] given
// a typed nil).
func NewSlidingLog(limit int, window time.Duration, opts ...Option) (*SlidingLog, error) {
	alg, err := newSlidingLogAlg(limit, window)
	if err != nil {
		return nil, err
	}
	l := &SlidingLog{}
	if err := l.init(alg, opts); err != nil {
		return nil, err
	}
	return l, nil
}

// SetLimit changes the number of events allowed per window. Events in the
// log still count against the new limit. The window length cannot change.
func (l *SlidingLog) SetLimit(limit int) error {
	alg, err := newSlidingLogAlg(limit, time.Duration(l.current().window))
	if err != nil {
		return err
	}
	l.reconfigure(alg, func(*slState, int64) {})
	return nil
}

// slidingLogAlg is the sliding log's arithmetic.
type slidingLogAlg struct {
	max    int64 // events per window
	window int64 // ns
}

// slState is one sliding log's state. The zero value is an empty log.
type slState struct {
	log   ring.Log
	total int64 // sum of the log's counts
}

func newSlidingLogAlg(limit int, window time.Duration) (*slidingLogAlg, error) {
	if err := checkCount("limit", limit); err != nil {
		return nil, err
	}
	if err := checkPeriod("window", window); err != nil {
		return nil, err
	}
	return &slidingLogAlg{max: int64(limit), window: int64(window)}, nil
}

func (a *slidingLogAlg) limit() int64 { return a.max }

// evict drops the entries that are window old at now: an entry is kept
// while ts > now - window.
func (a *slidingLogAlg) evict(st *slState, now int64) {
	for st.log.Len() > 0 && st.log.Front().TS <= now-a.window {
		st.total -= st.log.Front().N
		st.log.PopFront()
	}
}

func (a *slidingLogAlg) decide(st *slState, now, n int64, commit bool) verdict {
	a.evict(st, now)
	if after := st.total + n; after <= a.max {
		d := verdict{ok: true, remaining: a.max - after}
		if after > 0 {
			newest := now
			if st.log.Len() > 0 && (n == 0 || st.log.Back().TS > now) {
				newest = st.log.Back().TS
			}
			d.reset = newest + a.window - now
		}
		if commit && n > 0 {
			st.log.AddBack(now, n, int(a.max))
			st.total = after
		}
		return d
	}
	// Find the entry whose expiry frees enough room for n.
	free := st.total + n - a.max
	var ts int64
	for i := 0; free > 0; i++ {
		e := st.log.At(i)
		free -= e.N
		ts = e.TS
	}
	return verdict{
		remaining: max(a.max-st.total, 0),
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
