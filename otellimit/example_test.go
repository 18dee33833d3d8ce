package otellimit_test

import (
	"context"
	"fmt"
	"log"
	"sort"
	"time"

	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/otellimit"
)

// printMetrics prints the counters and histogram counts a reader holds, one
// line per series, sorted.
func printMetrics(reader *sdkmetric.ManualReader) {
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(context.Background(), &rm); err != nil {
		log.Fatal(err)
	}
	var lines []string
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			switch d := m.Data.(type) {
			case metricdata.Sum[int64]:
				for _, dp := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} %d", m.Name, attrs(dp.Attributes), dp.Value))
				}
			case metricdata.Histogram[float64]:
				for _, dp := range d.DataPoints {
					lines = append(lines, fmt.Sprintf("%s{%s} count=%d", m.Name, attrs(dp.Attributes), dp.Count))
				}
			}
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
}

// An Observer records what limiters report. Here the Events are written
// out by hand, as a Redis limiter of package redislimit would report them:
// two decisions, one of them taken by the fail-open policy while Redis was
// down.
func ExampleNewObserver() {
	reader := sdkmetric.NewManualReader() // a program would use an exporter's reader
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	obs, err := otellimit.NewObserver(mp)
	if err != nil {
		log.Fatal(err)
	}

	ctx := context.Background()
	obs.Observe(ctx, ratelimit.Event{
		Name: "api", Algorithm: ratelimit.SlidingCounterAlgorithm, Home: ratelimit.HomeRedis,
		Outcome: ratelimit.OutcomeAllowed, N: 1, Decision: ratelimit.Decision{Allowed: true},
		Latency: 400 * time.Microsecond,
	})
	obs.Observe(ctx, ratelimit.Event{
		Name: "api", Algorithm: ratelimit.SlidingCounterAlgorithm, Home: ratelimit.HomeRedis,
		Outcome: ratelimit.OutcomeFallback, N: 1, Decision: ratelimit.Decision{Allowed: true},
		Err: fmt.Errorf("ratelimit: redis unavailable"), Latency: 50 * time.Millisecond,
	})
	printMetrics(reader)
	// Output:
	// ratelimit.decision.duration{ratelimit.algorithm=slidingcounter,ratelimit.home=redis,ratelimit.limit=api,ratelimit.outcome=allowed} count=1
	// ratelimit.decision.duration{ratelimit.algorithm=slidingcounter,ratelimit.home=redis,ratelimit.limit=api,ratelimit.outcome=fallback} count=1
	// ratelimit.decisions{ratelimit.algorithm=slidingcounter,ratelimit.home=redis,ratelimit.limit=api,ratelimit.outcome=allowed} 1
	// ratelimit.decisions{ratelimit.algorithm=slidingcounter,ratelimit.home=redis,ratelimit.limit=api,ratelimit.outcome=fallback} 1
	// ratelimit.fallbacks{ratelimit.algorithm=slidingcounter,ratelimit.allowed=true,ratelimit.home=redis,ratelimit.limit=api} 1
}

// Give the Observer to every limiter, each with a name from a fixed set.
// The limiters report each decision: here 2 allowed and 1 denied for the
// key "alice". No key appears in the metrics.
func ExampleNewObserver_keyed() {
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	obs, err := otellimit.NewObserver(mp)
	if err != nil {
		log.Fatal(err)
	}
	perKey, err := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(2, time.Minute), 2),
		ratelimit.WithName("api"), ratelimit.WithObserver(obs))
	if err != nil {
		log.Fatal(err)
	}
	for range 3 {
		_, _ = perKey.AllowN(context.Background(), "alice", 1)
	}
	printMetrics(reader)
	// Output:
	// ratelimit.decisions{ratelimit.algorithm=tokenbucket,ratelimit.home=keyed,ratelimit.limit=api,ratelimit.outcome=allowed} 2
	// ratelimit.decisions{ratelimit.algorithm=tokenbucket,ratelimit.home=keyed,ratelimit.limit=api,ratelimit.outcome=denied} 1
}
