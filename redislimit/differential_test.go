package redislimit

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/require"
)

// The differential suite for issue 11: calendar quotas, SetPolicy, Reset,
// Block and Penalize, run on the in-memory ratelimit.Keyed and on Redis on
// one mock clock (see pair), demanding identical Decisions.

// reconfigPolicy returns a policy of algo with limit that Redis runs
// (whole-microsecond periods), with windows of a second (a leaky bucket
// leaks one every 100ms; a quota is a New York day).
func reconfigPolicy(algo ratelimit.Algorithm, limit int) ratelimit.Policy {
	switch algo {
	case ratelimit.TokenBucketAlgorithm:
		return ratelimit.TokenBucketPolicy(ratelimit.Per(limit, time.Second), limit)
	case ratelimit.LeakyBucketAlgorithm:
		return ratelimit.LeakyBucketPolicy(limit, 100*time.Millisecond)
	case ratelimit.FixedWindowAlgorithm:
		return ratelimit.FixedWindowPolicy(limit, time.Second)
	case ratelimit.SlidingLogAlgorithm:
		return ratelimit.SlidingLogPolicy(limit, time.Second)
	case ratelimit.SlidingCounterAlgorithm:
		return ratelimit.SlidingCounterPolicy(limit, time.Second)
	case ratelimit.QuotaAlgorithm:
		return ratelimit.QuotaPolicy(limit, ratelimit.Calendar{Unit: ratelimit.Daily, Location: mustZone("America/New_York")})
	}
	panic(fmt.Sprintf("no test policy for %v", algo))
}

var allAlgorithms = []ratelimit.Algorithm{
	ratelimit.TokenBucketAlgorithm, ratelimit.LeakyBucketAlgorithm, ratelimit.FixedWindowAlgorithm,
	ratelimit.SlidingLogAlgorithm, ratelimit.SlidingCounterAlgorithm, ratelimit.QuotaAlgorithm,
}

var allModes = []ratelimit.Inheritance{ratelimit.KeepUsed, ratelimit.ScaleUsed, ratelimit.StartFresh}

func mustZone(name string) *time.Location {
	loc, err := time.LoadLocation(name)
	if err != nil {
		panic(err)
	}
	return loc
}

// runSteps runs steps on a new pair of p starting at start.
func runSteps(t *testing.T, c redis.UniversalClient, p ratelimit.Policy, start time.Time, steps []step) {
	t.Helper()
	pr := newPairAt(t, c, p, start)
	for i, st := range steps {
		pr.run(t, i, st)
	}
}

// TestDifferentialBlockedAllowNConvertsNothing: a blocked AllowN is a
// Peek(0) of the key's state in memory, so it must not store the
// conversion of state kept under an earlier policy on Redis either: the
// conversion happens at the first unblocked touch, and for decaying state
// the time of conversion changes later decisions.
func TestDifferentialBlockedAllowNConvertsNothing(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for _, from := range allAlgorithms {
		for _, to := range allAlgorithms {
			t.Run(from.String()+"-"+to.String(), func(t *testing.T) {
				t.Parallel()
				steps := []step{
					{key: "k", kind: 'a', n: 7},
					{kind: 'S', policy: reconfigPolicy(to, 8), mode: ratelimit.KeepUsed},
					{key: "k", kind: 'B', d: 2 * time.Second},
					{advance: 300 * time.Millisecond, key: "k", kind: 'a', n: 1},
					{key: "k", kind: 'B'},
					{advance: 450 * time.Millisecond, key: "k", kind: 'p', n: 0},
					{key: "k", kind: 'a', n: 1},
					{advance: 100 * time.Millisecond, key: "k", kind: 'a', n: 2},
					{advance: 400 * time.Millisecond, key: "k", kind: 'p', n: 0},
				}
				runSteps(t, c, reconfigPolicy(from, 10), fakeclock.NewManual(mockStart).Now(), steps)
			})
		}
	}
}

