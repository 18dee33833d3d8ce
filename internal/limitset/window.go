package limitset

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/rlkit/ratelimit"
)

// window returns the window to report for c's limit at now (Unix
// nanoseconds): its Window, or else the window of its limiter's (or
// tier's) policy as it is now (a calendar quota's period has its own
// length: a day of 23 hours, a month of 28 days); 0 if unknown.
func (c *Charge[R]) window(now int64) time.Duration {
	e := c.Entry
	if e.Window > 0 {
		return e.Window
	}
	ph := e.ph
	if e.tiered != nil {
		ph, _ = c.Limiter.(policyHolder)
	}
	if ph == nil {
		return 0
	}
	return e.wins.windowAt(ph.Policy(), now)
}

// windowCache remembers the windows of a few policies (a tiered limit has
// one per tier): for most policies the window never changes, and a
// calendar quota's changes only from one period to the next, so that
// computing it (a division, or a period's bounds in a time zone) is done
// once per policy and period rather than once per request.
type windowCache struct {
	slots [4]atomic.Pointer[cachedWindow]
}

// cachedWindow is the window of policy p at every instant of [start, end).
type cachedWindow struct {
	p          ratelimit.Policy
	start, end int64 // Unix nanoseconds
	w          time.Duration
}

// windowAt returns p.WindowAt at now (Unix nanoseconds).
func (c *windowCache) windowAt(p ratelimit.Policy, now int64) time.Duration {
	slot := &c.slots[uint(p.Limit)%uint(len(c.slots))]
	if e := slot.Load(); e != nil && e.p == p && e.start <= now && now < e.end {
		return e.w
	}
	if p.Algorithm != ratelimit.QuotaAlgorithm {
		w := p.WindowAt(time.Unix(0, now)) // the same at every time
		slot.Store(&cachedWindow{p: p, start: math.MinInt64, end: math.MaxInt64, w: w})
		return w
	}
	t := time.Unix(0, now)
	start, end, err := p.Calendar.Period(t)
	if err != nil {
		return p.WindowAt(t) // not a calendar a limiter accepts: nothing worth caching
	}
	w := end.Sub(start) // p.WindowAt(t), from the period in hand
	slot.Store(&cachedWindow{p: p, start: start.UnixNano(), end: end.UnixNano(), w: w})
	return w
}
