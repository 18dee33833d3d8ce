package ratelimit

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// newQuotaSim returns a calendar quota's algorithm driven by explicit
// times, for the fuzzer and the tests that drive decide directly.
func newQuotaSim(t testing.TB, limit int, cal Calendar) sim {
	t.Helper()
	alg, err := newQuotaAlg(limit, cal, policyParams)
	require.NoError(t, err)
	return &simOf[fwState, *quotaAlg]{alg: alg}
}

func loadZone(t testing.TB, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	require.NoError(t, err, "time.LoadLocation(%q)", name)
	return loc
}

// utc is a UTC instant written as "2006-01-02 15:04", the independent
// oracle of the quota tests: every expected boundary below is worked out
// by hand from the zone's offsets, not computed by internal/calendar.
func utc(s string) time.Time {
	t, err := time.Parse("2006-01-02 15:04", s)
	if err != nil {
		panic(err)
	}
	return t
}

// quotaHomes is a single Quota and one key of a Keyed running the same
// policy on one clock, decided in lockstep: every call goes to both, and
// their Decisions must be equal.
type quotaHomes struct {
	t      *testing.T
	clk    *fakeclock.Manual
	single *Quota
	keyed  *Keyed
}

func newQuotaHomes(t *testing.T, limit int, cal Calendar, opts ...Option) *quotaHomes {
	t.Helper()
	clk := fakeclock.NewManual(time.Unix(0, 0))
	single, err := NewQuota(limit, cal, WithClock(clk))
	require.NoError(t, err)
	keyed, err := NewKeyed(QuotaPolicy(limit, cal), append([]Option{WithClock(clk)}, opts...)...)
	require.NoError(t, err)
	return &quotaHomes{t: t, clk: clk, single: single, keyed: keyed}
}

func (h *quotaHomes) set(at time.Time) { h.clk.Set(at) }

func (h *quotaHomes) allowN(n int) Decision {
	h.t.Helper()
	want := h.single.AllowN(n)
	got, err := h.keyed.AllowN(context.Background(), "k", n)
	require.NoError(h.t, err)
	require.Equal(h.t, want, got, "Keyed.AllowN(%d) at %v = %+v, single Quota says %+v", n, h.clk.Now().UTC(), got, want)
	return want
}

func (h *quotaHomes) peek(n int) Decision {
	h.t.Helper()
	want := h.single.Peek(n)
	got, err := h.keyed.Peek(context.Background(), "k", n)
	require.NoError(h.t, err)
	require.Equal(h.t, want, got, "Keyed.Peek(%d) at %v = %+v, single Quota says %+v", n, h.clk.Now().UTC(), got, want)
	return want
}

// checkQuotaPeriod checks, for a single quota and a keyed one in lockstep,
// that [start, end) is one period of cal and that at (inside it) sees it:
// start is a boundary, a full limit used at start is denied at at and
// 1ns before end with RetryAfter and ResetAfter exactly at end, and end is
// a boundary again.
func checkQuotaPeriod(t *testing.T, cal Calendar, at, start, end time.Time) {
	t.Helper()
	const limit = 3
	require.True(t, !at.Before(start) && at.Before(end), "the test's own instant %v must lie in [%v, %v)", at, start, end)
	h := newQuotaHomes(t, limit, cal)
	p := QuotaPolicy(limit, cal)
	for _, u := range []time.Time{start, at, end.Add(-1)} {
		assert.Equal(t, end.Sub(start), p.WindowAt(u), "WindowAt(%v)", u.UTC())
	}

	// start is a boundary: what is used 1ns before is gone at start.
	h.set(start.Add(-1))
	require.True(t, h.allowN(limit).Allowed, "AllowN(%d) on a fresh quota at %v", limit, start.Add(-1).UTC())
	h.set(start)
	assert.Equal(t, wantAllow(limit, limit, 0), h.peek(0), "Peek(0) at the period start %v", start.UTC())
	d := h.allowN(limit)
	assert.Equal(t, wantAllow(limit, 0, end.Sub(start)), d, "AllowN(%d) at the period start %v", limit, start.UTC())

	// Denied inside the period, with RetryAfter and ResetAfter at end.
	h.set(at)
	d = h.allowN(1)
	assert.Equal(t, wantDeny(limit, 0, end.Sub(at), end.Sub(at)), d, "AllowN(1) at %v", at.UTC())
	h.set(end.Add(-1))
	d = h.allowN(1)
	assert.Equal(t, wantDeny(limit, 0, 1, 1), d, "AllowN(1) 1ns before the boundary %v", end.UTC())

	// Admitted again exactly at end.
	h.set(end)
	assert.Equal(t, limit, h.peek(0).Remaining, "Peek(0) at the boundary %v", end.UTC())
	d = h.allowN(1)
	assert.True(t, d.Allowed, "AllowN(1) at the boundary %v = %+v", end.UTC(), d)
	assert.Equal(t, limit-1, d.Remaining, "AllowN(1) at the boundary %v", end.UTC())
}

