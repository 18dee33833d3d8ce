package benchmarks

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/sethvargo/go-limiter/memorystore"
	ulule "github.com/ulule/limiter/v3"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"
)

// BenchmarkKeyed compares per-key limiting in memory, in the shapes of the
// root package's BenchmarkKeyed: one hot key, and round-robin over 1,000,000
// distinct 10-byte keys, serial and parallel, on the real clock. Names are
// BenchmarkKeyed/<library>/{hotkey,1Mkeys}/{serial,parallel}:
//
//	ratelimit-<algorithm>  this module's Keyed.Allow, all five algorithms
//	sethvargo              github.com/sethvargo/go-limiter memorystore Take
//	ulule                  github.com/ulule/limiter/v3 with its memory store
//	                       (drivers/store/memory), Limiter.Get
//	xtimerate-syncmap      a naive baseline: one golang.org/x/time/rate
//	                       Limiter per key in a sync.Map
//
// Every limiter admits (nearly) every call, and no key is forgotten while
// the benchmark runs, so the 1M-key runs really hold and look up a million
// keys. How each is configured for that:
//
//   - ratelimit-*: a Keyed forgets a key only once its state is idle (a full
//     bucket, a passed window), so a key used once must stay non-idle for
//     longer than a run. Token bucket: capacity 2e8, refill one token per 5s
//     (a used key is full again only 5s after its last use; 2e8 is the
//     largest capacity exact arithmetic allows at that rate, ample for a hot
//     key at tens of millions of calls per second). Leaky bucket: capacity
//     2e8, one leak per 10s. Fixed window: 2^30 per day (epoch-aligned, so a
//     day boundary during a run would make keys idle). Sliding counter: 2^30
//     per hour (a key with a count stays non-idle through the next window).
//     Sliding log: 64 per hour, as in the root package: its log grows with
//     every admitted event, so its hot key admits 64 events and is denied
//     after that (admit/op says so).
//   - sethvargo: Tokens 2^30 per Interval of one hour (its bucket refills at
//     whole intervals counted from the key's first use, so none passes
//     during a run), default sweeping (every 6h, keys idle for 12h), default
//     InitialAlloc.
//   - ulule: Rate 2^30 per hour, default store options (prefix "limiter",
//     cleanup every 30s of counters expired, i.e. an hour after first use).
//   - xtimerate-syncmap: rate.Every(5s) with a burst of 2e8, like ours.
//
// The 1M-key runs report bytes/key: the live heap after inserting every key
// into a fresh limiter, minus the live heap before, divided by the number of
// keys (runtime.GC before each reading). Each key is inserted as a freshly
// allocated string, as a server would pass one taken from a request, so a
// library that keeps the caller's string is charged for it as one that
// copies it is. In parallel mode the limiter is filled once and reused for
// the rounds the benchmark framework runs to size b.N.
//
// Each run also reports admit/op (fraction of calls admitted) and cpu-ns/op
// (process CPU time per call; see report in compare_test.go). Modes run
// outer and libraries inner, so compared numbers are taken close together.
func BenchmarkKeyed(b *testing.B) {
	keys := keyedBenchKeys(1_000_000)
	for _, m := range []struct {
		name  string
		bench func(b *testing.B, lib keyedLib, keys []string, filled **filledKeyed)
	}{
		{"hotkey/serial", benchKeyedHotSerial},
		{"hotkey/parallel", benchKeyedHotParallel},
		{"1Mkeys/serial", benchKeyedManySerial},
		{"1Mkeys/parallel", benchKeyedManyParallel},
	} {
		for _, lib := range keyedLibs {
			// filled outlives the calls of one b.Run (RunParallel makes
			// several, with growing b.N) and is released after them.
			var filled *filledKeyed
			b.Run(lib.name+"/"+m.name, func(b *testing.B) { m.bench(b, lib, keys, &filled) })
			if filled != nil {
				filled.close()
			}
		}
	}
}

// keyedBenchKeys returns n distinct 10-byte keys, the root package's.
func keyedBenchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%09d", i)
	}
	return keys
}

// A keyedLib builds fresh per-key limiters of one library.
type keyedLib struct {
	name string
	new  func(b *testing.B) keyedLimiter
}

// keyedLimiter is one per-key limiter under test.
type keyedLimiter struct {
	// allow makes one decision for key and reports whether it admitted.
	allow func(key string) bool
	// len returns the number of keys held, or -1 when the library cannot
	// tell.
	len func() int
	// close releases background goroutines; nil if there are none.
	close func()
}

