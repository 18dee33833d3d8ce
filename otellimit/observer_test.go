package otellimit_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/otellimit"
)

var errStoreDown = errors.New("ratelimit: redis unavailable")

// redisEvent is an Event as a Redis limiter of package redislimit reports
// it (this module does not depend on redislimit).
func redisEvent(outcome ratelimit.Outcome, allowed bool, latency time.Duration) ratelimit.Event {
	e := ratelimit.Event{
		Name:      "api",
		Algorithm: ratelimit.SlidingCounterAlgorithm,
		Home:      ratelimit.HomeRedis,
		Outcome:   outcome,
		N:         1,
		Decision:  ratelimit.Decision{Allowed: allowed, Limit: 10},
		Latency:   latency,
	}
	if outcome == ratelimit.OutcomeFallback {
		e.Err = errStoreDown
	}
	return e
}

func TestObserveCountsFallbacksByWayTheFailurePolicyWent(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t)
	ctx := context.Background()
	for range 3 {
		obs.Observe(ctx, redisEvent(ratelimit.OutcomeFallback, true, 50*time.Millisecond)) // fail open
	}
	obs.Observe(ctx, redisEvent(ratelimit.OutcomeFallback, false, 50*time.Millisecond)) // fail closed
	obs.Observe(ctx, redisEvent(ratelimit.OutcomeAllowed, true, time.Millisecond))

	got := collect(t, reader)
	alg, home := ratelimit.SlidingCounterAlgorithm, ratelimit.HomeRedis
	assert.Equal(t, map[string]int64{
		series("api", alg, home, ratelimit.OutcomeFallback): 4,
		series("api", alg, home, ratelimit.OutcomeAllowed):  1,
	}, got.sums(t, "ratelimit.decisions"), "ratelimit.decisions")
	assert.Equal(t, map[string]int64{
		fallbackSeries("api", alg, home, true):  3,
		fallbackSeries("api", alg, home, false): 1,
	}, got.sums(t, "ratelimit.fallbacks"), "ratelimit.fallbacks")
}

func TestObserveRecordsRedisLatencyInSeconds(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t)
	ctx := context.Background()
	obs.Observe(ctx, redisEvent(ratelimit.OutcomeAllowed, true, 200*time.Microsecond))
	obs.Observe(ctx, redisEvent(ratelimit.OutcomeAllowed, true, 3*time.Millisecond))
	obs.Observe(ctx, redisEvent(ratelimit.OutcomeDenied, false, 400*time.Microsecond))
	wait := redisEvent(ratelimit.OutcomeAllowed, true, 2*time.Second)
	wait.Wait = true
	obs.Observe(ctx, wait)

	got := collect(t, reader)
	m := got["ratelimit.decision.duration"]
	assert.Equal(t, "s", m.Unit, "decision.duration unit")
	h := got.histograms(t, "ratelimit.decision.duration")
	alg, home := ratelimit.SlidingCounterAlgorithm, ratelimit.HomeRedis
	require.Len(t, h, 2, "decision.duration series: %v", h)
	allowed := h[series("api", alg, home, ratelimit.OutcomeAllowed)]
	assert.Equal(t, uint64(2), allowed.Count, "allowed decisions timed (the WaitN call is not one of them)")
	assert.InDelta(t, 0.0032, allowed.Sum, 1e-12, "sum of allowed latencies in seconds")
	assert.Equal(t, []float64{
		1e-6, 2.5e-6, 5e-6, 1e-5, 2.5e-5, 5e-5, 1e-4, 2.5e-4, 5e-4,
		1e-3, 2.5e-3, 5e-3, 0.01, 0.025, 0.05, 0.1,
	}, allowed.Bounds, "decision.duration bucket boundaries")
	// 200µs falls in (100µs, 250µs], 3ms in (2.5ms, 5ms].
	want := make([]uint64, len(allowed.Bounds)+1)
	want[7], want[11] = 1, 1
	assert.Equal(t, want, allowed.BucketCounts, "decision.duration buckets")
	assert.Equal(t, uint64(1), h[series("api", alg, home, ratelimit.OutcomeDenied)].Count, "denied decisions timed")

	w := got.histograms(t, "ratelimit.wait.duration")
	require.Len(t, w, 1, "wait.duration series: %v", w)
	assert.Equal(t, uint64(1), w[series("api", alg, home, ratelimit.OutcomeAllowed)].Count, "WaitN calls timed")
	assert.InDelta(t, 2.0, w[series("api", alg, home, ratelimit.OutcomeAllowed)].Sum, 1e-12, "wait seconds")
	assert.Equal(t, int64(4), got.sums(t, "ratelimit.decisions")[series("api", alg, home, ratelimit.OutcomeAllowed)]+
		got.sums(t, "ratelimit.decisions")[series("api", alg, home, ratelimit.OutcomeDenied)], "every decision counted, the WaitN call too")
}

