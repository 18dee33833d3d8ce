package otellimit_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/rlkit/ratelimit/otellimit"
)

func TestDecisionsOfAKeyedLimiterAreCountedByOutcome(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t)
	keyed, err := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Minute), 3),
		ratelimit.WithClock(fakeclock.NewInstant(clockStart)), ratelimit.WithMaxKeys(2),
		ratelimit.WithName("api"), ratelimit.WithObserver(obs))
	require.NoError(t, err)
	ctx := context.Background()

	for i := range 5 { // 3 allowed, 2 denied
		d, err := keyed.AllowN(ctx, "alice", 1)
		require.NoError(t, err)
		require.Equalf(t, i < 3, d.Allowed, "AllowN(alice, 1) #%d", i+1)
	}
	d, err := keyed.AllowN(ctx, "alice", 1) // denied
	require.NoError(t, err)
	require.False(t, d.Allowed, "AllowN(alice, 1) #6")
	_, err = keyed.AllowN(ctx, "bob", 1) // allowed
	require.NoError(t, err)
	require.NoError(t, keyed.WaitN(ctx, "bob", 1), "WaitN(bob, 1) with quota left") // allowed, a wait
	_, err = keyed.AllowN(ctx, "carol", 1)                                          // a third key: error
	require.ErrorIs(t, err, ratelimit.ErrTooManyKeys, "AllowN(carol, 1)")
	// Neither Peek nor RefundN is a decision.
	_, err = keyed.Peek(ctx, "alice", 1)
	require.NoError(t, err)
	require.NoError(t, keyed.RefundN(ctx, "bob", 1))

	got := collect(t, reader)
	alg, home := ratelimit.TokenBucketAlgorithm, ratelimit.HomeKeyed
	assert.Equal(t, map[string]int64{
		series("api", alg, home, ratelimit.OutcomeAllowed): 5,
		series("api", alg, home, ratelimit.OutcomeDenied):  3,
		series("api", alg, home, ratelimit.OutcomeError):   1,
	}, got.sums(t, "ratelimit.decisions"), "ratelimit.decisions")
	assert.Empty(t, got.sums(t, "ratelimit.fallbacks"), "ratelimit.fallbacks: no store to fail")
	assert.Empty(t, got.histograms(t, "ratelimit.decision.duration"), "in-memory decisions are not timed by default")
	w := got.histograms(t, "ratelimit.wait.duration")
	require.Len(t, w, 1, "wait.duration series: %v", w)
	assert.Equal(t, uint64(1), w[series("api", alg, home, ratelimit.OutcomeAllowed)].Count, "WaitN calls")
}

func TestDecisionsOfATokenBucketAreCountedAndTimed(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t, otellimit.WithDurationForAllHomes())
	clk := fakeclock.NewInstant(clockStart)
	tb, err := ratelimit.NewTokenBucket(ratelimit.Per(1, time.Second), 2,
		ratelimit.WithClock(clk), ratelimit.WithName("outbound"), ratelimit.WithObserver(obs))
	require.NoError(t, err)
	ctx := context.Background()

	for i := range 3 { // 2 allowed, 1 denied
		require.Equalf(t, i < 2, tb.AllowN(1).Allowed, "AllowN(1) #%d", i+1)
	}
	tb.Peek(1)                                                                  // not a decision
	require.NoError(t, tb.Wait(ctx), "Wait")                                    // allowed, a wait
	require.ErrorIs(t, tb.WaitN(ctx, 5), ratelimit.ErrExceedsLimit, "WaitN(5)") // error, a wait

	got := collect(t, reader)
	alg, home := ratelimit.TokenBucketAlgorithm, ratelimit.HomeMemory
	assert.Equal(t, map[string]int64{
		series("outbound", alg, home, ratelimit.OutcomeAllowed): 3,
		series("outbound", alg, home, ratelimit.OutcomeDenied):  1,
		series("outbound", alg, home, ratelimit.OutcomeError):   1,
	}, got.sums(t, "ratelimit.decisions"), "ratelimit.decisions")
	h := got.histograms(t, "ratelimit.decision.duration")
	assert.Equal(t, uint64(2), h[series("outbound", alg, home, ratelimit.OutcomeAllowed)].Count, "allowed AllowN calls timed")
	assert.Equal(t, uint64(1), h[series("outbound", alg, home, ratelimit.OutcomeDenied)].Count, "denied AllowN calls timed")
	assert.Len(t, h, 2, "decision.duration series (no WaitN call among them): %v", h)
	w := got.histograms(t, "ratelimit.wait.duration")
	assert.Equal(t, uint64(1), w[series("outbound", alg, home, ratelimit.OutcomeAllowed)].Count, "successful WaitN calls")
	assert.Equal(t, uint64(1), w[series("outbound", alg, home, ratelimit.OutcomeError)].Count, "failed WaitN calls")
}

