package redislimit

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
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
				runSteps(t, c, reconfigPolicy(from, 10), newMock().Now(), steps)
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
				runSteps(t, c, reconfigPolicy(from, 10), newMock().Now(), steps)
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