type quotaPeriodCase struct {
	name           string
	cal            Calendar
	at, start, end time.Time
}

func runQuotaPeriodCases(t *testing.T, cases []quotaPeriodCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			checkQuotaPeriod(t, tc.cal, tc.at, tc.start, tc.end)
		})
	}
}

// TestQuotaDSTDays: on the days the clocks change, in a northern zone (New
// York: EST -5, EDT -4) and a southern one (Sydney: AEST +10, AEDT +11), a
// daily quota's day is 23 or 25 hours, and RetryAfter and ResetAfter point
// at the next local midnight to the nanosecond.
func TestQuotaDSTDays(t *testing.T) {
	t.Parallel()
	ny := Calendar{Unit: Daily, Location: loadZone(t, "America/New_York")}
	syd := Calendar{Unit: Daily, Location: loadZone(t, "Australia/Sydney")}
	runQuotaPeriodCases(t, []quotaPeriodCase{
		// 2026-03-08: 02:00 EST becomes 03:00 EDT. 00:00 EST to 00:00 EDT.
		{"new-york/spring-forward-23h", ny, utc("2026-03-08 12:00"), utc("2026-03-08 05:00"), utc("2026-03-09 04:00")},
		// 2026-11-01: 02:00 EDT becomes 01:00 EST. 00:00 EDT to 00:00 EST.
		{"new-york/fall-back-25h", ny, utc("2026-11-01 06:30"), utc("2026-11-01 04:00"), utc("2026-11-02 05:00")},
		// The ordinary days around them are 24h.
		{"new-york/day-before-spring", ny, utc("2026-03-07 20:00"), utc("2026-03-07 05:00"), utc("2026-03-08 05:00")},
		{"new-york/day-after-fall", ny, utc("2026-11-02 20:00"), utc("2026-11-02 05:00"), utc("2026-11-03 05:00")},
		// 2026-04-05: 03:00 AEDT becomes 02:00 AEST. 00:00 AEDT to 00:00 AEST.
		{"sydney/fall-back-25h", syd, utc("2026-04-04 16:30"), utc("2026-04-04 13:00"), utc("2026-04-05 14:00")},
		// 2026-10-04: 02:00 AEST becomes 03:00 AEDT. 00:00 AEST to 00:00 AEDT.
		{"sydney/spring-forward-23h", syd, utc("2026-10-03 16:30"), utc("2026-10-03 14:00"), utc("2026-10-04 13:00")},
	})
}

// TestQuotaResetInGapOrRepeatedHour: a reset time the clocks skip happens
// at the end of the gap; one they repeat happens at its first occurrence,
// and not again at the second.
func TestQuotaResetInGapOrRepeatedHour(t *testing.T) {
	t.Parallel()
	ny := loadZone(t, "America/New_York")
	syd := loadZone(t, "Australia/Sydney")
	ny0230 := Calendar{Unit: Daily, Location: ny, Hour: 2, Minute: 30}
	ny0130 := Calendar{Unit: Daily, Location: ny, Hour: 1, Minute: 30}
	syd0215 := Calendar{Unit: Daily, Location: syd, Hour: 2, Minute: 15}
	runQuotaPeriodCases(t, []quotaPeriodCase{
		// 02:30 does not exist on 2026-03-08 in New York: that day starts
		// at 03:00 EDT (07:00Z). The day before runs from 02:30 EST.
		{"new-york/gap/day-before", ny0230, utc("2026-03-08 06:00"), utc("2026-03-07 07:30"), utc("2026-03-08 07:00")},
		{"new-york/gap/day", ny0230, utc("2026-03-08 12:00"), utc("2026-03-08 07:00"), utc("2026-03-09 06:30")},
		// 01:30 occurs twice on 2026-11-01: the day starts at the first
		// (EDT, 05:30Z); the second (EST, 06:30Z) lies inside it.
		{"new-york/repeated/second-occurrence", ny0130, utc("2026-11-01 06:30"), utc("2026-11-01 05:30"), utc("2026-11-02 06:30")},
		{"new-york/repeated/day-before", ny0130, utc("2026-11-01 05:29"), utc("2026-10-31 05:30"), utc("2026-11-01 05:30")},
		// Sydney, 2026-10-04: 02:15 AEST is skipped, the day starts at
		// 03:00 AEDT (16:00Z the day before).
		{"sydney/gap/day", syd0215, utc("2026-10-04 00:00"), utc("2026-10-03 16:00"), utc("2026-10-04 15:15")},
		{"sydney/gap/day-before", syd0215, utc("2026-10-03 15:59"), utc("2026-10-02 16:15"), utc("2026-10-03 16:00")},
		// Sydney, 2026-04-05: 02:15 AEDT (15:15Z) then 02:15 AEST (16:15Z).
		{"sydney/repeated/second-occurrence", syd0215, utc("2026-04-04 16:15"), utc("2026-04-04 15:15"), utc("2026-04-05 16:15")},
	})
}

