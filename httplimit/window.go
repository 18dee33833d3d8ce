package httplimit

import (
	"math"
	"sync/atomic"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/calendar"
)

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
		w := p.Window()
		slot.Store(&cachedWindow{p: p, start: math.MinInt64, end: math.MaxInt64, w: w})
		return w
	}
	t := time.Unix(0, now)
	w := p.WindowAt(t)
	spec, ok := calendarSpec(p.Calendar)
	if !ok {
		return w // not a calendar a limiter accepts: nothing worth caching
	}
	start, end := spec.Period(t)
	slot.Store(&cachedWindow{p: p, start: start.UnixNano(), end: end.UnixNano(), w: w})
	return w
}

// calendarSpec returns the periods of c as package calendar defines them
// (a nil Location is UTC, MonthDay 0 is 1), and false when c is invalid.
func calendarSpec(c ratelimit.Calendar) (calendar.Spec, bool) {
	s := calendar.Spec{Loc: c.Location, Hour: c.Hour, Minute: c.Minute, WeekStart: c.WeekStart, MonthDay: c.MonthDay}
	switch c.Unit {
	case ratelimit.Daily:
		s.Unit = calendar.Day
	case ratelimit.Weekly:
		s.Unit = calendar.Week
	case ratelimit.Monthly:
		s.Unit = calendar.Month
	case ratelimit.Yearly:
		s.Unit = calendar.Year
	}
	if s.Loc == nil {
		s.Loc = time.UTC
	}
	if s.MonthDay == 0 {
		s.MonthDay = 1
	}
	return s, s.Validate() == nil
}