func TestNoAttributeValueIsAKey(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t, otellimit.WithDurationForAllHomes())
	keys := []string{"sk_live_4eC39HqLyjWDarjtT1zdp7dc", "user:42", "203.0.113.7", "2001:db8::1", "alice@example.com"}
	keyed, err := ratelimit.NewKeyed(ratelimit.SlidingLogPolicy(2, time.Minute),
		ratelimit.WithClock(fakeclock.NewInstant(clockStart)), ratelimit.WithMaxKeys(len(keys)-1),
		ratelimit.WithName("login"), ratelimit.WithObserver(obs))
	require.NoError(t, err)
	ctx := context.Background()
	for _, key := range keys { // allowed, allowed, denied; the last key: too many keys
		for range 3 {
			_, err := keyed.AllowN(ctx, key, 1)
			if err != nil {
				require.ErrorIs(t, err, ratelimit.ErrTooManyKeys)
			}
		}
		_ = keyed.WaitN(ctx, key, 1)
	}

	got := collect(t, reader)
	values := got.values()
	require.NotEmpty(t, values, "no data collected")
	for _, key := range keys {
		assert.NotContains(t, values, key, "a key became an attribute value")
	}
	for _, v := range values {
		assert.Truef(t, slices.ContainsFunc([]string{"login", "slidinglog", "keyed", "allowed", "denied", "shadow", "error"},
			func(s string) bool { return s == v }), "attribute value %q is none of the expected ones", v)
	}
}

func TestObserverServesManyLimiters(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t)
	clk := fakeclock.NewInstant(clockStart)
	policies := []ratelimit.Policy{
		ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Minute), 1),
		ratelimit.LeakyBucketPolicy(1, time.Minute),
		ratelimit.FixedWindowPolicy(1, time.Minute),
		ratelimit.SlidingLogPolicy(1, time.Minute),
		ratelimit.SlidingCounterPolicy(1, time.Minute),
	}
	want := map[string]int64{}
	for _, p := range policies {
		single, err := p.NewLimiter(ratelimit.WithClock(clk), ratelimit.WithName("single"), ratelimit.WithObserver(obs))
		require.NoError(t, err)
		keyed, err := ratelimit.NewKeyed(p, ratelimit.WithClock(clk), ratelimit.WithName("keyed"), ratelimit.WithObserver(obs))
		require.NoError(t, err)
		for range 2 {
			single.AllowN(1)
			_, err := keyed.AllowN(context.Background(), "k", 1)
			require.NoError(t, err)
		}
		want[series("single", p.Algorithm, ratelimit.HomeMemory, ratelimit.OutcomeAllowed)] = 1
		want[series("single", p.Algorithm, ratelimit.HomeMemory, ratelimit.OutcomeDenied)] = 1
		want[series("keyed", p.Algorithm, ratelimit.HomeKeyed, ratelimit.OutcomeAllowed)] = 1
		want[series("keyed", p.Algorithm, ratelimit.HomeKeyed, ratelimit.OutcomeDenied)] = 1
	}
	assert.Equal(t, want, collect(t, reader).sums(t, "ratelimit.decisions"))
}

// TestPermitsOfAConcurrencyLimitAreCountedInFlight: a *ratelimit.Concurrency
// with the Observer; what it holds is ratelimit.concurrency.in_flight, and
// its releases are not decisions.
func TestPermitsOfAConcurrencyLimitAreCountedInFlight(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t)
	c, err := ratelimit.NewConcurrency(2, ratelimit.WithName("exports"), ratelimit.WithObserver(obs))
	require.NoError(t, err)
	ctx := context.Background()
	alg, home := ratelimit.ConcurrencyAlgorithm, ratelimit.HomeKeyed
	inFlight := func(want int64, msg string) {
		t.Helper()
		assert.Equal(t, map[string]int64{inFlightSeries("exports", home): want},
			collect(t, reader).upDownSums(t, "ratelimit.concurrency.in_flight"), msg)
	}

	p1, d, err := c.TryAcquire(ctx, "tenant-1", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed, "TryAcquire(tenant-1, 1) #1")
	p2, err := c.Acquire(ctx, "tenant-1", 1) // free: no wait, but a Wait Event
	require.NoError(t, err, "Acquire(tenant-1, 1)")
	p1.Release()
	inFlight(1, "after acquire, acquire, release")

	p3, d, err := c.TryAcquire(ctx, "tenant-2", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed, "TryAcquire(tenant-2, 1)")
	_, d, err = c.TryAcquire(ctx, "tenant-2", 2) // one free: denied
	require.NoError(t, err)
	require.False(t, d.Allowed, "TryAcquire(tenant-2, 2) with one free")
	_, _, err = c.TryAcquire(ctx, "tenant-2", 3) // never: an error
	require.ErrorIs(t, err, ratelimit.ErrExceedsLimit, "TryAcquire(tenant-2, 3)")
	inFlight(2, "a denial and an error hold nothing")

	p1.Release() // again: nothing
	p3.Release()
	require.NoError(t, c.Reset(ctx, "tenant-1")) // drops p2
	p2.Release()                                 // dropped already: nothing
	inFlight(0, "after every permit is released or reset")

	assert.Equal(t, map[string]int64{
		series("exports", alg, home, ratelimit.OutcomeAllowed): 3,
		series("exports", alg, home, ratelimit.OutcomeDenied):  1,
		series("exports", alg, home, ratelimit.OutcomeError):   1,
	}, collect(t, reader).sums(t, "ratelimit.decisions"), "ratelimit.decisions: no release among them")
}
