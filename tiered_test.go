package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTieredMove: a key moving from free (100 a minute) to pro (10,000 a
// minute) takes its usage along as the mode says, on top of what it
// already used in pro; free forgets it.
func TestTieredMove(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		mode   Inheritance
		proUse int // used in pro before the move
		want   int // pro's Remaining after
	}{
		{KeepUsed, 0, 9_940},
		{ScaleUsed, 0, 4_000},
		{StartFresh, 0, 10_000},
		{KeepUsed, 7_000, 3_000},  // already more used in pro: nothing added
		{ScaleUsed, 5_000, 4_000}, // 6,000 in all
	} {
		t.Run(fmt.Sprintf("%v/%d", tc.mode, tc.proUse), func(t *testing.T) {
			t.Parallel()
			clk := fakeclock.NewManual(testStart)
			free, err := NewKeyed(TokenBucketPolicy(Per(100, time.Minute), 100), WithClock(clk))
			require.NoError(t, err)
			pro, err := NewKeyed(FixedWindowPolicy(10_000, time.Minute), WithClock(clk))
			require.NoError(t, err)
			var mu sync.Mutex
			plan := "free"
			tiered, err := NewTiered(func(context.Context, string) string {
				mu.Lock()
				defer mu.Unlock()
				return plan
			}, map[string]KeyedLimiter{"free": free, "pro": pro})
			require.NoError(t, err)
			require.True(t, must(tiered.AllowN(ctx, "cust", 60)).Allowed)
			if tc.proUse > 0 {
				require.True(t, must(pro.AllowN(ctx, "cust", tc.proUse)).Allowed)
			}
			mu.Lock()
			plan = "pro"
			mu.Unlock()
			require.NoError(t, MoveKey(ctx, "cust", free, tiered, tc.mode))
			assert.Equal(t, tc.want, must(tiered.Peek(ctx, "cust", 0)).Remaining)
			assert.Equal(t, 100, must(free.Peek(ctx, "cust", 0)).Remaining, "the old tier forgets the key")
		})
	}
}

func TestTieredAdminDelegates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := fakeclock.NewManual(testStart)
	free, err := NewKeyed(FixedWindowPolicy(100, time.Minute), WithClock(clk))
	require.NoError(t, err)
	plain := plainKeyed{free}
	tiered, err := NewTiered(func(_ context.Context, key string) string { return key }, map[string]KeyedLimiter{"free": free, "plain": plain})
	require.NoError(t, err)

	require.NoError(t, tiered.Penalize(ctx, "free", 30))
	assert.Equal(t, 70, must(free.Peek(ctx, "free", 0)).Remaining)
	require.NoError(t, tiered.Block(ctx, "free", time.Minute))
	assert.Equal(t, time.Minute, must(free.AllowN(ctx, "free", 1)).RetryAfter)
	require.NoError(t, tiered.Reset(ctx, "free"))
	assert.Equal(t, 100, must(free.Peek(ctx, "free", 0)).Remaining)

	const notAdmin = "ratelimit: ratelimit.plainKeyed does not implement ratelimit.KeyAdmin"
	assert.EqualError(t, tiered.Reset(ctx, "plain"), notAdmin)
	assert.EqualError(t, tiered.Block(ctx, "plain", time.Second), notAdmin)
	assert.EqualError(t, tiered.Penalize(ctx, "plain", 1), notAdmin)
	assert.ErrorIs(t, tiered.Reset(ctx, "gold"), ErrUnknownTier)
	assert.ErrorIs(t, tiered.Block(ctx, "gold", time.Second), ErrUnknownTier)
	assert.ErrorIs(t, tiered.Penalize(ctx, "gold", 1), ErrUnknownTier)
	//lint:ignore SA1012 a nil context is what is tested
	assert.Error(t, tiered.Reset(nil, "free")) //nolint:staticcheck

	// MoveKey resolves a Tiered to the key's tier: the key "gold" has none,
	// the key "plain" is in a limiter that is no KeyAdmin.
	assert.ErrorIs(t, MoveKey(ctx, "gold", free, tiered, KeepUsed), ErrUnknownTier)
	assert.ErrorIs(t, MoveKey(ctx, "gold", tiered, free, KeepUsed), ErrUnknownTier)
	assert.EqualError(t, MoveKey(ctx, "plain", plain, tiered, KeepUsed), notAdmin)
	require.NoError(t, tiered.Penalize(ctx, "free", 5))
	require.NoError(t, MoveKey(ctx, "free", free, tiered, KeepUsed), "same tier")
	require.NoError(t, MoveKey(ctx, "free", tiered, free, KeepUsed), "same tier")
	assert.Equal(t, 95, must(free.Peek(ctx, "free", 0)).Remaining, "a move within one limiter changes nothing")

	withDefault, err := NewTiered(func(context.Context, string) string { return "gold" }, map[string]KeyedLimiter{"free": free}, WithDefaultTier("free"))
	require.NoError(t, err)
	require.NoError(t, MoveKey(ctx, "free", free, withDefault, KeepUsed), "an unknown tier is the default one")
	assert.Equal(t, 95, must(free.Peek(ctx, "free", 0)).Remaining, "the default tier is the same limiter")
}

func TestMoveKeyErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, _ := newReconfigKeyed(t, FixedWindowPolicy(10, time.Minute))
	b, _ := newReconfigKeyed(t, FixedWindowPolicy(20, time.Minute))
	//lint:ignore SA1012 a nil context is what is tested
	assert.Error(t, MoveKey(nil, "k", a, b, KeepUsed)) //nolint:staticcheck
	err := MoveKey(ctx, "k", a, b, 0)
	assert.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "ratelimit.MoveKey mode")
	assert.ErrorIs(t, MoveKey(ctx, "k", nil, b, KeepUsed), ErrInvalidConfig)
	assert.ErrorIs(t, MoveKey(ctx, "k", a, (*Keyed)(nil), KeepUsed), ErrInvalidConfig)
	assert.EqualError(t, MoveKey(ctx, "k", plainKeyed{a}, b, KeepUsed), "ratelimit: ratelimit.plainKeyed does not implement ratelimit.KeyAdmin")

	require.True(t, must(a.AllowN(ctx, "k", 5)).Allowed)
	require.NoError(t, MoveKey(ctx, "k", a, b, ScaleUsed))
	assert.Equal(t, 10, must(b.Peek(ctx, "k", 0)).Remaining)
	assert.Equal(t, 10, must(a.Peek(ctx, "k", 0)).Remaining)

	full, _ := newReconfigKeyed(t, FixedWindowPolicy(10, time.Minute), WithMaxKeys(1))
	require.True(t, must(full.AllowN(ctx, "other", 1)).Allowed)
	require.True(t, must(a.AllowN(ctx, "k", 5)).Allowed)
	err = MoveKey(ctx, "k", a, full, KeepUsed)
	assert.True(t, errors.Is(err, ErrTooManyKeys), "got %v", err)
	assert.Equal(t, 5, must(a.Peek(ctx, "k", 0)).Remaining, "a failed move leaves from as it was")
}

// TestTierFollowsNestedTiered: a Tiered whose tier is another Tiered
// resolves, in one Tier call, to the limiter that holds the key's state,
// under the outer tier's name, so AllowAll takes its atomic path for it.
func TestTierFollowsNestedTiered(t *testing.T) {
	t.Parallel()
	leaf, err := NewKeyed(FixedWindowPolicy(2, time.Minute), WithClock(fakeclock.NewManual(testStart)))
	require.NoError(t, err)
	inner, err := NewTiered(func(context.Context, string) string { return "in" }, map[string]KeyedLimiter{"in": leaf})
	require.NoError(t, err)
	outer, err := NewTiered(func(context.Context, string) string { return "out" }, map[string]KeyedLimiter{"out": inner})
	require.NoError(t, err)

	ctx := context.Background()
	name, l, err := outer.Tier(ctx, "k")
	require.NoError(t, err)
	assert.Equal(t, "out", name)
	assert.Same(t, leaf, l, "the limiter holding the key's state, not the inner Tiered")

	var buf [8]Dimension
	resolved, err := resolveAll(ctx, []Dimension{{Name: "nested", Limiter: outer, Key: "k"}}, &buf)
	require.NoError(t, err)
	assert.True(t, allAtomic(resolved), "every resolved limiter is a *Keyed: AllowAll is atomic")
	assert.Same(t, leaf, resolved[0].Limiter)
}