var keyedLibs = []keyedLib{
	keyedOurs(ratelimit.TokenBucketPolicy(ratelimit.Per(1, 5*time.Second), 200_000_000)),
	keyedOurs(ratelimit.FixedWindowPolicy(1<<30, 24*time.Hour)),
	keyedOurs(ratelimit.SlidingCounterPolicy(1<<30, time.Hour)),
	keyedOurs(ratelimit.SlidingLogPolicy(64, time.Hour)),
	keyedOurs(ratelimit.LeakyBucketPolicy(200_000_000, 10*time.Second)),
	{
		name: "sethvargo",
		new: func(b *testing.B) keyedLimiter {
			s, err := memorystore.New(&memorystore.Config{Tokens: 1 << 30, Interval: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			return keyedLimiter{
				allow: func(key string) bool {
					_, _, _, ok, _ := s.Take(ctx, key)
					return ok
				},
				len:   func() int { return -1 },
				close: func() { _ = s.Close(ctx) },
			}
		},
	},
	{
		name: "ulule",
		new: func(*testing.B) keyedLimiter {
			l := ulule.New(ululemem.NewStore(), ulule.Rate{Period: time.Hour, Limit: 1 << 30})
			ctx := context.Background()
			return keyedLimiter{
				allow: func(key string) bool {
					c, err := l.Get(ctx, key)
					return err == nil && !c.Reached
				},
				len: func() int { return -1 },
			}
		},
	},
	{
		name: "xtimerate-syncmap",
		new: func(*testing.B) keyedLimiter {
			var m sync.Map
			var n atomic.Int64
			return keyedLimiter{
				allow: func(key string) bool {
					v, ok := m.Load(key)
					if !ok {
						var loaded bool
						v, loaded = m.LoadOrStore(key, rate.NewLimiter(rate.Every(5*time.Second), 200_000_000))
						if !loaded {
							n.Add(1)
						}
					}
					return v.(*rate.Limiter).Allow()
				},
				len: func() int { return int(n.Load()) },
			}
		},
	},
}

// keyedOurs is this module's Keyed limiter running p.
func keyedOurs(p ratelimit.Policy) keyedLib {
	return keyedLib{
		name: "ratelimit-" + p.Algorithm.String(),
		new: func(b *testing.B) keyedLimiter {
			k, err := ratelimit.NewKeyed(p, ratelimit.WithMaxKeys(2_000_000))
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			return keyedLimiter{
				allow: func(key string) bool { return k.Allow(ctx, key) },
				len:   k.Len,
			}
		},
	}
}

// newKeyed returns a fresh limiter of lib, closed when b's run ends.
func newKeyed(b *testing.B, lib keyedLib) keyedLimiter {
	l := lib.new(b)
	if l.close != nil {
		b.Cleanup(l.close)
	}
	return l
}

const hotKey = "hot-key-01"

func benchKeyedHotSerial(b *testing.B, lib keyedLib, _ []string, _ **filledKeyed) {
	l := newKeyed(b, lib)
	b.ReportAllocs()
	admitted := 0
	cpu0 := cpuTime()
	for b.Loop() {
		if l.allow(hotKey) {
			admitted++
		}
	}
	report(b, admitted, cpu0)
}

func benchKeyedHotParallel(b *testing.B, lib keyedLib, _ []string, _ **filledKeyed) {
	l := newKeyed(b, lib)
	b.ReportAllocs()
	var admitted atomic.Int64
	cpu0 := cpuTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		n := int64(0)
		for pb.Next() {
			if l.allow(hotKey) {
				n++
			}
		}
		admitted.Add(n)
	})
	report(b, int(admitted.Load()), cpu0)
}

func benchKeyedManySerial(b *testing.B, lib keyedLib, keys []string, filled **filledKeyed) {
	f := fillOnce(b, lib, keys, filled)
	b.ReportAllocs()
	admitted, i := 0, 0
	cpu0 := cpuTime()
	for b.Loop() {
		if f.allow(keys[i]) {
			admitted++
		}
		if i++; i == len(keys) {
			i = 0
		}
	}
	report(b, admitted, cpu0)
}

func benchKeyedManyParallel(b *testing.B, lib keyedLib, keys []string, filled **filledKeyed) {
	f := fillOnce(b, lib, keys, filled)
	b.ReportAllocs()
	var next, admitted atomic.Int64
	cpu0 := cpuTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := int(next.Add(1) * 7919)
		n := int64(0)
		for pb.Next() {
			if f.allow(keys[i%len(keys)]) {
				n++
			}
			i++
		}
		admitted.Add(n)
	})
	report(b, int(admitted.Load()), cpu0)
}

// fillOnce returns *filled, filling a limiter of lib first if there is none
// yet, and has bytes/key reported at the end of b's run.
func fillOnce(b *testing.B, lib keyedLib, keys []string, filled **filledKeyed) *filledKeyed {
	if *filled == nil {
		*filled = fillKeyed(b, lib, keys)
	}
	f := *filled
	// Reported after the timed loop: b.Loop's first call and b.ResetTimer
	// delete metrics; cleanups run after each call of the benchmark.
	b.Cleanup(func() { b.ReportMetric(f.perKey, "bytes/key") })
	return f
}

// filledKeyed is a limiter holding every benchmark key.
type filledKeyed struct {
	keyedLimiter
	perKey float64 // live heap per key after filling
}

func (f *filledKeyed) close() {
	if f.keyedLimiter.close != nil {
		f.keyedLimiter.close()
	}
}

// fillKeyed returns a fresh limiter of lib holding every key, each admitted
// once, and measures the live heap it takes per key.
func fillKeyed(b *testing.B, lib keyedLib, keys []string) *filledKeyed {
	b.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	l := lib.new(b)
	for _, key := range keys {
		// A fresh string, as a server's key taken from a request would be.
		if !l.allow(strings.Clone(key)) {
			b.Fatalf("filling: %s denied %q", lib.name, key)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	f := &filledKeyed{
		keyedLimiter: l,
		perKey:       float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(len(keys)),
	}
	if held := l.len(); held >= 0 && held != len(keys) {
		f.close()
		b.Fatalf("%s holds %d keys after filling, want %d", lib.name, held, len(keys))
	}
	return f
}
