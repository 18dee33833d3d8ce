package ratelimit_test

import (
	"container/heap"
	"context"
	"errors"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/eventrec"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var adaptiveStart = time.Unix(1_700_000_000, 0)

func TestNewAdaptiveRefusesBadConfig(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  ratelimit.AdaptiveConfig
		want string
	}{
		{ratelimit.AdaptiveConfig{Min: -1}, "Min must be at least 1"},
		{ratelimit.AdaptiveConfig{Min: 10, Max: 5}, "Max must be at least Min"},
		{ratelimit.AdaptiveConfig{Initial: 2000}, "Initial must be within"},
		{ratelimit.AdaptiveConfig{Initial: 5, Min: 10}, "Initial must be within"},
		{ratelimit.AdaptiveConfig{Tolerance: -0.1}, "Tolerance must be in (0, 1]"},
		{ratelimit.AdaptiveConfig{Tolerance: 1.5}, "Tolerance must be in (0, 1]"},
		{ratelimit.AdaptiveConfig{Reserve: 0.5}, "Reserve must be in (0, 0.5)"},
		{ratelimit.AdaptiveConfig{Timeout: -time.Second}, "Timeout must not be negative"},
	} {
		a, err := ratelimit.NewAdaptive(tc.cfg)
		require.Error(t, err, "NewAdaptive(%+v)", tc.cfg)
		assert.Nil(t, a)
		assert.True(t, errors.Is(err, ratelimit.ErrInvalidConfig), "NewAdaptive(%+v) = %v, want ErrInvalidConfig", tc.cfg, err)
		assert.True(t, strings.HasPrefix(err.Error(), "ratelimit: "), "NewAdaptive(%+v) = %q, want the ratelimit: prefix", tc.cfg, err)
		assert.Contains(t, err.Error(), tc.want)
	}
}

// The ceilings of the three priorities, Remaining, and what a shed request
// is told.
func TestAdaptivePriorityCeilings(t *testing.T) {
	t.Parallel()
	rec := &eventrec.Recorder{}
	a, err := ratelimit.NewAdaptive(ratelimit.AdaptiveConfig{Initial: 10}, ratelimit.WithObserver(rec), ratelimit.WithName("svc"))
	require.NoError(t, err)
	ctx := context.Background()
	var flights []ratelimit.Flight
	acquire := func(p ratelimit.Priority, wantAllowed bool, wantRemaining int) {
		t.Helper()
		f, d := a.Acquire(ctx, p)
		require.Equal(t, wantAllowed, d.Allowed, "Acquire(%v) with %d in flight: Allowed", p, a.InFlight())
		assert.Equal(t, 10, d.Limit)
		if wantAllowed {
			assert.Equal(t, wantRemaining, d.Remaining, "Acquire(%v): Remaining", p)
			flights = append(flights, f)
		} else {
			assert.Equal(t, ratelimit.Flight{}, f)
			assert.Equal(t, time.Millisecond, d.RetryAfter, "Acquire(%v): RetryAfter before any latency is known", p)
		}
	}
	// Sheddable fills 8 = 10·(1-0.2), default 10, critical 12 = 10·(1+0.2).
	for i := range 8 {
		acquire(ratelimit.PrioritySheddable, true, 8-i-1)
	}
	acquire(ratelimit.PrioritySheddable, false, 0)
	acquire(ratelimit.PriorityDefault, true, 1)
	acquire(ratelimit.PriorityDefault, true, 0)
	acquire(ratelimit.PriorityDefault, false, 0)
	acquire(ratelimit.PriorityCritical, true, 1)
	acquire(ratelimit.PriorityCritical, true, 0)
	acquire(ratelimit.PriorityCritical, false, 0)
	assert.Equal(t, 12, a.InFlight())
	for _, f := range flights {
		f.Ignore()
	}
	assert.Equal(t, 0, a.InFlight())
	assert.Equal(t, 10, a.Limit(), "ignored flights teach nothing")

	events := rec.Take()
	require.Len(t, events, 15)
	shed := 0
	for _, e := range events {
		assert.Equal(t, ratelimit.AdaptiveAlgorithm, e.Algorithm)
		assert.Equal(t, ratelimit.HomeMemory, e.Home)
		assert.Equal(t, "svc", e.Name)
		if e.Outcome == ratelimit.OutcomeShed {
			shed++
			assert.False(t, e.Decision.Allowed)
		} else {
			assert.Equal(t, ratelimit.OutcomeAllowed, e.Outcome)
		}
	}
	assert.Equal(t, 3, shed)
}