// TestDifferentialInvalidAllowNConverts: an AllowN of an n that can never
// be admitted touches the key: memory converts and stores its state under
// an earlier policy then, and Redis must too.
func TestDifferentialInvalidAllowNConverts(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for _, from := range allAlgorithms {
		for _, n := range []int{0, -1, 9} {
			t.Run(fmt.Sprint(from, n), func(t *testing.T) {
				t.Parallel()
				steps := []step{
					{key: "k", kind: 'a', n: 7},
					{kind: 'S', policy: reconfigPolicy(ratelimit.TokenBucketAlgorithm, 8), mode: ratelimit.KeepUsed},
					{advance: 300 * time.Millisecond, key: "k", kind: 'a', n: n},
					{advance: 450 * time.Millisecond, key: "k", kind: 'p', n: 0},
					{key: "k", kind: 'a', n: 3},
				}
				runSteps(t, c, reconfigPolicy(from, 10), fakeclock.NewManual(mockStart).Now(), steps)
			})
		}
	}
}

// randomAdminStep returns a random step over every step kind, for keys
// k0-k2, with SetPolicy to a random policy of any algorithm (limits 1-12)
// in any mode, now and then back to base.
func randomAdminStep(rng *rand.Rand, base ratelimit.Policy, limit int) step {
	var adv time.Duration
	switch r := rng.IntN(20); {
	case r < 6: // same microsecond
	case r < 15:
		adv = time.Duration(rng.Int64N(300_000)) * time.Microsecond
	case r < 19:
		adv = time.Duration(rng.Int64N(3_000_000)) * time.Microsecond
	default:
		adv = time.Duration(rng.Int64N(30)) * time.Hour
	}
	st := step{advance: adv, key: fmt.Sprint("k", rng.IntN(3))}
	n := 1 + rng.IntN(limit)
	switch r := rng.IntN(40); {
	case r < 20:
		st.kind, st.n = 'a', n
		if rng.IntN(10) == 0 {
			st.n = []int{0, -1, limit + 1}[rng.IntN(3)]
		}
	case r < 24:
		st.kind, st.n = 'p', []int{0, n, limit + 1}[rng.IntN(3)]
	case r < 27:
		st.kind, st.n = 'r', n
	case r < 30:
		st.kind, st.n = 'P', 1+rng.IntN(2*limit)
	case r < 32:
		st.kind = 'R'
	case r < 35:
		st.kind = 'B'
		st.d = time.Duration(rng.Int64N(2_000_000)-200_000) * time.Microsecond
	default:
		st.kind, st.mode = 'S', allModes[rng.IntN(len(allModes))]
		if rng.IntN(5) == 0 {
			st.policy = base
		} else {
			st.policy = reconfigPolicy(allAlgorithms[rng.IntN(len(allAlgorithms))], 1+rng.IntN(12))
		}
	}
	return st
}

// TestDifferentialRandomAdmin: seeded random timelines mixing AllowN,
// Peek, RefundN, Penalize, Reset, Block and SetPolicy (any algorithm, any
// mode, sometimes back to the first policy), starting from each of the six
// algorithms, with identical Decisions in memory and on Redis.
func TestDifferentialRandomAdmin(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	const seeds, steps = 6, 300
	for _, algo := range allAlgorithms {
		t.Run(algo.String(), func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(seeds) {
				base := reconfigPolicy(algo, 6)
				pr := newPair(t, c, base)
				rng := rand.New(rand.NewPCG(seed, uint64(algo)))
				var done []step
				for i := range steps {
					st := randomAdminStep(rng, base, pr.rl.Policy().Limit)
					done = append(done, st)
					if !t.Run("", func(t *testing.T) { pr.runSeed(t, seed, i, st) }) {
						logSteps(t, done, st.key)
						t.FailNow()
					}
				}
			}
		})
	}
}

// logSteps logs the steps that touched key or changed the policy, for a
// failure.
func logSteps(t *testing.T, steps []step, key string) {
	t.Helper()
	var at time.Duration
	for i, st := range steps {
		at += st.advance
		if st.key == key || st.kind == 'S' {
			t.Logf("%3d at +%v: %v", i, at, st)
		}
	}
}

