package redislimit

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/require"
)

// The adversarial tests of the Lua side: corrupt and foreign state at the
// key every script touches, for every algorithm, must read as fresh state:
// never a script error (which the failure policy would turn into unlimited
// admission), never a lockout, and every key written keeps a bounded TTL.

// corruption is one way to spoil a limiter key.
type corruption struct {
	name string
	set  func(t *testing.T, c *redis.Client, key string)
}

func setString(v string) func(*testing.T, *redis.Client, string) {
	return func(t *testing.T, c *redis.Client, key string) {
		t.Helper()
		require.NoError(t, c.Set(bg(), key, v, 0).Err())
	}
}

// corruptions returns the corruptions tried on every algorithm: garbage,
// every other Redis type, wrong field counts, and numbers that are
// negative, fractional, non-finite or absurd.
func corruptions() []corruption {
	cs := []corruption{
		{"hash", func(t *testing.T, c *redis.Client, key string) {
			require.NoError(t, c.HSet(bg(), key, "f", "1").Err())
		}},
		{"list", func(t *testing.T, c *redis.Client, key string) {
			require.NoError(t, c.RPush(bg(), key, "5", "1700000000000000", "1").Err())
		}},
		{"set", func(t *testing.T, c *redis.Client, key string) {
			require.NoError(t, c.SAdd(bg(), key, "1", "2").Err())
		}},
		{"zset", func(t *testing.T, c *redis.Client, key string) {
			require.NoError(t, c.ZAdd(bg(), key, redis.Z{Score: 1, Member: "x"}, redis.Z{Score: 2, Member: "1"}).Err())
		}},
		{"zsetHeaderOnly", func(t *testing.T, c *redis.Client, key string) {
			require.NoError(t, c.ZAdd(bg(), key, redis.Z{Score: 5, Member: "b"}).Err())
		}},
		{"zsetBadMembers", func(t *testing.T, c *redis.Client, key string) {
			require.NoError(t, c.ZAdd(bg(), key, redis.Z{Score: 0, Member: "b"}, redis.Z{Score: 3, Member: "garbage"}, redis.Z{Score: 4, Member: "1e999"}).Err())
		}},
		{"zsetHugeCount", func(t *testing.T, c *redis.Client, key string) {
			require.NoError(t, c.ZAdd(bg(), key, redis.Z{Score: 0, Member: "b"}, redis.Z{Score: 1e15, Member: "1"}).Err())
		}},
		{"stream", func(t *testing.T, c *redis.Client, key string) {
			require.NoError(t, c.XAdd(bg(), &redis.XAddArgs{Stream: key, Values: []any{"a", "1"}}).Err())
		}},
	}
	for _, v := range []string{
		"garbage", "", " ", "1", "1 2 3 4", "1  2", "a b", "1 b", "1 2 c",
		"-5", "-5 -3", "-5 -3 -1", "1.5 2.5", "1.5 2.5 3.5", "nan nan", "inf inf inf", "1e400 1 1",
		"0x10 1", "99999999999999999999 5", "5 99999999999999999999", "5 5 99999999999999999999",
		"9007199254740993 9007199254740993", "9999999999999999 3 3", "0 -1", "0 0 -1",
		strings.Repeat("9", 400), "\x00\xff", "1 2\n",
	} {
		cs = append(cs, corruption{fmt.Sprintf("string%q", v), setString(v)})
	}
	return cs
}

// restart makes the reference a fresh in-memory limiter on the same clock:
// what the Redis limiter must behave as after its state was spoiled.
func (p *pair) restart(t *testing.T, pol ratelimit.Policy) {
	t.Helper()
	mem, err := ratelimit.NewKeyed(pol, ratelimit.WithClock(p.mock))
	require.NoError(t, err)
	p.mem = mem
}

// idleBound is the policy's longest meaningful idle time: a TTL past it
// (plus the client-time slack and clock skew allowance) keeps state nobody
// needs, and a lockout past it is a lockout the policy cannot mean.
func idleBound(p ratelimit.Policy) time.Duration {
	switch p.Algorithm {
	case ratelimit.SlidingCounterAlgorithm:
		return 2 * p.Period
	}
	return p.WindowAt(time.Now())
}

