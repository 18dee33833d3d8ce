package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOptionNotApplicableIsConfigError: an option given to a constructor it
// does not apply to is a configuration error naming the option and the
// constructor, not silently ignored.
func TestOptionNotApplicableIsConfigError(t *testing.T) {
	t.Parallel()
	k, err := NewKeyed(FixedWindowPolicy(1, time.Second))
	require.NoError(t, err)
	tiers := map[string]KeyedLimiter{"free": k}
	tierOf := func(context.Context, string) string { return "free" }
	for _, tc := range []struct {
		name, option, ctor string
		call               func() error
	}{
		{"maxkeys/tokenbucket", "ratelimit.WithMaxKeys", "ratelimit.NewTokenBucket", func() error {
			_, err := NewTokenBucket(PerSecond(1), 1, WithMaxKeys(10))
			return err
		}},
		{"maxkeys/policy", "ratelimit.WithMaxKeys", "ratelimit.NewSlidingLog", func() error {
			_, err := SlidingLogPolicy(1, time.Second).NewLimiter(WithMaxKeys(10))
			return err
		}},
		{"defaulttier/keyed", "ratelimit.WithDefaultTier", "ratelimit.NewKeyed", func() error {
			_, err := NewKeyed(FixedWindowPolicy(1, time.Second), WithDefaultTier("free"))
			return err
		}},
		{"defaulttier/fixedwindow", "ratelimit.WithDefaultTier", "ratelimit.NewFixedWindow", func() error {
			_, err := NewFixedWindow(1, time.Second, WithDefaultTier("free"))
			return err
		}},
		{"clock/tiered", "ratelimit.WithClock", "ratelimit.NewTiered", func() error {
			_, err := NewTiered(tierOf, tiers, WithClock(newManualClock(testStart)))
			return err
		}},
		{"maxkeys/tiered", "ratelimit.WithMaxKeys", "ratelimit.NewTiered", func() error {
			_, err := NewTiered(tierOf, tiers, WithMaxKeys(3))
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.call()
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.Equal(t, "ratelimit: invalid configuration: "+tc.option+" does not apply to "+tc.ctor, err.Error())
		})
	}
}

// TestTieredDefaultTier: with WithDefaultTier, a tier name with no limiter
// is charged in the default tier, through AllowN, Peek, WaitN and Tier.
func TestTieredDefaultTier(t *testing.T) {
	t.Parallel()
	clk := newManualClock(testStart)
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

// TestKeyedWaitIsWaitNOne: Wait is WaitN(ctx, key, 1): it waits out the key's
// RetryAfter on the limiter's clock and admits one event.
func TestKeyedWaitIsWaitNOne(t *testing.T) {
	t.Parallel()
	clk := newInstantClock(testStart)
	k, err := NewKeyed(TokenBucketPolicy(Per(1, time.Second), 1), WithClock(clk))
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, k.Wait(ctx, "k"))
	require.Equal(t, testStart, clk.Now(), "the first event needs no wait")
	require.NoError(t, k.Wait(ctx, "k"))
	assert.Equal(t, testStart.Add(time.Second), clk.Now(), "the second waits one refill")
	assert.Equal(t, 0, must(k.Peek(ctx, "k", 0)).Remaining, "and takes the token")
}
