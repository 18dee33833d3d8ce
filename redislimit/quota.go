package redislimit

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rlkit/ratelimit"
)

// Calendar quotas. The zone's rules live in Go (the time package's zone
// database, through ratelimit.Calendar.Period), not in Redis: each call
// passes the boundaries of four consecutive periods around the
// application's time (the previous period, the current one and the next
// two: five instants), and the script counts in the one holding its own
// now, the server's TIME unless WithClientTime. A server clock outside
// those four periods fails the call ("Redis clock more than a period away
// from the application's"), and the failure policy applies.

// quotaFingerprint returns the 8 hex digits that name a quota policy in
// its Redis keys: the limit and the calendar's normalized description
// (unit, reset time, week start or month day, zone name), which differs
// between calendars with different periods and is equal for calendars with
// the same ones (a nil Location and UTC, MonthDay 0 and 1).
func quotaFingerprint(p ratelimit.Policy) string {
	sum := sha256.Sum256(fmt.Appendf(nil, "cq/%d/%v", p.Limit, p.Calendar))
	return hex.EncodeToString(sum[:4])
}

// quotaBounds caches the script parameters of a calendar quota (the limit
// and five boundaries) for application times within one period: they
// change only when the application's time enters another period.
type quotaBounds struct {
	cal   ratelimit.Calendar
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
	// The calendar was validated: Period cannot fail.
	start, end, _ := q.cal.Period(time.Unix(0, now))
	prev, _, _ := q.cal.Period(start.Add(-time.Nanosecond))
	_, next, _ := q.cal.Period(end)
	_, last, _ := q.cal.Period(next)
	p := &quotaParams{from: start.UnixNano(), to: end.UnixNano()}
	p.params = []any{q.limit, prev.UnixMicro(), start.UnixMicro(), end.UnixMicro(), next.UnixMicro(), last.UnixMicro()}
	q.cur.Store(p)
	return p.params
}
