package benchmarks

// Overload (issue 28): the same simulated service (internal/testkit/overloadsim,
// in a testing/synctest bubble, so the figures are exact and fast) behind
// three gates:
//
//   - ratelimit-adaptive: ratelimit.Adaptive with its defaults (Initial 20,
//     Min 1, Max 1000, Tolerance 0.1, Reserve 0.2) and Timeout = the
//     scenario's; done(false) is Flight.Success, done(true) Flight.Dropped.
//   - failsafe-adaptivelimiter: failsafe-go's adaptivelimiter with its
//     defaults (limits 1/200/20, p90 over a recent window of 1-30 s and at
//     least 50 samples, no queueing), TryAcquirePermit (never waits);
//     done(false) is Permit.Record, done(true) Permit.Drop (its documented
//     use for a timeout). It has no priorities: every request is the same.
//   - failsafe-prioritylimiter: the same builder's BuildPrioritized, with a
//     Prioritizer calibrated every 100ms (ScheduleCalibrations); it queues
//     (by default up to 2-3x its limit) and sheds by level: critical is
//     priority.High, default Medium, sheddable Low. Its queue is outside the
//     service's, and the time spent in it counts in the latency.
//
// failsafe-go draws random numbers from the global math/rand/v2 (levels
// within a priority, the queue's rejection), so its runs vary from run to
// run beyond the seed; ours are exact. Each figure is over several seeds,
// reported as the median and the range.

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/failsafe-go/failsafe-go/adaptivelimiter"
	"github.com/failsafe-go/failsafe-go/priority"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/overloadsim"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The service: C = 50 workers of 20ms ±25%, a capacity of 2,500 requests/s;
// arrivals at 3x that for 40 s, and a client timeout of 1 s.
func overloadBase(seed uint64) overloadsim.Scenario {
	return overloadsim.Scenario{
		Workers: 50, Service: 20 * time.Millisecond, Spread: 0.25, Load: 3,
		Duration: 40 * time.Second, Timeout: time.Second, Seed: seed,
	}
}

// overloadScenario is one of the scenarios.
type overloadScenario struct {
	name string
	sc   func(seed uint64) overloadsim.Scenario
	// after is when the figures' phase starts: the limit's settle time is
	// measured from it, against the workers then.
	after time.Duration
}

var overloadScenarios = []overloadScenario{
	{name: "3x-overload", sc: overloadBase},
	{name: "capacity-halves", after: 20 * time.Second, sc: func(seed uint64) overloadsim.Scenario {
		sc := overloadBase(seed)
		sc.Changes = []overloadsim.Change{{At: 20 * time.Second, Workers: 25}}
		return sc
	}},
	{name: "20pc-critical", sc: func(seed uint64) overloadsim.Scenario {
		sc := overloadBase(seed)
		sc.Critical, sc.Sheddable = 0.2, 0.3
		return sc
	}},
}

// overloadGate builds a gate inside the bubble; stop ends what it started.
type overloadGate struct {
	name string
	ours bool
	make func(sc overloadsim.Scenario) (g overloadsim.Gate, stop func())
}

var overloadGates = []overloadGate{
	{name: "ratelimit-adaptive", ours: true, make: func(sc overloadsim.Scenario) (overloadsim.Gate, func()) {
		a, err := ratelimit.NewAdaptive(ratelimit.AdaptiveConfig{Timeout: sc.Timeout})
		if err != nil {
			panic(err) // a valid config: a bug here
		}
		return overloadsim.Adaptive(a), func() {}
	}},
	{name: "failsafe-adaptivelimiter", make: func(overloadsim.Scenario) (overloadsim.Gate, func()) {
		return failsafeGate{adaptivelimiter.NewBuilder[any]().Build()}, func() {}
	}},
	{name: "failsafe-prioritylimiter", make: func(overloadsim.Scenario) (overloadsim.Gate, func()) {
		p := adaptivelimiter.NewPrioritizer()
		l := adaptivelimiter.NewBuilder[any]().BuildPrioritized(p)
		stop := p.ScheduleCalibrations(context.Background(), 100*time.Millisecond)
		return failsafePriorityGate{l}, stop
	}},
}

type failsafeGate struct {
	l adaptivelimiter.AdaptiveLimiter[any]
}

func (g failsafeGate) Admit(ratelimit.Priority) (func(bool), bool) {
	p, ok := g.l.TryAcquirePermit()
	if !ok {
		return nil, false
	}
	return permitDone(p), true
}

func (g failsafeGate) Limit() int { return g.l.Limit() }

