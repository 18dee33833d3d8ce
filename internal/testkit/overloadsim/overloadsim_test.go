//go:build go1.25

package overloadsim

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fixedGate is a ratelimit.Adaptive whose limit cannot move: Min = Max.
func fixedGate(t *testing.T, limit int) Gate {
	t.Helper()
	a, err := ratelimit.NewAdaptive(ratelimit.AdaptiveConfig{Initial: limit, Min: limit, Max: limit})
	require.NoError(t, err)
	return Adaptive(a)
}

// base is 10 workers of 100ms ±20%: a capacity of 100 requests/s, here at
// 3× overload for 10 s.
func base() Scenario {
	return Scenario{Workers: 10, Service: 100 * time.Millisecond, Spread: 0.2, Load: 3, Duration: 10 * time.Second, Seed: 1}
}

// run runs sc in a synctest bubble with a fixed limit.
func run(t *testing.T, limit int, sc Scenario) *Result {
	t.Helper()
	var r *Result
	synctest.Test(t, func(t *testing.T) {
		var err error
		r, err = Run(fixedGate(t, limit), sc)
		require.NoError(t, err)
	})
	return r
}

// At a limit of C, nothing queues: the latency is the service time alone,
// and the workers are kept busy.
func TestLimitAtCapacity(t *testing.T) {
	t.Parallel()
	sc := base()
	r := run(t, sc.Workers, sc)
	w := r.Window(time.Second, sc.Duration)

	assert.InDelta(t, float64(sc.Service), float64(w.P50), float64(10*time.Millisecond), "p50")
	assert.InDelta(t, float64(sc.UnloadedP99()), float64(w.P99), float64(time.Millisecond), "p99 of a limit at C is the unloaded p99")
	for _, s := range r.Samples {
		assert.LessOrEqual(t, s.P99, 120*time.Millisecond, "no queueing: at most the longest service time, at %v", s.At)
	}
	assert.GreaterOrEqual(t, w.Goodput, 0.9*sc.Capacity(), "goodput")
	assert.LessOrEqual(t, w.Goodput, sc.Capacity()*1.05, "goodput above the capacity")
	assert.Equal(t, sc.Workers, w.MinLimit)
	assert.Equal(t, sc.Workers, w.MaxLimit)

	all := r.All()
	assert.Equal(t, all.Arrived, all.Admitted+all.Shed)
	assert.Equal(t, all.Admitted, all.Succeeded+all.Failed)
	assert.Zero(t, all.Failed)
	assert.InDelta(t, sc.Load*sc.Capacity()*sc.Duration.Seconds(), all.Arrived, 200, "arrivals at 3× capacity")
	assert.InDelta(t, 2.0/3, float64(all.Shed)/float64(all.Arrived), 0.05, "the share shed at 3×")
	for _, s := range r.Samples {
		assert.LessOrEqual(t, s.InFlight, sc.Workers, "in flight at %v", s.At)
	}
	last := r.Samples[len(r.Samples)-1]
	assert.Zero(t, last.InFlight, "the run ends when the last request has")
	assert.GreaterOrEqual(t, last.At, sc.Duration)
}

// At a limit of 2C, C requests wait in the queue: the latency doubles.
func TestLimitAtTwiceCapacity(t *testing.T) {
	t.Parallel()
	sc := base()
	r := run(t, 2*sc.Workers, sc)
	w := r.Window(time.Second, sc.Duration)

	assert.InDelta(t, float64(2*sc.Service), float64(w.P50), float64(20*time.Millisecond), "p50")
	assert.Greater(t, w.P99, sc.UnloadedP99()*3/2, "p99 with a queue")
	assert.GreaterOrEqual(t, w.Goodput, 0.95*sc.Capacity(), "goodput: the queue keeps the workers busy")
	assert.LessOrEqual(t, w.Goodput, sc.Capacity()*1.05, "goodput above the capacity")
}

