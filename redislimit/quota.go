package redislimit

import (
	"sync/atomic"
	"time"

	"github.com/rlkit/ratelimit"
)

// Calendar quotas. The zone's rules live in Go (the time package's zone
// database, through ratelimit.Calendar.Period), not in Redis: each call
// passes the boundaries of four consecutive periods around the
// application's time (the previous period, the current one and the next
// two: five instants), and the script counts in the one holding its own
// now, the server's TIME unless WithClock. A server clock outside
// those four periods fails the call ("Redis clock more than a period away
// from the application's"), and the failure policy applies.

// checkZone returns an error when the zone of cal cannot be identified by
// its name. The name is all that the Redis keys say of the zone (it is in
// the policy's fingerprint; the rules stay in each process), so processes
// that name a zone alike must mean the same rules. A name does not say
// which rules it has when it is empty, when it is "Local" (time.Local
// with the rules of the host's /etc/localtime, which differ from host to
// host), or when the zone database knows the name (time.LoadLocation)
// but its rules differ from the given zone's at some instant of the span
// that matters, from a year before now to the end of the quota's periods
// passed to the scripts and a year on: a FixedZone named after a zone of
// the database, or a zone loaded from other data under a database name.
// Names the database does not know are the user's own, and taken as
// given. (Processes that still disagree, such as two hosts with two
// tzdata releases, converge on the period stored first: see lua/quota/state.lua.)
func checkZone(cal ratelimit.Calendar, now time.Time, op string) error {
	loc := cal.Location
	if loc == nil {
		return nil // UTC
	}
	const why = "on Redis a quota's zone is known by its name alone, which must say which rules every process sharing the state counts periods by"
	switch name := loc.String(); name {
	case "":
		return invalid("%s: Policy.Calendar.Location has no name: %s; load the zone by its IANA name (time.LoadLocation)", op, why)
	case "Local":
		return invalid("%s: Policy.Calendar.Location is named \"Local\" (time.Local, whose rules come from each host's /etc/localtime or TZ): %s; load the zone by its IANA name (time.LoadLocation(\"Europe/Paris\"))", op, why)
	}
	ref, err := time.LoadLocation(loc.String())
	if err != nil || ref == loc {
		return nil
	}
	_, end, _ := cal.Period(now)
	for range 3 {
		_, end, _ = cal.Period(end)
	}
	if at, ok := zoneDiffers(loc, ref, now.AddDate(-1, 0, 0), end.AddDate(1, 0, 0)); ok {
		_, off := at.In(loc).Zone()
		_, refOff := at.In(ref).Zone()
		return invalid("%s: Policy.Calendar.Location %q is not the zone of that name in the zone database (at %v its UTC offset is %v, the database's %v): %s; give a zone of your own a name of its own, or load this one by name (time.LoadLocation)",
			op, loc.String(), at.UTC().Format(time.RFC3339), time.Duration(off)*time.Second, time.Duration(refOff)*time.Second, why)
	}
	return nil
}

// zoneDiffers returns the first instant in [from, to) at which a and b
// have different UTC offsets, walking their transitions.
func zoneDiffers(a, b *time.Location, from, to time.Time) (time.Time, bool) {
	for t := from; t.Before(to); {
		ta, tb := t.In(a), t.In(b)
		_, offA := ta.Zone()
		_, offB := tb.Zone()
		if offA != offB {
			return t, true
		}
		_, endA := ta.ZoneBounds()
		_, endB := tb.ZoneBounds()
		next := endA
		if next.IsZero() || (!endB.IsZero() && endB.Before(next)) {
			next = endB
		}
		if next.IsZero() {
			break // neither changes again
		}
		t = next
	}
	return time.Time{}, false
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
