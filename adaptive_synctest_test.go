//go:build go1.25

package ratelimit_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/overloadsim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The proofs of Adaptive, on the simulated service of overloadsim
// in a synctest bubble, so that every figure is exact for its seed. The
// service: C = 50 workers of 20ms ±25% (2,500 requests/s, unloaded p99
// 24.9ms), open-loop Poisson arrivals at 3x that, a client timeout of 1 s;
// every Adaptive with its defaults but Timeout = that timeout.

const proofSeeds = 3

func proofScenario(seed uint64) overloadsim.Scenario {
	return overloadsim.Scenario{
		Workers: 50, Service: 20 * time.Millisecond, Spread: 0.25, Load: 3,
		Duration: 10 * time.Second, Timeout: time.Second, Seed: seed,
	}
}

// runAdaptive runs sc through an Adaptive configured by cfg in a synctest
// bubble, its Gate wrapped by wrap when not nil.
func runAdaptive(t *testing.T, cfg ratelimit.AdaptiveConfig, sc overloadsim.Scenario, wrap func(overloadsim.Gate) overloadsim.Gate) *overloadsim.Result {
	t.Helper()
	var r *overloadsim.Result
	synctest.Test(t, func(t *testing.T) {
		a, err := ratelimit.NewAdaptive(cfg)
		require.NoError(t, err)
		g := overloadsim.Adaptive(a)
		if wrap != nil {
			g = wrap(g)
		}
		r, err = overloadsim.Run(g, sc)
		require.NoError(t, err)
	})
	return r
}

// settleIn returns how long after from the limit entered c·(1±0.2) for
// the rest of the phase (from, to]: ok is false when the phase's last
// sample is outside.
func settleIn(r *overloadsim.Result, c int, from, to time.Duration) (d time.Duration, ok bool) {
	first := time.Duration(-1)
	for _, s := range r.Samples {
		if s.At <= from || s.At > to {
			continue
		}
		switch in := float64(s.Limit) >= 0.8*float64(c) && float64(s.Limit) <= 1.2*float64(c); {
		case !in:
			first = -1
		case first < 0:
			first = s.At
		}
	}
	return first - from, first >= 0
}

// phaseGate counts, per priority, the requests that arrive from a time on
// and those of them that succeed. The simulation calls it from one
// goroutine.
type phaseGate struct {
	overloadsim.Gate
	start         time.Time
	from          time.Duration
	arrived, succ [3]int
}

func (g *phaseGate) Admit(p ratelimit.Priority) (func(bool), bool) {
	i := int(p) + 1
	counted := time.Since(g.start) >= g.from
	if counted {
		g.arrived[i]++
	}
	done, ok := g.Gate.Admit(p)
	if !ok {
		return nil, false
	}
	return func(failed bool) {
		if counted && !failed {
			g.succ[i]++
		}
		done(failed)
	}, true
}

func (g *phaseGate) rate(p ratelimit.Priority) float64 {
	i := int(p) + 1
	return float64(g.succ[i]) / float64(g.arrived[i])
}

// assertSettles asserts the figures for the phase that starts at
// from with c workers: the limit within ±20% of c for good within 5 s, and
// from 5 s into the phase to its end (to) p99 of admitted at most twice the
// unloaded p99 and goodput at least 90% of the capacity.
func assertSettles(t *testing.T, seed uint64, r *overloadsim.Result, c int, from, to time.Duration) {
	t.Helper()
	sc := r.Scenario
	settle, ok := settleIn(r, c, from, to)
	w := r.Window(from+5*time.Second, to)
	capacity := float64(c) / sc.Service.Seconds()
	p99 := float64(w.P99) / float64(sc.UnloadedP99())
	t.Logf("seed %d: settle %v, limit %d..%d (mean %.1f, C=%d), p99 %v = %.2fx unloaded, goodput %.0f/s = %.3f of capacity",
		seed, settle, w.MinLimit, w.MaxLimit, w.MeanLimit, c, w.P99, p99, w.Goodput, w.Goodput/capacity)
	assert.True(t, ok && settle <= 5*time.Second, "seed %d: settle within ±20%% of C=%d: %v (ok %v), want <= 5s", seed, c, settle, ok)
	assert.LessOrEqual(t, p99, 2.0, "seed %d: p99 / unloaded p99", seed)
	assert.GreaterOrEqual(t, w.Goodput/capacity, 0.9, "seed %d: goodput / capacity", seed)
}

// 1. At 3x overload with every default, the limit settles near C.
func TestAdaptiveProofOverload(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= proofSeeds; seed++ {
		sc := proofScenario(seed)
		r := runAdaptive(t, ratelimit.AdaptiveConfig{Timeout: sc.Timeout}, sc, nil)
		assertSettles(t, seed, r, sc.Workers, 0, sc.Duration)
	}
}

