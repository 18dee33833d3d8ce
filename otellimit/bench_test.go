package otellimit_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/otellimit"
)

// BenchmarkObserve measures one Observe call: on the SDK (what a program
// pays) and on the no-op provider (what the adapter itself costs); for an
// in-memory decision (one counter), a Redis one (a counter and a
// histogram), and a concurrency limit's admission and release together
// (two calls: the counter and in_flight, then in_flight alone).
func BenchmarkObserve(b *testing.B) {
	events := map[string]ratelimit.Event{
		"keyed": {Name: "api", Algorithm: ratelimit.TokenBucketAlgorithm, Home: ratelimit.HomeKeyed,
			Outcome: ratelimit.OutcomeAllowed, N: 1, Latency: 200 * time.Nanosecond},
		"redis": {Name: "api", Algorithm: ratelimit.SlidingCounterAlgorithm, Home: ratelimit.HomeRedis,
			Outcome: ratelimit.OutcomeAllowed, N: 1, Latency: 300 * time.Microsecond},
	}
	providers := []struct {
		name string
		mp   func() metric.MeterProvider
	}{
		{"noop", func() metric.MeterProvider { return noop.NewMeterProvider() }},
		{"sdk", func() metric.MeterProvider {
			return sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
		}},
	}
	acquired := ratelimit.Event{Name: "exports", Algorithm: ratelimit.ConcurrencyAlgorithm, Home: ratelimit.HomeKeyed,
		Outcome: ratelimit.OutcomeAllowed, N: 1, Decision: ratelimit.Decision{Allowed: true, Limit: 10}}
	released := acquired
	released.Outcome = ratelimit.OutcomeReleased
	ctx := context.Background()
	for _, p := range providers {
		for _, home := range []string{"keyed", "redis", "concurrency"} {
			obs, err := otellimit.NewObserver(p.mp())
			if err != nil {
				b.Fatal(err)
			}
			observe := func() { obs.Observe(ctx, events[home]) }
			if home == "concurrency" {
				observe = func() {
					obs.Observe(ctx, acquired)
					obs.Observe(ctx, released)
				}
			}
			observe()
			b.Run(p.name+"/"+home+"/serial", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					observe()
				}
			})
			b.Run(p.name+"/"+home+"/parallel", func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						observe()
					}
				})
			})
		}
	}
}
