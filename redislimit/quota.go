package redislimit

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/calendar"
)

// Calendar quotas. The zone's rules live in Go (the time package's zone
// database), not in Redis: each call passes the boundaries of five
// consecutive periods around the application's time (the previous period,
// the current one and the next two), and the script counts in the one
// holding its own now, the server's TIME unless WithClientTime. A server
// clock outside those four periods fails the call ("Redis clock more than
// a period away from the application's"), and the failure policy applies.

// specOf converts a calendar to the calendar package's Spec the way the
// ratelimit package does: a nil Location is UTC, MonthDay 0 is 1.
func specOf(c ratelimit.Calendar) calendar.Spec {
	loc := c.Location
	if loc == nil {
		loc = time.UTC
	}
	md := c.MonthDay
	if md == 0 {
		md = 1
	}
	var unit calendar.Unit
	switch c.Unit {
	case ratelimit.Daily:
		unit = calendar.Day
	case ratelimit.Weekly:
		unit = calendar.Week
	case ratelimit.Monthly:
		unit = calendar.Month
	case ratelimit.Yearly:
		unit = calendar.Year
	}
	return calendar.Spec{Unit: unit, Loc: loc, Hour: c.Hour, Minute: c.Minute, WeekStart: c.WeekStart, MonthDay: md}
}

// quotaScriptsFor validates a calendar quota policy for Redis.
func quotaScriptsFor(pol ratelimit.Policy) (scripts, error) {
	if pol.Limit < 1 {
		return scripts{}, invalid("New: Policy.Limit must be at least 1, got %d", pol.Limit)
	}
	if int64(pol.Limit) > maxState {
		return scripts{}, invalid("New: Policy.Limit must be at most 2^52, the largest quota Redis Lua counts exactly, got %d", pol.Limit)
	}
	if pol.Calendar.Unit < ratelimit.Daily || pol.Calendar.Unit > ratelimit.Yearly {
		return scripts{}, invalid("New: Policy.Calendar.Unit must be Daily, Weekly, Monthly or Yearly, got %d", pol.Calendar.Unit)
	}
	if pol.Calendar.MonthDay < 0 {
		return scripts{}, invalid("New: Policy.Calendar.MonthDay must be 0-31, got %d", pol.Calendar.MonthDay)
	}
	if err := specOf(pol.Calendar).Validate(); err != nil {
		return scripts{}, invalid("New: Policy.Calendar.%v", err)
	}
	return scripts{algoScripts: quotaScripts, code: "cq", exactRetry: true}, nil
}

// quotaFingerprint returns the 8 hex digits that name a quota policy in
// its Redis keys: the limit and the whole calendar (zone name, unit, reset
// time, week start, month day).
func quotaFingerprint(p ratelimit.Policy) string {
	s := specOf(p.Calendar)
	sum := sha256.Sum256(fmt.Appendf(nil, "cq/%d/%s/%d/%d/%d/%d/%d", p.Limit, s.Loc.String(), s.Unit, s.Hour, s.Minute, int(s.WeekStart), s.MonthDay))
	return hex.EncodeToString(sum[:4])
}

// quotaBounds caches the script parameters of a calendar quota (the limit
// and five boundaries) for application times within one period: they
// change only when the application's time enters another period.
type quotaBounds struct {
	spec  calendar.Spec
	limit int64
	cur   atomic.Pointer[quotaParams]
}

// quotaParams are the parameters for application times in [from, to) ns.
type quotaParams struct {
	from, to int64
	params   []any
}

// params returns the parameters for the application time now (Unix ns).
func (q *quotaBounds) params(now int64) []any {
	if p := q.cur.Load(); p != nil && p.from <= now && now < p.to {
		return p.params
	}
	b := q.spec.Starts(time.Unix(0, now), -1, 4)
	p := &quotaParams{from: b[1].UnixNano(), to: b[2].UnixNano(), params: make([]any, 0, 1+len(b))}
	p.params = append(p.params, q.limit)
	for _, t := range b {
		p.params = append(p.params, t.UnixMicro())
	}
	q.cur.Store(p)
	return p.params
}