// Below the capacity, every request is admitted and served at once.
func TestUnderloaded(t *testing.T) {
	t.Parallel()
	sc := base()
	sc.Load = 0.3
	r := run(t, 1000, sc)
	all := r.All()
	assert.Zero(t, all.Shed)
	assert.Equal(t, all.Arrived, all.Succeeded)
	w := r.Window(0, sc.Duration)
	assert.InDelta(t, 0.3*sc.Capacity(), w.Goodput, 5)
	assert.LessOrEqual(t, w.P99, time.Duration(float64(sc.UnloadedP99())*1.1), "little queueing at 30%")
}

// A request older than the Timeout fails at its deadline, queued or not.
func TestTimeout(t *testing.T) {
	t.Parallel()
	sc := base()
	sc.Timeout = 300 * time.Millisecond
	r := run(t, 5*sc.Workers, sc) // ~500ms of queueing
	all := r.All()
	assert.Positive(t, all.Failed)
	assert.Positive(t, all.Succeeded)
	assert.Equal(t, all.Admitted, all.Succeeded+all.Failed)
	for _, s := range r.Samples {
		assert.LessOrEqual(t, s.P99, sc.Timeout, "no latency beyond the timeout, at %v", s.At)
	}
}

// The capacity changes at the given times; the limit of the gate does not
// follow by itself, so at a fixed limit of the old C the queue grows.
func TestCapacityHalves(t *testing.T) {
	t.Parallel()
	sc := base()
	sc.Changes = []Change{{At: 5 * time.Second, Workers: 5}}
	assert.Equal(t, 10, sc.WorkersAt(4999*time.Millisecond))
	assert.Equal(t, 5, sc.WorkersAt(5*time.Second))
	r := run(t, sc.Workers, sc)
	for _, s := range r.Samples {
		assert.Equal(t, sc.WorkersAt(s.At), s.Workers, "workers at %v", s.At)
	}
	before, after := r.Window(time.Second, 5*time.Second), r.Window(6*time.Second, sc.Duration)
	assert.InDelta(t, sc.Capacity(), before.Goodput, 10)
	assert.InDelta(t, sc.Capacity()/2, after.Goodput, 5)
	assert.InDelta(t, float64(2*sc.Service), float64(after.P50), float64(20*time.Millisecond), "a limit of 2× the new C")
}

// The shares of priorities follow the Scenario, and the gate sees each.
func TestPriorities(t *testing.T) {
	t.Parallel()
	sc := base()
	sc.Critical, sc.Sheddable = 0.2, 0.3
	r := run(t, 1000, sc)
	n := float64(r.All().Arrived)
	assert.InDelta(t, 0.2, float64(r.Totals(ratelimit.PriorityCritical).Arrived)/n, 0.02)
	assert.InDelta(t, 0.3, float64(r.Totals(ratelimit.PrioritySheddable).Arrived)/n, 0.02)
	assert.InDelta(t, 0.5, float64(r.Totals(ratelimit.PriorityDefault).Arrived)/n, 0.02)
}

// The same Scenario gives the same Result; another Seed another one.
func TestDeterministic(t *testing.T) {
	t.Parallel()
	sc := base()
	sc.Critical, sc.Timeout = 0.2, 250*time.Millisecond
	a := run(t, 15, sc)
	b := run(t, 15, sc)
	assert.Equal(t, a.Samples, b.Samples)
	assert.Equal(t, a.All(), b.All())
	sc.Seed = 2
	c := run(t, 15, sc)
	assert.NotEqual(t, a.All(), c.All())
}

