package redislimit

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// TestClients runs a burst on every kind of client New accepts that a
// test can start: *redis.Client (with and without ContextTimeoutEnabled),
// *redis.Ring and the client redis.NewUniversalClient returns. The
// ClusterClient has its own tests.
func TestClients(t *testing.T) {
	t.Parallel()
	srv, _ := startRedis(t)
	clients := map[string]redis.UniversalClient{
		"client":            redis.NewClient(&redis.Options{Addr: srv.Addr()}),
		"client/ctxtimeout": redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true}),
		"ring":              redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": srv.Addr()}}),
		"universal":         redis.NewUniversalClient(&redis.UniversalOptions{Addrs: []string{srv.Addr()}}),
	}
	for name, c := range clients {
		t.Cleanup(func() { _ = c.Close() })
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := mustNew(t, c, ratelimit.SlidingLogPolicy(10, time.Hour), WithPrefix(uniquePrefix(t)))
			for i := range 12 {
				d, err := l.AllowN(bg(), "k", 1)
				if err != nil || d.Allowed != (i < 10) {
					t.Fatalf("AllowN #%d = %+v, %v; want allowed only for the first 10", i+1, d, err)
				}
			}
		})
	}
}

// TestSlidingLogMemory reports the Redis memory a sliding log key takes
// per entry (one per distinct microsecond with events), and checks that it
// stays compact.
func TestSlidingLogMemory(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	mock := fakeclock.NewManual(mockStart)
	for _, entries := range []int{100, 10_000} {
		l := mustNew(t, c, ratelimit.SlidingLogPolicy(entries, time.Hour), WithClock(mock), WithPrefix(uniquePrefix(t)))
		for range entries {
			mock.Add(time.Millisecond)
			if d, err := l.AllowN(bg(), "k", 1); !d.Allowed || err != nil {
				t.Fatalf("AllowN = %+v, %v", d, err)
			}
		}
		bytes, err := c.MemoryUsage(bg(), l.Key("k")).Result()
		if err != nil {
			t.Fatal(err)
		}
		per := float64(bytes) / float64(entries)
		t.Logf("sliding log with %d entries: %d bytes, %.1f bytes/entry", entries, bytes, per)
		// A sorted set: compact (listpack) up to 128 entries, then a skip
		// list, which buys O(log entries) decisions.
		if want := map[int]float64{100: 20, 10_000: 140}[entries]; per > want {
			t.Errorf("%.1f bytes per entry, want at most %.0f", per, want)
		}
	}
}

// TestKeyMemory reports the Redis memory one key's state takes per
// algorithm (MEMORY USAGE, which counts the key name and overhead too).
func TestKeyMemory(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for _, p := range []ratelimit.Policy{
		ratelimit.TokenBucketPolicy(ratelimit.Per(10, time.Second), 100),
		ratelimit.LeakyBucketPolicy(100, time.Millisecond),
		ratelimit.FixedWindowPolicy(100, time.Hour),
		ratelimit.SlidingLogPolicy(100, time.Hour),
		ratelimit.SlidingCounterPolicy(100, time.Hour),
	} {
		l := mustNew(t, c, p, WithPrefix("m:"))
		if _, err := l.AllowN(bg(), "user42", 1); err != nil {
			t.Fatal(err)
		}
		bytes, err := c.MemoryUsage(bg(), l.Key("user42")).Result()
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%-15v %s: %d bytes", p.Algorithm, l.Key("user42"), bytes)
		// The name takes 38 bytes with a 2-byte prefix: code,
		// fingerprint and the 22-character digest of the key.
		if bytes > 240 {
			t.Errorf("%v: %d bytes for one key, want at most 240", p.Algorithm, bytes)
		}
	}
}