// requireTTL checks that key, when present, has a TTL within the bound.
func requireTTL(t *testing.T, c *redis.Client, key string, p ratelimit.Policy) {
	t.Helper()
	ttl, err := c.PTTL(bg(), key).Result()
	require.NoError(t, err)
	if ttl == -2*time.Nanosecond || ttl == -2*time.Millisecond {
		return // no key
	}
	require.Positive(t, ttl, "key %s has no TTL", key)
	idle := idleBound(p)
	bound := idle + min(idle, time.Minute) + time.Minute + time.Millisecond
	require.LessOrEqual(t, ttl, bound, "TTL of %s beyond %v", key, bound)
}

// TestCorruptStateIsFresh spoils the key of every algorithm in every way,
// both before any traffic and in the middle of it, and demands decisions
// identical to a fresh in-memory limiter, no error, and a TTL on the key.
func TestCorruptStateIsFresh(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for _, p := range policies() {
		t.Run(name(p), func(t *testing.T) {
			t.Parallel()
			for _, cr := range corruptions() {
				for _, mid := range []bool{false, true} {
					pr := newPair(t, c, p)
					steps := timeline(p)
					if mid {
						for i, st := range steps[:p.Limit/2+1] {
							pr.run(t, i, st)
						}
					}
					key := pr.rl.Key("a")
					require.NoError(t, c.Del(bg(), key).Err())
					cr.set(t, c, key)
					pr.restart(t, p)
					// The first calls on the spoiled key: a peek, a refund
					// (nothing to refund in a fresh state), then the timeline.
					pr.run(t, -2, step{key: "a", kind: 'p', n: 1})
					pr.run(t, -1, step{key: "a", kind: 'r', n: 1})
					for i, st := range steps {
						pr.run(t, i, st)
						requireTTL(t, c, key, p)
						if t.Failed() {
							t.Fatalf("corruption %s (mid=%v)", cr.name, mid)
						}
					}
				}
			}
		})
	}
}

// TestCorruptStateFailOpenNotUnlimited is the reproduction: a
// limit of 5 behind FailOpen with garbage at the key must admit 5, not 20,
// and report no error.
func TestCorruptStateFailOpenNotUnlimited(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for _, p := range []ratelimit.Policy{
		ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 5),
		ratelimit.LeakyBucketPolicy(5, time.Hour),
		ratelimit.FixedWindowPolicy(5, time.Hour),
		ratelimit.SlidingLogPolicy(5, time.Hour),
		ratelimit.SlidingCounterPolicy(5, time.Hour),
	} {
		for _, v := range []string{"garbage", "hash"} {
			l := mustNew(t, c, p, WithPrefix(uniquePrefix(t)), WithDenyCache(0))
			key := l.Key("k")
			if v == "hash" {
				require.NoError(t, c.HSet(bg(), key, "x", "y").Err())
			} else {
				require.NoError(t, c.Set(bg(), key, v, 0).Err())
			}
			admitted := 0
			for range 20 {
				d, err := l.AllowN(bg(), "k", 1)
				require.NoError(t, err, "%v with %s", p, v)
				if d.Allowed {
					admitted++
				}
			}
			require.Equal(t, 5, admitted, "%v with %s", p, v)
			requireTTL(t, c, key, p)
		}
	}
}

