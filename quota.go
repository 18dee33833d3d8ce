package ratelimit

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/rlkit/ratelimit/internal/calendar"
)

// CalendarUnit is the length of a calendar quota's period.
type CalendarUnit uint8

// The calendar units. The zero CalendarUnit is invalid.
const (
	Daily CalendarUnit = iota + 1
	Weekly
	Monthly
	Yearly
)

// Calendar says where the periods of a calendar quota start: every day,
// week, month or year at a reset time on the wall clock of a time zone,
// such as Calendar{Unit: Daily, Location: newYork} (every day at midnight
// in New York) or Calendar{Unit: Monthly, MonthDay: 15, Hour: 9} (on the
// 15th of every month at 09:00 UTC). The zero Calendar is invalid: Unit
// must be set.
//
// Periods follow the zone's wall clock, daylight saving time included
// (the rules are in [Quota]'s documentation): a day is 23 or 25 hours long
// on the days the clocks change, and months and years have their real
// lengths.
type Calendar struct {
	// Unit is the length of a period: Daily, Weekly, Monthly or Yearly.
	Unit CalendarUnit
	// Location is the IANA time zone whose wall clock defines the periods,
	// such as the one time.LoadLocation("America/New_York") returns. Nil
	// means UTC. Package redislimit knows the zone by its name, and refuses
	// one whose name does not say its rules (unnamed, "Local", or named
	// after a zone of the zone database with other rules).
	Location *time.Location
	// Hour and Minute are the reset time: the local time of day at which
	// every period starts (0-23 and 0-59; midnight by default).
	Hour, Minute int
	// WeekStart is the day weekly periods start on (Sunday by default).
	// Other units ignore it, but it must be a valid day.
	WeekStart time.Weekday
	// MonthDay is the day of the month monthly periods start on, 1-31; 0
	// means 1. A month with fewer days starts its period on its last day:
	// with MonthDay 31 the period starts on February 28 (29 in a leap
	// year), April 30, and so on. Other units ignore it, but it must be in
	// 0-31.
	MonthDay int
}

// String describes c, such as "daily at 00:00 UTC", "weekly on Monday at
// 09:30 Europe/Paris" or "monthly on day 15 at 00:00 UTC".
func (c Calendar) String() string {
	loc := "UTC"
	if c.Location != nil {
		loc = c.Location.String()
	}
	at := fmt.Sprintf("at %02d:%02d %s", c.Hour, c.Minute, loc)
	switch c.Unit {
	case Daily:
		return "daily " + at
	case Weekly:
		return fmt.Sprintf("weekly on %v %s", c.WeekStart, at)
	case Monthly:
		return fmt.Sprintf("monthly on day %d %s", max(c.MonthDay, 1), at)
	case Yearly:
		return "yearly on January 1 " + at
	}
	return fmt.Sprintf("CalendarUnit(%d) %s", uint8(c.Unit), at)
}

// String returns "daily", "weekly", "monthly" or "yearly".
func (u CalendarUnit) String() string {
	switch u {
	case Daily:
		return "daily"
	case Weekly:
		return "weekly"
	case Monthly:
		return "monthly"
	case Yearly:
		return "yearly"
	}
	return fmt.Sprintf("CalendarUnit(%d)", uint8(u))
}

// QuotaPolicy is the policy of [NewQuota]: at most limit events per
// calendar period of cal.
func QuotaPolicy(limit int, cal Calendar) Policy {
	return Policy{Algorithm: QuotaAlgorithm, Limit: limit, Calendar: cal}
}

// Quota is a calendar quota: it admits at most limit events in each period
// of a [Calendar], such as 10,000 a day where the day is a calendar day in
// the customer's time zone, or 200,000 a month where the month is a
// calendar month, not 30 days. The count starts over at every period
// boundary, like a [FixedWindow] whose windows are calendar periods.
//
// Periods follow the wall clock of the Calendar's time zone. A day is the
// span between two resets, so it is 23 hours long on the day the clocks
// spring forward and 25 on the day they fall back; months and years have
// their real lengths (February 29 included). A reset time that does not
// exist on a day the clocks spring forward (02:30 in New York on the
// second Sunday of March) happens at the end of the gap, the instant the
// clocks jump (03:00 EDT); a reset time that occurs twice on a day the
// clocks fall back (01:30 in New York on the first Sunday of November)
// happens at its first occurrence (01:30 EDT).
//
// The Decision's RetryAfter on a denial, and its ResetAfter once anything
// is counted, point exactly at the next period boundary: retrying then
// succeeds, and a nanosecond before does not. A quota says nothing about
// how fast its period's events may come, so pair it with a short-window
// limit: with [AllowAll] over keyed limiters, a request passes 10 a
// second, 10,000 a day and 200,000 a month all or nothing, and a denial by
// any one of them charges none.
//
// Like the other limiters, a Quota reads the time from its [Clock] and
// measures it on the monotonic clock from the wall time read at creation,
// so a wall-clock step (NTP) does not move its boundaries, but a process
// that runs for months without a clock correction follows its own clock's
// drift.
//
// Create one with [NewQuota]; the zero value is not usable. A Quota is safe
// for concurrent use.
type Quota struct {
	c core[fwState, *quotaAlg]
}