// TestQuotaMonthsWeeksYears: months have their real lengths (February 29,
// a MonthDay beyond the month's end starts the period on its last day),
// weeks start on WeekStart, years on January 1 (366 days in a leap year).
func TestQuotaMonthsWeeksYears(t *testing.T) {
	t.Parallel()
	ny := loadZone(t, "America/New_York")
	tokyo := loadZone(t, "Asia/Tokyo") // +9, no DST
	runQuotaPeriodCases(t, []quotaPeriodCase{
		{"daily/feb-29", Calendar{Unit: Daily}, utc("2028-02-29 23:59"), utc("2028-02-29 00:00"), utc("2028-03-01 00:00")},
		{"monthly/leap-february-29-days", Calendar{Unit: Monthly}, utc("2028-02-29 12:00"), utc("2028-02-01 00:00"), utc("2028-03-01 00:00")},
		{"monthly/february-28-days", Calendar{Unit: Monthly, MonthDay: 0}, utc("2027-02-14 12:00"), utc("2027-02-01 00:00"), utc("2027-03-01 00:00")},
		// MonthDay 31: January 31 to February 28, then to March 31.
		{"monthly/day-31/january", Calendar{Unit: Monthly, MonthDay: 31}, utc("2027-02-10 00:00"), utc("2027-01-31 00:00"), utc("2027-02-28 00:00")},
		{"monthly/day-31/february", Calendar{Unit: Monthly, MonthDay: 31}, utc("2027-03-15 00:00"), utc("2027-02-28 00:00"), utc("2027-03-31 00:00")},
		{"monthly/day-31/leap-february", Calendar{Unit: Monthly, MonthDay: 31}, utc("2028-03-01 00:00"), utc("2028-02-29 00:00"), utc("2028-03-31 00:00")},
		// 30-day months: April 30 and June 30.
		{"monthly/day-31/april", Calendar{Unit: Monthly, MonthDay: 31}, utc("2026-05-15 00:00"), utc("2026-04-30 00:00"), utc("2026-05-31 00:00")},
		{"monthly/day-31/march-to-april", Calendar{Unit: Monthly, MonthDay: 31}, utc("2026-04-15 00:00"), utc("2026-03-31 00:00"), utc("2026-04-30 00:00")},
		{"monthly/day-30/june", Calendar{Unit: Monthly, MonthDay: 30}, utc("2026-07-01 00:00"), utc("2026-06-30 00:00"), utc("2026-07-30 00:00")},
		// A month in New York that contains the spring change: 31 days less an hour.
		{"monthly/new-york-march", Calendar{Unit: Monthly, Location: ny}, utc("2026-03-20 00:00"), utc("2026-03-01 05:00"), utc("2026-04-01 04:00")},
		// Weeks from Monday 08:00 in New York: the week of the spring
		// change is 167 hours.
		{"weekly/monday-new-york-dst", Calendar{Unit: Weekly, Location: ny, Hour: 8, WeekStart: time.Monday}, utc("2026-03-08 12:00"), utc("2026-03-02 13:00"), utc("2026-03-09 12:00")},
		{"weekly/sunday-default", Calendar{Unit: Weekly}, utc("2027-01-01 10:00"), utc("2026-12-27 00:00"), utc("2027-01-03 00:00")},
		{"weekly/saturday-before-start", Calendar{Unit: Weekly, WeekStart: time.Saturday, Hour: 6}, utc("2026-06-13 05:59"), utc("2026-06-06 06:00"), utc("2026-06-13 06:00")},
		{"yearly/leap-366-days", Calendar{Unit: Yearly}, utc("2028-12-31 23:59"), utc("2028-01-01 00:00"), utc("2029-01-01 00:00")},
		// Yearly at 09:30 in Tokyo: 00:30Z on January 1.
		{"yearly/tokyo-0930", Calendar{Unit: Yearly, Location: tokyo, Hour: 9, Minute: 30}, utc("2027-01-01 00:29"), utc("2026-01-01 00:30"), utc("2027-01-01 00:30")},
	})
}

