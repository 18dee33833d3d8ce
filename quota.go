package ratelimit

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/rlkit/ratelimit/internal/calendar"
)

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

// ReserveN is AllowN for work whose cost is known only once it ran: it
// charges an estimated n events as AllowN would, and holds them as a
// [Reservation] whose Settle charges the actual cost instead within
// expiry (see [ReserveAll]; it gives back only while the reservation's period is current, and charges an overrun to the period in force). A denied Reservation holds nothing. An
// expiry that is not positive or exceeds 24 hours is an error wrapping
// [ErrInvalidConfig]. The Reservation is never nil.
func (q *Quota) ReserveN(n int, expiry time.Duration) (*Reservation, error) {
	return q.c.reserveN("ratelimit.Quota.ReserveN", n, expiry)
}

// Peek reports the Decision that AllowN(n) would return now, without
// counting anything. Peek(0) reports the current quota: its Remaining is
// how many events the rest of the period admits, its ResetAfter the time
// left until the next period (0 when nothing is counted), and its Allowed
// is false only when [Quota.SetLimit] lowered the limit below the events
// counted in the current period.
func (q *Quota) Peek(n int) Decision { return q.c.peek(n) }

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

// settle is the fixed window's settle over calendar periods.
func (a *quotaAlg) settle(st *fwState, now, at, d int64) {
	k, _ := a.period(now)
	k0, _ := a.periodAt(at)
	settleWindow(st, k, k0, d, a.perPeriod)
}

func (a *quotaAlg) idle(st *fwState, now int64) bool {
	if st.count == 0 {
		return true
	}
	k, _ := a.period(now)
	return k > st.k
}
