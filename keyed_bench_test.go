package ratelimit

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlkit/ratelimit/internal/testkit/benchkeys"
)

// keyedBenchPolicies are the policies of the keyed benchmarks: limits high
// enough that traffic is mostly admitted, and slow enough that a used key is
// not idle (and so not reclaimed) while the benchmark runs, so that the
// 1M-key runs really hold a million keys. The sliding log's 64 per hour
// keeps its per-key log small; once a key has 64 events it is denied.
var keyedBenchPolicies = []Policy{
	TokenBucketPolicy(Per(1, time.Minute), 100_000),
	LeakyBucketPolicy(1000, time.Hour),
	FixedWindowPolicy(1<<30, time.Hour),
	SlidingLogPolicy(64, time.Hour),
	SlidingCounterPolicy(1<<30, time.Hour),
	QuotaPolicy(1<<30, Calendar{Unit: Monthly}),
}

// benchKeys returns n distinct 10-byte keys.
func benchKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("k%09d", i)
	}
	return keys
}

// BenchmarkKeyed measures Keyed.AllowN, serial and parallel, on the real
// clock, in three shapes:
//
//   - hotkey: one key;
//   - 1Mkeys: round-robin over 1,000,000 distinct 10-byte keys, in the order
//     they were inserted, passing the very strings of the keys slice;
//   - 1Mrandom: the shape of real traffic. 1,000,000 distinct keys of 14 to
//     24 bytes (internal/testkit/benchkeys) are inserted in a shuffled order as fresh
//     strings, then looked up in random order: each goroutine draws an index
//     from its own small generator and writes that key into its own scratch
//     buffer, so the key's bytes are hot in cache and are not the string the
//     limiter holds, as with a key just parsed from a request. The key is
//     passed as a string over the scratch buffer (no allocation), which is
//     sound because every key looked up is already held and Keyed copies a
//     key when it inserts one anyway; the number of keys held is checked
//     after the run. Choosing and writing a key costs about 6 ns
//     (benchkeys.BenchmarkLookupKey).
//
// The 1M-key runs report bytes/key: live heap after inserting every key,
// divided by the number of keys. The benchmarks module runs the same shapes
// against other libraries.
func BenchmarkKeyed(b *testing.B) {
	keys := benchKeys(1_000_000)
	for _, p := range keyedBenchPolicies {
		b.Run(p.Algorithm.String(), func(b *testing.B) {
			b.Run("hotkey/serial", func(b *testing.B) {
				k := mustKeyed(b, p)
				ctx := context.Background()
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					_, _ = k.AllowN(ctx, "hot-key-01", 1)
				}
			})
			b.Run("hotkey/parallel", func(b *testing.B) {
				k := mustKeyed(b, p)
				ctx := context.Background()
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						_, _ = k.AllowN(ctx, "hot-key-01", 1)
					}
				})
			})
			b.Run("1Mkeys/serial", func(b *testing.B) {
				k := fillKeyed(b, p, keys)
				ctx := context.Background()
				b.ReportAllocs()
				i := 0
				b.ResetTimer()
				for range b.N {
					_, _ = k.AllowN(ctx, keys[i], 1)
					if i++; i == len(keys) {
						i = 0
					}
				}
			})
			b.Run("1Mkeys/parallel", func(b *testing.B) {
				k := fillKeyed(b, p, keys)
				ctx := context.Background()
				var next atomic.Int64
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					i := int(next.Add(1) * 7919)
					for pb.Next() {
						_, _ = k.AllowN(ctx, keys[i%len(keys)], 1)
						i++
					}
				})
			})
			b.Run("1Mrandom/serial", func(b *testing.B) {
				k := fillKeyedRandom(b, p, len(keys))
				ctx := context.Background()
				var buf benchkeys.Buf
				r := benchkeys.NewRand(1)
				n := uint32(len(keys))
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					_, _ = k.AllowN(ctx, buf.Lookup(r.Index(n)), 1)
				}
				b.StopTimer()
				checkHeld(b, k, len(keys))
			})
			b.Run("1Mrandom/parallel", func(b *testing.B) {
				k := fillKeyedRandom(b, p, len(keys))
				ctx := context.Background()
				var seed atomic.Uint64
				n := uint32(len(keys))
				b.ReportAllocs()
				b.ResetTimer()
				b.RunParallel(func(pb *testing.PB) {
					var buf benchkeys.Buf
					r := benchkeys.NewRand(seed.Add(1))
					for pb.Next() {
						_, _ = k.AllowN(ctx, buf.Lookup(r.Index(n)), 1)
					}
				})
				b.StopTimer()
				checkHeld(b, k, len(keys))
			})
		})
	}
}

