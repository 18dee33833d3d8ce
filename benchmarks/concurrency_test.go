package benchmarks

import (
	"context"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/redislimit"
	"golang.org/x/sync/semaphore"
)

// BenchmarkConcurrency compares a concurrency limit in memory on one key:
// acquire one permit without waiting, then release it, serial and parallel
// (b.RunParallel; run with -cpu=1,2). Names are
// BenchmarkConcurrency/<library>/<mode>:
//
//	xsync-semaphore        golang.org/x/sync/semaphore Weighted.TryAcquire(1) + Release(1)
//	ratelimit-concurrency  this module's Concurrency.TryAcquire(ctx, key, 1) + Permit.Release
//
// Both allow 1000 permits, more than the goroutines that hold one at a
// time, so every acquisition is admitted (admit/op says so). The semaphore
// is one process and one key; ours is looked up by key on every call (one
// constant key here, so both serialize on one mutex in parallel), takes a
// context and returns a Decision (what is in flight and the limit) and a
// Permit that cannot release another holder's permits: that is the work
// the target (at most 1.2x the semaphore's ns/op, 0 allocs/op)
// allows for. Ours has no Observer, as in BenchmarkAllow.
//
// As in BenchmarkAllow, modes are the outer loop and libraries the inner
// one, so the numbers compared are taken seconds apart; run.sh adds rounds.
func BenchmarkConcurrency(b *testing.B) {
	for _, m := range []struct {
		name  string
		bench func(*testing.B, acquireFunc)
	}{
		{"serial", benchAcquireSerial},
		{"parallel", benchAcquireParallel},
	} {
		for _, p := range concurrencyPeers {
			b.Run(p.name+"/"+m.name, func(b *testing.B) { m.bench(b, p.new(b)) })
		}
	}
}

// concurrencyLimit is the permits each limiter allows.
const concurrencyLimit = 1000

// An acquireFunc acquires one permit, releases it and reports whether it
// was admitted.
type acquireFunc func() bool

// concurrencyPeers lists the limiters compared; new builds a fresh one.
var concurrencyPeers = []struct {
	name string
	new  func(b *testing.B) acquireFunc
}{
	{
		name: "xsync-semaphore",
		new: func(*testing.B) acquireFunc {
			s := semaphore.NewWeighted(concurrencyLimit)
			return func() bool {
				if !s.TryAcquire(1) {
					return false
				}
				s.Release(1)
				return true
			}
		},
	},
	{
		name: "ratelimit-concurrency",
		new: func(b *testing.B) acquireFunc {
			c, err := ratelimit.NewConcurrency(concurrencyLimit)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			return func() bool {
				p, d, err := c.TryAcquire(ctx, "tenant-42", 1)
				if err != nil || !d.Allowed {
					return false
				}
				p.Release()
				return true
			}
		},
	},
}

func benchAcquireSerial(b *testing.B, acquire acquireFunc) {
	acquire() // the first call stores the key
	b.ReportAllocs()
	admitted := 0
	cpu0 := cpuTime()
	for b.Loop() {
		if acquire() {
			admitted++
		}
	}
	report(b, admitted, cpu0)
}

func benchAcquireParallel(b *testing.B, acquire acquireFunc) {
	acquire()
	b.ReportAllocs()
	var admitted atomic.Int64
	cpu0 := cpuTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		n := int64(0)
		for pb.Next() {
			if acquire() {
				n++
			}
		}
		admitted.Add(n)
	})
	report(b, int(admitted.Load()), cpu0)
}

// BenchmarkRedisConcurrency compares a concurrency limit on Redis with one
// rate-limit decision on the same Redis and client, in one run: acquire one
// permit without waiting and release it (two scripts), against one
// token-bucket AllowN and one redis_rate Allow. No Go peer holds a
// concurrency limit on Redis that the module proxy serves
// (mennanov/limiters' ConcurrentBuffer is refused there), so the
// comparison is with a decision. Names are
// BenchmarkRedisConcurrency/<library>/serial; keys cycle over 1000 clients.
func BenchmarkRedisConcurrency(b *testing.B) {
	addr := benchRedisAddr(b)
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = c.Close() })
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "user" + strconv.Itoa(i)
	}
	prefix := fmt.Sprintf("bench:%d:", time.Now().UnixNano())
	rr := redis_rate.NewLimiter(c)
	rrLimit := redis_rate.Limit{Rate: 1_000_000, Burst: 1_000_000, Period: time.Second}
	tb, err := redislimit.New(c, ratelimit.TokenBucketPolicy(ratelimit.Per(1_000_000, time.Second), 1_000_000),
		redislimit.WithPrefix(prefix), redislimit.WithTimeout(time.Second))
	if err != nil {
		b.Fatal(err)
	}
	cc, err := redislimit.NewConcurrency(c, 1_000_000, redislimit.WithPrefix(prefix), redislimit.WithTimeout(time.Second))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cc.Close() })
	for _, e := range []struct {
		name string
		call func(ctx context.Context, key string) error
	}{
		{"redis_rate", func(ctx context.Context, key string) error {
			_, err := rr.Allow(ctx, prefix+"rr:"+key, rrLimit)
			return err
		}},
		{"ratelimit-tokenbucket", func(ctx context.Context, key string) error {
			_, err := tb.AllowN(ctx, key, 1)
			return err
		}},
		{"ratelimit-concurrency", func(ctx context.Context, key string) error {
			p, d, err := cc.TryAcquire(ctx, key, 1)
			if err == nil && !d.Allowed {
				err = fmt.Errorf("denied: %+v", d)
			}
			p.Release()
			return err
		}},
	} {
		b.Run(e.name+"/serial", func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				if err := e.call(ctx, keys[i%len(keys)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
		})
	}
}
