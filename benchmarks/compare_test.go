package benchmarks

import (
	"sync/atomic"
	"testing"
	"time"

	juju "github.com/juju/ratelimit"
	"github.com/rlkit/ratelimit"
	uber "go.uber.org/ratelimit"
	"golang.org/x/time/rate"
)

// BenchmarkAllow compares the cost of one non-blocking admission decision
// across libraries, on the real clock, serial and parallel (b.RunParallel;
// run with -cpu=1,2). Names are BenchmarkAllow/<library>/<mode>:
//
//	xtimerate              golang.org/x/time/rate   Limiter.Allow
//	juju                   github.com/juju/ratelimit Bucket.TakeAvailable(1)
//	uber                   go.uber.org/ratelimit    Limiter.Take (blocking; see below)
//	ratelimit-<algorithm>  this module              Allow, all five algorithms
//
// Every limiter gets one of two policies, the same as in the root package's
// bench_test.go:
//
//   - serial, parallel: admitting. 100M events/s with a burst (capacity,
//     limit per window) of 10,000: 10,000 per 100µs. That is several times
//     what one limiter can serve (tens of ns a call, and parallel callers
//     serialize on it), so every call is admitted and the state changes on
//     every call. x/time/rate gets rate.Limit(1e8) rather than rate.Inf,
//     because Inf short-cuts all the arithmetic.
//   - denied-serial, denied-parallel: saturated. 1M events/s with a burst of
//     1000 (1000 per 1ms). About 1000 calls per ms are admitted and the rest
//     are denied: at 50-100ns a call, 90-95% of calls.
//
// uber's Take is not an Allow: it never refuses, it sleeps until the caller's
// turn. At 100M/s it allots 10ns per call and keeps 10 calls of slack, so it
// would sleep only if calls came faster than one per 10ns on average, which
// no caller here can (one clock read alone costs more). So it never sleeps
// (measured: Take costs the same at 1e8/s, at 1e9/s, WithoutSlack, and as
// NewUnlimited, which only reads the clock), and the benchmark measures its
// bookkeeping, the same work Allow does. At a
// saturating rate it would measure its sleeps, so it has no denied variant.
//
// Each benchmark reports admit/op, the fraction of calls admitted, so the
// mix is measured rather than assumed (uber's is 1 by construction), and
// cpu-ns/op, CPU time per call, which unlike ns/op holds up when other
// processes load the machine (see report).
//
// The loop runs every library in one mode before the next mode, so that the
// numbers compared are taken seconds apart, not minutes: on a shared machine
// the load changes over a run. run.sh adds rounds of -count=1 for the same
// reason.
func BenchmarkAllow(b *testing.B) {
	for _, m := range []struct {
		name   string
		denied bool
		bench  func(*testing.B, allowFunc)
	}{
		{"serial", false, benchSerial},
		{"parallel", false, benchParallel},
		{"denied-serial", true, benchSerial},
		{"denied-parallel", true, benchParallel},
	} {
		for _, p := range peers {
			newLimiter := p.admit
			if m.denied {
				newLimiter = p.denied
			}
			if newLimiter == nil {
				continue
			}
			b.Run(p.name+"/"+m.name, func(b *testing.B) { m.bench(b, newLimiter()) })
		}
	}
}

// An allowFunc makes one admission decision and reports whether it admitted.
// Calling through a func value costs the same as a direct call to within
// noise (measured in the root package), and every library pays it alike.
type allowFunc func() bool

