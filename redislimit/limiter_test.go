package redislimit

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

func TestNewValidation(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled: New does not contact Redis
	t.Cleanup(func() { _ = c.Close() })
	tests := []struct {
		name string
		p    ratelimit.Policy
		opts []Option
		want string // substring of the error; "" means no error
	}{
		{"ok", ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Second), 10), nil, ""},
		{"invalid policy", ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Second), 0), nil, "ratelimit.Policy.Limit must be positive, got 0"},
		{"zero policy", ratelimit.Policy{}, nil, "algorithm"},
		{"sub-microsecond period", ratelimit.FixedWindowPolicy(10, 1500*time.Nanosecond), nil, "Policy.Period must be a whole number of microseconds (Redis keeps time in integer microseconds), got 1.5µs"},
		{"nanosecond leak", ratelimit.LeakyBucketPolicy(10, time.Nanosecond), nil, "got 1ns"},
		{"token bucket overflows 2^52", ratelimit.TokenBucketPolicy(ratelimit.Per(1000, time.Microsecond), 1<<53), nil, "Limit (capacity)"},
		{"token bucket at the edge", ratelimit.TokenBucketPolicy(ratelimit.Per(1000, time.Microsecond), 1<<51), nil, ""},
		{"token bucket overflows in memory", ratelimit.TokenBucketPolicy(ratelimit.Per(1, 999_999_937*time.Microsecond), 1<<30), nil, "capacity"},
		{"leaky bucket overflows", ratelimit.LeakyBucketPolicy(1<<40, time.Hour), nil, "ratelimit.Policy.Limit x ratelimit.Policy.Period must be at most 2^61ns"},
		{"sliding counter overflows", ratelimit.SlidingCounterPolicy(1_000_000, 24*time.Hour), nil, "below 2^53"},
		{"sliding counter at the edge", ratelimit.SlidingCounterPolicy(1_000_000, 2*time.Hour), nil, ""},
		{"prefix with a brace", ratelimit.FixedWindowPolicy(1, time.Second), []Option{WithPrefix("a{b}:")}, "WithPrefix"},
		{"zero timeout", ratelimit.FixedWindowPolicy(1, time.Second), []Option{WithTimeout(0)}, "ratelimit: invalid configuration: redislimit.WithTimeout must be positive, got 0s"},
		{"negative breaker", ratelimit.FixedWindowPolicy(1, time.Second), []Option{WithBreaker(-time.Second)}, "redislimit.WithBreaker must not be negative, got -1s"},
		{"typed nil observer", ratelimit.FixedWindowPolicy(1, time.Second), []Option{WithObserver((ratelimit.ObserverFunc)(nil))}, "redislimit.WithObserver: observer is a nil ratelimit.ObserverFunc"},
		{"typed nil clock", ratelimit.FixedWindowPolicy(1, time.Second), []Option{WithClock((*manualClock)(nil))}, "redislimit.WithClock: clock is a nil *fakeclock.Manual"},
		{"negative deny cache", ratelimit.FixedWindowPolicy(1, time.Second), []Option{WithDenyCache(-1)}, "WithDenyCache"},
		{"no instances", ratelimit.FixedWindowPolicy(1, time.Second), []Option{WithLocalFallback(0)}, "WithLocalFallback"},
		{"local fallback without instances", ratelimit.FixedWindowPolicy(1, time.Second), []Option{WithFailurePolicy(failLocal)}, "WithLocalFallback(instances)"},
		{"unknown failure policy", ratelimit.FixedWindowPolicy(1, time.Second), []Option{WithFailurePolicy(9)}, "redislimit.WithFailurePolicy must be FailOpen or FailClosed (or use WithLocalFallback), got FailurePolicy(9)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(c, tt.p, tt.opts...)
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("New(%v) = %v, want no error", tt.p, err)
			case tt.want == "":
			case err == nil:
				t.Fatalf("New(%v) = nil error, want one containing %q", tt.p, tt.want)
			case !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ratelimit.ErrInvalidConfig):
				t.Fatalf("New(%v) = %v, want an ErrInvalidConfig containing %q", tt.p, err, tt.want)
			case !strings.HasPrefix(err.Error(), "ratelimit: invalid configuration: "):
				t.Fatalf("New(%v) = %q, want \"ratelimit: invalid configuration: \" first", tt.p, err)
			}
		})
	}
	if _, err := New(nil, ratelimit.FixedWindowPolicy(1, time.Second)); err == nil {
		t.Error("New(nil client) = nil error")
	}
}