func TestSettleTime(t *testing.T) {
	t.Parallel()
	r := &Result{Scenario: Scenario{Duration: 6 * time.Second, Sample: time.Second}}
	for i, l := range []int{50, 30, 11, 9, 13, 10, 40} { // the last is after Duration
		r.Samples = append(r.Samples, Sample{At: time.Duration(i+1) * time.Second, Limit: l})
	}
	d, ok := r.SettleTime(10, 0.2, 0)
	assert.True(t, ok)
	assert.Equal(t, 6*time.Second, d, "13 is outside ±20%% of 10")
	d, ok = r.SettleTime(10, 0.3, 0)
	assert.True(t, ok)
	assert.Equal(t, 3*time.Second, d)
	d, ok = r.SettleTime(10, 0.3, 2*time.Second)
	assert.True(t, ok)
	assert.Equal(t, time.Second, d, "measured from after")
	_, ok = r.SettleTime(100, 0.1, 0)
	assert.False(t, ok)
}

func TestBadScenario(t *testing.T) {
	t.Parallel()
	g := fixedGate(t, 1)
	for name, mod := range map[string]func(*Scenario){
		"workers":  func(sc *Scenario) { sc.Workers = 0 },
		"service":  func(sc *Scenario) { sc.Service = 0 },
		"spread":   func(sc *Scenario) { sc.Spread = 1 },
		"load":     func(sc *Scenario) { sc.Load = 0 },
		"shares":   func(sc *Scenario) { sc.Critical, sc.Sheddable = 0.6, 0.6 },
		"duration": func(sc *Scenario) { sc.Duration = -1 },
		"sample":   func(sc *Scenario) { sc.Sample = -1 },
		"timeout":  func(sc *Scenario) { sc.Timeout = -1 },
		"change":   func(sc *Scenario) { sc.Changes = []Change{{At: time.Second, Workers: 0}} },
	} {
		sc := base()
		mod(&sc)
		_, err := Run(g, sc)
		assert.ErrorContains(t, err, "overloadsim: ", name)
	}
	_, err := Run(nil, base())
	assert.ErrorContains(t, err, "overloadsim: ")
}

// semWaiter is a Waiter of a fixed limit: a request waits for a place
// until its context ends.
type semWaiter struct{ sem chan struct{} }

func (w semWaiter) Admit(ratelimit.Priority) (func(bool), bool) {
	select {
	case w.sem <- struct{}{}:
		return func(bool) { <-w.sem }, true
	default:
		return nil, false
	}
}

func (w semWaiter) Wait(ctx context.Context, _ ratelimit.Priority) (func(bool), bool) {
	select {
	case w.sem <- struct{}{}:
		return func(bool) { <-w.sem }, true
	case <-ctx.Done():
		return nil, false
	}
}

func (w semWaiter) Limit() int { return cap(w.sem) }

// A Waiter's queue is part of the latency. An unbounded FIFO queue with a
// client timeout collapses: once the queue is longer than the timeout, a
// request gets its place only to time out in service, and the goodput
// falls to nothing.
func TestWaiter(t *testing.T) {
	t.Parallel()
	sc := base()
	sc.Timeout = 500 * time.Millisecond
	synctest.Test(t, func(t *testing.T) {
		r, err := Run(semWaiter{make(chan struct{}, sc.Workers)}, sc)
		require.NoError(t, err)
		early, late := r.Window(0, 600*time.Millisecond), r.Window(time.Second, sc.Duration)
		assert.GreaterOrEqual(t, early.Goodput, 0.9*sc.Capacity(), "goodput before the queue is a timeout long")
		assert.Greater(t, early.P99, 2*sc.Service, "p99: the requests waited in the gate")
		assert.Less(t, late.Goodput, 0.1*sc.Capacity(), "goodput after: collapse")
		assert.Equal(t, sc.Timeout, late.P50)
		all := r.All()
		assert.Equal(t, all.Arrived, all.Admitted+all.Shed)
		assert.Equal(t, all.Admitted, all.Succeeded+all.Failed)
		for _, s := range r.Samples {
			assert.LessOrEqual(t, s.InFlight, sc.Workers, "in flight at %v", s.At)
			assert.LessOrEqual(t, s.P99, sc.Timeout, "at %v", s.At)
		}
	})
}