func TestObserveTimesMemoryDecisionsOnlyWithDurationForAllHomes(t *testing.T) {
	t.Parallel()
	memory := ratelimit.Event{
		Name: "local", Algorithm: ratelimit.TokenBucketAlgorithm, Home: ratelimit.HomeMemory,
		Outcome: ratelimit.OutcomeAllowed, N: 1, Latency: 300 * time.Nanosecond,
	}
	keyed := memory
	keyed.Home = ratelimit.HomeKeyed

	obs, reader := newObserver(t)
	obs.Observe(context.Background(), memory)
	obs.Observe(context.Background(), keyed)
	assert.Empty(t, collect(t, reader).histograms(t, "ratelimit.decision.duration"), "in-memory decisions timed by default")

	obs, reader = newObserver(t, otellimit.WithDurationForAllHomes())
	obs.Observe(context.Background(), memory)
	obs.Observe(context.Background(), keyed)
	h := collect(t, reader).histograms(t, "ratelimit.decision.duration")
	assert.Equal(t, uint64(1), h[series("local", ratelimit.TokenBucketAlgorithm, ratelimit.HomeMemory, ratelimit.OutcomeAllowed)].Count, "memory")
	assert.Equal(t, uint64(1), h[series("local", ratelimit.TokenBucketAlgorithm, ratelimit.HomeKeyed, ratelimit.OutcomeAllowed)].Count, "keyed")
}

func TestObserveFoldsLimitNamesBeyondTheCapIntoOther(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t, otellimit.WithMaxLimits(2))
	ctx := context.Background()
	e := ratelimit.Event{Algorithm: ratelimit.FixedWindowAlgorithm, Home: ratelimit.HomeKeyed, Outcome: ratelimit.OutcomeDenied, N: 1}
	for i := range 1000 {
		e.Name = fmt.Sprintf("name-%d", i%500) // 500 names: 2 kept, 498 folded
		obs.Observe(ctx, e)
	}
	e.Name = "name-0" // a kept name still gets its own series for a new outcome
	e.Outcome = ratelimit.OutcomeAllowed
	obs.Observe(ctx, e)

	alg, home := ratelimit.FixedWindowAlgorithm, ratelimit.HomeKeyed
	assert.Equal(t, map[string]int64{
		series("name-0", alg, home, ratelimit.OutcomeDenied):  2,
		series("name-1", alg, home, ratelimit.OutcomeDenied):  2,
		series("other", alg, home, ratelimit.OutcomeDenied):   996,
		series("name-0", alg, home, ratelimit.OutcomeAllowed): 1,
	}, collect(t, reader).sums(t, "ratelimit.decisions"))
}