// TestExactArithmetic runs the differential test on policies whose
// integers approach 2^52/2^53 in the scripts, where a double's rounding
// would show if floor/ceil were not exact.
func TestExactArithmetic(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for _, p := range []ratelimit.Policy{
		ratelimit.TokenBucketPolicy(ratelimit.Per(3, 999_999_937*time.Microsecond), 500_000),
		ratelimit.LeakyBucketPolicy(1_000, 999_999_937*time.Microsecond),
		ratelimit.SlidingCounterPolicy(1_000_000, 8_000_000_000*time.Microsecond),
		ratelimit.SlidingCounterPolicy(999_983, 9_007_000_000*time.Microsecond),
	} {
		t.Run(name(p), func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(2) {
				pr := newPair(t, c, p)
				rng := newRand(seed)
				for i := range 200 {
					pr.runSeed(t, seed, i, randomStep(rng, p))
				}
			}
		})
	}
}

func TestAllowNInvalidN(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	l := mustNew(t, c, ratelimit.FixedWindowPolicy(3, time.Hour), WithPrefix(uniquePrefix(t)))
	for _, n := range []int{0, -1, 4} {
		d, err := l.AllowN(bg(), "k", n)
		if err != nil || d.Allowed || d.RetryAfter != ratelimit.RetryNever || d.Remaining != 3 || d.Limit != 3 {
			t.Errorf("AllowN(%d) = %+v, %v; want denied with RetryNever and Remaining 3", n, d, err)
		}
	}
	for _, tt := range []struct {
		n    int
		want error
	}{{0, ratelimit.ErrInvalidN}, {4, ratelimit.ErrExceedsLimit}} {
		if err := l.WaitN(bg(), "k", tt.n); !errors.Is(err, tt.want) {
			t.Errorf("WaitN(%d) = %v, want %v", tt.n, err, tt.want)
		}
	}
	if err := l.RefundN(bg(), "k", 0); !errors.Is(err, ratelimit.ErrInvalidN) {
		t.Errorf("RefundN(0) = %v, want ErrInvalidN", err)
	}
}

// TestWaitN waits on the real clock and server time: WaitN sleeps about
// RetryAfter and is then admitted; a deadline shorter than the wait fails
// at once.
func TestWaitN(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	l := mustNew(t, c, ratelimit.TokenBucketPolicy(ratelimit.Per(1, 100*time.Millisecond), 1), WithPrefix(uniquePrefix(t)))
	// A wait of an hour with a deadline of 30 s: refused at once, so
	// WaitN returns before its ctx ends. (The test used a 50 ms deadline
	// for a 100 ms wait and wanted the refusal within 80 ms: a loaded
	// machine could take longer, or spend enough of the wait before the
	// call that the rest fit in the deadline.)
	slow := mustNew(t, c, ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 1), WithPrefix(uniquePrefix(t)))
	if d, err := slow.AllowN(bg(), "k", 1); !d.Allowed || err != nil {
		t.Fatalf("AllowN = %+v, %v", d, err)
	}
	ctx, cancel := context.WithTimeout(bg(), 30*time.Second)
	defer cancel()
	if err := slow.WaitN(ctx, "k", 1); !errors.Is(err, ratelimit.ErrDeadline) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("WaitN with a 30s deadline for an hour's wait = %v, want ErrDeadline", err)
	}
	if ctx.Err() != nil {
		t.Errorf("WaitN returned once its ctx had ended (%v), want at once: one round trip, no sleep", ctx.Err())
	}

	start := time.Now()
	if d, err := l.AllowN(bg(), "k", 1); !d.Allowed || err != nil {
		t.Fatalf("AllowN = %+v, %v", d, err)
	}
	if err := l.WaitN(bg(), "k", 1); err != nil {
		t.Fatalf("WaitN = %v", err)
	}
	// The next token comes 100 ms after the admission, which came after
	// start (one clock on one machine), so WaitN cannot return sooner.
	// 2 s is twenty times the wait: a loaded machine wakes a sleeper tens
	// of ms late.
	if took := time.Since(start); took < 99*time.Millisecond || took > 2*time.Second {
		t.Errorf("AllowN then WaitN took %v, want about 100ms", took)
	}
	cctx, ccancel := context.WithCancel(bg())
	ccancel()
	if err := l.WaitN(cctx, "k", 1); !errors.Is(err, context.Canceled) {
		t.Errorf("WaitN on a cancelled ctx = %v, want context.Canceled", err)
	}
}

