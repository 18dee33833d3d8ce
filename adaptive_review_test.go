package ratelimit_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A zero field takes its default within the bounds given: Max 10 alone,
// or Min 50 alone, is a valid config, not an error about an Initial (or a
// Max) the caller never set.
func TestNewAdaptiveDefaultsFitTheBoundsGiven(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg                ratelimit.AdaptiveConfig
		wantLimit, wantMax int
	}{
		{ratelimit.AdaptiveConfig{Max: 10}, 10, 10},
		{ratelimit.AdaptiveConfig{Max: 1}, 1, 1},
		{ratelimit.AdaptiveConfig{Min: 50}, 50, 1000},
		{ratelimit.AdaptiveConfig{Min: 5000}, 5000, 5000},
	} {
		a, err := ratelimit.NewAdaptive(tc.cfg)
		require.NoError(t, err, "NewAdaptive(%+v)", tc.cfg)
		assert.Equal(t, tc.wantLimit, a.Limit(), "NewAdaptive(%+v).Limit()", tc.cfg)
	}
}

// A limit of one (Max 1, or Min 1 reached after drops) still serves a
// sheddable request when nothing is in flight: else a service whose
// traffic is all sheddable would shed it all, for good, as no flight
// would ever end to let the limit grow.
func TestAdaptiveSheddableServedAtLimitOne(t *testing.T) {
	t.Parallel()
	a, err := ratelimit.NewAdaptive(ratelimit.AdaptiveConfig{Initial: 1, Max: 1})
	require.NoError(t, err)
	ctx := context.Background()
	f, d := a.Acquire(ctx, ratelimit.PrioritySheddable)
	require.True(t, d.Allowed, "a sheddable request on an idle service at limit 1")
	_, d = a.Acquire(ctx, ratelimit.PrioritySheddable)
	assert.False(t, d.Allowed, "a second sheddable request")
	f.Success()
	assert.Equal(t, 0, a.InFlight())
}

// A huge limit does not overflow the ceilings into negatives, which would
// shed everything.
func TestAdaptiveHugeLimit(t *testing.T) {
	t.Parallel()
	a, err := ratelimit.NewAdaptive(ratelimit.AdaptiveConfig{Initial: math.MaxInt, Max: math.MaxInt})
	require.NoError(t, err)
	assert.Greater(t, a.Limit(), 0)
	for _, p := range []ratelimit.Priority{ratelimit.PrioritySheddable, ratelimit.PriorityDefault, ratelimit.PriorityCritical} {
		f, d := a.Acquire(context.Background(), p)
		require.True(t, d.Allowed, "Acquire(%v) at limit MaxInt", p)
		assert.Greater(t, d.Remaining, 0, "Acquire(%v): Remaining", p)
		f.Success()
	}
}

// A limit cut to one by drops comes back once they stop: a growing limit
// gains a place at least per window, where a tenth of one per window kept
// it at one for over ten seconds (windows of one second at that limit).
func TestAdaptiveRecoversFromMin(t *testing.T) {
	t.Parallel()
	clk := fakeclock.NewManual(adaptiveStart)
	a, err := ratelimit.NewAdaptive(ratelimit.AdaptiveConfig{Initial: 100}, ratelimit.WithClock(clk))
	require.NoError(t, err)
	limits := batches(a, clk, 3000, 200, 10*time.Millisecond, 50) // 2% dropped, 30 s
	require.Equal(t, 1, limits[len(limits)-1], "the drops cut the limit to Min")
	limits = batches(a, clk, 500, 200, 10*time.Millisecond, 0) // healthy, 5 s
	assert.GreaterOrEqual(t, limits[len(limits)-1], 8, "the limit 5 s after the drops stopped")
}