// calendarSteps returns a timeline for a quota of cal and limit from start
// to end: around every boundary, steps a microsecond before, at and a
// microsecond after it (AllowN, Peek), and between boundaries random
// AllowN, Peek, RefundN, Penalize, Reset and Block at random times, on
// two keys.
func calendarSteps(t *testing.T, rng *rand.Rand, cal ratelimit.Calendar, limit int, start, end time.Time) []step {
	t.Helper()
	var steps []step
	now := start
	to := func(at time.Time) time.Duration {
		d := at.Sub(now)
		if d < 0 {
			t.Fatalf("calendarSteps moved the clock back by %v", -d)
		}
		now = at
		return d
	}
	for now.Before(end) {
		_, b, err := cal.Period(now)
		if err != nil {
			t.Fatal(err)
		}
		// Random traffic in the period, at up to six random times, each
		// in the first half of what is left of it: time only moves
		// forward. (A clock moved back across a boundary after other keys
		// were decided later would let memory reclaim a key whose period
		// had ended then, which Redis keeps: a fake-clock artefact, as
		// real time never runs backwards in memory.)
		for range 1 + rng.IntN(6) {
			span := b.Sub(now)
			at := now.Add(time.Duration(rng.Int64N(int64(span/time.Microsecond)/2+1)) * time.Microsecond)
			key := fmt.Sprint("k", rng.IntN(2))
			st := step{advance: to(at), key: key}
			switch r := rng.IntN(12); {
			case r < 6:
				st.kind, st.n = 'a', 1+rng.IntN(limit)
			case r < 8:
				st.kind, st.n = 'p', rng.IntN(limit+1)
			case r < 9:
				st.kind, st.n = 'r', 1+rng.IntN(limit)
			case r < 10:
				st.kind, st.n = 'P', 1+rng.IntN(limit)
			case r < 11:
				st.kind = 'R'
			default:
				st.kind, st.d = 'B', time.Duration(rng.Int64N(int64(span/time.Microsecond)))*time.Microsecond
			}
			steps = append(steps, st)
		}
		steps = append(steps,
			step{advance: to(b.Add(-time.Microsecond)), key: "k0", kind: 'a', n: 1},
			step{key: "k0", kind: 'p', n: 0},
			step{key: "k1", kind: 'p', n: limit},
			step{advance: to(b), key: "k0", kind: 'p', n: 0},
			step{key: "k0", kind: 'a', n: limit},
			step{key: "k0", kind: 'a', n: 1},
			step{advance: to(b.Add(time.Microsecond)), key: "k1", kind: 'a', n: 1},
			step{key: "k0", kind: 'p', n: 1},
		)
	}
	return steps
}

