package redislimit

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/require"
)

// Calendar quotas whose processes disagree about the periods: the key
// names a quota's zone by its name, and two processes can give one name
// different rules (time.Local under two settings of /etc/localtime, an
// IANA zone under two tzdata releases, a FixedZone named after a zone).

// tzData returns the TZif data of the zone name from the system's zone
// database, or skips t when there is none.
func tzData(t *testing.T, name string) []byte {
	t.Helper()
	for _, dir := range []string{os.Getenv("ZONEINFO"), "/usr/share/zoneinfo", "/usr/share/lib/zoneinfo", "/usr/lib/locale/TZ"} {
		if dir == "" {
			continue
		}
		if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
			return b
		}
	}
	t.Skipf("no zone database with %s on this system", name)
	return nil
}

// sameNameZones returns pairs of locations that share a name but not
// their rules: fixed offsets, and two IANA zones' data under one name (as
// two tzdata releases that disagree about a zone).
func sameNameZones(t *testing.T) map[string][2]*time.Location {
	t.Helper()
	ny, err := time.LoadLocationFromTZData("Corp/Headquarters", tzData(t, "America/New_York"))
	require.NoError(t, err)
	tokyo, err := time.LoadLocationFromTZData("Corp/Headquarters", tzData(t, "Asia/Tokyo"))
	require.NoError(t, err)
	return map[string][2]*time.Location{
		"fixed":  {time.FixedZone("Corp/Office", 0), time.FixedZone("Corp/Office", 9*3600)},
		"tzdata": {ny, tokyo},
	}
}

// TestQuotaZoneRulesDisagree is the reproduction: a daily quota
// of 5 under two limiters on one Redis, one prefix, whose zones share a
// name but not their rules, called alternately. Before the fix each read
// the other's stored period as an older one and started fresh: 100 of 100
// admitted. Now the stored period, while it holds now, counts for both:
// 5 admitted, both report the same quota at every step, and over three
// days a fresh count starts only when the stored period has ended.
func TestQuotaZoneRulesDisagree(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for name, zones := range sameNameZones(t) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			mock := fakeclock.NewManual(mockStart)
			prefix := uniquePrefix(t)
			var ls [2]*Limiter
			for i, z := range zones {
				ls[i] = mustNew(t, c, ratelimit.QuotaPolicy(5, ratelimit.Calendar{Unit: ratelimit.Daily, Location: z}),
					WithClock(mock), WithDenyCache(0), WithPrefix(prefix))
			}
			require.Equal(t, ls[0].Key("k"), ls[1].Key("k"), "one name, one key")
			admitted := 0
			for i := range 100 {
				d, err := ls[i%2].AllowN(bg(), "k", 1)
				require.NoError(t, err)
				if d.Allowed {
					admitted++
				}
			}
			require.Equal(t, 5, admitted, "a daily quota of 5 called 100 times by two processes")

			// Ten days, a call every 10 to 50 minutes from either: both
			// always see one state, and each count starts fresh only after
			// the period it replaces has ended. Each process starts some.
			rng := newRand(7)
			var end time.Time // of the stored period
			var freshBy [2]int
			for i := range 10 * 24 * 2 {
				mock.Add(time.Duration(10+rng.IntN(41)) * time.Minute)
				who := rng.IntN(2)
				d, err := ls[who].AllowN(bg(), "k", 1)
				require.NoError(t, err)
				p0, err := ls[0].Peek(bg(), "k", 0)
				require.NoError(t, err)
				p1, err := ls[1].Peek(bg(), "k", 0)
				require.NoError(t, err)
				require.Equal(t, p0, p1, "step %d: the two see different quotas", i)
				if d.Allowed && d.Remaining == 4 {
					// A fresh count: the period before must have ended.
					require.False(t, mock.Now().Before(end), "step %d: a fresh count at %v, before the stored period's end %v", i, mock.Now(), end)
					freshBy[who]++
				}
				end = mock.Now().Add(p0.ResetAfter)
			}
			require.Positive(t, freshBy[0], "no period of the first zone counted")
			require.Positive(t, freshBy[1], "no period of the second zone counted")
		})
	}
}

