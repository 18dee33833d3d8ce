package redislimit

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/require"
)

// clientLimiter returns a limiter on a manual clock with client time.
func clientLimiter(t *testing.T, c redis.UniversalClient, p ratelimit.Policy, opts ...Option) (*Limiter, *manualClock) {
	t.Helper()
	mock := fakeclock.NewManual(mockStart)
	// Start at a whole minute, so that minute windows are easy to reason about.
	mock.Set(mock.Now().Truncate(time.Minute))
	opts = append([]Option{WithClock(mock), WithPrefix(uniquePrefix(t))}, opts...)
	return mustNew(t, c, p, opts...), mock
}

func TestBlockDeniesUntilItEndsAndChargesNothing(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for _, p := range policies() {
		t.Run(name(p), func(t *testing.T) {
			t.Parallel()
			l, mock := clientLimiter(t, c, p)
			before, err := l.Peek(bg(), "k", 0)
			require.NoError(t, err)
			require.NoError(t, l.Block(bg(), "k", 10*time.Second))
			for _, n := range []int{1, p.Limit} {
				d, err := l.AllowN(bg(), "k", n)
				require.NoError(t, err)
				require.Equal(t, ratelimit.Decision{Limit: p.Limit, RetryAfter: 10 * time.Second, ResetAfter: 10 * time.Second}, d, "AllowN(%d) while blocked", n)
			}
			d, err := l.Peek(bg(), "k", 0)
			require.NoError(t, err)
			require.False(t, d.Allowed, "Peek(0) while blocked")
			// Invalid n keep their RetryNever denial, with the state's quota.
			d, err = l.AllowN(bg(), "k", p.Limit+1)
			require.NoError(t, err)
			require.Equal(t, ratelimit.RetryNever, d.RetryAfter)
			require.Equal(t, before.Remaining, d.Remaining)
			mock.Add(4 * time.Second)
			d, err = l.AllowN(bg(), "k", 1)
			require.NoError(t, err)
			require.Equal(t, 6*time.Second, d.RetryAfter)
			// A new block replaces the old; d <= 0 lifts it; nothing was charged.
			require.NoError(t, l.Block(bg(), "k", time.Second))
			d, _ = l.AllowN(bg(), "k", 1)
			require.Equal(t, time.Second, d.RetryAfter)
			require.NoError(t, l.Block(bg(), "k", 0))
			d, err = l.Peek(bg(), "k", 0)
			require.NoError(t, err)
			require.Equal(t, p.Limit, d.Remaining, "a blocked decision charged something")
			require.NoError(t, l.Block(bg(), "k", time.Minute))
			require.NoError(t, l.Reset(bg(), "k"))
			require.True(t, l.Allow(bg(), "k"), "Reset must lift the block")
			require.ErrorContains(t, l.Block(bg(), "k", 101*365*24*time.Hour), "ratelimit: block duration")
		})
	}
}

func TestPenalizeEmptiesAtMost(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for _, p := range policies() {
		t.Run(name(p), func(t *testing.T) {
			t.Parallel()
			l, _ := clientLimiter(t, c, p)
			require.ErrorIs(t, l.Penalize(bg(), "k", 0), ratelimit.ErrInvalidN)
			require.NoError(t, l.Penalize(bg(), "k", 1))
			d, err := l.Peek(bg(), "k", 0)
			require.NoError(t, err)
			require.Equal(t, p.Limit-1, d.Remaining)
			require.NoError(t, l.Penalize(bg(), "k", 1<<40))
			d, err = l.Peek(bg(), "k", 0)
			require.NoError(t, err)
			require.Equal(t, 0, d.Remaining)
			require.NoError(t, l.Reset(bg(), "k"))
			d, err = l.Peek(bg(), "k", 0)
			require.NoError(t, err)
			require.Equal(t, p.Limit, d.Remaining)
		})
	}
}

