package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// BenchmarkAdaptive measures one request's overhead, Acquire and then
// Success, on the real clock, when not shedding (the default
// configuration: a few requests in flight against a limit of 20 and
// more), serial and parallel; shed-serial and shed-parallel measure a
// shed Acquire (a limit of 1, held).
func BenchmarkAdaptive(b *testing.B) {
	ctx := context.Background()
	admit := func(b *testing.B) *Adaptive {
		a, err := NewAdaptive(AdaptiveConfig{})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		return a
	}
	shed := func(b *testing.B) *Adaptive {
		a, err := NewAdaptive(AdaptiveConfig{Initial: 1, Max: 1})
		if err != nil {
			b.Fatal(err)
		}
		if _, d := a.Acquire(ctx, PriorityDefault); !d.Allowed {
			b.Fatal("the first Acquire was shed")
		}
		b.ReportAllocs()
		return a
	}
	b.Run("serial", func(b *testing.B) {
		a := admit(b)
		for range b.N {
			f, _ := a.Acquire(ctx, PriorityDefault)
			f.Success()
		}
	})
	b.Run("parallel", func(b *testing.B) {
		a := admit(b)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				f, _ := a.Acquire(ctx, PriorityDefault)
				f.Success()
			}
		})
	})
	b.Run("shed-serial", func(b *testing.B) {
		a := shed(b)
		for range b.N {
			a.Acquire(ctx, PriorityDefault)
		}
	})
	b.Run("shed-parallel", func(b *testing.B) {
		a := shed(b)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				a.Acquire(ctx, PriorityDefault)
			}
		})
	})
}

// TestAdaptiveDoesNotAllocate counts the allocations of 20,000 requests,
// Acquire then Success, over many windows (a manual clock moved 50µs a
// request), in the steady state: none. Not under the race detector, whose
// sync.Pool drops a quarter of what is put back.
func TestAdaptiveDoesNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("sync.Pool drops items under the race detector")
	}
	clk := fakeclock.NewManual(time.Unix(1_700_000_000, 0))
	a, err := NewAdaptive(AdaptiveConfig{}, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	run := func(n int) {
		for range n {
			f, d := a.Acquire(ctx, PriorityDefault)
			if !d.Allowed {
				t.Fatal("shed")
			}
			clk.Add(50 * time.Microsecond)
			f.Success()
		}
	}
	run(1000)
	before := a.core.probes // guarded by a.mu; nothing else runs
	allocs := testing.AllocsPerRun(1, func() { run(20_000) })
	if allocs != 0 {
		t.Errorf("20,000 requests allocated %v times, want 0", allocs)
	}
	if a.core.probes == before && a.core.baseline == 0 {
		t.Errorf("no window closed: the test measured nothing")
	}
}
