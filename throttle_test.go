package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// throttleEpoch is a window boundary for one-minute windows.
var throttleEpoch = time.Unix(1_700_000_040, 0)

func newTestThrottle(t *testing.T, cfg ThrottleConfig, opts ...Option) (*Throttle, *fakeclock.Mock) {
	t.Helper()
	clk := fakeclock.New(throttleEpoch)
	th, err := NewThrottle(cfg, append([]Option{WithClock(clk)}, opts...)...)
	require.NoError(t, err)
	return th, clk
}

func TestThrottleConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  ThrottleConfig
		want string
	}{
		{ThrottleConfig{Window: -time.Second}, "ratelimit.ThrottleConfig.Window"},
		{ThrottleConfig{Window: time.Microsecond}, "ratelimit.ThrottleConfig.Window"},
		{ThrottleConfig{K: 0.5}, "ratelimit.ThrottleConfig.K"},
		{ThrottleConfig{K: -2}, "ratelimit.ThrottleConfig.K"},
		{ThrottleConfig{RetryShare: -0.1}, "ratelimit.ThrottleConfig.RetryShare"},
		{ThrottleConfig{RetryShare: 1.5}, "ratelimit.ThrottleConfig.RetryShare"},
	} {
		_, err := NewThrottle(tc.cfg)
		require.Error(t, err, "%+v", tc.cfg)
		assert.ErrorIs(t, err, ErrInvalidConfig)
		assert.Contains(t, err.Error(), tc.want)
		assert.Contains(t, err.Error(), "ratelimit: ")
	}
	_, err := NewThrottle(ThrottleConfig{}, WithDefaultTier("x"))
	assert.ErrorIs(t, err, ErrInvalidConfig)
	_, err = NewThrottle(ThrottleConfig{}, WithMaxKeys(0))
	assert.ErrorIs(t, err, ErrInvalidConfig)
}

// A cold start is not throttled, a healthy server never is.
func TestThrottleColdStartAndHealthy(t *testing.T) {
	t.Parallel()
	th, clk := newTestThrottle(t, ThrottleConfig{})
	ctx := context.Background()
	for i := 0; i < 100; i++ {
		require.True(t, th.Attempt(ctx, "a").Allowed, "in-flight attempt %d before any answer", i)
	}
	for i := 0; i < 1000; i++ {
		clk.Add(100 * time.Millisecond)
		require.True(t, th.Attempt(ctx, "a").Allowed, "attempt %d to a healthy server", i)
		th.Record("a", true)
	}
}

// The rule, step by step: attempts < K·accepts + 1 over the window, and
// only answers count.
func TestThrottleRule(t *testing.T) {
	t.Parallel()
	th, clk := newTestThrottle(t, ThrottleConfig{K: 2})
	ctx := context.Background()
	// Two accepts: up to 2·2+1 = 5 attempts.
	th.Record("a", true)
	th.Record("a", true)
	d := th.Attempt(ctx, "a")
	require.True(t, d.Allowed)
	assert.Equal(t, 5, d.Limit)
	assert.Equal(t, 2, d.Remaining, "three failures more and the key is throttled")
	th.Record("a", false)
	th.Record("a", false)
	require.True(t, th.Attempt(ctx, "a").Allowed, "4 attempts < 5")
	th.Record("a", false)
	d = th.Attempt(ctx, "a")
	require.False(t, d.Allowed, "5 attempts, 2 accepts")
	assert.Positive(t, d.RetryAfter)
	assert.False(t, th.Attempt(ctx, "a").Allowed, "a refused request is not an attempt, and does not change the rule")
	assert.True(t, th.Attempt(ctx, "b").Allowed, "keys are apart")

	// Waiting the RetryAfter with no other traffic lets a request go, and
	// not a millisecond before.
	clk.Add(d.RetryAfter - time.Millisecond)
	assert.False(t, th.Attempt(ctx, "a").Allowed, "just before RetryAfter")
	clk.Add(time.Millisecond)
	assert.True(t, th.Attempt(ctx, "a").Allowed, "at RetryAfter")

	// Two windows later everything is forgotten.
	clk.Add(2 * time.Minute)
	d = th.Attempt(ctx, "a")
	assert.True(t, d.Allowed)
	assert.Equal(t, 1, d.Limit)
}