// TestQuotaRefund: RefundN gives back events in the period they were
// counted in, and nothing across a boundary.
func TestQuotaRefund(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cal := Calendar{Unit: Daily, Location: loadZone(t, "America/New_York")}
	clk := fakeclock.NewManual(utc("2026-03-08 12:00"))
	k, err := NewKeyed(QuotaPolicy(10, cal), WithClock(clk))
	require.NoError(t, err)

	require.True(t, must(k.AllowN(ctx, "k", 7)).Allowed)
	clk.Add(time.Hour)
	require.NoError(t, k.RefundN(ctx, "k", 3))
	assert.Equal(t, 6, must(k.Peek(ctx, "k", 0)).Remaining, "Remaining after 7 used and 3 refunded")
	require.NoError(t, k.RefundN(ctx, "k", 100))
	assert.Equal(t, wantAllow(10, 10, 0), must(k.Peek(ctx, "k", 0)), "a refund never raises a key above a fresh quota")

	// Across the boundary (04:00Z on 2026-03-09): a refund of the old
	// day's events does not touch the new day.
	clk.Set(utc("2026-03-09 04:00").Add(-1))
	require.True(t, must(k.AllowN(ctx, "k", 10)).Allowed)
	clk.Add(1)
	require.True(t, must(k.AllowN(ctx, "k", 4)).Allowed) // the new day
	require.NoError(t, k.RefundN(ctx, "k", 4))
	assert.Equal(t, 10, must(k.Peek(ctx, "k", 0)).Remaining)

	// On the algorithm: a state of the previous period is left as it is.
	alg, err := newQuotaAlg(10, cal, policyParams)
	require.NoError(t, err)
	day1 := utc("2026-03-08 12:00").UnixNano()
	day2 := utc("2026-03-09 12:00").UnixNano()
	var st fwState
	require.True(t, alg.decide(&st, day1, 5, consume).ok)
	before := st
	alg.refund(&st, day2, 5)
	assert.Equal(t, before, st, "refund at the next period changed the previous period's state")
	alg.refund(&st, day1+1, 2)
	assert.Equal(t, int64(3), st.count, "refund in the same period")
}

// TestQuotaClockBackwards: a key whose state is in a later period than now
// (the clock stepped back) stays in that period, as the fixed window does:
// its count holds, and RetryAfter is the whole of that period.
func TestQuotaClockBackwards(t *testing.T) {
	t.Parallel()
	cal := Calendar{Unit: Daily, Location: loadZone(t, "America/New_York")}
	h := newQuotaHomes(t, 2, cal)
	h.set(utc("2026-03-09 10:00")) // Monday 2026-03-09, a 24h day
	require.True(t, h.allowN(2).Allowed)
	h.set(utc("2026-03-08 12:00")) // back into Sunday, a 23h day
	d := h.allowN(1)
	assert.Equal(t, wantDeny(2, 0, 24*time.Hour, 24*time.Hour), d, "AllowN(1) after the clock stepped back a day")
}

// TestQuotaIdleKeysReclaimed: a keyed quota's key is idle, and reclaimable,
// once its period has ended or when it has nothing counted, and not
// before.
func TestQuotaIdleKeysReclaimed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cal := Calendar{Unit: Daily, Location: loadZone(t, "Australia/Sydney")}
	clk := fakeclock.NewManual(utc("2026-10-03 20:00")) // the 23h day: 14:00Z to 13:00Z
	k, err := NewKeyed(QuotaPolicy(5, cal), WithClock(clk), WithMaxKeys(1))
	require.NoError(t, err)
	require.True(t, must(k.AllowN(ctx, "a", 1)).Allowed)

	d, err := k.AllowN(ctx, "b", 1)
	require.ErrorIs(t, err, ErrTooManyKeys, "a used key is not reclaimed within its period")
	assert.False(t, d.Allowed)
	clk.Set(utc("2026-10-04 13:00").Add(-1))
	_, err = k.AllowN(ctx, "b", 1)
	require.ErrorIs(t, err, ErrTooManyKeys, "1ns before the boundary, a's day is not over")

	clk.Add(1)
	d, err = k.AllowN(ctx, "b", 1)
	require.NoError(t, err, "at the boundary a's period has ended: it is reclaimed")
	assert.True(t, d.Allowed)
	assert.Equal(t, 1, k.Len())

	// A key refunded to nothing is idle at once.
	require.NoError(t, k.RefundN(ctx, "b", 1))
	d, err = k.AllowN(ctx, "c", 1)
	require.NoError(t, err, "a key with nothing counted is reclaimed")
	assert.True(t, d.Allowed)

	// On the algorithm.
	alg, err := newQuotaAlg(5, cal, policyParams)
	require.NoError(t, err)
	end := utc("2026-10-04 13:00").UnixNano()
	var st fwState
	assert.True(t, alg.idle(&st, end-1), "a fresh state is idle")
	require.True(t, alg.decide(&st, end-2, 1, consume).ok)
	assert.False(t, alg.idle(&st, end-1), "a state with events in the current period is not idle")
	assert.True(t, alg.idle(&st, end), "a state whose period ended is idle")
}