// TestDifferentialCalendar runs calendar quota timelines across the DST
// days of a northern (New York: 2026-03-08, 2026-11-01) and a southern zone
// (Sydney: 2026-04-05, 2026-10-04), with reset times inside the skipped
// and the repeated hour, Feb 29 2028, month ends with MonthDay 31, weekly
// and yearly quotas: identical Decisions in memory and on Redis.
func TestDifferentialCalendar(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	ny, syd, paris := mustZone("America/New_York"), mustZone("Australia/Sydney"), mustZone("Europe/Paris")
	day := 24 * time.Hour
	for _, tc := range []struct {
		name  string
		cal   ratelimit.Calendar
		start time.Time
		span  time.Duration
	}{
		{"NY spring midnight", ratelimit.Calendar{Unit: ratelimit.Daily, Location: ny}, time.Date(2026, 3, 6, 12, 0, 0, 0, ny), 4 * day},
		{"NY spring in the gap", ratelimit.Calendar{Unit: ratelimit.Daily, Location: ny, Hour: 2, Minute: 30}, time.Date(2026, 3, 6, 12, 0, 0, 0, ny), 4 * day},
		{"NY fall repeated", ratelimit.Calendar{Unit: ratelimit.Daily, Location: ny, Hour: 1, Minute: 30}, time.Date(2026, 10, 30, 12, 0, 0, 0, ny), 4 * day},
		{"NY fall midnight", ratelimit.Calendar{Unit: ratelimit.Daily, Location: ny}, time.Date(2026, 10, 30, 12, 0, 0, 0, ny), 4 * day},
		{"Sydney fall repeated", ratelimit.Calendar{Unit: ratelimit.Daily, Location: syd, Hour: 2, Minute: 30}, time.Date(2026, 4, 3, 12, 0, 0, 0, syd), 4 * day},
		{"Sydney spring in the gap", ratelimit.Calendar{Unit: ratelimit.Daily, Location: syd, Hour: 2, Minute: 30}, time.Date(2026, 10, 2, 12, 0, 0, 0, syd), 4 * day},
		{"Sydney spring midnight", ratelimit.Calendar{Unit: ratelimit.Daily, Location: syd}, time.Date(2026, 10, 2, 12, 0, 0, 0, syd), 4 * day},
		{"Feb 29 daily", ratelimit.Calendar{Unit: ratelimit.Daily, Location: ny, Hour: 6}, time.Date(2028, 2, 27, 12, 0, 0, 0, ny), 4 * day},
		{"Feb 29 monthly day 29", ratelimit.Calendar{Unit: ratelimit.Monthly, MonthDay: 29}, time.Date(2028, 1, 20, 0, 0, 0, 0, time.UTC), 70 * day},
		{"month ends day 31", ratelimit.Calendar{Unit: ratelimit.Monthly, Location: ny, MonthDay: 31, Hour: 23, Minute: 59}, time.Date(2026, 1, 15, 0, 0, 0, 0, ny), 200 * day},
		{"monthly Sydney", ratelimit.Calendar{Unit: ratelimit.Monthly, Location: syd, Hour: 2, Minute: 30}, time.Date(2026, 3, 15, 0, 0, 0, 0, syd), 230 * day},
		{"weekly Paris", ratelimit.Calendar{Unit: ratelimit.Weekly, Location: paris, WeekStart: time.Monday, Hour: 9, Minute: 30}, time.Date(2026, 3, 18, 0, 0, 0, 0, paris), 30 * day},
		{"weekly NY Sunday 2:30", ratelimit.Calendar{Unit: ratelimit.Weekly, Location: ny, WeekStart: time.Sunday, Hour: 2, Minute: 30}, time.Date(2026, 2, 25, 0, 0, 0, 0, ny), 260 * day},
		{"yearly NY", ratelimit.Calendar{Unit: ratelimit.Yearly, Location: ny}, time.Date(2026, 11, 20, 0, 0, 0, 0, ny), 800 * day},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(3) {
				rng := rand.New(rand.NewPCG(seed, 11))
				limit := 3 + int(seed)
				start := tc.start.Add(time.Duration(rng.Int64N(int64(day/time.Microsecond))) * time.Microsecond)
				steps := calendarSteps(t, rng, tc.cal, limit, start, start.Add(tc.span))
				pr := newPairAt(t, c, ratelimit.QuotaPolicy(limit, tc.cal), start)
				for i, st := range steps {
					if !t.Run("", func(t *testing.T) { pr.runSeed(t, seed, i, st) }) {
						logSteps(t, steps[:i+1], st.key)
						t.FailNow()
					}
				}
			}
		})
	}
}

// trafficSteps are a few AllowN and Peek steps on k0-k2 over about a
// second, leaving each key partly used.
func trafficSteps(limit int) []step {
	return []step{
		{key: "k0", kind: 'a', n: max(limit/2, 1)},
		{advance: 130 * time.Millisecond, key: "k1", kind: 'a', n: limit},
		{advance: 70 * time.Millisecond, key: "k0", kind: 'a', n: 1},
		{advance: 250 * time.Millisecond, key: "k1", kind: 'a', n: 1},
		{key: "k0", kind: 'p', n: 0},
		{key: "k1", kind: 'p', n: 0},
	}
}

// afterSteps touch the keys after a change: at once, later, and with
// every kind of step.
func afterSteps(limit int) []step {
	return []step{
		{key: "k0", kind: 'p', n: 0},
		{key: "k0", kind: 'a', n: 1},
		{advance: 90 * time.Millisecond, key: "k1", kind: 'p', n: 1},
		{advance: 110 * time.Millisecond, key: "k1", kind: 'r', n: 1},
		{key: "k2", kind: 'a', n: limit},
		{advance: 300 * time.Millisecond, key: "k0", kind: 'a', n: limit},
		{key: "k1", kind: 'P', n: 2},
		{key: "k1", kind: 'a', n: 1},
		{advance: 600 * time.Millisecond, key: "k0", kind: 'p', n: 0},
		{key: "k1", kind: 'a', n: 2},
		{advance: 2 * time.Second, key: "k0", kind: 'a', n: 1},
		{key: "k1", kind: 'p', n: 0},
	}
}