// 2. When the capacity halves mid-run, the limit follows within 5 s.
func TestAdaptiveProofCapacityHalves(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= proofSeeds; seed++ {
		sc := proofScenario(seed)
		sc.Duration = 20 * time.Second
		sc.Changes = []overloadsim.Change{{At: 10 * time.Second, Workers: 25}}
		r := runAdaptive(t, ratelimit.AdaptiveConfig{Timeout: sc.Timeout}, sc, nil)
		assertSettles(t, seed, r, 50, 0, 10*time.Second)
		assertSettles(t, seed, r, 25, 10*time.Second, sc.Duration)
	}
}

// 3. With 20% critical and 30% sheddable arrivals at 3x overload, critical
// requests succeed and the sheddable ones are shed first. The rates are of
// the requests that arrive once the limit settled (from 5 s, as the other
// figures); the whole run's, with the first second at the Initial limit of
// 20 below the critical requests' own concurrency (about 33), are logged.
func TestAdaptiveProofPriorities(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= proofSeeds; seed++ {
		sc := proofScenario(seed)
		sc.Critical, sc.Sheddable = 0.2, 0.3
		pg := &phaseGate{from: 5 * time.Second}
		r := runAdaptive(t, ratelimit.AdaptiveConfig{Timeout: sc.Timeout}, sc, func(g overloadsim.Gate) overloadsim.Gate {
			pg.Gate, pg.start = g, time.Now()
			return pg
		})
		crit, def, shed := r.Totals(ratelimit.PriorityCritical), r.Totals(ratelimit.PriorityDefault), r.Totals(ratelimit.PrioritySheddable)
		t.Logf("seed %d: succeeded from 5s: critical %.4f, default %.4f, sheddable %.4f; over the whole run: critical %d/%d = %.4f, default %.4f, sheddable %.4f",
			seed, pg.rate(ratelimit.PriorityCritical), pg.rate(ratelimit.PriorityDefault), pg.rate(ratelimit.PrioritySheddable),
			crit.Succeeded, crit.Arrived, crit.SuccessRate(), def.SuccessRate(), shed.SuccessRate())
		assert.GreaterOrEqual(t, pg.rate(ratelimit.PriorityCritical), 0.99, "seed %d: critical success rate", seed)
		assert.Less(t, pg.rate(ratelimit.PrioritySheddable), pg.rate(ratelimit.PriorityDefault), "seed %d: sheddable shed before default", seed)
		assert.Less(t, pg.rate(ratelimit.PriorityDefault), pg.rate(ratelimit.PriorityCritical), "seed %d: default shed before critical", seed)
		assert.GreaterOrEqual(t, crit.SuccessRate(), 0.98, "seed %d: critical success rate over the whole run", seed)
		assertSettles(t, seed, r, sc.Workers, 0, sc.Duration)
	}
}

// The limit stays within [Min, Max]: Max below the capacity under
// overload, Min above it when the capacity collapses.
func TestAdaptiveStaysWithinMinMax(t *testing.T) {
	t.Parallel()
	sc := proofScenario(1)
	sc.Duration = 6 * time.Second
	sc.Changes = []overloadsim.Change{{At: 3 * time.Second, Workers: 5}}
	cfg := ratelimit.AdaptiveConfig{Initial: 30, Min: 20, Max: 40, Timeout: sc.Timeout}
	r := runAdaptive(t, cfg, sc, nil)
	seen := map[int]bool{}
	for _, s := range r.Samples {
		require.GreaterOrEqual(t, s.Limit, cfg.Min, "limit at %v", s.At)
		require.LessOrEqual(t, s.Limit, cfg.Max, "limit at %v", s.At)
		seen[s.Limit] = true
	}
	assert.True(t, seen[cfg.Min] && seen[cfg.Max], "the limit reached both bounds: %v", seen)
}

// An idle service does not inflate the limit: at 5% of the capacity (2.5
// requests in flight on average) the limit grows only when a burst fills
// half of it, which gets rarer as it grows: over 20 s it stays within
// Initial·(1+Tolerance)². (With a steady concurrency it does not grow at
// all: TestAdaptiveUnusedLimitDoesNotGrow.)
func TestAdaptiveIdleDoesNotInflate(t *testing.T) {
	t.Parallel()
	sc := proofScenario(1)
	sc.Load, sc.Duration = 0.05, 20*time.Second
	r := runAdaptive(t, ratelimit.AdaptiveConfig{}, sc, nil)
	maxLimit := 0
	for _, s := range r.Samples {
		maxLimit = max(maxLimit, s.Limit)
	}
	t.Logf("idle at 5%% of capacity for %v: the limit at most %d", sc.Duration, maxLimit)
	assert.LessOrEqual(t, maxLimit, 24, "the limit grew while idle")
}
