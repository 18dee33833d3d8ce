package redislimit

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/require"
)

// A denial stores nothing (AllowN's documentation): on Redis it must not
// write at all, or a flood of denials becomes a flood of replicated
// writes. Neither may a Peek. These tests take every key under a
// limiter's prefix, its DUMP (the serialized value) and its PEXPIRETIME
// (the absolute expiry, which a refreshed TTL would move), before and
// after each denial and each Peek, and demand them equal.

// keyspace returns DUMP and PEXPIRETIME of every key whose name starts
// with prefix.
func keyspace(t *testing.T, c *redis.Client, prefix string) map[string]string {
	t.Helper()
	keys, err := c.Keys(bg(), prefix+"*").Result()
	require.NoError(t, err)
	out := make(map[string]string, len(keys))
	for _, k := range keys {
		dump, err := c.Dump(bg(), k).Result()
		if errors.Is(err, redis.Nil) {
			continue // expired meanwhile: not the script's doing
		}
		require.NoError(t, err)
		at, err := c.Do(bg(), "PEXPIRETIME", k).Int64()
		require.NoError(t, err)
		sum := sha256.Sum256([]byte(dump))
		out[k] = fmt.Sprintf("%d bytes, sha256 %x, expires at %d", len(dump), sum[:6], at)
	}
	return out
}

// TestSlidingLogDenialWritesNothing is the case: a sliding log of
// 5 per 300ms holding three entries, the oldest expired. Before the fix
// the first denied AllowN(3) moved the log's base (a ZADD of its "b"
// member), the second deleted the expired entry.
func TestSlidingLogDenialWritesNothing(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	mock := fakeclock.NewManual(mockStart)
	prefix := uniquePrefix(t)
	l := mustNew(t, c, ratelimit.SlidingLogPolicy(5, 300*time.Millisecond),
		WithClock(mock), WithDenyCache(0), WithPrefix(prefix))
	for _, st := range []struct {
		advance time.Duration
		n       int
	}{{0, 1}, {100 * time.Millisecond, 2}, {100 * time.Millisecond, 2}} {
		mock.Add(st.advance)
		d, err := l.AllowN(bg(), "k", st.n)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	// 350ms after the first entry: it has expired, four events are live.
	mock.Add(150 * time.Millisecond)
	for i := range 3 {
		before := keyspace(t, c, prefix)
		d, err := l.AllowN(bg(), "k", 3)
		require.NoError(t, err)
		require.False(t, d.Allowed, "denial %d", i)
		require.Equal(t, 1, d.Remaining, "denial %d", i)
		require.Equal(t, 50*time.Millisecond, d.RetryAfter, "denial %d", i)
		require.Equal(t, before, keyspace(t, c, prefix), "denial %d wrote", i)
		_, err = l.Peek(bg(), "k", 3)
		require.NoError(t, err)
		require.Equal(t, before, keyspace(t, c, prefix), "Peek after denial %d wrote", i)
	}
	// The admission that follows still sees what the log holds.
	d, err := l.AllowN(bg(), "k", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.Equal(t, 0, d.Remaining)
}

// TestDenialsWriteNothing runs random traffic on every algorithm (the
// sliding log with many entries and expiries, the quota across a day
// boundary), a blocked key and a never-admissible n, and checks that no
// denial and no Peek changes any key, while the decisions stay those of
// the in-memory limiter.
func TestDenialsWriteNothing(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	ps := append(policies(),
		ratelimit.SlidingLogPolicy(40, 50*time.Millisecond),
		ratelimit.QuotaPolicy(6, ratelimit.Calendar{Unit: ratelimit.Daily, Location: mustZone("America/New_York")}))
	for _, p := range ps {
		t.Run(name(p), func(t *testing.T) {
			t.Parallel()
			mock := fakeclock.NewManual(mockStart)
			mem, err := ratelimit.NewKeyed(p, ratelimit.WithClock(mock))
			require.NoError(t, err)
			prefix := uniquePrefix(t)
			rl := mustNew(t, c, p, WithClock(mock), WithPrefix(prefix))
			rng := newRand(uint64(p.Limit))
			window := p.WindowAt(time.Time{}) // a quota's is set below
			if p.Algorithm == ratelimit.QuotaAlgorithm {
				window = 24 * time.Hour
			}
			denials := 0
			for i := range 300 {
				mock.Add(time.Duration(rng.Int64N(int64(window/8) + 1)).Truncate(time.Microsecond))
				key := fmt.Sprint("k", rng.IntN(2))
				n := 1 + rng.IntN(p.Limit)
				switch rng.IntN(20) {
				case 0:
					n = p.Limit + 1 // never admissible: denied with RetryNever
				case 1:
					require.NoError(t, mem.Block(bg(), key, window/3))
					require.NoError(t, rl.Block(bg(), key, window/3))
				}
				before := keyspace(t, c, prefix)
				want, werr := mem.AllowN(bg(), key, n)
				got, err := rl.AllowN(bg(), key, n)
				require.Equal(t, werr, err, "step %d", i)
				require.Equal(t, roundDecision(want), got, "step %d: AllowN(%d) on %s", i, n, key)
				if !got.Allowed {
					denials++
					require.Equal(t, before, keyspace(t, c, prefix), "step %d: a denied AllowN(%d) wrote", i, n)
				}
				before = keyspace(t, c, prefix)
				_, err = rl.Peek(bg(), key, 1+rng.IntN(p.Limit))
				require.NoError(t, err)
				require.Equal(t, before, keyspace(t, c, prefix), "step %d: a Peek wrote", i)
			}
			require.Greater(t, denials, 20, "too few denials to test")
		})
	}
}