var _ Limiter = (*Quota)(nil)

// NewQuota returns a calendar quota that admits at most limit events in
// each period of cal. It returns an error wrapping [ErrInvalidConfig] when
// limit is not positive (or above 2^53), when a field of cal is out of
// range (the message names it, such as ratelimit.Calendar.Hour), or when an
// option is invalid (such as [WithClock] given a typed nil).
func NewQuota(limit int, cal Calendar, opts ...Option) (*Quota, error) {
	alg, err := newQuotaAlg(limit, cal, argNames("ratelimit.NewQuota", "limit", "", "cal"))
	if err != nil {
		return nil, err
	}
	q := &Quota{}
	if err := q.c.init("NewQuota", QuotaAlgorithm, alg, opts); err != nil {
		return nil, err
	}
	return q, nil
}

// Allow reports whether one event may happen now, and counts it if so. It
// is shorthand for AllowN(1).Allowed.
func (q *Quota) Allow() bool { return q.c.allow() }

// AllowN reports whether n events may happen now, and counts them in the
// current period if so: all n or nothing. It never blocks, and a denied
// request counts nothing. When denied, the Decision's RetryAfter is the
// time left until the next period starts. When n <= 0 or n exceeds the
// limit the Decision is denied with RetryAfter set to [RetryNever].
func (q *Quota) AllowN(n int) Decision { return q.c.allowN(n) }

// Peek reports the Decision that AllowN(n) would return now, without
// counting anything. Peek(0) reports the current quota: its Remaining is
// how many events the rest of the period admits, its ResetAfter the time
// left until the next period (0 when nothing is counted), and its Allowed
// is false only when [Quota.SetLimit] lowered the limit below the events
// counted in the current period.
func (q *Quota) Peek(n int) Decision { return q.c.peek(n) }

// Limit returns the number of events allowed per period.
func (q *Quota) Limit() int { return q.c.limit() }

// Calendar returns the quota's calendar, with a nil Location replaced by
// time.UTC and a MonthDay of 0 by 1.
func (q *Quota) Calendar() Calendar { return q.c.current().cal }

// Wait blocks until one event is admitted or ctx is done. It is shorthand
// for WaitN(ctx, 1).
func (q *Quota) Wait(ctx context.Context) error { return q.c.waitN(ctx, 1) }

// WaitN blocks until n events are admitted, and returns nil once they are:
// when the current period has no room, that is at the next period
// boundary, which may be hours or days away. It retries after each denied
// Decision's RetryAfter, so concurrent waiters are not served in arrival
// order.
//
// It returns an error at once when n <= 0 ([ErrInvalidN]) or n exceeds the
// limit ([ErrExceedsLimit]), and without sleeping when the wait before the
// next retry would outlast ctx's deadline ([ErrDeadline], which also
// matches context.DeadlineExceeded). If ctx is done while waiting it
// returns ctx.Err().
func (q *Quota) WaitN(ctx context.Context, n int) error { return q.c.waitN(ctx, n) }

// SetLimit changes the number of events allowed per period. Events already
// counted in the current period still count against the new limit, so
// lowering the limit below them denies every request until the period
// ends. The calendar cannot change: it sets where periods start.
func (q *Quota) SetLimit(limit int) error {
	alg, err := newQuotaAlg(limit, q.c.current().cal, argNames("ratelimit.Quota.SetLimit", "limit", "", "cal"))
	if err != nil {
		return err
	}
	q.c.reconfigure(alg, func(*fwState, int64) {})
	return nil
}

// quotaAlg is the calendar quota's arithmetic: a fixed window whose windows
// are the periods of a calendar. Its state is an fwState whose k is the
// start of the period count belongs to, in Unix ns.
//
// Computing a period takes calendar arithmetic in a time zone, far slower
// than the rest of a decision, so the alg caches the span of the period
// that contains the latest time it was asked about. One alg serves every
// key of a keyed limiter, under many shard locks, so the cache is an atomic
// pointer to an immutable span, replaced (one small allocation per period)
// when a decision falls outside it.
type quotaAlg struct {
	perPeriod int64
	cal       Calendar // normalized: Location non-nil, MonthDay 1-31
	spec      calendar.Spec
	span      atomic.Pointer[quotaSpan]
}

// quotaSpan is one period, [start, end) in Unix ns. Never modified once
// published.
type quotaSpan struct{ start, end int64 }

// newQuotaAlg validates the parameters, which names tells how the caller
// calls (names.period names the calendar), and returns the arithmetic of
// limit events per period of cal.
func newQuotaAlg(limit int, cal Calendar, names paramNames) (*quotaAlg, error) {
	if err := checkCount(names.count, limit); err != nil {
		return nil, err
	}
	cal, spec, err := cal.spec(names.period)
	if err != nil {
		return nil, err
	}
	return &quotaAlg{perPeriod: int64(limit), cal: cal, spec: spec}, nil
}

