package httplimit

import (
	"sync/atomic"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/calendar"
)

// quotaWindows remembers, for a few calendar quota policies (a tiered
// limit has one per tier), the window of the period last seen, so that
// the period's bounds are computed once per period rather than once per
// request.
type quotaWindows struct {
	slots [4]atomic.Pointer[quotaWindow]
}

// quotaWindow is the window of one period of one policy: WindowAt of any
// instant in [start, end).
type quotaWindow struct {
	p          ratelimit.Policy
	start, end int64 // Unix nanoseconds
	w          time.Duration
}

// windowAt returns p.WindowAt at now (Unix nanoseconds), for a policy of
// the calendar quota.
func (q *quotaWindows) windowAt(p ratelimit.Policy, now int64) time.Duration {
	slot := &q.slots[uint(p.Limit)%uint(len(q.slots))]
	if e := slot.Load(); e != nil && e.p == p && e.start <= now && now < e.end {
		return e.w
	}
	t := time.Unix(0, now)
	w := p.WindowAt(t)
	spec, ok := calendarSpec(p.Calendar)
	if !ok {
		return w // not a calendar a limiter accepts: nothing worth caching
	}
	start, end := spec.Period(t)
	slot.Store(&quotaWindow{p: p, start: start.UnixNano(), end: end.UnixNano(), w: w})
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