// peers lists every limiter compared. admit and denied build a fresh limiter
// with the admitting and the saturated policy; denied is nil when the
// library cannot refuse.
var peers = []struct {
	name          string
	admit, denied func() allowFunc
}{
	{
		name: "xtimerate",
		admit: func() allowFunc {
			l := rate.NewLimiter(rate.Limit(1e8), 10_000)
			return l.Allow
		},
		denied: func() allowFunc {
			l := rate.NewLimiter(rate.Limit(1e6), 1000)
			return l.Allow
		},
	},
	{
		name: "juju",
		admit: func() allowFunc {
			l := juju.NewBucketWithRate(1e8, 10_000)
			return func() bool { return l.TakeAvailable(1) == 1 }
		},
		denied: func() allowFunc {
			l := juju.NewBucketWithRate(1e6, 1000)
			return func() bool { return l.TakeAvailable(1) == 1 }
		},
	},
	{
		name: "uber",
		admit: func() allowFunc {
			l := uber.New(100_000_000) // per second, default slack 10
			return func() bool { l.Take(); return true }
		},
	},
	{
		name: "ratelimit-tokenbucket",
		admit: func() allowFunc {
			return ours(ratelimit.NewTokenBucket(ratelimit.Per(10_000, 100*time.Microsecond), 10_000))
		},
		denied: func() allowFunc { return ours(ratelimit.NewTokenBucket(ratelimit.Per(1000, time.Millisecond), 1000)) },
	},
	{
		name:   "ratelimit-leakybucket",
		admit:  func() allowFunc { return ours(ratelimit.NewLeakyBucket(10_000, 10*time.Nanosecond)) },
		denied: func() allowFunc { return ours(ratelimit.NewLeakyBucket(1000, time.Microsecond)) },
	},
	{
		name:   "ratelimit-fixedwindow",
		admit:  func() allowFunc { return ours(ratelimit.NewFixedWindow(10_000, 100*time.Microsecond)) },
		denied: func() allowFunc { return ours(ratelimit.NewFixedWindow(1000, time.Millisecond)) },
	},
	{
		name:   "ratelimit-slidinglog",
		admit:  func() allowFunc { return ours(ratelimit.NewSlidingLog(10_000, 100*time.Microsecond)) },
		denied: func() allowFunc { return ours(ratelimit.NewSlidingLog(1000, time.Millisecond)) },
	},
	{
		name:   "ratelimit-slidingcounter",
		admit:  func() allowFunc { return ours(ratelimit.NewSlidingCounter(10_000, 100*time.Microsecond)) },
		denied: func() allowFunc { return ours(ratelimit.NewSlidingCounter(1000, time.Millisecond)) },
	},
}

// ours adapts one of this module's constructors: ours(NewX(...)).
func ours(l ratelimit.Limiter, err error) allowFunc {
	if err != nil {
		panic(err)
	}
	return l.Allow
}

// benchWarmup is how long a fresh limiter is driven before timing starts:
// two of the longest window, so that windows have rolled over and the
// sliding log has grown to its steady size.
const benchWarmup = 2 * time.Millisecond

func warm(allow allowFunc) {
	for start := time.Now(); time.Since(start) < benchWarmup; {
		allow()
	}
}

func benchSerial(b *testing.B, allow allowFunc) {
	warm(allow)
	b.ReportAllocs()
	admitted := 0
	cpu0 := cpuTime()
	for b.Loop() {
		if allow() {
			admitted++
		}
	}
	report(b, admitted, cpu0)
}

func benchParallel(b *testing.B, allow allowFunc) {
	warm(allow)
	b.ReportAllocs()
	var admitted atomic.Int64
	cpu0 := cpuTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		n := int64(0)
		for pb.Next() {
			if allow() {
				n++
			}
		}
		admitted.Add(n)
	})
	report(b, int(admitted.Load()), cpu0)
}

// report adds admit/op and cpu-ns/op to the result. cpu-ns/op is the
// process's CPU time (user + system, all threads) over the timed loop per
// call. Unlike ns/op, which is wall time, it does not count the time the
// benchmark spent descheduled, so it stays meaningful when other processes
// load the machine; with -cpu=2 in parallel it is about twice ns/op.
func report(b *testing.B, admitted int, cpu0 time.Duration) {
	cpu1 := cpuTime()
	b.ReportMetric(float64(admitted)/float64(b.N), "admit/op")
	if cpu0 >= 0 && cpu1 >= 0 {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
	}
}
