package redislimit

import (
	"context"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
)

// benchPolicies are the policies the benchmarks run: limits high enough
// that nearly every decision admits, as in a healthy service.
func benchPolicies() []ratelimit.Policy {
	return []ratelimit.Policy{
		ratelimit.TokenBucketPolicy(ratelimit.Per(1_000_000, time.Second), 1_000_000),
		ratelimit.LeakyBucketPolicy(1_000_000, time.Microsecond),
		ratelimit.FixedWindowPolicy(1_000_000_000, time.Second),
		ratelimit.SlidingLogPolicy(1_000_000_000, time.Second),
		ratelimit.SlidingCounterPolicy(1_000_000, time.Second),
	}
}

// benchWorkers is the number of goroutines of the parallel benchmarks.
const benchWorkers = 64

// BenchmarkAllowN measures decisions on one local Redis, next to PING on
// the same client in the same run:
//
//   - serial: one caller, latency per decision (compare with ping/serial,
//     and with noopscript/serial, an EVALSHA of "return 1": the floor of
//     any script), and the server's cost per script run (server-µs/op,
//     from INFO commandstats);
//   - parallel: 64 goroutines, throughput as decisions/s (compare with
//     ping/parallel's ops/s).
//
// Keys cycle over 1000 clients. The client has ContextTimeoutEnabled, as
// the package recommends.
func BenchmarkAllowN(b *testing.B) {
	_, c := startRedis(b)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "user" + strconv.Itoa(i)
	}
	b.Run("ping/serial", func(b *testing.B) {
		ctx := bg()
		for b.Loop() {
			if err := c.Ping(ctx).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	// The floor of any script: EVALSHA of "return 1" with one key.
	noop := redis.NewScript("return 1")
	b.Run("noopscript/serial", func(b *testing.B) {
		ctx := bg()
		for b.Loop() {
			if err := noop.Run(ctx, c, []string{"k"}).Err(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ping/parallel", func(b *testing.B) {
		var errs atomic.Int64
		b.SetParallelism(max(benchWorkers/runtimeGOMAXPROCS(), 1))
		b.RunParallel(func(pb *testing.PB) {
			ctx := bg()
			for pb.Next() {
				if err := c.Ping(ctx).Err(); err != nil {
					errs.Add(1)
				}
			}
		})
		if errs.Load() > 0 {
			b.Fatalf("%d errors", errs.Load())
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	})
	for _, p := range benchPolicies() {
		l := mustNew(b, c, p, WithPrefix(uniquePrefix(b)), WithTimeout(time.Second))
		b.Run(p.Algorithm.String()+"/serial", func(b *testing.B) {
			ctx := bg()
			c.ConfigResetStat(ctx)
			i := 0
			for b.Loop() {
				if _, err := l.AllowN(ctx, keys[i%len(keys)], 1); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.StopTimer()
			if us := usecPerCall(b, c, "evalsha"); us > 0 {
				b.ReportMetric(us, "server-µs/op")
			}
		})
		b.Run(p.Algorithm.String()+"/parallel", func(b *testing.B) {
			benchParallel(b, l, keys)
		})
	}
}

// benchParallel runs AllowN from benchWorkers goroutines.
func benchParallel(b *testing.B, l *Limiter, keys []string) {
	var next, errs atomic.Int64
	var first atomic.Value
	b.SetParallelism(max(benchWorkers/runtimeGOMAXPROCS(), 1))
	b.RunParallel(func(pb *testing.PB) {
		ctx := bg()
		i := int(next.Add(7919))
		for pb.Next() {
			if _, err := l.AllowN(ctx, keys[i%len(keys)], 1); err != nil && errs.Add(1) == 1 {
				first.Store(err)
			}
			i++
		}
	})
	if n := errs.Load(); n > 0 {
		b.Fatalf("%d errors, first: %v", n, first.Load())
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

// usecPerCall returns INFO commandstats' usec_per_call of cmd, or 0.
func usecPerCall(b *testing.B, c redis.UniversalClient, cmd string) float64 {
	info, err := c.Info(bg(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":"); ok {
			for _, f := range strings.Split(rest, ",") {
				if v, ok := strings.CutPrefix(f, "usec_per_call="); ok {
					us, _ := strconv.ParseFloat(v, 64)
					return us
				}
			}
		}
	}
	return 0
}

// BenchmarkDenyCacheHit measures a decision answered by the deny cache, the
// one path without a round trip, where the limiter's own overhead shows:
// one key denied for an hour, asked again and again, without an observer
// and with one (which counts the events), in the same run.
func BenchmarkDenyCacheHit(b *testing.B) {
	_, c := startRedis(b)
	var seen atomic.Int64
	obs := ratelimit.ObserverFunc(func(context.Context, ratelimit.Event) { seen.Add(1) })
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"noobserver", nil},
		{"observer", []Option{WithObserver(obs), WithName("bench")}},
	} {
		l := mustNew(b, c, ratelimit.FixedWindowPolicy(1, time.Hour), append(tc.opts, WithPrefix(uniquePrefix(b)))...)
		ctx := bg()
		if _, err := l.AllowN(ctx, "k", 1); err != nil {
			b.Fatal(err)
		}
		if d, _ := l.AllowN(ctx, "k", 1); d.Allowed {
			b.Fatal("second call admitted")
		}
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if d, _ := l.AllowN(ctx, "k", 1); d.Allowed {
					b.Fatal("admitted")
				}
			}
		})
	}
}

// BenchmarkObserverRoundTrip measures the observer's cost on decisions
// that go to Redis (a lone caller, token bucket), without and with one.
func BenchmarkObserverRoundTrip(b *testing.B) {
	_, c := startRedis(b)
	var seen atomic.Int64
	obs := ratelimit.ObserverFunc(func(context.Context, ratelimit.Event) { seen.Add(1) })
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "user" + strconv.Itoa(i)
	}
	p := ratelimit.TokenBucketPolicy(ratelimit.Per(1_000_000, time.Second), 1_000_000)
	for _, tc := range []struct {
		name string
		opts []Option
	}{
		{"noobserver", nil},
		{"observer", []Option{WithObserver(obs), WithName("bench")}},
	} {
		l := mustNew(b, c, p, append(tc.opts, WithPrefix(uniquePrefix(b)), WithTimeout(time.Second))...)
		b.Run(tc.name, func(b *testing.B) {
			b.ReportAllocs()
			ctx := bg()
			i := 0
			for b.Loop() {
				if _, err := l.AllowN(ctx, keys[i%len(keys)], 1); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