// TestSetPolicyConvertsLazily checks the modes by hand on fixed windows of
// one minute: 6 of 10 used, then changes.
func TestSetPolicyConvertsLazily(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	fw := func(n int) ratelimit.Policy { return ratelimit.FixedWindowPolicy(n, time.Minute) }
	type change struct {
		p    ratelimit.Policy
		mode ratelimit.Inheritance
	}
	for _, tc := range []struct {
		name    string
		changes []change
		want    int // remaining after the changes
	}{
		{"keep/tighten", []change{{fw(5), ratelimit.KeepUsed}}, 0},
		{"keep/loosen", []change{{fw(20), ratelimit.KeepUsed}}, 14},
		{"scale/loosen", []change{{fw(20), ratelimit.ScaleUsed}}, 8},
		{"scale/tighten", []change{{fw(4), ratelimit.ScaleUsed}}, 1}, // ceil(6*4/10) = 3
		{"fresh", []change{{fw(4), ratelimit.StartFresh}}, 4},
		{"two changes", []change{{fw(20), ratelimit.ScaleUsed}, {fw(7), ratelimit.KeepUsed}}, 0},
		{"to token bucket", []change{{ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 10), ratelimit.KeepUsed}}, 4},
		{"to sliding log", []change{{ratelimit.SlidingLogPolicy(8, time.Minute), ratelimit.KeepUsed}}, 2},
		{"to quota", []change{{ratelimit.QuotaPolicy(9, ratelimit.Calendar{Unit: ratelimit.Daily}), ratelimit.KeepUsed}}, 3},
		{"back again", []change{{fw(20), ratelimit.KeepUsed}, {fw(10), ratelimit.KeepUsed}}, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l, _ := clientLimiter(t, c, fw(10))
			d, err := l.AllowN(bg(), "k", 6)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			oldKey := l.Key("k")
			for _, ch := range tc.changes {
				require.NoError(t, l.SetPolicy(ch.p, ch.mode))
			}
			d, err = l.Peek(bg(), "k", 0)
			require.NoError(t, err)
			require.Equal(t, tc.want, d.Remaining, "Peek(0) after the changes")
			if len(tc.changes) == 1 {
				n, _ := c.Exists(bg(), oldKey).Result()
				require.EqualValues(t, 1, n, "a Peek must not convert")
			}
			require.NoError(t, l.Penalize(bg(), "k", 1))
			d, err = l.Peek(bg(), "k", 0)
			require.NoError(t, err)
			require.Equal(t, max(tc.want-1, 0), d.Remaining, "after a conversion and a penalty of 1")
			if l.Key("k") != oldKey {
				n, _ := c.Exists(bg(), oldKey).Result()
				require.EqualValues(t, 0, n, "the old key must be deleted by the conversion")
			}
		})
	}
	l, _ := clientLimiter(t, c, fw(10))
	require.ErrorIs(t, l.SetPolicy(fw(5), 0), ratelimit.ErrInvalidConfig)
	require.ErrorIs(t, l.SetPolicy(ratelimit.Policy{}, ratelimit.KeepUsed), ratelimit.ErrInvalidConfig)
	require.Equal(t, fw(10), l.Policy(), "a refused change changes nothing")
}

func TestWithPreviousConvertsForANewProcess(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	old, mock := clientLimiter(t, c, ratelimit.FixedWindowPolicy(10, time.Minute))
	require.True(t, allowed(t, old, "k", 6))
	l := mustNew(t, c, ratelimit.FixedWindowPolicy(20, time.Minute), WithClock(mock), WithPrefix(old.base),
		WithPrevious(ratelimit.FixedWindowPolicy(10, time.Minute), ratelimit.ScaleUsed))
	d, err := l.Peek(bg(), "k", 0)
	require.NoError(t, err)
	require.Equal(t, 8, d.Remaining)
}

// allowed is l.AllowN(key, n).Allowed, failing t on error.
func allowed(t *testing.T, l *Limiter, key string, n int) bool {
	t.Helper()
	d, err := l.AllowN(bg(), key, n)
	require.NoError(t, err)
	return d.Allowed
}

