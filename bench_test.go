package ratelimit

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// The benchmarks run every algorithm on the real clock, which is what users
// run, in two steady states:
//
//   - serial, parallel: admitting. The policy is 100M events/s (burst or
//     limit 10,000 per 100µs), several times what one limiter can serve:
//     every call reads the clock and takes a mutex, tens of ns, and parallel
//     callers serialize on that mutex. So every call is admitted and
//     recorded: the state changes on every call, windows roll over every few
//     thousand calls and the sliding log evicts as fast as it appends. This
//     is a well-provisioned limiter in a healthy service, where Allow almost
//     always says yes. The sliding log's memory is bounded by its limit (at
//     most 10,000 entries, 160 KB); in practice it holds one entry per call
//     in the last 100µs, a few thousand.
//   - denied-serial, denied-parallel: saturated. The policy is 1M events/s
//     (1000 per 1ms), well below the offered load, so about 1000 calls per
//     ms are admitted as quota frees up and the rest are denied, each with
//     its RetryAfter computed: at 50-100ns a call, 90-95% of calls. This is
//     a client hammering a limiter it has exhausted. The sliding log holds
//     at most 1000 entries.
//
// Each benchmark reports admit/op, the fraction of calls admitted, so the
// mix is measured rather than assumed.
//
// When the benchmark is descheduled for most of a window, the sliding log
// drains, its ring buffer shrinking on the way down, and grows back after.
// Buffers of 64 entries and more come back from internal/ring's pools, so
// the round trip allocates only its few small buffers, well below 1 B/op
// (it was 2-5 B/op, and 14% of the parallel ns/op, before the pools).
// Steady traffic allocates nothing, which TestAllowDoesNotAllocate checks
// exactly.
//
// Call cost does not depend on how Allow is reached: a direct call, a call
// through the Limiter interface and a call through a closure measured the
// same to within noise, so the table below holds Limiters.

// benchAlgos is the benchmark and allocation-test table. admit and denied
// build a fresh limiter in the admitting and the saturated configuration.
var benchAlgos = []struct {
	name   string
	admit  func(opts ...Option) (Limiter, error)
	denied func(opts ...Option) (Limiter, error)
}{
	{
		name: "tokenbucket",
		admit: func(o ...Option) (Limiter, error) {
			return NewTokenBucket(Per(10_000, 100*time.Microsecond), 10_000, o...)
		},
		denied: func(o ...Option) (Limiter, error) { return NewTokenBucket(Per(1000, time.Millisecond), 1000, o...) },
	},
	{
		name:   "leakybucket",
		admit:  func(o ...Option) (Limiter, error) { return NewLeakyBucket(10_000, 10*time.Nanosecond, o...) },
		denied: func(o ...Option) (Limiter, error) { return NewLeakyBucket(1000, time.Microsecond, o...) },
	},
	{
		name:   "fixedwindow",
		admit:  func(o ...Option) (Limiter, error) { return NewFixedWindow(10_000, 100*time.Microsecond, o...) },
		denied: func(o ...Option) (Limiter, error) { return NewFixedWindow(1000, time.Millisecond, o...) },
	},
	{
		name:   "slidinglog",
		admit:  func(o ...Option) (Limiter, error) { return NewSlidingLog(10_000, 100*time.Microsecond, o...) },
		denied: func(o ...Option) (Limiter, error) { return NewSlidingLog(1000, time.Millisecond, o...) },
	},
	{
		name:   "slidingcounter",
		admit:  func(o ...Option) (Limiter, error) { return NewSlidingCounter(10_000, 100*time.Microsecond, o...) },
		denied: func(o ...Option) (Limiter, error) { return NewSlidingCounter(1000, time.Millisecond, o...) },
	},
}

// benchWarmup is how long a fresh limiter is driven before timing starts:
// two of the longest window, so that windows have rolled over and the
// sliding log has grown to its steady size.
const benchWarmup = 2 * time.Millisecond

// BenchmarkAllow measures Allow for every algorithm, serial and parallel,
// admitting and saturated; see the comment at the top of this file.
func BenchmarkAllow(b *testing.B) {
	for _, a := range benchAlgos {
		b.Run(a.name+"/serial", func(b *testing.B) { benchAllowSerial(b, a.admit) })
		b.Run(a.name+"/parallel", func(b *testing.B) { benchAllowParallel(b, a.admit) })
		b.Run(a.name+"/denied-serial", func(b *testing.B) { benchAllowSerial(b, a.denied) })
		b.Run(a.name+"/denied-parallel", func(b *testing.B) { benchAllowParallel(b, a.denied) })
	}
}

// benchNew builds a limiter on the real clock and drives it for benchWarmup.
func benchNew(b *testing.B, newLimiter func(...Option) (Limiter, error)) Limiter {
	b.Helper()
	l, err := newLimiter()
	if err != nil {
		b.Fatal(err)
	}
	for start := time.Now(); time.Since(start) < benchWarmup; {
		l.Allow()
	}
	return l
}