func TestObserveFoldsUnknownEnumValuesIntoUnknown(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t)
	ctx := context.Background()
	for v := range 256 { // values far beyond the known ones: one series, not 256
		obs.Observe(ctx, ratelimit.Event{Name: "x", Algorithm: ratelimit.Algorithm(200 + v%56), Home: ratelimit.Home(200 + v%56), Outcome: ratelimit.Outcome(200 + v%56)})
	}
	obs.Observe(ctx, ratelimit.Event{Name: "x"}) // the zero values: Home 0 is HomeNone
	assert.Equal(t, map[string]int64{
		"ratelimit.algorithm=unknown,ratelimit.home=unknown,ratelimit.limit=x,ratelimit.outcome=unknown": 256,
		"ratelimit.algorithm=unknown,ratelimit.home=none,ratelimit.limit=x,ratelimit.outcome=unknown":    1,
	}, collect(t, reader).sums(t, "ratelimit.decisions"))
}

// TestObserveGivesEveryNamedEnumValueItsOwnAttribute: each value of
// Algorithm, Home and Outcome whose String is a name is reported under
// that name, so that a value added to package ratelimit is never folded
// into "unknown" by a table sized for the values before it.
func TestObserveGivesEveryNamedEnumValueItsOwnAttribute(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t)
	ctx := context.Background()
	base := ratelimit.Event{Name: "x", Algorithm: ratelimit.FixedWindowAlgorithm, Home: ratelimit.HomeKeyed, Outcome: ratelimit.OutcomeAllowed}
	want := map[string]int64{}
	add := func(e ratelimit.Event) {
		obs.Observe(ctx, e)
		want[series(e.Name, e.Algorithm, e.Home, e.Outcome)]++
	}
	var algs, homes, outcomes []string
	for v := range 256 {
		if a := ratelimit.Algorithm(v); !strings.HasPrefix(a.String(), "Algorithm(") {
			e := base
			e.Algorithm = a
			add(e)
			algs = append(algs, a.String())
		}
		if h := ratelimit.Home(v); h.String() != "unknown" {
			e := base
			e.Home = h
			add(e)
			homes = append(homes, h.String())
		}
		if o := ratelimit.Outcome(v); o.String() != "unknown" {
			e := base
			e.Outcome = o
			if o == ratelimit.OutcomeReleased {
				obs.Observe(ctx, e) // not a decision (TestObserveCountsReleasesOnlyInFlight)
			} else {
				add(e)
			}
			outcomes = append(outcomes, o.String())
		}
	}
	assert.Contains(t, algs, "quota")
	assert.Contains(t, homes, "none")
	assert.Contains(t, outcomes, "exempt")
	assert.Contains(t, outcomes, "released")
	assert.Equal(t, want, collect(t, reader).sums(t, "ratelimit.decisions"))
}

// TestObserveReportsExemptionsOfTheMiddleware: the Events package
// httplimit reports for exempt and denylisted requests (HomeNone,
// OutcomeExempt or a denial with no limiter behind it) get their own
// series.
func TestObserveReportsExemptionsOfTheMiddleware(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t, otellimit.WithDurationForAllHomes())
	ctx := context.Background()
	exempt := ratelimit.Event{Name: "api", Algorithm: ratelimit.QuotaAlgorithm, Home: ratelimit.HomeNone,
		Outcome: ratelimit.OutcomeExempt, N: 1, Decision: ratelimit.Decision{Allowed: true}}
	denied := ratelimit.Event{Name: "api", Home: ratelimit.HomeNone, Outcome: ratelimit.OutcomeDenied, N: 1,
		Decision: ratelimit.Decision{RetryAfter: ratelimit.RetryNever}, Err: errors.New("ratelimit: request denied by a denylist")}
	for range 3 {
		obs.Observe(ctx, exempt)
	}
	obs.Observe(ctx, denied)
	got := collect(t, reader)
	assert.Equal(t, map[string]int64{
		"ratelimit.algorithm=quota,ratelimit.home=none,ratelimit.limit=api,ratelimit.outcome=exempt":   3,
		"ratelimit.algorithm=unknown,ratelimit.home=none,ratelimit.limit=api,ratelimit.outcome=denied": 1,
	}, got.sums(t, "ratelimit.decisions"))
	assert.Empty(t, got.sums(t, "ratelimit.fallbacks"))
}