// TestQuotaInvalidCalendars: every out-of-range field is a configuration
// error naming it, from every constructor, and never a panic.
func TestQuotaInvalidCalendars(t *testing.T) {
	t.Parallel()
	ny := loadZone(t, "America/New_York")
	for _, tc := range []struct {
		cal   Calendar
		limit int
		want  string
	}{
		{Calendar{}, 1, "ratelimit.Calendar.Unit must be Daily, Weekly, Monthly or Yearly, got CalendarUnit(0)"},
		{Calendar{Unit: Yearly + 1}, 1, "ratelimit.Calendar.Unit must be Daily, Weekly, Monthly or Yearly, got CalendarUnit(5)"},
		{Calendar{Unit: Daily, Hour: -1}, 1, "ratelimit.Calendar.Hour must be 0-23, got -1"},
		{Calendar{Unit: Daily, Hour: 24, Location: ny}, 1, "ratelimit.Calendar.Hour must be 0-23, got 24"},
		{Calendar{Unit: Daily, Minute: 60}, 1, "ratelimit.Calendar.Minute must be 0-59, got 60"},
		{Calendar{Unit: Daily, Minute: math.MinInt}, 1, "ratelimit.Calendar.Minute must be 0-59"},
		{Calendar{Unit: Weekly, WeekStart: 7}, 1, "ratelimit.Calendar.WeekStart must be a day of the week, got 7"},
		{Calendar{Unit: Weekly, WeekStart: -1}, 1, "ratelimit.Calendar.WeekStart must be a day of the week, got -1"},
		{Calendar{Unit: Monthly, MonthDay: 32}, 1, "ratelimit.Calendar.MonthDay must be 1-31 (or 0, meaning 1), got 32"},
		{Calendar{Unit: Monthly, MonthDay: -1}, 1, "ratelimit.Calendar.MonthDay must be 1-31 (or 0, meaning 1), got -1"},
		{Calendar{Unit: Daily}, 0, "must be positive, got 0"},
		{Calendar{Unit: Daily}, maxCount + 1, "must be at most 2^53"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			t.Parallel()
			check := func(err error, caller string) {
				t.Helper()
				require.ErrorIs(t, err, ErrInvalidConfig)
				assert.Contains(t, err.Error(), tc.want)
				assert.Contains(t, err.Error(), caller)
				assert.True(t, strings.HasPrefix(err.Error(), "ratelimit: invalid configuration: "), err.Error())
			}
			var q *Quota
			var err error
			require.NotPanics(t, func() { q, err = NewQuota(tc.limit, tc.cal) })
			assert.Nil(t, q)
			check(err, "ratelimit.NewQuota")
			p := QuotaPolicy(tc.limit, tc.cal)
			if tc.limit == 1 {
				check(p.Validate(), "ratelimit.Policy.Calendar: ")
			} else {
				check(p.Validate(), "ratelimit.Policy.Limit")
			}
			_, err = NewKeyed(p)
			check(err, "ratelimit.Policy.")
			_, err = p.NewLimiter()
			check(err, "ratelimit.NewQuota")
			require.NotPanics(t, func() { _ = p.WindowAt(time.Now()); _ = p.window(); _ = p.String() })
		})
	}
	_, err := NewQuota(1, Calendar{Unit: Daily, Hour: 24})
	assert.EqualError(t, err, "ratelimit: invalid configuration: ratelimit.NewQuota cal: ratelimit.Calendar.Hour must be 0-23, got 24")
	err = QuotaPolicy(1, Calendar{Unit: Monthly, MonthDay: 32}).Validate()
	assert.EqualError(t, err, "ratelimit: invalid configuration: ratelimit.Policy.Calendar: ratelimit.Calendar.MonthDay must be 1-31 (or 0, meaning 1), got 32")
	q := must(NewQuota(5, Calendar{Unit: Daily}))
	err = q.SetLimit(0)
	assert.EqualError(t, err, "ratelimit: invalid configuration: ratelimit.Quota.SetLimit limit must be positive, got 0")
	assert.Equal(t, 5, q.Peek(0).Limit, "a refused SetLimit changes nothing")
}

