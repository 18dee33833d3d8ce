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
// in-memory decision (one counter) and a Redis one (a counter and a
// histogram).
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
	ctx := context.Background()
	for _, p := range providers {
		for _, home := range []string{"keyed", "redis"} {
			e := events[home]
			obs, err := otellimit.NewObserver(p.mp())
			if err != nil {
				b.Fatal(err)
			}
			obs.Observe(ctx, e)
			b.Run(p.name+"/"+home+"/serial", func(b *testing.B) {
				b.ReportAllocs()
				for b.Loop() {
					obs.Observe(ctx, e)
				}
			})
			b.Run(p.name+"/"+home+"/parallel", func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						obs.Observe(ctx, e)
					}
				})
			})
		}
	}
}