// TestDifferentialSetPolicy changes the policy from each algorithm to
// each, tightening and loosening, in each mode, with keys touched at once,
// later and never before.
func TestDifferentialSetPolicy(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for _, from := range allAlgorithms {
		for _, to := range allAlgorithms {
			for _, mode := range allModes {
				for _, limits := range [][2]int{{10, 4}, {4, 10}} {
					t.Run(fmt.Sprintf("%v-%v-%v-%d-%d", from, to, mode, limits[0], limits[1]), func(t *testing.T) {
						t.Parallel()
						steps := trafficSteps(limits[0])
						steps = append(steps, step{advance: 40 * time.Millisecond, kind: 'S', policy: reconfigPolicy(to, limits[1]), mode: mode})
						steps = append(steps, afterSteps(limits[1])...)
						runSteps(t, c, reconfigPolicy(from, limits[0]), fakeclock.NewManual(mockStart).Now(), steps)
					})
				}
			}
		}
	}
}

// TestDifferentialSetPolicyChains: two changes before a key is touched,
// then a change back to the first policy (keys touched after each), and a
// change to the same policy again, over random algorithms and modes.
func TestDifferentialSetPolicyChains(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for seed := range uint64(24) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			rng := rand.New(rand.NewPCG(seed, 5))
			pick := func() (ratelimit.Policy, ratelimit.Inheritance) {
				return reconfigPolicy(allAlgorithms[rng.IntN(len(allAlgorithms))], 2+rng.IntN(10)), allModes[rng.IntN(len(allModes))]
			}
			first, _ := pick()
			steps := trafficSteps(first.Limit)
			p1, m1 := pick()
			p2, m2 := pick()
			_, m3 := pick()
			_, m4 := pick()
			steps = append(steps,
				step{advance: 10 * time.Millisecond, kind: 'S', policy: p1, mode: m1},
				step{advance: 10 * time.Millisecond, kind: 'S', policy: p2, mode: m2},
			)
			steps = append(steps, afterSteps(p2.Limit)[:6]...)
			steps = append(steps, step{kind: 'S', policy: first, mode: m3})
			steps = append(steps, afterSteps(first.Limit)...)
			steps = append(steps, step{kind: 'S', policy: first, mode: m4})
			steps = append(steps, afterSteps(first.Limit)...)
			pr := newPair(t, c, first)
			for i, st := range steps {
				if !t.Run("", func(t *testing.T) { pr.run(t, i, st) }) {
					logSteps(t, steps[:i+1], st.key)
					t.FailNow()
				}
			}
		})
	}
}

// TestDifferentialQuotaZoneChange moves a running daily quota from New
// York to Tokyo with KeepUsed, before and after Tokyo's day ends, and
// back: identical Decisions in both homes.
func TestDifferentialQuotaZoneChange(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	ny, tokyo := mustZone("America/New_York"), mustZone("Asia/Tokyo")
	nyQuota := ratelimit.QuotaPolicy(10, ratelimit.Calendar{Unit: ratelimit.Daily, Location: ny})
	tokyoQuota := ratelimit.QuotaPolicy(10, ratelimit.Calendar{Unit: ratelimit.Daily, Location: tokyo})
	// 2026-11-30 08:00 in New York is 22:00 in Tokyo: Tokyo's day ends in
	// two hours, New York's in sixteen.
	start := time.Date(2026, 11, 30, 8, 0, 0, 0, ny)
	for _, mode := range allModes {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			steps := []step{
				{key: "k0", kind: 'a', n: 7},
				{advance: time.Hour, key: "k1", kind: 'a', n: 4},
				{advance: time.Minute, kind: 'S', policy: tokyoQuota, mode: mode},
				{key: "k0", kind: 'p', n: 0},
				{key: "k0", kind: 'a', n: 4},
				{key: "k0", kind: 'a', n: 3},
				{advance: 59*time.Minute - time.Microsecond, key: "k0", kind: 'a', n: 1},
				{advance: time.Microsecond, key: "k0", kind: 'a', n: 10},
				{key: "k1", kind: 'p', n: 0}, // converted after Tokyo's day ended: fresh there
				{key: "k1", kind: 'a', n: 10},
				{advance: time.Hour, kind: 'S', policy: nyQuota, mode: mode},
				{key: "k0", kind: 'p', n: 0},
				{key: "k0", kind: 'a', n: 1},
				{advance: 13 * time.Hour, key: "k0", kind: 'a', n: 10},
				{advance: time.Hour, key: "k0", kind: 'a', n: 10},
			}
			runSteps(t, c, nyQuota, start, steps)
		})
	}
}