// TestForeignStateNoLockout writes state with a short window (or a small
// bucket) at time T and then runs a long-window policy of the same
// algorithm on that key: the second policy must start fresh (as if the key
// were empty) and leave a TTL within its own idle time, not treat the
// foreign window index as time that ran backwards.
func TestForeignStateNoLockout(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	pairs := [][2]ratelimit.Policy{
		{ratelimit.FixedWindowPolicy(5, time.Second), ratelimit.FixedWindowPolicy(5, time.Hour)},
		{ratelimit.FixedWindowPolicy(5, time.Microsecond), ratelimit.FixedWindowPolicy(5, 24*time.Hour)},
		{ratelimit.SlidingCounterPolicy(5, time.Second), ratelimit.SlidingCounterPolicy(5, time.Hour)},
		{ratelimit.SlidingCounterPolicy(5, time.Microsecond), ratelimit.SlidingCounterPolicy(5, 24*time.Hour)},
		{ratelimit.SlidingLogPolicy(5, time.Hour), ratelimit.SlidingLogPolicy(3, time.Second)},
		{ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 5), ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Second), 3)},
		{ratelimit.LeakyBucketPolicy(50, time.Hour), ratelimit.LeakyBucketPolicy(5, time.Second)},
	}
	for _, pp := range pairs {
		t.Run(name(pp[0])+"_then_"+name(pp[1]), func(t *testing.T) {
			mock := fakeclock.NewManual(mockStart)
			a := mustNew(t, c, pp[0], WithClock(mock), WithDenyCache(0), WithPrefix(uniquePrefix(t)))
			b := mustNew(t, c, pp[1], WithClock(mock), WithDenyCache(0), WithPrefix(uniquePrefix(t)))
			for range pp[0].Limit {
				d, err := a.AllowN(bg(), "k", 1)
				require.NoError(t, err)
				require.True(t, d.Allowed)
			}
			// Hand a's state to b's key, as a shared prefix (or any key
			// layout mistake) would; without a TTL, as a forged key has.
			dump, err := c.Dump(bg(), a.Key("k")).Result()
			require.NoError(t, err)
			require.NoError(t, c.RestoreReplace(bg(), b.Key("k"), 0, dump).Err())
			mem, err := ratelimit.NewKeyed(pp[1], ratelimit.WithClock(mock))
			require.NoError(t, err)
			for i := range pp[1].Limit + 2 {
				w, err := mem.AllowN(bg(), "k", 1)
				require.NoError(t, err)
				want := roundDecision(w)
				got, err := b.AllowN(bg(), "k", 1)
				require.NoError(t, err)
				require.Equal(t, want, got, "call %d", i)
				requireTTL(t, c, b.Key("k"), pp[1])
			}
		})
	}
}

// TestFutureStateBounded writes state far in the future (as a clock that
// stepped a day forward, or a forged key, would) and checks that every
// algorithm treats it as fresh instead of holding quota until then.
func TestFutureStateBounded(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for _, p := range policies() {
		t.Run(name(p), func(t *testing.T) {
			t.Parallel()
			pr := newPair(t, c, p)
			// Fill the key a day ahead, then step back to now.
			day := 24 * time.Hour
			pr.mock.Add(day)
			for range p.Limit {
				_, err := pr.rl.AllowN(bg(), "a", 1)
				require.NoError(t, err)
			}
			pr.mock.Add(-day)
			for i, st := range timeline(p) {
				pr.run(t, i, st)
				requireTTL(t, c, pr.rl.Key("a"), p)
			}
		})
	}
}

// TestSmallBackwardStepHolds keeps the existing handling of a clock that
// steps back a little: the quota used at the later time stays used.
func TestSmallBackwardStepHolds(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for _, p := range []ratelimit.Policy{
		ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Second), 5),
		ratelimit.LeakyBucketPolicy(5, time.Second),
		ratelimit.FixedWindowPolicy(5, time.Second),
		ratelimit.SlidingLogPolicy(5, time.Second),
		ratelimit.SlidingCounterPolicy(5, time.Second),
	} {
		mock := fakeclock.NewManual(mockStart)
		l := mustNew(t, c, p, WithClock(mock), WithDenyCache(0), WithPrefix(uniquePrefix(t)))
		mock.Set(mock.Now().Truncate(time.Second).Add(time.Second)) // a window boundary
		for range 5 {
			d, err := l.AllowN(bg(), "k", 1)
			require.NoError(t, err)
			require.True(t, d.Allowed)
		}
		mock.Add(-100 * time.Millisecond)
		d, err := l.AllowN(bg(), "k", 1)
		require.NoError(t, err)
		require.False(t, d.Allowed, "%v: a 100ms backward step minted quota", p)
		require.LessOrEqual(t, d.RetryAfter, 2*time.Second+100*time.Millisecond, "%v", p)
	}
}

