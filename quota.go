package ratelimit

import (
	"context"
	"errors"
	"time"
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
// week, month or year at a reset time on the wall clock of a time zone.
type Calendar struct {
	// Unit is the length of a period: Daily, Weekly, Monthly or Yearly.
	Unit CalendarUnit
	// Location is the IANA time zone whose wall clock defines the periods,
	// such as the one time.LoadLocation("America/New_York") returns. Nil
	// means UTC.
	Location *time.Location
	// Hour and Minute are the reset time: the local time of day at which
	// every period starts (0-23 and 0-59; midnight by default).
	Hour, Minute int
	// WeekStart is the day weekly periods start on (Sunday by default).
	WeekStart time.Weekday
	// MonthDay is the day of the month monthly periods start on, 1-31; 0
	// means 1. A month with fewer days starts its period on its last day.
	MonthDay int
}

// QuotaPolicy is the policy of [NewQuota]: at most limit events per
// calendar period.
func QuotaPolicy(limit int, cal Calendar) Policy {
	return Policy{Algorithm: QuotaAlgorithm, Limit: limit, Calendar: cal}
}

// Quota is a calendar quota: TODO(helper A) document.
type Quota struct {
	c core[fwState, *quotaAlg]
}

var _ Limiter = (*Quota)(nil)

// NewQuota returns a calendar quota of limit events per period of cal.
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

// Allow reports whether one event may happen now.
func (q *Quota) Allow() bool { return q.c.allow() }

// AllowN reports whether n events may happen now.
func (q *Quota) AllowN(n int) Decision { return q.c.allowN(n) }

// Peek reports the Decision AllowN(n) would return now.
func (q *Quota) Peek(n int) Decision { return q.c.peek(n) }

// Limit returns the number of events allowed per period.
func (q *Quota) Limit() int { return q.c.limit() }

// Wait is shorthand for WaitN(ctx, 1).
func (q *Quota) Wait(ctx context.Context) error { return q.c.waitN(ctx, 1) }

// WaitN blocks until n events are admitted or ctx is done.
func (q *Quota) WaitN(ctx context.Context, n int) error { return q.c.waitN(ctx, n) }

// quotaAlg is the calendar quota's arithmetic. TODO(helper A).
type quotaAlg struct {
	perPeriod int64
}

func newQuotaAlg(limit int, cal Calendar, names paramNames) (*quotaAlg, error) {
	_ = cal
	if err := checkCount(names.count, limit); err != nil {
		return nil, err
	}
	return nil, errors.New("ratelimit: calendar quotas are not implemented yet")
}

func (a *quotaAlg) limit() int64                                         { return a.perPeriod }
func (a *quotaAlg) decide(st *fwState, now, n int64, act action) verdict { return verdict{} }
func (a *quotaAlg) idle(st *fwState, now int64) bool                     { return true }
func (a *quotaAlg) refund(st *fwState, now, n int64)                     {}

// nominal returns the usual length of c's periods: 24 hours, 7 days, 30
// days or 365 days. TODO(helper A): confirm.
func (c Calendar) nominal() time.Duration {
	switch c.Unit {
	case Daily:
		return 24 * time.Hour
	case Weekly:
		return 7 * 24 * time.Hour
	case Monthly:
		return 30 * 24 * time.Hour
	case Yearly:
		return 365 * 24 * time.Hour
	}
	return 0
}

// windowAt returns the length of c's period containing t. TODO(helper A).
func (c Calendar) windowAt(t time.Time) time.Duration { return c.nominal() }