// TestQuotaAllowAllStack: 10/s, 12 a day and 20 a month in New York
// through AllowAll, all or nothing: a denial by any one limit charges none,
// reports the longest RetryAfter, and waiting that long lets the request
// through. It runs on the atomic in-memory path and on the refund path.
func TestQuotaAllowAllStack(t *testing.T) {
	t.Parallel()
	ny := loadZone(t, "America/New_York")
	for _, path := range []string{"in-memory", "refund"} {
		t.Run(path, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := fakeclock.NewManual(utc("2026-03-29 14:00")) // Sunday, 10:00 EDT
			newKeyed := func(p Policy) KeyedLimiter {
				k, err := NewKeyed(p, WithClock(clk))
				require.NoError(t, err)
				if path == "refund" {
					return otherLimiter{k}
				}
				return k
			}
			dims := []Dimension{
				{Name: "second", Limiter: newKeyed(TokenBucketPolicy(Per(10, time.Second), 10)), Key: "c"},
				{Name: "day", Limiter: newKeyed(QuotaPolicy(12, Calendar{Unit: Daily, Location: ny})), Key: "c"},
				{Name: "month", Limiter: newKeyed(QuotaPolicy(20, Calendar{Unit: Monthly, Location: ny})), Key: "c"},
			}
			remaining := func() [3]int {
				var r [3]int
				for i, d := range dims {
					r[i] = must(d.Limiter.Peek(ctx, d.Key, 0)).Remaining
				}
				return r
			}
			allowAll := func(n int) MultiDecision {
				t.Helper()
				md, err := AllowAll(ctx, n, dims...)
				require.NoError(t, err)
				return md
			}

			md := allowAll(6)
			require.True(t, md.Allowed, "AllowAll(6) = %+v", md)
			assert.Equal(t, [3]int{4, 6, 14}, remaining())

			// The token bucket alone denies 5: no quota is charged.
			md = allowAll(5)
			assert.False(t, md.Allowed)
			assert.Equal(t, 0, md.Index, "denied by the per-second limit")
			assert.Equal(t, 100*time.Millisecond, md.RetryAfter)
			assert.Equal(t, [3]int{4, 6, 14}, remaining(), "a denial charges nothing")

			// A second later the daily quota alone denies 7, until
			// 00:00 EDT (04:00Z).
			clk.Add(time.Second)
			md = allowAll(7)
			assert.False(t, md.Allowed)
			assert.Equal(t, 1, md.Index, "denied by the daily quota")
			untilMidnight := utc("2026-03-30 04:00").Sub(utc("2026-03-29 14:00").Add(time.Second))
			assert.Equal(t, untilMidnight, md.RetryAfter)
			assert.Equal(t, untilMidnight, md.ResetAfter)
			assert.Equal(t, [3]int{10, 6, 14}, remaining(), "a denial charges nothing")
			clk.Add(md.RetryAfter - 1)
			assert.False(t, allowAll(7).Allowed, "1ns before midnight")
			clk.Add(1)
			require.True(t, allowAll(7).Allowed, "at midnight, after the RetryAfter")
			assert.Equal(t, [3]int{3, 5, 7}, remaining())

			// The next second, 8 is denied by the day (5 left) and the month
			// (7 left); the month's denial, until April 1 00:00 EDT, is the
			// longer and is the one reported.
			clk.Add(time.Second)
			md = allowAll(8)
			assert.False(t, md.Allowed)
			assert.Equal(t, 2, md.Index, "the longest RetryAfter: the monthly quota's")
			untilApril := utc("2026-04-01 04:00").Sub(utc("2026-03-30 04:00").Add(time.Second))
			assert.Equal(t, untilApril, md.RetryAfter)
			assert.Equal(t, [3]int{10, 5, 7}, remaining(), "a denial charges nothing")
			clk.Add(md.RetryAfter)
			require.True(t, allowAll(8).Allowed, "waiting the RetryAfter lets it through")
			assert.Equal(t, [3]int{2, 4, 12}, remaining())
		})
	}
}

// TestQuotaSetLimitKeepsCount: events counted in the current period still
// count against a new limit.
func TestQuotaSetLimitKeepsCount(t *testing.T) {
	t.Parallel()
	clk := fakeclock.NewManual(utc("2026-06-10 12:00"))
	q, err := NewQuota(10, Calendar{Unit: Daily}, WithClock(clk))
	require.NoError(t, err)
	require.True(t, q.AllowN(8).Allowed)
	require.NoError(t, q.SetLimit(5))
	assert.Equal(t, 5, q.Peek(0).Limit)
	assert.Equal(t, wantDeny(5, 0, 12*time.Hour, 12*time.Hour), q.Peek(0), "Peek(0) with 8 counted against 5")
	assert.False(t, q.Allow(), "8 counted against a new limit of 5")
	require.NoError(t, q.SetLimit(12))
	assert.Equal(t, 4, q.Peek(0).Remaining)
	clk.Add(12 * time.Hour)
	assert.Equal(t, wantAllow(12, 12, 0), q.Peek(0), "a new day")
	assert.Equal(t, wantAllow(12, 11, 24*time.Hour), q.AllowN(1), "the calendar is kept: days run midnight to midnight UTC")
}

// TestQuotaStrings pins Policy.String, Window and WindowAt of quotas.
func TestQuotaStrings(t *testing.T) {
	t.Parallel()
	ny := loadZone(t, "America/New_York")
	for _, tc := range []struct {
		p      Policy
		want   string
		window time.Duration
	}{
		{QuotaPolicy(10000, Calendar{Unit: Daily, Location: ny}), "quota(limit=10000, daily at 00:00 America/New_York)", 24 * time.Hour},
		{QuotaPolicy(5, Calendar{Unit: Weekly, WeekStart: time.Monday, Hour: 9, Minute: 30}), "quota(limit=5, weekly on Monday at 09:30 UTC)", 7 * 24 * time.Hour},
		{QuotaPolicy(200000, Calendar{Unit: Monthly, MonthDay: 15}), "quota(limit=200000, monthly on day 15 at 00:00 UTC)", 30 * 24 * time.Hour},
		{QuotaPolicy(1, Calendar{Unit: Monthly}), "quota(limit=1, monthly on day 1 at 00:00 UTC)", 30 * 24 * time.Hour},
		{QuotaPolicy(7, Calendar{Unit: Yearly}), "quota(limit=7, yearly on January 1 at 00:00 UTC)", 365 * 24 * time.Hour},
		{QuotaPolicy(7, Calendar{}), "quota(limit=7, CalendarUnit(0) at 00:00 UTC)", 0},
	} {
		assert.Equal(t, tc.want, tc.p.String())
		assert.Equal(t, tc.window, tc.p.window(), "%v window()", tc.p)
	}
	assert.Equal(t, "daily", Daily.String())
	assert.Equal(t, 29*24*time.Hour, QuotaPolicy(1, Calendar{Unit: Monthly}).WindowAt(utc("2028-02-10 00:00")))
	assert.Equal(t, 25*time.Hour, QuotaPolicy(1, Calendar{Unit: Daily, Location: ny}).WindowAt(utc("2026-11-01 12:00")))
}

