package ratelimit_test

import (
	"context"
	"testing"

	"github.com/rlkit/ratelimit"
)

// BenchmarkConcurrency: one TryAcquire and its Release of one permit, on
// one key (the peer comparison with golang.org/x/sync/semaphore is in
// benchmarks/).
func BenchmarkConcurrency(b *testing.B) {
	ctx := context.Background()
	b.Run("serial", func(b *testing.B) {
		c, _ := ratelimit.NewConcurrency(1 << 20)
		b.ReportAllocs()
		for range b.N {
			p, _, _ := c.TryAcquire(ctx, "k", 1)
			p.Release()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		c, _ := ratelimit.NewConcurrency(1 << 20)
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				p, _, _ := c.TryAcquire(ctx, "k", 1)
				p.Release()
			}
		})
	})
}