// A Flight ends once: a second call, on it or on a copy, does nothing, and
// the zero Flight holds nothing.
func TestAdaptiveFlightEndsOnce(t *testing.T) {
	t.Parallel()
	a, err := ratelimit.NewAdaptive(ratelimit.AdaptiveConfig{Initial: 2})
	require.NoError(t, err)
	f, d := a.Acquire(context.Background(), ratelimit.PriorityDefault)
	require.True(t, d.Allowed)
	g, d := a.Acquire(context.Background(), ratelimit.PriorityDefault)
	require.True(t, d.Allowed)
	copyOfF := f
	f.Success()
	f.Success()
	copyOfF.Dropped()
	f.Ignore()
	assert.Equal(t, 1, a.InFlight(), "ending one flight four times")
	// The token f held is reused by the next flight: f still ends nothing.
	h, d := a.Acquire(context.Background(), ratelimit.PriorityDefault)
	require.True(t, d.Allowed)
	f.Success()
	assert.Equal(t, 2, a.InFlight(), "an ended Flight ended a later one")
	g.Success()
	h.Success()
	assert.Equal(t, 0, a.InFlight())
	ratelimit.Flight{}.Success()
	ratelimit.Flight{}.Dropped()
	assert.Equal(t, 0, a.InFlight())
}

// batches drives a in batches on clk: each batch acquires n flights at
// once, moves time by lat and ends them, every dropEvery-th (when
// positive) with Dropped and the rest with Success. It returns the limit
// after each batch.
func batches(a *ratelimit.Adaptive, clk *fakeclock.Manual, count, n int, lat time.Duration, dropEvery int) []int {
	var limits []int
	k := 0
	for range count {
		var fs []ratelimit.Flight
		for range n {
			if f, d := a.Acquire(context.Background(), ratelimit.PriorityDefault); d.Allowed {
				fs = append(fs, f)
			}
		}
		clk.Add(lat)
		for _, f := range fs {
			if k++; dropEvery > 0 && k%dropEvery == 0 {
				f.Dropped()
			} else {
				f.Success()
			}
		}
		limits = append(limits, a.Limit())
	}
	return limits
}

// A limit that is not in use does not grow: three requests in flight at a
// time, at a steady latency, for 10 s.
func TestAdaptiveUnusedLimitDoesNotGrow(t *testing.T) {
	t.Parallel()
	clk := fakeclock.NewManual(adaptiveStart)
	a, err := ratelimit.NewAdaptive(ratelimit.AdaptiveConfig{}, ratelimit.WithClock(clk))
	require.NoError(t, err)
	limits := batches(a, clk, 1000, 3, 10*time.Millisecond, 0)
	for i, l := range limits {
		require.LessOrEqual(t, l, 20, "limit after batch %d", i)
	}
	assert.Equal(t, 20, limits[len(limits)-1])
}

// In use at a steady latency, the limit grows; with drops (3% of the
// flights) at that same steady latency it is cut (Gradient2 ignores them,
// concurrency-limits #137), and so it is by flights longer than Timeout
// ended with Success.
func TestAdaptiveDropsAndTimeoutsCut(t *testing.T) {
	t.Parallel()
	run := func(cfg ratelimit.AdaptiveConfig, dropEvery int) []int {
		clk := fakeclock.NewManual(adaptiveStart)
		a, err := ratelimit.NewAdaptive(cfg, ratelimit.WithClock(clk))
		require.NoError(t, err)
		// Full batches (all of the limit) of 40ms: about 3 windows in 0.5 s,
		// before the first probe.
		return batches(a, clk, 12, 1000, 40*time.Millisecond, dropEvery)
	}
	grows := run(ratelimit.AdaptiveConfig{Initial: 100}, 0)
	t.Logf("steady latency: %v", grows)
	assert.Greater(t, grows[len(grows)-1], 100, "a limit in use at the baseline latency grows")

	cut := run(ratelimit.AdaptiveConfig{Initial: 100}, 33)
	t.Logf("steady latency, 3%% dropped: %v", cut)
	assert.Less(t, cut[len(cut)-1], 100, "drops at a steady latency cut the limit")
	for i := 1; i < len(cut); i++ {
		assert.GreaterOrEqual(t, float64(cut[i]), 0.9*float64(cut[i-1])-1, "a cut by a tenth per window at most (batch %d)", i)
	}

	slow := run(ratelimit.AdaptiveConfig{Initial: 100, Timeout: 30 * time.Millisecond}, 0)
	t.Logf("steady latency above Timeout: %v", slow)
	assert.Less(t, slow[len(slow)-1], 100, "flights longer than Timeout cut the limit")
}