// TestDenyCache checks that a denied key costs no round trip until its
// RetryAfter has passed, that the cached Decision matches what Redis
// says, and that the cache is bounded.
func TestDenyCache(t *testing.T) {
	t.Parallel()
	srv, c := startRedis(t)
	for _, p := range []ratelimit.Policy{
		ratelimit.TokenBucketPolicy(ratelimit.Per(2, time.Second), 5),
		ratelimit.LeakyBucketPolicy(5, 300*time.Millisecond),
		ratelimit.FixedWindowPolicy(5, time.Second),
		ratelimit.SlidingLogPolicy(5, time.Second),
	} {
		t.Run(name(p), func(t *testing.T) {
			mock := fakeclock.NewManual(mockStart)
			l := mustNew(t, c, p, WithClock(mock), WithPrefix(uniquePrefix(t)))
			var denied ratelimit.Decision
			for i := 0; ; i++ {
				d, err := l.AllowN(bg(), "k", 1)
				if err != nil {
					t.Fatal(err)
				}
				if !d.Allowed {
					denied = d
					break
				}
				mock.Add(time.Millisecond)
			}
			calls := scriptCalls(t, srv.Addr())
			for _, frac := range []time.Duration{0, 1, 2, 3} {
				step := denied.RetryAfter * frac / 4
				at := mock.Now()
				mock.Set(at.Add(step).Truncate(time.Microsecond))
				got, err := l.AllowN(bg(), "k", 1)
				mock.Set(at)
				if err != nil || got.Allowed {
					t.Fatalf("AllowN %v into the denial = %+v, %v; want a cached denial", step, got, err)
				}
			}
			if after := scriptCalls(t, srv.Addr()); after != calls {
				t.Errorf("%d script calls while the key was denied, want 0", after-calls)
			}
			// The cached RetryAfter counts down exactly with the server's.
			mock.Add(denied.RetryAfter / 2)
			cached, _ := l.AllowN(bg(), "k", 1)
			fresh, err := l.Peek(bg(), "k", 1)
			if err != nil || cached.RetryAfter != fresh.RetryAfter || fresh.Allowed {
				t.Errorf("cached denial %+v, Redis says %+v (%v): want the same RetryAfter", cached, fresh, err)
			}
			mock.Add(cached.RetryAfter)
			if d, err := l.AllowN(bg(), "k", 1); !d.Allowed || err != nil {
				t.Errorf("AllowN after RetryAfter = %+v, %v; want allowed", d, err)
			}
		})
	}
	t.Run("bounded", func(t *testing.T) {
		mock := fakeclock.NewManual(mockStart)
		l := mustNew(t, c, ratelimit.FixedWindowPolicy(1, time.Hour), WithClock(mock), WithDenyCache(64), WithPrefix(uniquePrefix(t)))
		for i := range 1000 {
			k := strconv.Itoa(i)
			l.AllowN(bg(), k, 1)
			if d, _ := l.AllowN(bg(), k, 1); d.Allowed {
				t.Fatal("second event admitted")
			}
		}
		if n := l.cur.Load().cache.len(); n > 64 {
			t.Errorf("deny cache holds %d keys, want <= 64", n)
		}
	})
	t.Run("slidingcounter is not cached", func(t *testing.T) {
		l := mustNew(t, c, ratelimit.SlidingCounterPolicy(1, time.Hour))
		if l.cur.Load().cache != nil {
			t.Error("sliding counter has a deny cache")
		}
	})
	t.Run("refund drops the entry", func(t *testing.T) {
		mock := fakeclock.NewManual(mockStart)
		l := mustNew(t, c, ratelimit.FixedWindowPolicy(1, time.Hour), WithClock(mock), WithPrefix(uniquePrefix(t)))
		l.AllowN(bg(), "k", 1)
		if d, _ := l.AllowN(bg(), "k", 1); d.Allowed {
			t.Fatal("second event admitted")
		}
		if err := l.RefundN(bg(), "k", 1); err != nil {
			t.Fatal(err)
		}
		if d, err := l.AllowN(bg(), "k", 1); !d.Allowed || err != nil {
			t.Errorf("AllowN after RefundN = %+v, %v; want allowed", d, err)
		}
	})
}

// scriptCalls returns EVALSHA plus EVAL calls so far on the server.
func scriptCalls(t *testing.T, addr string) int {
	return cmdCalls(t, addr, "evalsha") + cmdCalls(t, addr, "eval")
}

// offsetClock is the real clock shifted by off.
type offsetClock struct {
	clock.Clock
	off time.Duration
}

func (c offsetClock) Now() time.Time { return c.Clock.Now().Add(c.off) }

