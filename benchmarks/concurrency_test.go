package benchmarks

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/rlkit/ratelimit"
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
