package redislimit

import (
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlkit/ratelimit"
)

// BenchmarkConcurrencyAcquireRelease measures a concurrency permit on one
// local Redis, TryAcquire then Release (two scripts), next to one
// token-bucket AllowN (one script) on the same client in the same run:
// the goal is acquire+release <= 2.2x the token bucket's
// decision. Keys cycle over 1000 clients; serial is the latency of one
// caller, parallel the throughput of 64 goroutines. Compare the
// sub-benchmarks with benchstat over interleaved -count rounds.
func BenchmarkConcurrencyAcquireRelease(b *testing.B) {
	_, c := startRedis(b)
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "user" + strconv.Itoa(i)
	}
	l := mustNew(b, c, ratelimit.TokenBucketPolicy(ratelimit.Per(1_000_000, time.Second), 1_000_000),
		WithPrefix(uniquePrefix(b)), WithTimeout(time.Second))
	cc := newCC(b, c, 1_000_000, WithTimeout(time.Second))
	b.Run("tokenbucket/serial", func(b *testing.B) {
		ctx := bg()
		i := 0
		for b.Loop() {
			if _, err := l.AllowN(ctx, keys[i%len(keys)], 1); err != nil {
				b.Fatal(err)
			}
			i++
		}
	})
	b.Run("acquirerelease/serial", func(b *testing.B) {
		ctx := bg()
		i := 0
		for b.Loop() {
			p, d, err := cc.TryAcquire(ctx, keys[i%len(keys)], 1)
			if err != nil || !d.Allowed {
				b.Fatal(err, d)
			}
			p.Release()
			i++
		}
	})
	b.Run("tokenbucket/parallel", func(b *testing.B) {
		benchParallel(b, l, keys)
	})
	b.Run("acquirerelease/parallel", func(b *testing.B) {
		var next, errs atomic.Int64
		b.SetParallelism(max(benchWorkers/runtimeGOMAXPROCS(), 1))
		b.RunParallel(func(pb *testing.PB) {
			ctx := bg()
			i := int(next.Add(7919))
			for pb.Next() {
				p, d, err := cc.TryAcquire(ctx, keys[i%len(keys)], 1)
				if err != nil || !d.Allowed {
					errs.Add(1)
				}
				p.Release()
				i++
			}
		})
		if n := errs.Load(); n > 0 {
			b.Fatalf("%d errors", n)
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "permits/s")
	})
}
