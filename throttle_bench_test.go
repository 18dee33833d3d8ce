package ratelimit

import (
	"context"
	"sync/atomic"
	"testing"
)

// BenchmarkThrottle measures an Attempt and its Record, on the real clock,
// on one key and on 1,000 keys, serial and parallel.
func BenchmarkThrottle(b *testing.B) {
	keys := benchKeys(1000)
	for _, shape := range []struct {
		name string
		keys []string
	}{{"hotkey", keys[:1]}, {"1000keys", keys}} {
		th, err := NewThrottle(ThrottleConfig{})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		b.Run(shape.name+"/serial", func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				k := shape.keys[i%len(shape.keys)]
				if th.Attempt(ctx, k).Allowed {
					th.Record(k, true)
				}
			}
		})
		b.Run(shape.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			var next atomic.Int64
			b.RunParallel(func(pb *testing.PB) {
				i := int(next.Add(1)) * 7919
				for pb.Next() {
					k := shape.keys[i%len(shape.keys)]
					i++
					if th.Attempt(ctx, k).Allowed {
						th.Record(k, true)
					}
				}
			})
		})
	}
}