// TestSetPolicyConcurrent flips the policy while many goroutines hammer one
// key within one window: with ScaleUsed the fraction used never drops, so
// never more than the larger limit is admitted.
func TestSetPolicyConcurrent(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	small, big := ratelimit.FixedWindowPolicy(10, time.Hour), ratelimit.FixedWindowPolicy(40, time.Hour)
	l, _ := clientLimiter(t, c, big)
	var admitted atomic.Int64
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				d, err := l.AllowN(bg(), "k", 1)
				if err == nil && d.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	for i := range 40 {
		p := small
		if i%2 == 1 {
			p = big
		}
		require.NoError(t, l.SetPolicy(p, ratelimit.ScaleUsed))
		touch(t, l, []string{"k"}) // see touch: a key older than four changes starts fresh
		time.Sleep(2 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	require.LessOrEqual(t, admitted.Load(), int64(big.Limit), "admitted more than the larger limit")
	require.Positive(t, admitted.Load())
}

// TestGarbageNeverAllowsAll: garbage in the block key and in the keys of
// previous policies reads as no block and as fresh state, without errors.
func TestGarbageNeverAllowsAll(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for _, p := range policies() {
		t.Run(name(p), func(t *testing.T) {
			t.Parallel()
			l, _ := clientLimiter(t, c, ratelimit.FixedWindowPolicy(3, time.Minute))
			oldKey := l.Key("k")
			require.NoError(t, l.SetPolicy(p, ratelimit.KeepUsed))
			keys := l.cur.Load().keys(l, "k")
			for _, v := range []string{"garbage", "-1", "99999999999999999999", "1 2 3 4"} {
				require.NoError(t, c.Set(bg(), keys[1], v, 0).Err())
				require.NoError(t, c.Set(bg(), oldKey, v, 0).Err())
				_, err := l.Peek(bg(), "k", 0)
				require.NoError(t, err)
			}
			require.NoError(t, c.Del(bg(), keys[1]).Err())
			require.NoError(t, c.RPush(bg(), keys[1], "x").Err())
			require.NoError(t, c.Del(bg(), oldKey).Err())
			require.NoError(t, c.RPush(bg(), oldKey, "x").Err())
			admitted := 0
			for range p.Limit + 3 {
				d, err := l.AllowN(bg(), "k", 1)
				require.NoError(t, err)
				if d.Allowed {
					admitted++
				}
			}
			require.Equal(t, p.Limit, admitted)
		})
	}
}

// TestQuotaBoundaryFromServerClock: without WithClock the period is
// the one holding Redis's TIME. An application clock a day behind still
// counts in the server's day; one far away fails (the failure policy).
func TestQuotaBoundaryFromServerClock(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	p := ratelimit.QuotaPolicy(5, ratelimit.Calendar{Unit: ratelimit.Daily})
	lagging := fakeclock.NewManual(time.Now().Add(-24 * time.Hour))
	l := mustNew(t, c, p, withLocalClock(lagging), WithPrefix(uniquePrefix(t)))
	d, err := l.AllowN(bg(), "k", 1)
	require.NoError(t, err)
	end := time.Now().UTC().Truncate(24 * time.Hour).Add(24 * time.Hour)
	require.InDelta(t, float64(time.Until(end)), float64(d.ResetAfter), float64(5*time.Second), "ResetAfter must point at the end of the server's day")
	far := fakeclock.NewManual(time.Now().Add(-10 * 24 * time.Hour))
	l2 := mustNew(t, c, p, withLocalClock(far), WithPrefix(uniquePrefix(t)), WithFailurePolicy(FailClosed))
	d, err = l2.AllowN(bg(), "k", 1)
	require.ErrorIs(t, err, ErrUnavailable)
	require.False(t, d.Allowed)
	require.ErrorContains(t, err, "more than a period away")
}

func TestAdminErrorsWrapUnavailable(t *testing.T) {
	t.Parallel()
	s, c := startRedis(t)
	l := mustNew(t, c, ratelimit.FixedWindowPolicy(3, time.Second), WithTimeout(200*time.Millisecond), WithBreaker(0))
	s.Kill()
	for _, err := range []error{l.Reset(bg(), "k"), l.Block(bg(), "k", time.Second), l.Penalize(bg(), "k", 1)} {
		require.True(t, errors.Is(err, ErrUnavailable), "got %v", err)
	}
}