// TestDifferentialAdmin runs Reset, Block and Penalize on every algorithm:
// a block over used and fresh keys, lifted, replaced and outlived,
// penalties beyond the remaining quota, resets of blocked keys, and a
// blocked key whose policy changed.
func TestDifferentialAdmin(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for _, algo := range allAlgorithms {
		for _, to := range allAlgorithms {
			t.Run(algo.String()+"-"+to.String(), func(t *testing.T) {
				t.Parallel()
				p := reconfigPolicy(algo, 6)
				steps := []step{
					{key: "k0", kind: 'a', n: 2},
					{key: "k0", kind: 'B', d: 800 * time.Millisecond},
					{key: "k1", kind: 'B', d: time.Hour},
					{advance: 100 * time.Millisecond, key: "k0", kind: 'a', n: 1},
					{key: "k0", kind: 'a', n: 0},
					{key: "k0", kind: 'a', n: 7},
					{key: "k0", kind: 'p', n: 0},
					{key: "k0", kind: 'p', n: 6},
					{key: "k0", kind: 'p', n: 7},
					{key: "k0", kind: 'p', n: -1},
					{key: "k0", kind: 'r', n: 1},
					{key: "k0", kind: 'P', n: 2},
					{key: "k0", kind: 'p', n: 0},
					{key: "k2", kind: 'P', n: 100},
					{key: "k2", kind: 'a', n: 1},
					{key: "k2", kind: 'p', n: 0},
					{advance: 700*time.Millisecond - time.Microsecond, key: "k0", kind: 'a', n: 1},
					{advance: time.Microsecond, key: "k0", kind: 'a', n: 1},
					{key: "k0", kind: 'B', d: 300 * time.Millisecond},
					{key: "k0", kind: 'B', d: 200 * time.Millisecond},
					{advance: 150 * time.Millisecond, key: "k0", kind: 'a', n: 1},
					{key: "k0", kind: 'B', d: -time.Second},
					{key: "k0", kind: 'a', n: 1},
					{key: "k0", kind: 'B', d: 101 * 365 * 24 * time.Hour},
					{key: "k1", kind: 'a', n: 1},
					{key: "k1", kind: 'R'},
					{key: "k1", kind: 'a', n: 6},
					{key: "k1", kind: 'B', d: time.Second},
					{key: "k0", kind: 'P', n: 3},
					{advance: 50 * time.Millisecond, kind: 'S', policy: reconfigPolicy(to, 5), mode: ratelimit.ScaleUsed},
					{key: "k1", kind: 'a', n: 1},
					{key: "k1", kind: 'p', n: 0},
					{advance: 500 * time.Millisecond, key: "k1", kind: 'a', n: 1},
					{advance: 500 * time.Millisecond, key: "k1", kind: 'a', n: 1},
					{key: "k1", kind: 'p', n: 0},
					{key: "k0", kind: 'B', d: time.Second},
					{key: "k0", kind: 'R'},
					{key: "k0", kind: 'a', n: 5},
					{key: "k2", kind: 'R'},
					{key: "k2", kind: 'p', n: 0},
				}
				runSteps(t, c, p, fakeclock.NewManual(mockStart).Now(), steps)
			})
		}
	}
}

// TestChangeBackSaltsKeyNames: a change back to an earlier policy names
// the keys with a salt, so that state under the earlier policy converts
// (here: StartFresh forgets it); setting the policy in force again with
// KeepUsed changes nothing; a process given the same previous policies by
// WithPrevious uses the same names.
func TestChangeBackSaltsKeyNames(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	a, b := ratelimit.FixedWindowPolicy(10, time.Minute), ratelimit.SlidingLogPolicy(5, time.Minute)
	l, mock := clientLimiter(t, c, a)
	require.True(t, allowed(t, l, "k", 6))
	natural := l.Key("k")
	require.NoError(t, l.SetPolicy(b, ratelimit.KeepUsed))
	require.NoError(t, l.SetPolicy(a, ratelimit.StartFresh))
	require.NotEqual(t, natural, l.Key("k"))
	require.Contains(t, l.Key("k"), ".1:{")
	d, err := l.Peek(bg(), "k", 0)
	require.NoError(t, err)
	require.Equal(t, 10, d.Remaining, "StartFresh back to the first policy")
	salted := l.Key("k")
	require.NoError(t, l.SetPolicy(a, ratelimit.KeepUsed))
	require.Equal(t, salted, l.Key("k"), "the policy in force set again: no change")
	later := mustNew(t, c, a, WithClock(mock), WithPrefix(l.base),
		WithPrevious(a, ratelimit.KeepUsed), WithPrevious(b, ratelimit.StartFresh), WithPrevious(a, ratelimit.KeepUsed))
	require.Equal(t, l.Key("k"), later.Key("k"), "WithPrevious names keys as SetPolicy did")
	require.True(t, allowed(t, later, "k", 10))
	require.False(t, allowed(t, l, "k", 1), "both processes count in one key")
}