func TestObserveIsSafeForConcurrentUse(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t, otellimit.WithMaxLimits(8))
	const goroutines, each = 8, 500
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range each {
				obs.Observe(context.Background(), ratelimit.Event{
					Name:      fmt.Sprintf("l%d", (g+i)%16),
					Algorithm: ratelimit.SlidingLogAlgorithm, Home: ratelimit.HomeRedis,
					Outcome: ratelimit.Outcome(1 + i%5), Decision: ratelimit.Decision{Allowed: i%2 == 0},
				})
			}
		}()
	}
	wg.Wait()
	var total int64
	names := map[string]bool{}
	for s, v := range collect(t, reader).sums(t, "ratelimit.decisions") {
		total += v
		for _, kv := range strings.Split(s, ",") {
			if name, ok := strings.CutPrefix(kv, "ratelimit.limit="); ok {
				names[name] = true
			}
		}
	}
	assert.Equal(t, int64(goroutines*each), total, "decisions counted")
	assert.Len(t, names, 9, "8 names and other: %v", names)
	assert.True(t, names["other"], "other among %v", names)
}

func TestObserveDoesNotAllocate(t *testing.T) {
	ctx := context.Background()
	events := []ratelimit.Event{
		{Name: "api", Algorithm: ratelimit.TokenBucketAlgorithm, Home: ratelimit.HomeKeyed, Outcome: ratelimit.OutcomeAllowed, N: 1},
		{Name: "api", Algorithm: ratelimit.TokenBucketAlgorithm, Home: ratelimit.HomeKeyed, Outcome: ratelimit.OutcomeDenied, N: 1},
		redisEvent(ratelimit.OutcomeAllowed, true, time.Millisecond),
		redisEvent(ratelimit.OutcomeFallback, true, 50*time.Millisecond),
		{Name: "api", Algorithm: ratelimit.LeakyBucketAlgorithm, Home: ratelimit.HomeMemory, Outcome: ratelimit.OutcomeAllowed, N: 1, Wait: true, Latency: time.Second},
		concurrencyEvent(ratelimit.OutcomeAllowed, 2),
		concurrencyEvent(ratelimit.OutcomeReleased, 2),
	}
	reader := sdkmetric.NewManualReader()
	for name, mp := range map[string]metric.MeterProvider{
		"sdk":  sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader)),
		"noop": noop.NewMeterProvider(),
	} {
		obs, err := otellimit.NewObserver(mp, otellimit.WithDurationForAllHomes())
		require.NoError(t, err)
		for _, e := range events { // first use builds the attribute sets
			obs.Observe(ctx, e)
		}
		allocs := testing.AllocsPerRun(200, func() {
			for _, e := range events {
				obs.Observe(ctx, e)
			}
		})
		assert.Zerof(t, allocs, "allocations per %d Observe calls (%s)", len(events), name)
	}
}

func TestNewObserverRejectsBadArguments(t *testing.T) {
	t.Parallel()
	var nilProvider *sdkmetric.MeterProvider
	_, err := otellimit.NewObserver(nilProvider)
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig, "typed-nil provider")
	assert.EqualError(t, err, "ratelimit: invalid configuration: otellimit.NewObserver: meter provider is a nil *metric.MeterProvider")

	for _, n := range []int{0, -1} {
		_, err = otellimit.NewObserver(noop.NewMeterProvider(), otellimit.WithMaxLimits(n))
		require.ErrorIsf(t, err, ratelimit.ErrInvalidConfig, "WithMaxLimits(%d)", n)
		assert.EqualError(t, err, fmt.Sprintf("ratelimit: invalid configuration: otellimit.WithMaxLimits must be positive, got %d", n))
	}
}