// TestCompileExactBounds checks that New accepts the largest policies whose
// arithmetic Lua doubles do exactly, that they count exactly at the
// boundary, and that one above is rejected with an error naming the
// argument and the bound.
func TestCompileExactBounds(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	const b52 = 1 << 52
	ok := []ratelimit.Policy{
		ratelimit.FixedWindowPolicy(b52, time.Hour),
		ratelimit.SlidingLogPolicy(b52, time.Hour),
	}
	bad := []struct {
		p    ratelimit.Policy
		want string
	}{
		{ratelimit.FixedWindowPolicy(b52+1, time.Hour), "Limit"},
		{ratelimit.FixedWindowPolicy(1<<53, time.Hour), "Limit"},
		{ratelimit.SlidingLogPolicy(b52+1, time.Hour), "Limit"},
		{ratelimit.SlidingLogPolicy(1<<53, time.Hour), "Limit"},
		{ratelimit.SlidingCounterPolicy(1, (b52+1)*time.Microsecond), "Period"},
		{ratelimit.LeakyBucketPolicy(2, (b52/2+1)*time.Microsecond), "Limit"},
		{ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Microsecond), b52), "Limit"},
	}
	for _, p := range ok {
		if p.Validate() != nil {
			continue
		}
		_, err := scriptsFor(p, "New")
		require.NoError(t, err, "%v", p)
	}
	for _, b := range bad {
		if b.p.Validate() != nil {
			continue // rejected by the core already
		}
		_, err := New(c, b.p)
		require.Error(t, err, "%v", b.p)
		require.True(t, errors.Is(err, ratelimit.ErrInvalidConfig), "%v", err)
		require.True(t, strings.HasPrefix(err.Error(), "ratelimit: invalid configuration: "), "%v", err)
		require.Contains(t, err.Error(), b.want, "%v", b.p)
		require.Contains(t, err.Error(), "2^5", "%v: the error names the bound", b.p)
	}
	// The boundary counts exactly: 2^52 events, then not one more.
	for _, p := range ok[:2] {
		l := mustNew(t, c, p, WithPrefix(uniquePrefix(t)), WithDenyCache(0))
		for _, n := range []int{b52 - 3, 1, 1, 1} {
			d, err := l.AllowN(bg(), "k", n)
			require.NoError(t, err)
			require.True(t, d.Allowed, "%v n=%d", p, n)
		}
		for range 5 {
			d, err := l.AllowN(bg(), "k", 1)
			require.NoError(t, err)
			require.False(t, d.Allowed, "%v: admitted past 2^52", p)
			require.Equal(t, 0, d.Remaining)
		}
		d, err := l.AllowN(bg(), "k2", b52)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		d, err = l.AllowN(bg(), "k2", b52)
		require.NoError(t, err)
		require.False(t, d.Allowed)
	}
}

// TestSlidingLogRebase drives a sliding log of limit 2^52 on one key that
// never goes idle until its base passes 2^52, the point where the script
// moves every score back, and checks every decision against the in-memory
// reference.
func TestSlidingLogRebase(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	const b52 = 1 << 52
	p := ratelimit.SlidingLogPolicy(b52, time.Second)
	pr := newPair(t, c, p)
	half := p.Period / 2
	steps := []step{
		{key: "k", kind: 'a', n: b52 - 1},
		{advance: half, key: "k", kind: 'a', n: 1},
		{advance: half + time.Microsecond, key: "k", kind: 'a', n: b52 - 1}, // the first entry expired
		{key: "k", kind: 'a', n: 1},                                         // denied: full
		{advance: half, key: "k", kind: 'a', n: 1},                          // base 2^52
		{key: "k", kind: 'a', n: 1},
		{advance: half + time.Microsecond, key: "k", kind: 'a', n: 3}, // base past 2^52: rebase
		{key: "k", kind: 'a', n: b52},
		{key: "k", kind: 'a', n: b52 - 4},
		{key: "k", kind: 'a', n: 1},
		{key: "k", kind: 'r', n: 2},
		{key: "k", kind: 'a', n: 2},
		{key: "k", kind: 'a', n: 1},
		{advance: time.Microsecond, key: "k", kind: 'p', n: b52},
		{advance: half, key: "k", kind: 'a', n: b52 / 2},
		{advance: half, key: "k", kind: 'a', n: b52},
	}
	for i, st := range steps {
		pr.run(t, i, st)
	}
	requireTTL(t, c, pr.rl.Key("k"), p)
}