// A discrete-event queue model, for the scenarios overloadsim does not
// offer (the service time changing, a start far above the capacity) and
// for long timelines: C workers, service time s spread uniformly by ±20%,
// a FIFO queue in front of them, arrivals evenly spaced, no goroutine:
// time is a manual clock set at each event.
type queueModel struct {
	workers  int
	service  time.Duration
	load     float64       // arrivals, x the starting capacity
	duration time.Duration // simulated
	change   time.Duration // when positive: at it, the service time becomes service2
	service2 time.Duration
	timeout  time.Duration // a request that waited longer in the queue is dropped
	cfg      ratelimit.AdaptiveConfig
}

type modelJob struct {
	f      ratelimit.Flight
	arrive time.Duration
	done   time.Duration
}

type modelBusy []*modelJob

func (h modelBusy) Len() int           { return len(h) }
func (h modelBusy) Less(i, j int) bool { return h[i].done < h[j].done }
func (h modelBusy) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *modelBusy) Push(x any)        { *h = append(*h, x.(*modelJob)) }
func (h *modelBusy) Pop() any {
	o := *h
	x := o[len(o)-1]
	*h = o[:len(o)-1]
	return x
}

// run returns the limit every 100ms and the Adaptive.
func (m queueModel) run(t *testing.T) ([]int, *ratelimit.Adaptive) {
	t.Helper()
	clk := fakeclock.NewManual(adaptiveStart)
	a, err := ratelimit.NewAdaptive(m.cfg, ratelimit.WithClock(clk))
	require.NoError(t, err)
	rng := rand.New(rand.NewSource(1))
	gap := time.Duration(float64(m.service) / (m.load * float64(m.workers)))
	service := m.service
	var busy modelBusy
	var queue []*modelJob
	var limits []int
	next, nextSample := time.Duration(0), time.Duration(0)
	for next < m.duration {
		var now time.Duration
		if len(busy) > 0 && busy[0].done <= next {
			now = busy[0].done
			clk.Set(adaptiveStart.Add(now))
			heap.Pop(&busy).(*modelJob).f.Success()
		} else {
			now, next = next, next+gap
			clk.Set(adaptiveStart.Add(now))
			if f, d := a.Acquire(context.Background(), ratelimit.PriorityDefault); d.Allowed {
				queue = append(queue, &modelJob{f: f, arrive: now})
			}
		}
		if m.change > 0 && now >= m.change {
			service = m.service2
		}
		for len(busy) < m.workers && len(queue) > 0 {
			j := queue[0]
			queue = queue[1:]
			if m.timeout > 0 && now-j.arrive > m.timeout {
				j.f.Dropped()
				continue
			}
			j.done = now + time.Duration(float64(service)*(0.8+0.4*rng.Float64()))
			heap.Push(&busy, j)
		}
		for ; now >= nextSample; nextSample += 100 * time.Millisecond {
			limits = append(limits, a.Limit())
		}
	}
	return limits, a
}

// within asserts that every limit of limits[from:to] (to 0: the end) is
// within c·(1±0.2).
func within(t *testing.T, limits []int, from, to, c int, what string) {
	t.Helper()
	if to == 0 {
		to = len(limits)
	}
	for i, l := range limits[from:to] {
		if float64(l) < 0.8*float64(c) || float64(l) > 1.2*float64(c) {
			t.Errorf("%s: limit %d at %v, want within ±20%% of %d; limits %v", what, l, time.Duration(from+i)*100*time.Millisecond, c, limits)
			return
		}
	}
}