func allResolveKeyed(t *testing.T, l KeyedLimiter) bool {
	t.Helper()
	var buf [8]Dimension
	dims, err := resolveAll(context.Background(), []Dimension{{Name: "x", Limiter: l, Key: "k"}}, &buf)
	require.NoError(t, err)
	_, isKeyed := dims[0].Limiter.(*Keyed)
	return isKeyed
}

// TestTieredDefaultTier: with WithDefaultTier, a tier name with no limiter
// is charged in the default tier, through AllowN, Peek, WaitN and Tier.
func TestTieredDefaultTier(t *testing.T) {
	t.Parallel()
	clk := fakeclock.NewManual(testStart)
	free, err := NewKeyed(FixedWindowPolicy(1, time.Hour), WithClock(clk))
	require.NoError(t, err)
	pro, err := NewKeyed(FixedWindowPolicy(10, time.Hour), WithClock(clk))
	require.NoError(t, err)
	type planKey struct{}
	tierOf := func(ctx context.Context, _ string) string {
		plan, _ := ctx.Value(planKey{}).(string)
		return plan
	}
	tl, err := NewTiered(tierOf, map[string]KeyedLimiter{"free": free, "pro": pro}, WithDefaultTier("free"))
	require.NoError(t, err)
	ctx := context.Background()
	enterprise := context.WithValue(ctx, planKey{}, "enterprise") // no such tier

	name, l, err := tl.Tier(enterprise, "k")
	require.NoError(t, err)
	assert.Equal(t, "free", name, "Tier applies the default")
	assert.Same(t, free, l)

	d, err := tl.AllowN(enterprise, "k", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Equal(t, 0, must(free.Peek(ctx, "k", 0)).Remaining, "charged in the default tier")
	d, err = tl.Peek(ctx, "k", 1) // no plan at all: the default too
	require.NoError(t, err)
	assert.False(t, d.Allowed)

	d, err = tl.AllowN(context.WithValue(ctx, planKey{}, "pro"), "k", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "a known tier is its own")
	assert.Equal(t, 9, must(pro.Peek(ctx, "k", 0)).Remaining)

	// Without a default, an unknown tier is refused.
	strict, err := NewTiered(tierOf, map[string]KeyedLimiter{"free": free})
	require.NoError(t, err)
	_, err = strict.AllowN(enterprise, "k", 1)
	assert.ErrorIs(t, err, ErrUnknownTier)
	_, _, err = strict.Tier(enterprise, "k")
	assert.ErrorIs(t, err, ErrUnknownTier)
}

// TestTieredDefaultTierMustExist: a default naming no tier is a
// configuration error.
func TestTieredDefaultTierMustExist(t *testing.T) {
	t.Parallel()
	k, err := NewKeyed(FixedWindowPolicy(1, time.Hour))
	require.NoError(t, err)
	_, err = NewTiered(func(context.Context, string) string { return "free" }, map[string]KeyedLimiter{"free": k}, WithDefaultTier("basic"))
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Equal(t, `ratelimit: invalid configuration: ratelimit.WithDefaultTier must name one of the tiers, got "basic"`, err.Error())
}

// TestObserverTieredReportsThroughItsTier: a Tiered reports nothing itself;
// the tier's limiter reports each decision once.
func TestObserverTieredReportsThroughItsTier(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	k, err := NewKeyed(FixedWindowPolicy(1, time.Hour), WithClock(fakeclock.NewManual(testStart)), WithObserver(rec), WithName("api"))
	require.NoError(t, err)
	tl, err := NewTiered(func(context.Context, string) string { return "free" }, map[string]KeyedLimiter{"free": k})
	require.NoError(t, err)
	_, err = tl.AllowN(context.Background(), "secret-key", 1)
	require.NoError(t, err)
	wantEvent(t, rec.take(), k.Policy(), HomeKeyed, 1, OutcomeAllowed, false, nil)
	_, _ = tl.AllowN(context.Background(), "secret-key", 1)
	wantEvent(t, rec.take(), k.Policy(), HomeKeyed, 1, OutcomeDenied, false, nil)

	_, err = NewTiered(func(context.Context, string) string { return "free" }, map[string]KeyedLimiter{"free": k}, WithObserver(rec))
	require.ErrorIs(t, err, ErrInvalidConfig, "Tiered reports nothing itself: WithObserver does not apply")
	assert.Contains(t, err.Error(), "ratelimit.WithObserver")
}
