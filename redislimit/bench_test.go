package redislimit

import (
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
)

// benchPolicies are the policies the benchmarks run: limits high enough
// that most decisions admit, as in a healthy service.
func benchPolicies() []ratelimit.Policy {
	return []ratelimit.Policy{
		ratelimit.TokenBucketPolicy(1_000_000, 1_000_000, time.Second),
		ratelimit.LeakyBucketPolicy(1_000_000, time.Microsecond),
		ratelimit.FixedWindowPolicy(1_000_000_000, time.Second),
		ratelimit.SlidingLogPolicy(1_000_000_000, time.Second),
		ratelimit.SlidingCounterPolicy(1_000_000, time.Second),
	}
}

// BenchmarkAllowN measures one decision per iteration on one Redis:
// serial (latency, next to a PING of the same client in the same run) and
// with 64 goroutines (throughput, reported as decisions/s), each over
// 1000 keys.
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
	b.Run("ping/parallel", func(b *testing.B) {
		b.SetParallelism(64 / max(1, runtimeProcs()))
		b.RunParallel(func(pb *testing.PB) {
			ctx := bg()
			for pb.Next() {
				if err := c.Ping(ctx).Err(); err != nil {
					b.Error(err)
					return
				}
			}
		})
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "ops/s")
	})
	for _, p := range benchPolicies() {
		l := mustNew(b, c, p, WithPrefix(uniquePrefix(b)), WithTimeout(time.Second))
		b.Run(p.Algorithm.String()+"/serial", func(b *testing.B) {
			ctx := bg()
			i := 0
			for b.Loop() {
				if _, err := l.AllowN(ctx, keys[i%len(keys)], 1); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
		b.Run(p.Algorithm.String()+"/parallel", func(b *testing.B) {
			benchParallel(b, l, keys)
		})
	}
}

func runtimeProcs() int { return runtimeGOMAXPROCS() }

// benchParallel runs AllowN from 64 goroutines.
func benchParallel(b *testing.B, l *Limiter, keys []string) {
	var next atomic.Int64
	var errs atomic.Int64
	b.SetParallelism(max(64/runtimeProcs(), 1))
	b.RunParallel(func(pb *testing.PB) {
		ctx := bg()
		i := int(next.Add(7919))
		for pb.Next() {
			if _, err := l.AllowN(ctx, keys[i%len(keys)], 1); err != nil {
				errs.Add(1)
			}
			i++
		}
	})
	if n := errs.Load(); n > 0 {
		b.Fatalf("%d errors", n)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
}

var _ = fmt.Sprint
var _ redis.UniversalClient