// TestSkew: two limiters whose application clocks are 10s apart (±5s)
// decide on the server's time, so together they admit exactly what one
// limiter admits; their skewed clocks only time their local deny caches.
func TestSkew(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for _, p := range []ratelimit.Policy{
		ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 200),
		ratelimit.LeakyBucketPolicy(200, time.Hour),
		ratelimit.SlidingLogPolicy(200, time.Hour),
	} {
		t.Run(name(p), func(t *testing.T) {
			t.Parallel()
			run := func(ls ...*Limiter) int64 {
				var admitted atomic.Int64
				var wg sync.WaitGroup
				for i := range 16 {
					l := ls[i%len(ls)]
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range 40 {
							d, err := l.AllowN(bg(), "k", 1)
							if err != nil {
								t.Error(err)
								return
							}
							if d.Allowed {
								admitted.Add(1)
							}
						}
					}()
				}
				wg.Wait()
				return admitted.Load()
			}
			one := run(mustNew(t, c, p, WithPrefix(uniquePrefix(t))))
			prefix := uniquePrefix(t)
			ahead := mustNew(t, c, p, WithPrefix(prefix), withLocalClock(offsetClock{clock.New(), 5 * time.Second}))
			behind := mustNew(t, c, p, WithPrefix(prefix), withLocalClock(offsetClock{clock.New(), -5 * time.Second}))
			two := run(ahead, behind)
			if one != int64(p.Limit) || two != one {
				t.Errorf("one limiter admitted %d, two with clocks 10s apart %d; want both %d", one, two, p.Limit)
			}
		})
	}
}

// TestKeys checks the key layout: prefix, algorithm code, policy
// fingerprint, hash tag (a digest of the key), TTL.
func TestKeys(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for _, p := range policies() {
		prefix := uniquePrefix(t)
		l := mustNew(t, c, p, WithPrefix(prefix))
		key := l.Key("user:42")
		if want := prefix + l.cur.Load().scripts.code + ":" + policyFingerprint(l.cur.Load().scripts.code, p) + ":{6j_UO-HlfWLhY9rhn8dAvQ}"; key != want {
			t.Errorf("Key(user:42) = %q, want %q", key, want)
		}
		if _, err := l.AllowN(bg(), "user:42", 1); err != nil {
			t.Fatal(err)
		}
		// A TTL no longer than the state lasts; the key may already have
		// expired (-2) when the state lasts microseconds, but it must never
		// lack a TTL (-1).
		ttl, err := c.PTTL(bg(), key).Result()
		if err != nil || ttl == -1 || ttl > 2*p.Period+time.Millisecond {
			t.Errorf("%v: PTTL(%s) = %v, %v; want a TTL no longer than the state lasts", p, key, ttl, err)
		}
		// A denied request for a new key stores nothing.
		if d, _ := l.AllowN(bg(), "new", p.Limit+1); d.Allowed {
			t.Fatal("n > limit admitted")
		}
		if n, _ := c.Exists(bg(), l.Key("new")).Result(); n != 0 {
			t.Errorf("%v: a denied request stored %s", p, l.Key("new"))
		}
	}
	l := mustNew(t, c, ratelimit.FixedWindowPolicy(1, time.Second))
	// fw, limit 1, window 1s; the first 128 bits of SHA-256("x").
	if got, want := l.Key("x"), "ratelimit:fw:5e244d77:{LXEWQrcmsEQBYnyp-6wy9Q}"; got != want {
		t.Errorf("default Key(x) = %q, want %q", got, want)
	}
	if got, want := mustNew(t, c, ratelimit.FixedWindowPolicy(1, time.Second), WithPlainKeys()).Key("x"), "ratelimit:fw:5e244d77:{x}"; got != want {
		t.Errorf("WithPlainKeys: Key(x) = %q, want %q", got, want)
	}
}

// TestDeniedStoresNothing: a denial leaves the key's value and TTL as they
// were, for every algorithm (peeks too).
func TestDeniedStoresNothing(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for _, p := range policies() {
		mock := fakeclock.NewManual(mockStart)
		l := mustNew(t, c, p, WithClock(mock), WithDenyCache(0), WithPrefix(uniquePrefix(t)))
		for {
			d, err := l.AllowN(bg(), "k", 1)
			if err != nil {
				t.Fatal(err)
			}
			if !d.Allowed {
				break
			}
		}
		key := l.Key("k")
		before, err := c.Dump(bg(), key).Result()
		if err != nil {
			t.Fatalf("%v: DUMP %s: %v", p, key, err)
		}
		ttl0, _ := c.PTTL(bg(), key).Result()
		for _, n := range []int{1, 2, p.Limit, p.Limit + 1, 0} {
			if d, _ := l.AllowN(bg(), "k", n); d.Allowed {
				t.Fatalf("%v: AllowN(%d) admitted on an exhausted key", p, n)
			}
			l.Peek(bg(), "k", n)
		}
		after, err := c.Dump(bg(), key).Result()
		ttl1, _ := c.PTTL(bg(), key).Result()
		if err != nil || after != before || ttl1 > ttl0 {
			t.Errorf("%v: denials changed %s: value changed %t, PTTL %v -> %v (%v)", p, key, after != before, ttl0, ttl1, err)
		}
	}
}