// TestConfigErrorsNameTheCall: configuration errors say which call
// refused the policy, and Block's error is memory's.
func TestConfigErrorsNameTheCall(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	bad := ratelimit.FixedWindowPolicy(3, time.Nanosecond)
	huge := ratelimit.QuotaPolicy(1<<53, ratelimit.Calendar{Unit: ratelimit.Daily})
	_, err := New(c, bad)
	require.ErrorContains(t, err, "redislimit.New: Policy.Period must be a whole number of microseconds")
	_, err = New(c, huge)
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	require.ErrorContains(t, err, "redislimit.New: Policy.Limit must be at most 2^52")
	_, err = New(c, ratelimit.FixedWindowPolicy(3, time.Second), WithPrevious(bad, ratelimit.KeepUsed))
	require.ErrorContains(t, err, "redislimit.WithPrevious: Policy.Period")
	_, err = New(c, ratelimit.FixedWindowPolicy(3, time.Second), WithPrevious(ratelimit.FixedWindowPolicy(3, time.Second), 0))
	require.ErrorContains(t, err, "redislimit.WithPrevious: mode")
	l := mustNew(t, c, ratelimit.FixedWindowPolicy(3, time.Second))
	require.ErrorContains(t, l.SetPolicy(bad, ratelimit.KeepUsed), "redislimit.SetPolicy: Policy.Period")
	require.ErrorContains(t, l.SetPolicy(huge, ratelimit.KeepUsed), "redislimit.SetPolicy: Policy.Limit")
	err = l.SetPolicy(ratelimit.QuotaPolicy(3, ratelimit.Calendar{Unit: ratelimit.Monthly, MonthDay: 32}), ratelimit.KeepUsed)
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	require.ErrorContains(t, err, "MonthDay")
	mem, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(3, time.Second))
	require.NoError(t, err)
	for _, d := range []time.Duration{100*365*24*time.Hour + 1, 1<<63 - 1} {
		want := mem.Block(bg(), "k", d)
		require.Error(t, want)
		require.EqualError(t, l.Block(bg(), "k", d), want.Error())
	}
	require.EqualError(t, l.Block(bg(), "k", 100*365*24*time.Hour+1), "ratelimit: block duration 876000h0m0.000000001s must be at most 876000h0m0s")
}

// TestSetPolicyForgetsAQuotaAfterItsPeriod: a previous quota policy is
// forgotten (its keys no longer read by every decision) once the period
// holding the change has ended, plus the minute of slack, as memory
// forgets it at the period's end.
func TestSetPolicyForgetsAQuotaAfterItsPeriod(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	ny := mustZone("America/New_York")
	quota := ratelimit.QuotaPolicy(5, ratelimit.Calendar{Unit: ratelimit.Daily, Location: ny})
	l, mock := clientLimiter(t, c, quota)
	mock.Set(time.Date(2026, 3, 7, 20, 0, 0, 0, ny))
	require.NoError(t, l.SetPolicy(ratelimit.FixedWindowPolicy(5, time.Second), ratelimit.KeepUsed))
	mock.Set(time.Date(2026, 3, 8, 0, 0, 59, 999_999_000, ny))
	require.NoError(t, l.SetPolicy(ratelimit.FixedWindowPolicy(6, time.Second), ratelimit.KeepUsed))
	require.Len(t, l.cur.Load().prev, 2, "the quota is kept until a minute past its period")
	mock.Set(time.Date(2026, 3, 8, 0, 1, 0, 0, ny))
	require.NoError(t, l.SetPolicy(ratelimit.FixedWindowPolicy(7, time.Second), ratelimit.KeepUsed))
	require.Len(t, l.cur.Load().prev, 2, "the quota is forgotten, the first window kept")
	for _, lk := range l.cur.Load().prev {
		require.NotEqual(t, ratelimit.QuotaAlgorithm, lk.policy.Algorithm)
	}
}