// TestQuotaSpanCache: decisions far apart in time, and back again, always
// see the right period, whatever the cache holds; concurrent keys on
// different days share it safely.
func TestQuotaSpanCache(t *testing.T) {
	t.Parallel()
	cal := Calendar{Unit: Daily, Location: loadZone(t, "Australia/Sydney")}
	alg, err := newQuotaAlg(3, cal, policyParams)
	require.NoError(t, err)
	ref, err := newQuotaAlg(3, cal, policyParams)
	require.NoError(t, err)
	times := []time.Time{utc("2026-10-03 14:00"), utc("2026-10-04 12:59"), utc("2026-10-04 13:00"), utc("2026-04-05 13:59"), utc("2026-01-01 00:00"), utc("2026-10-03 13:59")}
	for i := range 200 {
		now := times[i%len(times)].UnixNano() + int64(i%3) - 1
		s, e := alg.period(now)
		ws, we := ref.periodAt(now)
		require.Equal(t, [2]int64{ws, we}, [2]int64{s, e}, "period(%v) after %d calls", time.Unix(0, now).UTC(), i)
	}

	k, err := NewKeyed(QuotaPolicy(3, cal), WithClock(fakeclock.NewManual(utc("2026-10-04 12:00"))))
	require.NoError(t, err)
	done := make(chan struct{})
	for g := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 500 {
				now := times[(g+i)%len(times)].UnixNano()
				st := fwState{}
				v := k.cur.Load().store.(*shardStore[fwState, *quotaAlg]).alg.decide(&st, now, 1, consume)
				ws, _ := ref.periodAt(now)
				if st.k != ws || !v.ok {
					t.Errorf("decide at %v: state %+v, want period start %d", time.Unix(0, now).UTC(), st, ws)
					return
				}
			}
		}()
	}
	for range 8 {
		<-done
	}
}

// TestQuotaExtremeTimes: a clock at the ends of the int64 range gets a
// decision, not a panic.
func TestQuotaExtremeTimes(t *testing.T) {
	t.Parallel()
	alg, err := newQuotaAlg(2, Calendar{Unit: Yearly}, policyParams)
	require.NoError(t, err)
	for _, now := range []int64{math.MinInt64, math.MinInt64 + 1, -1, 0, math.MaxInt64 - 1, math.MaxInt64} {
		var st fwState
		require.NotPanics(t, func() {
			v := alg.decide(&st, now, 2, consume)
			assert.True(t, v.ok, "at %d", now)
			v = alg.decide(&st, now, 1, consume)
			assert.False(t, v.ok, "at %d", now)
			assert.GreaterOrEqual(t, v.retry, int64(0), fmt.Sprintf("at %d", now))
		})
	}
}

// TestQuotaAllowDoesNotAllocate: a quota's AllowN, single and keyed,
// admitting and denying, allocates nothing in steady state (the period
// cache allocates once per period, when it moves on). Not parallel:
// AllocsPerRun counts the whole process.
func TestQuotaAllowDoesNotAllocate(t *testing.T) {
	const calls = 20_000
	cal := Calendar{Unit: Daily, Location: loadZone(t, "America/New_York")}
	ctx := context.Background()
	for _, limit := range []int{maxCount, 100} {
		clk := &benchStepClock{now: time.Unix(1_700_000_000, 0), step: 37 * time.Nanosecond}
		q, err := NewQuota(limit, cal, WithClock(clk))
		require.NoError(t, err)
		k, err := NewKeyed(QuotaPolicy(limit, cal), WithClock(clk))
		require.NoError(t, err)
		q.Allow()
		k.Allow(ctx, "k")
		allocs := testing.AllocsPerRun(1, func() {
			for range calls {
				q.AllowN(1)
				_, _ = k.AllowN(ctx, "k", 1)
			}
		})
		assert.Zero(t, allocs, "%d AllowN calls with limit %d allocated", calls, limit)
	}
}

