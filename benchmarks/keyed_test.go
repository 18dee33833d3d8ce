package benchmarks

import (
	"context"
	"fmt"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/benchkeys"
	"github.com/sethvargo/go-limiter/memorystore"
	ulule "github.com/ulule/limiter/v3"
	ululemem "github.com/ulule/limiter/v3/drivers/store/memory"
	"golang.org/x/time/rate"
)

// BenchmarkKeyed compares per-key limiting in memory, in the shapes of the
// root package's BenchmarkKeyed, serial and parallel, on the real clock.
// Names are BenchmarkKeyed/<library>/<mode>/{serial,parallel}, the modes:
//
//	hotkey    one key, the same string constant on every call
//	1Mkeys    round-robin over 1,000,000 distinct 10-byte keys ("k000004711")
//	          in the order they were inserted, passing the very strings the
//	          limiter stored (the old measure: it walks each store in
//	          allocation order and never copies a key's bytes into cache)
//	1Mrandom  real traffic: 1,000,000 distinct keys of 14 to 24 bytes
//	          ("tenant-42/user:004711", internal/testkit/benchkeys) inserted in a
//	          shuffled order, looked up in random order with bytes that are
//	          hot in cache and are not the stored string
//
// and the libraries:
//
//	ratelimit-<algorithm>  this module's Keyed.Allow, all five algorithms
//	sethvargo              github.com/sethvargo/go-limiter memorystore Take
//	ulule                  github.com/ulule/limiter/v3 with its memory store
//	                       (drivers/store/memory), Limiter.Get
//	xtimerate-syncmap      a naive baseline: one golang.org/x/time/rate
//	                       Limiter per key in a sync.Map
//
// In 1Mrandom each goroutine draws the index of its next key from its own
// small generator (benchkeys.Rand: no million-entry index or key slice, which
// would add a cache miss of its own to every lookup and push every ratio
// towards 1) and writes that key's bytes into its own scratch buffer, as a
// server parses a key from a request; choosing and writing a key costs about
// 6 ns (benchkeys.BenchmarkLookupKey), the same for every library. The key
// is passed as a string over the scratch buffer (benchkeys.Buf.Lookup), so
// the lookup allocates nothing that the library does not. That string
// changes with the next lookup, which is sound only because no library keeps
// the string of a key it already holds: ours and ulule copy a key's bytes
// whenever they store one (ulule stores "limiter:"+key), and sethvargo and
// xtimerate-syncmap store the caller's string only on a key's first use, in
// a Go map or sync.Map, and every key looked up was inserted by the fill and
// is not forgotten during the run. After each run the number of keys held is
// checked to be unchanged: ours by Keyed.Len, sethvargo by the length of its
// map (read by reflection), xtimerate-syncmap by a count of its stores;
// ulule cannot tell, and needs no check as it never keeps the caller's
// string.
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
// The 1M-key runs (1Mkeys and 1Mrandom) report bytes/key: the live heap
// after inserting every key into a fresh limiter, minus the live heap
// before, divided by the number of keys (runtime.GC before each reading).
// Each key is inserted as a freshly allocated string, as a server would pass
// one taken from a request, so a library that keeps the caller's string is
// charged for it as one that copies it is; 1Mrandom's keys are longer than
// 1Mkeys' (19 bytes on average, against 10). In parallel mode the limiter is
// filled once and reused for the rounds the benchmark framework runs to size
// b.N.
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
		{"1Mrandom/serial", benchKeyedRandomSerial},
		{"1Mrandom/parallel", benchKeyedRandomParallel},
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
	new  func(tb testing.TB) keyedLimiter
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
		new: func(tb testing.TB) keyedLimiter {
			s, err := memorystore.New(&memorystore.Config{Tokens: 1 << 30, Interval: time.Hour})
			if err != nil {
				tb.Fatal(err)
			}
			ctx := context.Background()
			return keyedLimiter{
				allow: func(key string) bool {
					_, _, _, ok, _ := s.Take(ctx, key)
					return ok
				},
				len:   sethvargoLen(s),
				close: func() { _ = s.Close(ctx) },
			}
		},
	},
	{
		name: "ulule",
		new: func(testing.TB) keyedLimiter {
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
		new: func(testing.TB) keyedLimiter {
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

// sethvargoLen returns a function counting the keys a sethvargo memorystore
// holds: the length of its unexported map "data", read by reflection (only
// between runs, when no Take runs), or -1 if the store is not built that way.
func sethvargoLen(s any) func() int {
	v := reflect.ValueOf(s)
	if v.Kind() == reflect.Pointer {
		v = v.Elem()
	}
	var data reflect.Value
	if v.Kind() == reflect.Struct {
		data = v.FieldByName("data")
	}
	return func() int {
		if data.Kind() != reflect.Map {
			return -1
		}
		return data.Len()
	}
}

// keyedOurs is this module's Keyed limiter running p.
func keyedOurs(p ratelimit.Policy) keyedLib {
	return keyedLib{
		name: "ratelimit-" + p.Algorithm.String(),
		new: func(tb testing.TB) keyedLimiter {
			k, err := ratelimit.NewKeyed(p, ratelimit.WithMaxKeys(2_000_000))
			if err != nil {
				tb.Fatal(err)
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
	f := fillOnce(b, filled, func() *filledKeyed { return fillKeyed(b, lib, keys) })
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
	f := fillOnce(b, filled, func() *filledKeyed { return fillKeyed(b, lib, keys) })
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

// benchKeyedRandomSerial looks up random keys of a limiter holding
// len(keys) keys of internal/testkit/benchkeys, each written into a scratch buffer.
func benchKeyedRandomSerial(b *testing.B, lib keyedLib, keys []string, filled **filledKeyed) {
	n := len(keys)
	f := fillOnce(b, filled, func() *filledKeyed { return fillKeyedRandom(b, lib, n) })
	b.ReportAllocs()
	var buf benchkeys.Buf
	r := benchkeys.NewRand(1)
	admitted := 0
	cpu0 := cpuTime()
	for b.Loop() {
		if f.allow(buf.Lookup(r.Index(uint32(n)))) {
			admitted++
		}
	}
	report(b, admitted, cpu0)
	f.checkHeld(b, lib, n)
}

// benchKeyedRandomParallel is benchKeyedRandomSerial with a generator and a
// scratch buffer per goroutine.
func benchKeyedRandomParallel(b *testing.B, lib keyedLib, keys []string, filled **filledKeyed) {
	n := len(keys)
	f := fillOnce(b, filled, func() *filledKeyed { return fillKeyedRandom(b, lib, n) })
	b.ReportAllocs()
	var seed, admitted atomic.Int64
	cpu0 := cpuTime()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		var buf benchkeys.Buf
		r := benchkeys.NewRand(uint64(seed.Add(1)))
		a := int64(0)
		for pb.Next() {
			if f.allow(buf.Lookup(r.Index(uint32(n)))) {
				a++
			}
		}
		admitted.Add(a)
	})
	report(b, int(admitted.Load()), cpu0)
	f.checkHeld(b, lib, n)
}

// fillOnce returns *filled, filling a limiter with fill first if there is
// none yet, and has bytes/key reported at the end of b's run.
func fillOnce(b *testing.B, filled **filledKeyed, fill func() *filledKeyed) *filledKeyed {
	if *filled == nil {
		*filled = fill()
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

// checkHeld fails b if f, as far as lib can tell, does not hold n keys: a
// lookup stored a key, or a key was forgotten.
func (f *filledKeyed) checkHeld(b *testing.B, lib keyedLib, n int) {
	b.Helper()
	if held := f.len(); held >= 0 && held != n {
		b.Fatalf("%s holds %d keys after the run, want %d", lib.name, held, n)
	}
}

func (f *filledKeyed) close() {
	if f.keyedLimiter.close != nil {
		f.keyedLimiter.close()
	}
}

// fillKeyed returns a fresh limiter of lib holding every key, each admitted
// once, and measures the live heap it takes per key.
func fillKeyed(b *testing.B, lib keyedLib, keys []string) *filledKeyed {
	return fillKeyedWith(b, lib, len(keys), func(yield func(string)) {
		for _, key := range keys {
			// A fresh string, as a server's key taken from a request would be.
			yield(strings.Clone(key))
		}
	})
}

// fillKeyedRandom returns a fresh limiter of lib holding the first n keys of
// internal/testkit/benchkeys, inserted in a shuffled order as freshly allocated
// strings, each admitted once, and measures the live heap it takes per key
// as fillKeyed does.
func fillKeyedRandom(b *testing.B, lib keyedLib, n int) *filledKeyed {
	return fillKeyedWith(b, lib, n, func(yield func(string)) {
		// The order is garbage by the second reading, so it is not counted.
		for _, i := range benchkeys.Shuffled(n, 1) {
			yield(benchkeys.Key(i))
		}
	})
}

// fillKeyedWith returns a fresh limiter of lib holding the n keys that keys
// yields, each admitted once, and the live heap it takes per key.
func fillKeyedWith(b *testing.B, lib keyedLib, n int, keys func(yield func(string))) *filledKeyed {
	b.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	l := lib.new(b)
	keys(func(key string) {
		if !l.allow(key) {
			b.Fatalf("filling: %s denied %q", lib.name, key)
		}
	})
	runtime.GC()
	runtime.ReadMemStats(&after)
	f := &filledKeyed{
		keyedLimiter: l,
		perKey:       float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n),
	}
	if held := l.len(); held >= 0 && held != n {
		f.close()
		b.Fatalf("%s holds %d keys after filling, want %d", lib.name, held, n)
	}
	return f
}

// TestKeyedLen checks that every library whose key count the random modes
// rely on can tell it: a sethvargo store that changed its internals would
// otherwise turn the check after each run off unseen.
func TestKeyedLen(t *testing.T) {
	for _, lib := range keyedLibs {
		if lib.name == "ulule" { // copies every key: nothing to check
			continue
		}
		l := lib.new(t)
		for _, k := range []string{"a", "b", "a"} {
			l.allow(k)
		}
		if got := l.len(); got != 2 {
			t.Errorf("%s: len() = %d after using keys a, b, a; want 2", lib.name, got)
		}
		if l.close != nil {
			l.close()
		}
	}
}