func mustKeyed(b *testing.B, p Policy) *Keyed {
	b.Helper()
	k, err := NewKeyed(p, WithMaxKeys(2_000_000))
	if err != nil {
		b.Fatal(err)
	}
	return k
}

// fillKeyed returns a Keyed limiter holding every key, and reports the heap
// it takes per key.
func fillKeyed(b *testing.B, p Policy, keys []string) *Keyed {
	return fillKeyedWith(b, p, len(keys), func(yield func(string)) {
		for _, key := range keys {
			yield(key)
		}
	})
}

// fillKeyedRandom returns a Keyed limiter holding the first n keys of
// internal/testkit/benchkeys, inserted in a shuffled order as fresh strings, and
// reports the heap it takes per key.
func fillKeyedRandom(b *testing.B, p Policy, n int) *Keyed {
	return fillKeyedWith(b, p, n, func(yield func(string)) {
		// The order is garbage by the second reading, so it is not counted.
		for _, i := range benchkeys.Shuffled(n, 1) {
			yield(benchkeys.Key(i))
		}
	})
}

// fillKeyedWith returns a Keyed limiter holding the n keys that keys
// yields, and reports the live heap they take per key (after the timed
// loop: b.Loop's first call deletes metrics).
func fillKeyedWith(b *testing.B, p Policy, n int, keys func(yield func(string))) *Keyed {
	b.Helper()
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	k := mustKeyed(b, p)
	ctx := context.Background()
	keys(func(key string) {
		if d, err := k.AllowN(ctx, key, 1); err != nil || !d.Allowed {
			b.Fatalf("filling: AllowN(%q) = %+v, %v", key, d, err)
		}
	})
	runtime.GC()
	runtime.ReadMemStats(&after)
	perKey := float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / float64(n)
	checkHeld(b, k, n)
	b.Cleanup(func() { b.ReportMetric(perKey, "bytes/key") })
	return k
}

// checkHeld fails b unless k holds n keys.
func checkHeld(b *testing.B, k *Keyed, n int) {
	b.Helper()
	if held := k.Len(); held != n {
		b.Fatalf("holds %d keys, want %d", held, n)
	}
}

// BenchmarkAllowAll measures AllowAll over two in-memory limits, the
// atomic path, with every request admitted.
func BenchmarkAllowAll(b *testing.B) {
	a, err := NewKeyed(TokenBucketPolicy(Per(1<<30, time.Second), 1<<30))
	if err != nil {
		b.Fatal(err)
	}
	c, err := NewKeyed(FixedWindowPolicy(1<<30, time.Hour))
	if err != nil {
		b.Fatal(err)
	}
	dims := []Dimension{{Name: "a", Limiter: a, Key: "k1"}, {Name: "b", Limiter: c, Key: "k2"}}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		_, _ = AllowAll(ctx, 1, dims...)
	}
}

// BenchmarkReserve measures a reservation and its settlement against the
// AllowN they stand for, on one key of a token bucket that admits
// everything: "allow" is AllowN, "reserve+settle" ReserveN then Settle
// below the estimate, and "ReserveAll/2" the same over two dimensions
// (requests with their own N, and tokens), against "AllowAll/2".
func BenchmarkReserve(b *testing.B) {
	tokens, err := NewKeyed(TokenBucketPolicy(Per(1<<30, time.Second), 1<<30))
	if err != nil {
		b.Fatal(err)
	}
	requests, err := NewKeyed(TokenBucketPolicy(Per(1<<30, time.Second), 1<<30))
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	dims := []Dimension{{Name: "requests", Limiter: requests, Key: "k", N: 1}, {Name: "tokens", Limiter: tokens, Key: "k"}}
	b.Run("allow", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_, _ = tokens.AllowN(ctx, "k", 100)
		}
	})
	b.Run("reserve+settle", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			r, _ := tokens.ReserveN(ctx, "k", 100, time.Minute)
			_ = r.Settle(ctx, 60)
		}
	})
	b.Run("AllowAll/2", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			_, _ = AllowAll(ctx, 100, dims...)
		}
	})
	b.Run("ReserveAll/2", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			r, _ := ReserveAll(ctx, 100, time.Minute, dims...)
			_ = r.Settle(ctx, 60)
		}
	})
}