// TestQuotaUnidentifiableZone: on Redis a calendar's zone is named by its
// name alone, so New, SetPolicy and WithPrevious refuse a zone whose name
// does not say which rules it has: time.Local when its name is "Local"
// (rules from /etc/localtime, which differ between hosts), an unnamed
// zone, and a zone named after one of the zone database whose rules
// differ from it (a FixedZone("UTC", 3600)). The error says why. Zones
// the database names as given, fixed zones that match it, and names it
// does not know are accepted.
func TestQuotaUnidentifiableZone(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	quota := func(loc *time.Location) ratelimit.Policy {
		return ratelimit.QuotaPolicy(5, ratelimit.Calendar{Unit: ratelimit.Daily, Location: loc})
	}
	localCopy, err := time.LoadLocationFromTZData("Local", tzData(t, "Europe/Paris"))
	require.NoError(t, err)
	unnamed, err := time.LoadLocationFromTZData("", tzData(t, "Europe/Paris"))
	require.NoError(t, err)
	parisAsTokyo, err := time.LoadLocationFromTZData("Europe/Paris", tzData(t, "Asia/Tokyo"))
	require.NoError(t, err)
	for _, tc := range []struct {
		loc  *time.Location
		want string
	}{
		{localCopy, `"Local"`},
		{unnamed, "no name"},
		{time.FixedZone("", 3600), "no name"},
		{time.FixedZone("UTC", 3600), `"UTC"`},
		{time.FixedZone("Europe/Paris", 3600), `"Europe/Paris"`},
		{parisAsTokyo, `"Europe/Paris"`},
	} {
		_, err := New(c, quota(tc.loc))
		require.ErrorIs(t, err, ratelimit.ErrInvalidConfig, "%q", tc.loc)
		require.ErrorContains(t, err, tc.want)
		require.ErrorContains(t, err, "Calendar.Location")
		l := mustNew(t, c, quota(nil))
		err = l.SetPolicy(quota(tc.loc), ratelimit.KeepUsed)
		require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
		require.ErrorContains(t, err, tc.want)
		_, err = New(c, quota(nil), WithPrevious(quota(tc.loc), ratelimit.KeepUsed))
		require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
		require.ErrorContains(t, err, tc.want)
	}
	if time.Local.String() == "Local" {
		_, err := New(c, quota(time.Local))
		require.ErrorContains(t, err, `"Local"`)
	}
	parisData, err := time.LoadLocationFromTZData("Europe/Paris", tzData(t, "Europe/Paris"))
	require.NoError(t, err)
	for _, loc := range []*time.Location{
		nil, time.UTC, time.FixedZone("UTC", 0), mustZone("Europe/Paris"), parisData,
		time.FixedZone("Corp/Office", 3600), // a name the database does not know: the user's own
	} {
		_, err := New(c, quota(loc))
		require.NoError(t, err, "%v", loc)
	}
}

// quotaZoneHelperEnv carries the arguments of TestQuotaZoneHelperProcess.
const quotaZoneHelperEnv = "REDISLIMIT_QUOTA_ZONE_HELPER"

// TestQuotaZoneHelperProcess is one call of TestQuotaTwoZoneDatabases in a
// process of its own; it does nothing unless run by it. It loads
// Europe/Paris from its own zone database (ZONEINFO), makes one AllowN on
// a daily quota in that zone, and prints the zone's offset and whether
// the call was admitted.
func TestQuotaZoneHelperProcess(t *testing.T) {
	spec := os.Getenv(quotaZoneHelperEnv)
	if spec == "" {
		t.Skip("run by TestQuotaTwoZoneDatabases")
	}
	var addr, prefix string
	var at int64
	_, err := fmt.Sscan(spec, &addr, &prefix, &at)
	require.NoError(t, err)
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	l, err := New(c, ratelimit.QuotaPolicy(5, ratelimit.Calendar{Unit: ratelimit.Daily, Location: paris}),
		WithPrefix(prefix), WithClock(fakeclock.NewManual(time.Unix(0, at))), WithFailurePolicy(FailClosed),
		WithTimeout(10*time.Second)) // a loaded machine runs the suite beside this process
	require.NoError(t, err)
	d, err := l.AllowN(bg(), "k", 1)
	require.NoError(t, err)
	_, off := time.Unix(0, at).In(paris).Zone()
	fmt.Printf("RESULT %d %v\n", off, d.Allowed)
}

