package benchmarks

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/redislimit"
)

// BenchmarkRedisLease measures one hot key on Redis decided by 64
// goroutines of one process (issue 14), in one run. Names are
// BenchmarkRedisLease/<library>/hotkey-64g:
//
//	ratelimit-<algorithm>-lease  redislimit.Limiter.AllowN with WithLeases
//	                             (default LeaseConfig): decisions served
//	                             in memory from leases of about 10ms of
//	                             traffic, one script per lease
//	ratelimit-<algorithm>        the same limiter without leases: one
//	                             script per decision (pipelined)
//	redis_rate                   github.com/go-redis/redis_rate/v10
//	                             Limiter.Allow, one EVALSHA per call
//
// for the five leasable algorithms (the sliding log cannot be leased).
// Every limiter admits nearly every call (buckets and windows of 1e8 to
// 1e9 a second, a daily quota of 2^50); admit/op reports the share
// admitted, cpu-ns/op the CPU time per decision, decisions/s the
// throughput. Each library runs once per round, one after another, on a
// fresh key; leases are given back after each.
//
// It uses the Redis at REDIS_ADDR, or starts redis-server as
// BenchmarkRedis does, and skips when there is neither.
func BenchmarkRedisLease(b *testing.B) {
	addr := benchRedisAddr(b)
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = c.Close() })
	prefix := fmt.Sprintf("benchlease:%d:", time.Now().UnixNano())

	type entry struct {
		name    string
		call    func(ctx context.Context) (bool, error)
		release func()
	}
	var entries []entry
	for _, p := range []ratelimit.Policy{
		ratelimit.TokenBucketPolicy(ratelimit.Per(100_000_000, time.Second), 100_000_000),
		ratelimit.LeakyBucketPolicy(100_000_000, time.Microsecond),
		ratelimit.FixedWindowPolicy(1_000_000_000, time.Second),
		ratelimit.SlidingCounterPolicy(1_000_000_000, time.Second),
		ratelimit.QuotaPolicy(1<<50, ratelimit.Calendar{Unit: ratelimit.Daily}),
	} {
		for _, lease := range []bool{true, false} {
			name := "ratelimit-" + p.Algorithm.String()
			opts := []redislimit.Option{redislimit.WithPrefix(prefix + name + ":"), redislimit.WithTimeout(time.Second)}
			if lease {
				name += "-lease"
				opts = append(opts, redislimit.WithLeases(redislimit.LeaseConfig{}))
			}
			l, err := redislimit.New(c, p, opts...)
			if err != nil {
				b.Fatal(err)
			}
			entries = append(entries, entry{
				name: name,
				call: func(ctx context.Context) (bool, error) {
					d, err := l.AllowN(ctx, "hot", 1)
					return d.Allowed, err
				},
				release: func() { _ = l.ReleaseLeases(context.Background()) },
			})
		}
	}
	rr := redis_rate.NewLimiter(c)
	rrLimit := redis_rate.Limit{Rate: 1_000_000_000, Burst: 1_000_000_000, Period: time.Second}
	entries = append(entries, entry{name: "redis_rate", call: func(ctx context.Context) (bool, error) {
		r, err := rr.Allow(ctx, prefix+"rr:hot", rrLimit)
		return err == nil && r.Allowed > 0, err
	}, release: func() {}})

	for _, e := range entries {
		b.Run(e.name+"/hotkey-64g", func(b *testing.B) {
			var errs, admitted atomic.Int64
			var first atomic.Value
			b.ReportAllocs()
			b.SetParallelism(max(redisBenchWorkers/runtime.GOMAXPROCS(0), 1))
			cpu0 := cpuTime()
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				ok := int64(0)
				for pb.Next() {
					allowed, err := e.call(ctx)
					if err != nil && errs.Add(1) == 1 {
						first.Store(err)
					}
					if allowed {
						ok++
					}
				}
				admitted.Add(ok)
			})
			cpu1 := cpuTime()
			e.release()
			if n := errs.Load(); n > 0 {
				b.Fatalf("%d errors, first: %v", n, first.Load())
			}
			if cpu0 >= 0 {
				b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
			}
			b.ReportMetric(float64(admitted.Load())/float64(b.N), "admit/op")
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}
