package limitset

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit"
)

// newYork loads America/New_York or skips the test.
func newYork(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skipf("no time zone data: %v", err)
	}
	return loc
}

// TestWindowCacheHoldsAQuotaWindowForOnePeriod: the window of a calendar quota is
// Policy.WindowAt of the request's time, computed once per period and
// policy: the cached entry spans exactly the period containing the
// request, and a request in the next period, or under another policy,
// computes it anew.
func TestWindowCacheHoldsAQuotaWindowForOnePeriod(t *testing.T) {
	t.Parallel()
	ny := newYork(t)
	p := ratelimit.QuotaPolicy(1000, ratelimit.Calendar{Unit: ratelimit.Daily, Location: ny, Hour: 6})
	var q windowCache
	at := func(s string) int64 {
		tm, err := time.ParseInLocation(time.DateTime, s, ny)
		require.NoError(t, err)
		return tm.UnixNano()
	}
	now := at("2026-03-07 12:00:00")
	assert.Equal(t, p.WindowAt(time.Unix(0, now)), q.windowAt(p, now))
	e := q.slots[1000%len(q.slots)].Load()
	require.NotNil(t, e)
	assert.Equal(t, at("2026-03-07 06:00:00"), e.start, "cached from the reset time of the day")
	assert.Equal(t, at("2026-03-08 06:00:00"), e.end, "cached until the next reset")

	q.windowAt(p, at("2026-03-08 05:59:59"))
	assert.Same(t, e, q.slots[1000%len(q.slots)].Load(), "a request in the same period recomputed the window")

	next := at("2026-03-08 06:00:00")
	assert.Equal(t, p.WindowAt(time.Unix(0, next)), q.windowAt(p, next))
	e2 := q.slots[1000%len(q.slots)].Load()
	assert.NotSame(t, e, e2, "the next period reused the cached window")
	assert.Equal(t, next, e2.start)
	assert.Equal(t, at("2026-03-09 06:00:00"), e2.end)

	other := ratelimit.QuotaPolicy(1000, ratelimit.Calendar{Unit: ratelimit.Monthly, Location: ny})
	assert.Equal(t, other.WindowAt(time.Unix(0, next)), q.windowAt(other, next))
	assert.Equal(t, other, q.slots[1000%len(q.slots)].Load().p, "another policy used the cached window")

	// A calendar no limiter accepts is passed to WindowAt, never cached.
	bad := ratelimit.QuotaPolicy(7, ratelimit.Calendar{Unit: 9})
	assert.Equal(t, bad.WindowAt(time.Unix(0, next)), q.windowAt(bad, next))
	assert.Nil(t, q.slots[7%len(q.slots)].Load())
}