// TestQuotaTwoZoneDatabases runs the disagreement between real processes:
// each loads Europe/Paris by name from a zone database of its own (the
// ZONEINFO variable; one holds Tokyo's rules under that name, as two
// tzdata releases may disagree about a zone), so both pass New's check of
// the zone, and both name one Redis key. Twenty calls, one per process in
// turn, at one instant: 5 admitted (before the fix, 20).
func TestQuotaTwoZoneDatabases(t *testing.T) {
	t.Parallel()
	s, _ := startRedis(t)
	dbs := [2]string{t.TempDir(), t.TempDir()}
	for i, data := range [][]byte{tzData(t, "Europe/Paris"), tzData(t, "Asia/Tokyo")} {
		require.NoError(t, os.MkdirAll(filepath.Join(dbs[i], "Europe"), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dbs[i], "Europe", "Paris"), data, 0o644))
	}
	prefix := uniquePrefix(t)
	// Noon UTC: Paris's day began at 22:00 UTC, Tokyo's at 15:00.
	at := time.Date(2026, 7, 1, 12, 0, 0, 0, time.UTC).UnixNano()
	admitted := 0
	offsets := map[string]bool{}
	for i := range 20 {
		cmd := exec.Command(os.Args[0], "-test.run=^TestQuotaZoneHelperProcess$", "-test.count=1")
		cmd.Env = append(os.Environ(), "ZONEINFO="+dbs[i%2], fmt.Sprintf("%s=%s %s %d", quotaZoneHelperEnv, s.Addr(), prefix, at))
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		var off, allowed string
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[0] == "RESULT" {
				off, allowed = f[1], f[2]
			}
		}
		require.NotEmpty(t, off, "%s", out)
		offsets[off] = true
		if allowed == "true" {
			admitted++
		}
	}
	require.Len(t, offsets, 2, "the two processes must read Europe/Paris differently")
	require.Equal(t, 5, admitted, "a daily quota of 5, 20 calls from two processes")
}

// TestQuotaStoredPeriodCounts: a limiter counts in the period another
// process stored while it holds now, refunds into it, and reports its end;
// a stored "period" longer than twice its own is no period of the
// calendar and reads as fresh.
func TestQuotaStoredPeriodCounts(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	mock := fakeclock.NewManual(mockStart) // 2026-11-30 15:00:00.123456 UTC: 00:00 in UTC+9
	prefix := uniquePrefix(t)
	mk := func(off int) *Limiter {
		cal := ratelimit.Calendar{Unit: ratelimit.Daily, Location: time.FixedZone("Corp/Office", off)}
		return mustNew(t, c, ratelimit.QuotaPolicy(5, cal), WithClock(mock), WithDenyCache(0), WithPrefix(prefix))
	}
	utc, tokyo := mk(0), mk(9*3600)
	d, err := tokyo.AllowN(bg(), "k", 3)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	tokyoEnd := time.Date(2026, 12, 1, 15, 0, 0, 0, time.UTC)
	require.Equal(t, tokyoEnd.Sub(mock.Now()), d.ResetAfter)

	d, err = utc.Peek(bg(), "k", 0)
	require.NoError(t, err)
	require.Equal(t, 2, d.Remaining, "the stored period's count")
	require.Equal(t, tokyoEnd.Sub(mock.Now()), d.ResetAfter, "the stored period's end, not UTC midnight")
	require.NoError(t, utc.RefundN(bg(), "k", 1))
	d, err = tokyo.Peek(bg(), "k", 0)
	require.NoError(t, err)
	require.Equal(t, 3, d.Remaining, "a refund into the stored period")

	// A stored period of three days holding now, full: not a day.
	now := mock.Now().UnixMicro()
	require.NoError(t, c.Set(bg(), utc.Key("k"), fmt.Sprintf("%d %d 5", now-3600e6, now+3*86400e6), time.Hour).Err())
	d, err = utc.AllowN(bg(), "k", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, 4, d.Remaining)
	require.Equal(t, time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).Sub(mock.Now()), d.ResetAfter)
}