// The previous window weighs by the share of it still in the sliding
// window.
func TestThrottleSlidingWeight(t *testing.T) {
	t.Parallel()
	th, clk := newTestThrottle(t, ThrottleConfig{K: 1})
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		th.Record("a", false) // 10 failed attempts, no accept
	}
	clk.Add(time.Minute) // next window, f = 0: the estimate is 10
	d := th.Attempt(ctx, "a")
	require.False(t, d.Allowed)
	// 10·(1-f) < 1 from f > 0.9: 54 s into the window.
	assert.Equal(t, 54*time.Second+1, d.RetryAfter)
	clk.Add(54*time.Second - time.Millisecond)
	assert.False(t, th.Attempt(ctx, "a").Allowed, "a millisecond before")
	clk.Add(time.Millisecond + 1)
	assert.True(t, th.Attempt(ctx, "a").Allowed)
}

// RetryAfter of a refusal that lasts into the next window.
func TestThrottleRetryAfterNextWindow(t *testing.T) {
	t.Parallel()
	th, clk := newTestThrottle(t, ThrottleConfig{K: 1})
	ctx := context.Background()
	clk.Add(30 * time.Second)
	for i := 0; i < 4; i++ {
		th.Record("a", false)
	}
	d := th.Attempt(ctx, "a")
	require.False(t, d.Allowed)
	// This window's 4 stay for its 30 s left; in the next one 4·(1-g) < 1
	// from g > 0.75.
	assert.Equal(t, 30*time.Second+45*time.Second+1, d.RetryAfter)
	clk.Add(d.RetryAfter - 1)
	assert.False(t, th.Attempt(ctx, "a").Allowed)
	clk.Add(1)
	assert.True(t, th.Attempt(ctx, "a").Allowed)
}

// Retries: at most RetryShare·requests + 1 in the window, and the request
// rule too.
func TestThrottleRetryBudget(t *testing.T) {
	t.Parallel()
	th, _ := newTestThrottle(t, ThrottleConfig{RetryShare: 0.1})
	ctx := context.Background()
	for i := 0; i < 30; i++ {
		require.True(t, th.Attempt(ctx, "a").Allowed)
		th.Record("a", true)
	}
	// 30 requests: retries < 0.1·30 + 1 = 4.
	for i := 0; i < 4; i++ {
		d := th.Retry(ctx, "a")
		require.True(t, d.Allowed, "retry %d", i)
		th.Record("a", false)
	}
	d := th.Retry(ctx, "a")
	assert.False(t, d.Allowed, "the fifth retry of 30 requests")
	assert.Equal(t, 4, d.Limit)
	assert.Positive(t, d.RetryAfter)
	assert.True(t, th.Attempt(ctx, "a").Allowed, "requests still go")

	// A key throttled refuses its retries even with budget left.
	th2, _ := newTestThrottle(t, ThrottleConfig{})
	th2.Record("a", false)
	assert.False(t, th2.Retry(ctx, "a").Allowed)
}

// The keys are bounded: idle keys are forgotten for room, live ones never;
// new keys beyond the cap share one state, throttled together.
func TestThrottleMaxKeys(t *testing.T) {
	t.Parallel()
	th, clk := newTestThrottle(t, ThrottleConfig{K: 1}, WithMaxKeys(2))
	ctx := context.Background()
	th.Record("a", false)
	th.Record("b", false)
	assert.False(t, th.Attempt(ctx, "a").Allowed)
	// c and d share the overflow state.
	th.Record("c", false)
	assert.False(t, th.Attempt(ctx, "d").Allowed, "overflow keys share their counts")
	assert.False(t, th.Attempt(ctx, "a").Allowed, "a is still held")
	assert.Len(t, th.keys, 2)
	clk.Add(2 * time.Minute)
	assert.True(t, th.Attempt(ctx, "e").Allowed)
	assert.Len(t, th.keys, 1, "the idle keys were forgotten for e")
}

func TestThrottleObserver(t *testing.T) {
	t.Parallel()
	var got []Event
	obs := ObserverFunc(func(_ context.Context, e Event) { got = append(got, e) })
	th, _ := newTestThrottle(t, ThrottleConfig{}, WithObserver(obs), WithName("api"))
	ctx := context.Background()
	th.Attempt(ctx, "a")
	th.Record("a", false)
	th.Attempt(ctx, "a")
	require.Len(t, got, 2)
	assert.Equal(t, OutcomeAllowed, got[0].Outcome)
	assert.Equal(t, OutcomeShed, got[1].Outcome)
	assert.Equal(t, ThrottleAlgorithm, got[1].Algorithm)
	assert.Equal(t, "api", got[1].Name)
	assert.Equal(t, "throttle", ThrottleAlgorithm.String())
}