// TestNewRejectsBadPolicies: policies the core rejects are rejected by New
// with a redislimit error, never a panic or a limiter that fails open.
func TestNewRejectsBadPolicies(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for _, p := range []ratelimit.Policy{
		{},
		ratelimit.FixedWindowPolicy(-1, time.Second),
		ratelimit.FixedWindowPolicy(1, -time.Second),
		ratelimit.SlidingLogPolicy(0, time.Second),
		ratelimit.TokenBucketPolicy(ratelimit.Per(-1, time.Second), 1),
		ratelimit.LeakyBucketPolicy(1<<62, time.Hour),
		ratelimit.SlidingCounterPolicy(1<<40, time.Second),
		ratelimit.FixedWindowPolicy(1, 1500*time.Nanosecond),
	} {
		l, err := New(c, p)
		require.Error(t, err, "%v", p)
		require.Nil(t, l)
		require.True(t, errors.Is(err, ratelimit.ErrInvalidConfig), "%v", err)
		require.True(t, strings.HasPrefix(err.Error(), "ratelimit: invalid configuration: "), "%v", err)
	}
}

// TestClientTimeBeforeEpoch: with WithClock, a clock before 1970
// (negative Unix microseconds) is still a clock: state written then must
// read back as valid, not as garbage (which would make every call fresh and
// the limit unlimited). (The in-memory reference is no guide there: its
// zero state sits at the epoch.)
func TestClientTimeBeforeEpoch(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for _, p := range policies() {
		mock := fakeclock.NewManual(mockStart)
		mock.Set(time.Date(1969, 6, 1, 12, 0, 0, 123456000, time.UTC))
		l := mustNew(t, c, p, WithClock(mock), WithDenyCache(0), WithPrefix(uniquePrefix(t)))
		admitted := 0
		for range p.Limit + 3 {
			d, err := l.AllowN(bg(), "k", 1)
			require.NoError(t, err)
			if d.Allowed {
				admitted++
			}
		}
		require.Equal(t, p.Limit, admitted, "%v", p)
		requireTTL(t, c, l.Key("k"), p)
	}
}

// TestSlidingLogLargeDifferential drives logs of hundreds of entries (the
// conformance policies hold a handful), so that the galloping search for
// expired entries, the dead entries dropped a few per call and the
// cumulative-count lookup of denials all run at depth, and demands the
// in-memory reference's decisions.
func TestSlidingLogLargeDifferential(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for _, p := range []ratelimit.Policy{
		ratelimit.SlidingLogPolicy(300, 5*time.Millisecond),
		ratelimit.SlidingLogPolicy(1000, 2*time.Millisecond),
	} {
		t.Run(name(p), func(t *testing.T) {
			t.Parallel()
			var deepest int64
			defer func() { t.Logf("deepest log: %d members", deepest) }()
			for seed := range uint64(3) {
				pr := newPair(t, c, p)
				rng := newRand(seed)
				us := int64(p.Period / time.Microsecond)
				for i := range 3000 {
					st := step{key: "k", kind: 'a', n: 1}
					switch r := rng.IntN(100); {
					case r < 85:
						st.advance = time.Duration(rng.Int64N(us/int64(p.Limit)+1)) * time.Microsecond
					case r < 97:
						st.advance = time.Duration(rng.Int64N(us/8+1)) * time.Microsecond
					case r < 99:
						st.advance = time.Duration(rng.Int64N(us+1)) * time.Microsecond
					default:
						st.advance = time.Duration(rng.Int64N(3*us)) * time.Microsecond
					}
					switch r := rng.IntN(100); {
					case r < 8:
						st.kind = 'p'
						st.n = rng.IntN(p.Limit + 1)
					case r < 12:
						st.kind = 'r'
						st.n = 1 + rng.IntN(5)
					case r < 14:
						st.n = 1 + rng.IntN(p.Limit)
					case r < 24:
						st.n = 1 + rng.IntN(4)
					}
					pr.runSeed(t, seed, i, st)
					if t.Failed() {
						return
					}
					card, err := c.ZCard(bg(), pr.rl.Key("k")).Result()
					require.NoError(t, err)
					deepest = max(deepest, card)
				}
			}
		})
	}
}