// calendarName returns how an error names the calendar the caller gave
// under the name period: the Policy field for a Policy.
func calendarName(period string) string {
	if period == policyParams.period {
		return "ratelimit.Policy.Calendar"
	}
	return period
}

// spec validates c, which the caller calls name (such as
// "ratelimit.NewQuota cal"), and returns it normalized, with its
// internal/calendar Spec.
func (c Calendar) spec(name string) (Calendar, calendar.Spec, error) {
	name = calendarName(name)
	if c.Location == nil {
		c.Location = time.UTC
	}
	if c.Unit < Daily || c.Unit > Yearly {
		return c, calendar.Spec{}, configError("%s: ratelimit.Calendar.Unit must be Daily, Weekly, Monthly or Yearly, got %v", name, c.Unit)
	}
	if c.MonthDay < 0 || c.MonthDay > 31 {
		return c, calendar.Spec{}, configError("%s: ratelimit.Calendar.MonthDay must be 1-31 (or 0, meaning 1), got %d", name, c.MonthDay)
	}
	if c.MonthDay == 0 {
		c.MonthDay = 1
	}
	s := calendar.Spec{
		Unit:      calendar.Unit(c.Unit), // the same values, in the same order
		Loc:       c.Location,
		Hour:      c.Hour,
		Minute:    c.Minute,
		WeekStart: c.WeekStart,
		MonthDay:  c.MonthDay,
	}
	if err := s.Validate(); err != nil {
		// Validate names the Spec field, whose name is the Calendar's.
		return c, calendar.Spec{}, configError("%s: ratelimit.Calendar.%v", name, err)
	}
	return c, s, nil
}

func (a *quotaAlg) limit() int64 { return a.perPeriod }

// period returns the period containing now, from the cache when it holds.
func (a *quotaAlg) period(now int64) (start, end int64) {
	if sp := a.span.Load(); sp != nil && sp.start <= now && now < sp.end {
		return sp.start, sp.end
	}
	start, end = a.periodAt(now)
	a.span.Store(&quotaSpan{start: start, end: end})
	return start, end
}

// periodAt computes the period containing now, clamped to the int64 range,
// without the cache.
func (a *quotaAlg) periodAt(now int64) (start, end int64) {
	s, e := a.spec.Period(time.Unix(0, now))
	return unixNanoClamped(s), unixNanoClamped(e)
}

// unixNanoClamped returns t in Unix ns, saturated at the ends of int64.
func unixNanoClamped(t time.Time) int64 {
	switch {
	case t.Before(time.Unix(0, math.MinInt64)):
		return math.MinInt64
	case t.After(time.Unix(0, math.MaxInt64)):
		return math.MaxInt64
	}
	return t.UnixNano()
}

func (a *quotaAlg) decide(st *fwState, now, n int64, act action) verdict {
	k, end := a.period(now)
	count := st.count
	switch {
	case k > st.k:
		count = 0
	case k < st.k: // time ran backwards: stay in the newer period
		k, end = a.periodAt(st.k)
		now = k
	}
	untilEnd := end - now
	if count+n <= a.perPeriod {
		if act == consume {
			st.k, st.count = k, count+n
		}
		d := verdict{ok: true, remaining: a.perPeriod - count - n}
		if count+n > 0 {
			d.reset = untilEnd
		}
		return d
	}
	return verdict{
		remaining: max(a.perPeriod-count, 0),
		retry:     untilEnd,
		reset:     untilEnd,
	}
}

func (a *quotaAlg) refund(st *fwState, now, n int64) {
	if k, _ := a.period(now); k == st.k {
		st.count = max(st.count-n, 0)
	}
}

func (a *quotaAlg) idle(st *fwState, now int64) bool {
	if st.count == 0 {
		return true
	}
	k, _ := a.period(now)
	return k > st.k
}

// nominal returns the usual length of c's periods, which [Policy.Window]
// reports: 24 hours, 7 days, 30 days or 365 days, whatever the zone and
// the date. [Calendar.windowAt] has the real length of a given period.
func (c Calendar) nominal() time.Duration {
	const day = 24 * time.Hour
	switch c.Unit {
	case Daily:
		return day
	case Weekly:
		return 7 * day
	case Monthly:
		return 30 * day
	case Yearly:
		return 365 * day
	}
	return 0
}

// windowAt returns the exact length of c's period containing t, such as
// 23 hours on the day the clocks spring forward, or 29 days for February
// of a leap year; the nominal length when c is invalid.
func (c Calendar) windowAt(t time.Time) time.Duration {
	start, end, err := c.Period(t)
	if err != nil {
		return c.nominal()
	}
	return end.Sub(start)
}

// Period returns the period of c containing t: the instant it started
// (inclusive) and the instant it ends (exclusive), in c's Location, such
// as midnight to midnight of t's day in New York for a daily calendar
// there. A quota of c admits again from end. It returns an error wrapping
// [ErrInvalidConfig] when c is invalid.
func (c Calendar) Period(t time.Time) (start, end time.Time, err error) {
	_, spec, err := c.spec("ratelimit.Calendar.Period")
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	start, end = spec.Period(t)
	return start, end, nil
}
