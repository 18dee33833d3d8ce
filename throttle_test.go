package ratelimit

import (
	"context"
	"sync"
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
		{ThrottleConfig{Probe: -time.Second}, "ratelimit.ThrottleConfig.Probe"},
		{ThrottleConfig{Probe: 2 * time.Minute}, "ratelimit.ThrottleConfig.Probe"},
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
	th, clk := newTestThrottle(t, ThrottleConfig{K: 2, Probe: time.Minute})
	ctx := context.Background()
	// Two accepts: up to 2·2+1 = 5 attempts.
	th.Record("a", true)
	th.Record("a", true)
	d := th.Attempt(ctx, "a")
	require.True(t, d.Allowed)
	assert.Equal(t, 5, d.Limit)
	assert.Equal(t, 2, d.Remaining, "two failures more still go, the third throttles the key")
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

// The rule on the weighted counts, and its RetryAfter (probes aside): the
// previous window weighs by the share of it still in the sliding window.
func TestThrottleRuleDecay(t *testing.T) {
	t.Parallel()
	th, _ := newTestThrottle(t, ThrottleConfig{K: 1})
	for _, tc := range []struct {
		name           string
		f              float64 // elapsed share of the window
		up, uc, bp, bc float64
		allowed        bool
		retryAfter     time.Duration
	}{
		// 10 failures in the previous window: 10·(1-g) < 1 from g > 0.9.
		{"previous window", 0, 10, 0, 0, 0, false, 54*time.Second + 1},
		{"previous window, later", 0.5, 10, 0, 0, 0, false, 24*time.Second + 1},
		{"previous window, decayed", 0.9001, 10, 0, 0, 0, true, 0},
		// 4 failures half a window ago: they stay for the 30 s left, then
		// 4·(1-g) < 1 from g > 0.75.
		{"this window", 0.5, 0, 4, 0, 0, false, 30*time.Second + 45*time.Second + 1},
		// 3 attempts, 2 accepts this window: 3 < 2+1 fails.
		{"accepts", 0.5, 0, 3, 0, 2, false, 30*time.Second + 1},
		{"accepts, room", 0.5, 0, 2, 0, 2, true, 0},
	} {
		d := th.rule(tc.f, 1, tc.up, tc.uc, tc.bp, tc.bc)
		assert.Equal(t, tc.allowed, d.Allowed, tc.name)
		if !tc.allowed {
			assert.InDelta(t, float64(tc.retryAfter), float64(d.RetryAfter), float64(time.Microsecond), tc.name)
			// Waiting it with nothing else happening lets a request go.
			g := tc.f + float64(d.RetryAfter)/float64(time.Minute)
			up, uc, bp, bc := tc.up, tc.uc, tc.bp, tc.bc
			if g > 1 {
				g, up, uc, bp, bc = g-1, uc, 0, bc, 0
			}
			assert.True(t, th.rule(g, 1, up, uc, bp, bc).Allowed, "%s: after RetryAfter", tc.name)
			assert.False(t, th.rule(g-1e-6, 1, up, uc, bp, bc).Allowed, "%s: just before RetryAfter", tc.name)
		}
	}
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
	th, clk := newTestThrottle(t, ThrottleConfig{K: 1, Probe: time.Minute}, WithMaxKeys(2))
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

// A throttled key lets one request go per Probe (counted from its last
// answer or probe); a retry is never a probe.
func TestThrottleProbe(t *testing.T) {
	t.Parallel()
	th, clk := newTestThrottle(t, ThrottleConfig{}) // Probe: 1 s
	ctx := context.Background()
	th.Record("a", false)
	d := th.Attempt(ctx, "a")
	require.False(t, d.Allowed)
	assert.Equal(t, time.Second, d.RetryAfter, "the next probe")
	clk.Add(time.Second - 1)
	assert.False(t, th.Attempt(ctx, "a").Allowed)
	assert.False(t, th.Retry(ctx, "a").Allowed)
	clk.Add(1)
	assert.False(t, th.Retry(ctx, "a").Allowed, "a retry is never a probe")
	d = th.Attempt(ctx, "a")
	assert.True(t, d.Allowed, "the probe")
	assert.Zero(t, d.Remaining)
	assert.False(t, th.Attempt(ctx, "a").Allowed, "one probe per Probe")
	clk.Add(time.Second)
	assert.True(t, th.Attempt(ctx, "a").Allowed, "no answer for a second: the next probe")
	clk.Add(500 * time.Millisecond)
	th.Record("a", false) // the probe failed
	clk.Add(999 * time.Millisecond)
	assert.False(t, th.Attempt(ctx, "a").Allowed, "a second from the last answer")
	clk.Add(time.Millisecond)
	assert.True(t, th.Attempt(ctx, "a").Allowed)
}

// An accept while the key is throttled forgives the failures before it:
// traffic returns at once.
func TestThrottleForgivesOnAccept(t *testing.T) {
	t.Parallel()
	th, clk := newTestThrottle(t, ThrottleConfig{})
	ctx := context.Background()
	for i := 0; i < 10; i++ {
		th.Record("a", true)
	}
	for i := 0; i < 100; i++ {
		th.Record("a", false)
	}
	require.False(t, th.Attempt(ctx, "a").Allowed)
	clk.Add(time.Second)
	require.True(t, th.Attempt(ctx, "a").Allowed, "the probe")
	th.Record("a", true) // the server is back
	d := th.Attempt(ctx, "a")
	require.True(t, d.Allowed, "111 attempts, 11 accepts: forgiven")
	assert.Equal(t, 23, d.Limit)
	assert.Equal(t, 11, d.Remaining, "11 attempts and 11 accepts: 11 failures more still go, the 12th throttles the key again")
	for i := 0; i < 12; i++ {
		require.True(t, th.Attempt(ctx, "a").Allowed, "failure %d", i)
		th.Record("a", false)
	}
	assert.False(t, th.Attempt(ctx, "a").Allowed, "23 attempts, 11 accepts")
	// An accept while not throttled forgives nothing.
	th2, _ := newTestThrottle(t, ThrottleConfig{})
	th2.Record("a", true)
	th2.Record("a", false)
	th2.Record("a", true)
	assert.Equal(t, 1, th2.Attempt(ctx, "a").Remaining, "3 attempts, 2 accepts: one failure more still goes (4 < 5)")
}

// Concurrent Attempts and Records on a few keys (run with -race): the
// counts add up, every Decision is sane.
func TestThrottleConcurrent(t *testing.T) {
	t.Parallel()
	th, _ := newTestThrottle(t, ThrottleConfig{K: 1e6})
	ctx := context.Background()
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				key := []string{"a", "b", "c"}[i%3]
				d := th.Attempt(ctx, key)
				assert.True(t, d.Allowed)
				assert.GreaterOrEqual(t, d.Remaining, 0)
				th.Record(key, true)
				th.Retry(ctx, key)
			}
		}()
	}
	wg.Wait()
	th.mu.Lock()
	defer th.mu.Unlock()
	var att, req float64
	for _, st := range th.keys {
		att += st.cur.attempts
		req += st.cur.requests
	}
	assert.Equal(t, 4000.0, att)
	assert.Equal(t, 4000.0, req)
}