// When the service itself gets slower (its service time doubles) the
// latency rises without queueing: cutting the limit does not lower it, so
// it becomes the new baseline, and the limit returns to about C instead of
// settling at half of it.
func TestAdaptiveServiceSlowsDown(t *testing.T) {
	t.Parallel()
	m := queueModel{workers: 50, service: 10 * time.Millisecond, load: 3, duration: 12 * time.Second,
		change: 5 * time.Second, service2: 20 * time.Millisecond}
	limits, a := m.run(t)
	t.Logf("limits every 100ms: %v", limits)
	within(t, limits, 10, 50, 50, "before")
	within(t, limits, 60, 0, 50, "from 1 s after the service time doubled")
	// The baseline (RetryAfter) is the new service time's median.
	for a.InFlight() < a.Limit() {
		a.Acquire(context.Background(), ratelimit.PriorityDefault)
	}
	_, d := a.Acquire(context.Background(), ratelimit.PriorityDefault)
	require.False(t, d.Allowed)
	assert.InDelta(t, 20*time.Millisecond, d.RetryAfter, float64(2*time.Millisecond), "RetryAfter, the baseline latency")
}

// Started ten times above the capacity, with requests dropped after 50ms
// in the queue: the probe goes down by shares while the latency falls with
// the limit, and the limit settles at about C within 2 s.
func TestAdaptiveStartsFarAboveCapacity(t *testing.T) {
	t.Parallel()
	m := queueModel{workers: 50, service: 10 * time.Millisecond, load: 3, duration: 10 * time.Second,
		timeout: 50 * time.Millisecond, cfg: ratelimit.AdaptiveConfig{Initial: 500}}
	limits, _ := m.run(t)
	t.Logf("limits every 100ms: %v", limits)
	within(t, limits, 20, 0, 50, "from 2 s")
}

// The baseline is re-measured about every 30 s at 1/(1+Tolerance)² of the
// limit (Envoy pins the concurrency to 3 for it): over 70 s (three probes) the limit
// never leaves ±20% of C once settled.
func TestAdaptiveProbeStaysNearTheLimit(t *testing.T) {
	t.Parallel()
	m := queueModel{workers: 50, service: 10 * time.Millisecond, load: 3, duration: 70 * time.Second}
	limits, _ := m.run(t)
	low := limits[10]
	for _, l := range limits[10:] {
		low = min(low, l)
	}
	t.Logf("lowest limit from 1 s to 70 s: %d (C = 50)", low)
	within(t, limits, 10, 0, 50, "from 1 s")
}

// TestAdaptiveReserveRoundsUp: the reserve is counted in whole places,
// rounded up, so that at a small limit critical requests keep more than
// one place: at 9 with 0.2, sheddable requests fill 7, default ones 9 and
// critical ones 11; at 10, exactly 8, 10 and 12.
func TestAdaptiveReserveRoundsUp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ limit, shed, def, crit int }{{9, 7, 9, 11}, {10, 8, 10, 12}, {1, 0, 1, 2}} {
		a, err := ratelimit.NewAdaptive(ratelimit.AdaptiveConfig{Initial: tc.limit, Min: tc.limit, Max: tc.limit})
		require.NoError(t, err)
		for _, step := range []struct {
			p       ratelimit.Priority
			ceiling int
		}{{ratelimit.PrioritySheddable, tc.shed}, {ratelimit.PriorityDefault, tc.def}, {ratelimit.PriorityCritical, tc.crit}} {
			for a.InFlight() < step.ceiling {
				_, d := a.Acquire(context.Background(), step.p)
				require.Truef(t, d.Allowed, "limit %d: %v at %d in flight", tc.limit, step.p, a.InFlight())
			}
			_, d := a.Acquire(context.Background(), step.p)
			assert.Falsef(t, d.Allowed, "limit %d: %v beyond %d", tc.limit, step.p, step.ceiling)
		}
	}
}