// Not parallel: it sets the global MeterProvider.
func TestNewObserverWithNilProviderUsesTheGlobalOne(t *testing.T) {
	prev := otel.GetMeterProvider()
	t.Cleanup(func() { otel.SetMeterProvider(prev) })
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	otel.SetMeterProvider(mp)

	obs, err := otellimit.NewObserver(nil)
	require.NoError(t, err)
	obs.Observe(context.Background(), redisEvent(ratelimit.OutcomeDenied, false, time.Millisecond))
	assert.Equal(t, map[string]int64{
		series("api", ratelimit.SlidingCounterAlgorithm, ratelimit.HomeRedis, ratelimit.OutcomeDenied): 1,
	}, collect(t, reader).sums(t, "ratelimit.decisions"))
}

// concurrencyEvent is an Event of an in-memory concurrency limit named
// "exports".
func concurrencyEvent(outcome ratelimit.Outcome, n int) ratelimit.Event {
	return ratelimit.Event{Name: "exports", Algorithm: ratelimit.ConcurrencyAlgorithm, Home: ratelimit.HomeKeyed,
		Outcome: outcome, N: n, Decision: ratelimit.Decision{Allowed: outcome != ratelimit.OutcomeDenied, Limit: 4}}
}

// TestObserveCountsReleasesOnlyInFlight: an OutcomeReleased Event is not a
// decision; it takes its permits off in_flight, for a concurrency limit
// only, and records nothing else. Only admitted permits go in flight.
func TestObserveCountsReleasesOnlyInFlight(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t, otellimit.WithDurationForAllHomes())
	ctx := context.Background()
	obs.Observe(ctx, concurrencyEvent(ratelimit.OutcomeAllowed, 3))
	obs.Observe(ctx, concurrencyEvent(ratelimit.OutcomeReleased, 2))
	for _, oc := range []ratelimit.Outcome{ratelimit.OutcomeDenied, ratelimit.OutcomeShadow, ratelimit.OutcomeError,
		ratelimit.OutcomeExempt} {
		obs.Observe(ctx, concurrencyEvent(oc, 1)) // decisions, but no permit held
	}
	// A failure policy's admission holds a permit its Release will report;
	// its refusal holds none.
	obs.Observe(ctx, concurrencyEvent(ratelimit.OutcomeFallback, 1))
	failClosed := concurrencyEvent(ratelimit.OutcomeFallback, 1)
	failClosed.Decision.Allowed = false
	obs.Observe(ctx, failClosed)
	wait := concurrencyEvent(ratelimit.OutcomeAllowed, 1)
	wait.Wait = true
	obs.Observe(ctx, wait) // an Acquire that waited
	// A release of a rate limit makes no sense and is dropped; so is an n
	// that is not positive.
	obs.Observe(ctx, ratelimit.Event{Name: "exports", Algorithm: ratelimit.TokenBucketAlgorithm, Home: ratelimit.HomeKeyed,
		Outcome: ratelimit.OutcomeReleased, N: 1})
	obs.Observe(ctx, concurrencyEvent(ratelimit.OutcomeReleased, -5))

	got := collect(t, reader)
	alg, home := ratelimit.ConcurrencyAlgorithm, ratelimit.HomeKeyed
	assert.Equal(t, map[string]int64{inFlightSeries("exports", home): 3},
		got.upDownSums(t, "ratelimit.concurrency.in_flight"), "3 admitted, 2 released, 1 admitted by a wait, 1 failing open")
	assert.Equal(t, map[string]int64{
		series("exports", alg, home, ratelimit.OutcomeAllowed):  2,
		series("exports", alg, home, ratelimit.OutcomeDenied):   1,
		series("exports", alg, home, ratelimit.OutcomeShadow):   1,
		series("exports", alg, home, ratelimit.OutcomeError):    1,
		series("exports", alg, home, ratelimit.OutcomeExempt):   1,
		series("exports", alg, home, ratelimit.OutcomeFallback): 2,
	}, got.sums(t, "ratelimit.decisions"), "ratelimit.decisions: no release among them")
	for _, h := range []string{"ratelimit.decision.duration", "ratelimit.wait.duration"} {
		for s := range got.histograms(t, h) {
			assert.NotContainsf(t, s, "released", "%s has a series of releases", h)
		}
	}
	assert.NotContains(t, got.values(), "released", "an attribute value")
}