func permitDone(p adaptivelimiter.Permit) func(bool) {
	return func(failed bool) {
		if failed {
			p.Drop()
		} else {
			p.Record()
		}
	}
}

// failsafePriorityGate is an overloadsim.Waiter: failsafe-go's prioritized
// limiter queues.
type failsafePriorityGate struct {
	l adaptivelimiter.PriorityLimiter[any]
}

func failsafePriority(p ratelimit.Priority) priority.Priority {
	switch {
	case p > ratelimit.PriorityDefault:
		return priority.High
	case p < ratelimit.PriorityDefault:
		return priority.Low
	}
	return priority.Medium
}

// Admit (which the simulation does not call for a Waiter) never waits: with
// a context already cancelled, the limiter takes a free permit or refuses.
func (g failsafePriorityGate) Admit(p ratelimit.Priority) (func(bool), bool) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return g.Wait(ctx, p)
}

func (g failsafePriorityGate) Wait(ctx context.Context, p ratelimit.Priority) (func(bool), bool) {
	pm, err := g.l.AcquirePermitWithPriority(ctx, failsafePriority(p))
	if err != nil {
		return nil, false
	}
	return permitDone(pm), true
}

func (g failsafePriorityGate) Limit() int { return g.l.Limit() }

// overloadFigures are the figures of one run.
type overloadFigures struct {
	settle     time.Duration // the limit within ±20% of C for good, after the phase start; -1: never
	enter      time.Duration // the limit first within ±20% of C, after the phase start; -1: never
	inBand     float64       // the share of the samples from enter to the end within ±20% of C
	limitRatio float64       // the mean limit over the phase's last 5 s, / C
	p99Ratio   float64       // p99 of admitted, from 5 s into the phase to its end, / unloaded p99
	goodput    float64       // successes/s over the same span, / capacity then
	critical   float64       // critical requests that succeeded / arrived (NaN: none)
	defaults   float64       // the same, default priority
	sheddable  float64       // the same, sheddable
}

func runOverload(t *testing.T, g overloadGate, s overloadScenario, seed uint64) (*overloadsim.Result, overloadFigures) {
	t.Helper()
	sc := s.sc(seed)
	var r *overloadsim.Result
	synctest.Test(t, func(t *testing.T) {
		gate, stop := g.make(sc)
		defer stop()
		var err error
		r, err = overloadsim.Run(gate, sc)
		require.NoError(t, err)
	})
	end := sc.Duration
	c := sc.WorkersAt(s.after)
	f := overloadFigures{settle: -1, enter: -1, critical: math.NaN(), defaults: math.NaN(), sheddable: math.NaN()}
	if d, ok := r.SettleTime(c, 0.2, s.after); ok {
		f.settle = d
	}
	var in, n int
	for _, x := range r.Samples {
		if x.At <= s.after || x.At > end {
			continue
		}
		ok := math.Abs(float64(x.Limit)/float64(c)-1) <= 0.2
		if ok && f.enter < 0 {
			f.enter = x.At - s.after
		}
		if f.enter >= 0 {
			n++
			if ok {
				in++
			}
		}
	}
	if n > 0 {
		f.inBand = float64(in) / float64(n)
	}
	last := r.Window(end-5*time.Second, end)
	f.limitRatio = last.MeanLimit / float64(c)
	steady := r.Window(s.after+5*time.Second, end)
	f.p99Ratio = float64(steady.P99) / float64(sc.UnloadedP99())
	f.goodput = steady.Goodput / (float64(c) / sc.Service.Seconds())
	rate := func(p ratelimit.Priority) float64 {
		if tt := r.Totals(p); tt.Arrived > 0 {
			return tt.SuccessRate()
		}
		return math.NaN()
	}
	f.critical, f.defaults, f.sheddable = rate(ratelimit.PriorityCritical), rate(ratelimit.PriorityDefault), rate(ratelimit.PrioritySheddable)
	return r, f
}

const overloadSeeds = 5