// TestDifferentialNameReusedAfterPruning: once previous policies are
// forgotten, a key name (natural or salted) can be used again while a key
// left over under it, idle, still exists in Redis (its TTL runs on the
// server's clock, with a minute of slack under client time). Such a key
// must not hide the state the client holds under a previous policy,
// whether the name is the current policy's or a newer previous one's.
func TestDifferentialNameReusedAfterPruning(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for _, algo := range allAlgorithms {
		t.Run(algo.String(), func(t *testing.T) {
			t.Parallel()
			a := reconfigPolicy(algo, 6)
			b := reconfigPolicy(ratelimit.FixedWindowAlgorithm, 9)
			steps := []step{
				{kind: 'S', policy: a, mode: ratelimit.KeepUsed}, // a.1
				{key: "k", kind: 'a', n: 2},                      // under a.1
				{advance: 100 * time.Millisecond, kind: 'S', policy: b, mode: ratelimit.KeepUsed},
				{advance: 49 * time.Hour, kind: 'S', policy: a, mode: ratelimit.KeepUsed}, // a, the others forgotten
				{key: "k", kind: 'a', n: 3},                                               // under a; k's a.1 key is left over
				{kind: 'S', policy: a, mode: ratelimit.KeepUsed},                          // a.1 again
				{key: "k", kind: 'p', n: 0},
				{key: "k", kind: 'a', n: 1},
				{key: "k", kind: 'p', n: 0},
			}
			runSteps(t, c, a, fakeclock.NewManual(mockStart).Now(), steps)
		})
	}
}

// TestScriptArgsAllocateOnce: a decision's script arguments take one
// allocation (the slice; the mode is boxed once for all), so that the
// block key's place in KEYS, which go-redis boxes, adds none per decision
// over the limiter before blocks.
func TestScriptArgsAllocateOnce(t *testing.T) {
	_, c := startRedis(t)
	l := mustNew(t, c, ratelimit.FixedWindowPolicy(10, time.Second))
	g := l.cur.Load()
	for _, m := range []commitMode{commit, peekOnly, peekNever, allowNever, penalize, refund} {
		require.Equal(t, string(m), m.arg())
		require.Zero(t, testing.AllocsPerRun(100, func() { _ = m.arg() }), "mode %q", m)
	}
	require.Equal(t, 1.0, testing.AllocsPerRun(100, func() { _ = g.args(l, "", 1, commit) }))
}

// TestSetPolicyAgainChangesNothing: as in memory, setting the policy in
// force again with KeepUsed or ScaleUsed (a configuration reload, here
// loading the quota's zone anew each time) is no change: a used-up key
// untouched across twenty reloads stays used up (it used to start fresh
// once four "changes" had passed, as its state fell out of the chain), the
// keys keep their names, and a process started with the reload in its
// WithPrevious names them alike.
func TestSetPolicyAgainChangesNothing(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	quota := func() ratelimit.Policy {
		loc, err := time.LoadLocation("America/New_York")
		require.NoError(t, err)
		return ratelimit.QuotaPolicy(5, ratelimit.Calendar{Unit: ratelimit.Daily, Location: loc})
	}
	for _, mode := range []ratelimit.Inheritance{ratelimit.KeepUsed, ratelimit.ScaleUsed} {
		t.Run(mode.String(), func(t *testing.T) {
			t.Parallel()
			l, mock := clientLimiter(t, c, quota())
			require.True(t, allowed(t, l, "used", 5))
			name := l.Key("used")
			for range 20 {
				require.NoError(t, l.SetPolicy(quota(), mode))
				mock.Add(time.Millisecond)
				allowed(t, l, "other", 1)
			}
			require.False(t, allowed(t, l, "used", 1), "a used-up key after 20 reloads of its policy")
			require.Equal(t, name, l.Key("used"))
			later := mustNew(t, c, quota(), WithClock(mock), WithPrefix(l.base), WithPrevious(quota(), mode))
			require.Equal(t, name, later.Key("used"), "WithPrevious skips the step that changed nothing")
			require.False(t, allowed(t, later, "used", 1))
		})
	}
}