// BenchmarkQuotaAllowN compares a daily quota in New York with a fixed
// window of 24 hours, on the real clock, admitting (a limit no run
// reaches) and denying (a limit of 1, used up): the cost of calendar
// periods over epoch-aligned windows. Compare with
// benchstat -col /algo.
func BenchmarkQuotaAllowN(b *testing.B) {
	cal := Calendar{Unit: Daily, Location: loadZone(b, "America/New_York")}
	for _, mode := range []struct {
		name  string
		limit int
	}{{"admit", maxCount}, {"denied", 1}} {
		for _, algo := range []struct {
			name string
			make func() (Limiter, error)
		}{
			{"quota", func() (Limiter, error) { return NewQuota(mode.limit, cal) }},
			{"fixedwindow", func() (Limiter, error) { return NewFixedWindow(mode.limit, 24*time.Hour) }},
		} {
			b.Run("algo="+algo.name+"/"+mode.name+"/serial", func(b *testing.B) {
				l, err := algo.make()
				require.NoError(b, err)
				l.Allow()
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					l.AllowN(1)
				}
			})
			b.Run("algo="+algo.name+"/"+mode.name+"/parallel", func(b *testing.B) {
				l, err := algo.make()
				require.NoError(b, err)
				l.Allow()
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						l.AllowN(1)
					}
				})
			})
		}
	}
	for _, algo := range []struct {
		name string
		p    Policy
	}{
		{"quota", QuotaPolicy(maxCount, cal)},
		{"fixedwindow", FixedWindowPolicy(maxCount, 24*time.Hour)},
	} {
		b.Run("algo="+algo.name+"/keyed-hotkey/parallel", func(b *testing.B) {
			k, err := NewKeyed(algo.p)
			require.NoError(b, err)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					_, _ = k.AllowN(ctx, "hot-key-01", 1)
				}
			})
		})
	}
}

// BenchmarkQuotaPeriod measures what the period cache saves: a period from
// the cache, and computed afresh in the zone (what every decision would
// cost without it).
func BenchmarkQuotaPeriod(b *testing.B) {
	alg, err := newQuotaAlg(1, Calendar{Unit: Daily, Location: loadZone(b, "America/New_York")}, policyParams)
	require.NoError(b, err)
	now := time.Now().UnixNano()
	b.Run("cached", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			alg.period(now + int64(i&1023))
		}
	})
	b.Run("uncached", func(b *testing.B) {
		b.ReportAllocs()
		for i := range b.N {
			alg.periodAt(now + int64(i&1023))
		}
	})
}

// TestQuotaZoneChange: a running daily quota moves from New York to Tokyo
// (SetPolicy). What the key used carries over by the mode, and from then on
// the day is Tokyo's: the denial's RetryAfter points at Tokyo's midnight,
// and the key is full exactly there.
func TestQuotaZoneChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ny, tokyo := loadZone(t, "America/New_York"), loadZone(t, "Asia/Tokyo")
	for _, tc := range []struct {
		mode       Inheritance
		limit      int
		wantRemain int
	}{
		{KeepUsed, 10, 3},    // 7 used stay 7
		{ScaleUsed, 20, 6},   // 7 of 10 is 14 of 20
		{StartFresh, 10, 10}, // a fresh Tokyo day
		{KeepUsed, 5, 0},     // 7 used, capped at the new limit: empty, not locked out
	} {
		t.Run(fmt.Sprintf("%v to %d", tc.mode, tc.limit), func(t *testing.T) {
			t.Parallel()
			// 22:00 on June 10 in New York is 02:00 UTC on June 11, 11:00 in Tokyo.
			clk := fakeclock.NewManual(utc("2026-06-11 02:00"))
			k, err := NewKeyed(QuotaPolicy(10, Calendar{Unit: Daily, Location: ny}), WithClock(clk))
			require.NoError(t, err)
			require.True(t, must(k.AllowN(ctx, "key", 7)).Allowed)
			require.NoError(t, k.SetPolicy(QuotaPolicy(tc.limit, Calendar{Unit: Daily, Location: tokyo}), tc.mode))

			d := must(k.Peek(ctx, "key", 0))
			assert.Equal(t, tc.wantRemain, d.Remaining)
			// Tokyo's next midnight: 15:00 UTC on June 11, 13 hours on.
			untilMidnight := utc("2026-06-11 15:00").Sub(clk.Now())
			if tc.wantRemain < tc.limit {
				assert.Equal(t, untilMidnight, d.ResetAfter, "the used events count in Tokyo's day")
			}
			left := tc.wantRemain
			if left == tc.limit { // fresh: use one, which counts in Tokyo's day
				d := must(k.AllowN(ctx, "key", 1))
				require.True(t, d.Allowed)
				assert.Equal(t, untilMidnight, d.ResetAfter)
				left--
			}
			denied := must(k.AllowN(ctx, "key", left+1))
			require.False(t, denied.Allowed)
			assert.Equal(t, untilMidnight, denied.RetryAfter, "the next boundary is Tokyo's midnight, not New York's")

			clk.Add(untilMidnight - 1)
			assert.Equal(t, left, must(k.Peek(ctx, "key", 0)).Remaining, "1 ns before Tokyo's midnight")
			clk.Add(1)
			assert.Equal(t, tc.limit, must(k.Peek(ctx, "key", 0)).Remaining, "full at Tokyo's midnight")
		})
	}
}