// TestOverload runs every scenario with every gate over overloadSeeds seeds,
// prints the figures side by side, and asserts the figures of ours
// (RESULTS.md, section Overload, is written from this output by hand).
func TestOverload(t *testing.T) {
	if testing.Short() {
		t.Skip("the overload scenarios take a few seconds")
	}
	var out strings.Builder
	fmt.Fprintf(&out, "C=50 workers, s=20ms±25%% (unloaded p99 %v), 3x load, 40 s (capacity-halves: to 25 workers at 20 s), timeout 1 s; %d seeds: median [min, max]\n",
		overloadBase(0).UnloadedP99(), overloadSeeds)
	fmt.Fprintf(&out, "| scenario | gate | settle ±20%% of C (for good) | first within ±20%% | share of samples within after | limit / C, last 5 s | p99 / unloaded | goodput / capacity | critical ok | default ok | sheddable ok |\n")
	fmt.Fprintf(&out, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, s := range overloadScenarios {
		for _, g := range overloadGates {
			var fs []overloadFigures
			for seed := uint64(1); seed <= overloadSeeds; seed++ {
				r, f := runOverload(t, g, s, seed)
				fs = append(fs, f)
				if g.ours {
					assertOurFigures(t, s, seed, r, f)
				}
			}
			fmt.Fprintf(&out, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", s.name, g.name,
				spreadDur(fs, func(f overloadFigures) time.Duration { return f.settle }),
				spreadDur(fs, func(f overloadFigures) time.Duration { return f.enter }),
				spread(fs, "%.3f", func(f overloadFigures) float64 { return f.inBand }),
				spread(fs, "%.2f", func(f overloadFigures) float64 { return f.limitRatio }),
				spread(fs, "%.2f", func(f overloadFigures) float64 { return f.p99Ratio }),
				spread(fs, "%.2f", func(f overloadFigures) float64 { return f.goodput }),
				spread(fs, "%.3f", func(f overloadFigures) float64 { return f.critical }),
				spread(fs, "%.3f", func(f overloadFigures) float64 { return f.defaults }),
				spread(fs, "%.3f", func(f overloadFigures) float64 { return f.sheddable }))
		}
	}
	t.Log("\n" + out.String())
}

// assertOurFigures asserts the figures of ratelimit.Adaptive.
func assertOurFigures(t *testing.T, s overloadScenario, seed uint64, r *overloadsim.Result, f overloadFigures) {
	t.Helper()
	if !limitMoved(r) {
		t.Logf("%s seed %d: the limit of ratelimit.Adaptive never moved (the skeleton's fixed limit): its figures are not asserted", s.name, seed)
		return
	}
	assert.True(t, f.settle >= 0 && f.settle <= 5*time.Second, "%s seed %d: within ±20%% of C for good after %v, want <= 5s", s.name, seed, f.settle)
	assert.InDelta(t, 1, f.limitRatio, 0.2, "%s seed %d: limit / C", s.name, seed)
	assert.LessOrEqual(t, f.p99Ratio, 2.0, "%s seed %d: p99 / unloaded", s.name, seed)
	assert.GreaterOrEqual(t, f.goodput, 0.9, "%s seed %d: goodput / capacity", s.name, seed)
	if !math.IsNaN(f.sheddable) {
		assert.GreaterOrEqual(t, f.critical, 0.99, "%s seed %d: critical success", s.name, seed)
		assert.Less(t, f.sheddable, f.defaults, "%s seed %d: sheddable shed before default", s.name, seed)
	}
}

// limitMoved reports whether the gate's limit ever changed in r: the
// skeleton of ratelimit.Adaptive, before its algorithm, kept it fixed.
func limitMoved(r *overloadsim.Result) bool {
	for _, s := range r.Samples {
		if s.Limit != r.Samples[0].Limit {
			return true
		}
	}
	return false
}

func spread(fs []overloadFigures, format string, get func(overloadFigures) float64) string {
	var vs []float64
	for _, f := range fs {
		if v := get(f); !math.IsNaN(v) {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return "-"
	}
	slices.Sort(vs)
	med := vs[len(vs)/2]
	if vs[0] == vs[len(vs)-1] {
		return fmt.Sprintf(format, med)
	}
	return fmt.Sprintf(format+" ["+format+", "+format+"]", med, vs[0], vs[len(vs)-1])
}

func spreadDur(fs []overloadFigures, get func(overloadFigures) time.Duration) string {
	var vs []time.Duration
	never := 0
	for _, f := range fs {
		if v := get(f); v >= 0 {
			vs = append(vs, v)
		} else {
			never++
		}
	}
	var s string
	if len(vs) > 0 {
		slices.Sort(vs)
		s = vs[len(vs)/2].String()
		if vs[0] != vs[len(vs)-1] {
			s += fmt.Sprintf(" [%v, %v]", vs[0], vs[len(vs)-1])
		}
	}
	if never > 0 {
		s = strings.TrimSpace(s + fmt.Sprintf(" never in %d/%d", never, len(fs)))
	}
	return s
}