func benchAllowSerial(b *testing.B, newLimiter func(...Option) (Limiter, error)) {
	l := benchNew(b, newLimiter)
	b.ReportAllocs()
	admitted := 0
	b.ResetTimer()
	for range b.N {
		if l.Allow() {
			admitted++
		}
	}
	b.ReportMetric(float64(admitted)/float64(b.N), "admit/op")
}

func benchAllowParallel(b *testing.B, newLimiter func(...Option) (Limiter, error)) {
	l := benchNew(b, newLimiter)
	b.ReportAllocs()
	var admitted atomic.Int64
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		n := int64(0)
		for pb.Next() {
			if l.Allow() {
				n++
			}
		}
		admitted.Add(n)
	})
	b.ReportMetric(float64(admitted.Load())/float64(b.N), "admit/op")
}

// benchStepClock is a Clock whose Now advances by step on every call, so a
// limiter driven by it reaches an exact, repeatable steady state. It is not
// safe for concurrent use, and its Timer must not be called.
type benchStepClock struct {
	now  time.Time
	step time.Duration
}

func (c *benchStepClock) Now() time.Time {
	c.now = c.now.Add(c.step)
	return c.now
}

func (c *benchStepClock) After(time.Duration) <-chan time.Time {
	panic("ratelimit: benchStepClock.After called; it only serves Allow")
}

// TestAllowDoesNotAllocate checks that Allow allocates nothing in the two
// steady states that BenchmarkAllow measures. Time steps by a fixed 37ns a
// call (about the real cost of one Allow) so that the steady state is exact:
// in the admitting configuration every call is admitted and the sliding log
// holds a constant ~2700 entries; in the saturated one about 96% of calls
// are denied. A warm-up of several windows comes first, because a sliding
// log allocates while it grows to its steady size.
//
// It does not call t.Parallel: testing.AllocsPerRun counts the allocations
// of the whole process, so no other test may run meanwhile.
func TestAllowDoesNotAllocate(t *testing.T) {
	const (
		step   = 37 * time.Nanosecond
		warmup = 4 * time.Millisecond / step // four of the longest window
		calls  = 20_000
	)
	for _, a := range benchAlgos {
		for _, cfg := range []struct {
			name       string
			newLimiter func(...Option) (Limiter, error)
			minAdmit   float64 // bounds on the fraction of calls admitted, to
			maxAdmit   float64 // check that the intended path was measured
		}{
			{"admit", a.admit, 1, 1},
			{"denied", a.denied, 0.01, 0.05},
		} {
			t.Run(a.name+"/"+cfg.name, func(t *testing.T) {
				clk := &benchStepClock{now: time.Unix(1_700_000_000, 0), step: step}
				l, err := cfg.newLimiter(WithClock(clk))
				if err != nil {
					t.Fatal(err)
				}
				for range warmup {
					l.Allow()
				}
				// One run of many calls: AllocsPerRun divides the count by
				// the number of runs in integers, which would hide up to
				// runs-1 allocations; this way the count is exact.
				admitted := 0
				allocs := testing.AllocsPerRun(1, func() {
					admitted = 0
					for range calls {
						if l.Allow() {
							admitted++
						}
					}
				})
				if allocs != 0 {
					t.Errorf("%d steady-state Allow calls allocated %v times, want 0", calls, allocs)
				}
				if frac := float64(admitted) / calls; frac < cfg.minAdmit || frac > cfg.maxAdmit {
					t.Errorf("admitted %.4f of calls, want between %v and %v", frac, cfg.minAdmit, cfg.maxAdmit)
				}
			})
		}
	}
}

// BenchmarkObserver measures what an Observer costs on the admitting path:
// BenchmarkAllow's serial configuration and BenchmarkKeyed's hot key, each
// with no Observer and with one that does nothing (so the figure is the
// limiter's part: two real-clock readings for Latency and the call).
func BenchmarkObserver(b *testing.B) {
	obs := ObserverFunc(func(context.Context, Event) {})
	for _, a := range benchAlgos {
		observed := func(o ...Option) (Limiter, error) { return a.admit(append(o, WithObserver(obs))...) }
		b.Run(a.name+"/single/none", func(b *testing.B) { benchAllowSerial(b, a.admit) })
		b.Run(a.name+"/single/observer", func(b *testing.B) { benchAllowSerial(b, observed) })
	}
	ctx := context.Background()
	for _, p := range keyedBenchPolicies {
		for _, o := range []struct {
			name string
			opts []Option
		}{{"none", nil}, {"observer", []Option{WithObserver(obs)}}} {
			b.Run(p.Algorithm.String()+"/keyed/"+o.name, func(b *testing.B) {
				k, err := NewKeyed(p, o.opts...)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					_, _ = k.AllowN(ctx, "hot-key-01", 1)
				}
			})
		}
	}
}
