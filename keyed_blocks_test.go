package ratelimit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBlockDeniesEveryAlgorithm: a blocked key is denied with the rest of
// the block as RetryAfter and charged nothing; invalid n keep their own
// denial; the block ends on time, is replaced by a new one, lifted by
// d <= 0 and by Reset, and survives a change of policy.
func TestBlockDeniesEveryAlgorithm(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, algo := range reconfigAlgorithms {
		t.Run(algo.String(), func(t *testing.T) {
			t.Parallel()
			k, clk := newReconfigKeyed(t, policyOf(algo, 10))
			require.True(t, must(k.AllowN(ctx, "key", 3)).Allowed)
			before := must(k.Peek(ctx, "key", 0))
			require.Equal(t, 7, before.Remaining)

			require.NoError(t, k.Block(ctx, "key", 10*time.Second))
			want := Decision{Limit: 10, RetryAfter: 10 * time.Second, ResetAfter: max(10*time.Second, before.ResetAfter)}
			for _, n := range []int{1, 10} {
				assert.Equal(t, want, must(k.AllowN(ctx, "key", n)), "AllowN(%d) while blocked", n)
				assert.Equal(t, want, must(k.Peek(ctx, "key", n)), "Peek(%d) while blocked", n)
			}
			assert.Equal(t, want, must(k.Peek(ctx, "key", 0)), "Peek(0) while blocked")
			for _, n := range []int{-1, 11} {
				assert.Equal(t, RetryNever, must(k.AllowN(ctx, "key", n)).RetryAfter, "AllowN(%d) while blocked", n)
				assert.Equal(t, RetryNever, must(k.Peek(ctx, "key", n)).RetryAfter, "Peek(%d) while blocked", n)
			}
			assert.Equal(t, RetryNever, must(k.AllowN(ctx, "key", 0)).RetryAfter, "AllowN(0) while blocked")

			require.NoError(t, k.Block(ctx, "key", 0))
			assert.Equal(t, before, must(k.Peek(ctx, "key", 0)), "a block charges nothing")

			require.NoError(t, k.Block(ctx, "key", 10*time.Second))
			require.NoError(t, k.Block(ctx, "key", 2*time.Second))
			assert.Equal(t, 2*time.Second, must(k.AllowN(ctx, "key", 1)).RetryAfter, "a new Block replaces the old")
			clk.Add(2*time.Second - time.Nanosecond)
			assert.Equal(t, time.Nanosecond, must(k.AllowN(ctx, "key", 1)).RetryAfter)
			clk.Add(time.Nanosecond)
			assert.True(t, must(k.AllowN(ctx, "key", 1)).Allowed, "once the block has ended")
			assert.Equal(t, int64(0), k.blocks.count.Load(), "ended blocks are forgotten")

			// A block outlives a change of policy; Reset lifts it.
			require.NoError(t, k.Block(ctx, "key", time.Minute))
			require.NoError(t, k.SetPolicy(policyOf(algo, 20), KeepUsed))
			d := must(k.AllowN(ctx, "key", 1))
			assert.False(t, d.Allowed, "blocked after SetPolicy")
			assert.Equal(t, 20, d.Limit)
			assert.Equal(t, time.Minute, d.RetryAfter)
			require.NoError(t, k.Reset(ctx, "key"))
			d = must(k.Peek(ctx, "key", 0))
			assert.Equal(t, 20, d.Remaining, "Reset forgets the state and lifts the block")
			assert.True(t, d.Allowed)

			// A key with no state can be blocked too.
			require.NoError(t, k.Block(ctx, "new", time.Hour))
			assert.Equal(t, Decision{Limit: 20, RetryAfter: time.Hour, ResetAfter: time.Hour}, must(k.AllowN(ctx, "new", 1)))
			assert.True(t, must(k.AllowN(ctx, "other", 1)).Allowed, "other keys are not blocked")
		})
	}
}

// TestBlockedWaitN: WaitN on a blocked key waits exactly until the block
// ends, or returns ErrDeadline at once when that outlasts its deadline.
func TestBlockedWaitN(t *testing.T) {
	t.Parallel()
	for _, algo := range reconfigAlgorithms {
		t.Run(algo.String(), func(t *testing.T) {
			t.Parallel()
			clk := fakeclock.NewAnnouncing(testStart)
			k, err := NewKeyed(policyOf(algo, 10), WithClock(clk))
			require.NoError(t, err)
			ctx := context.Background()
			require.NoError(t, k.Block(ctx, "key", time.Hour))

			short, cancel := context.WithTimeout(ctx, time.Minute)
			defer cancel()
			err = k.WaitN(short, "key", 1)
			require.ErrorIs(t, err, ErrDeadline)
			require.ErrorIs(t, err, context.DeadlineExceeded)

			done := make(chan error, 1)
			go func() { done <- k.WaitN(ctx, "key", 1) }()
			clk.Next(t)
			clk.Add(time.Hour - time.Nanosecond)
			select {
			case err := <-done:
				t.Fatalf("WaitN returned %v before the block ended", err)
			default:
			}
			clk.Add(time.Nanosecond)
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(10 * time.Second):
				t.Fatal("WaitN still blocked after the block ended")
			}
			assert.Equal(t, 9, must(k.Peek(ctx, "key", 0)).Remaining)
		})
	}
}

// TestBlockedKeyInAllowAll: a blocked dimension denies the request with
// the rest of its block; nothing is charged anywhere.
func TestBlockedKeyInAllowAll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := fakeclock.NewManual(testStart)
	a, err := NewKeyed(FixedWindowPolicy(10, time.Minute), WithClock(clk))
	require.NoError(t, err)
	b, err := NewKeyed(TokenBucketPolicy(Per(10, time.Minute), 10), WithClock(clk))
	require.NoError(t, err)
	tiered, err := NewTiered(func(context.Context, string) string { return "t" }, map[string]KeyedLimiter{"t": b})
	require.NoError(t, err)
	require.NoError(t, b.Block(ctx, "ip", 30*time.Second))
	for _, dim := range []Dimension{{Name: "ip", Limiter: b, Key: "ip"}, {Name: "ip", Limiter: tiered, Key: "ip"}} {
		md, err := AllowAll(ctx, 1, Dimension{Name: "user", Limiter: a, Key: "user"}, dim)
		require.NoError(t, err)
		assert.False(t, md.Allowed)
		assert.Equal(t, 1, md.Index)
		assert.Equal(t, 30*time.Second, md.RetryAfter)
		assert.Equal(t, 10, must(a.Peek(ctx, "user", 0)).Remaining, "nothing charged")
	}
	clk.Add(30 * time.Second)
	md, err := AllowAll(ctx, 1, Dimension{Name: "user", Limiter: a, Key: "user"}, Dimension{Name: "ip", Limiter: b, Key: "ip"})
	require.NoError(t, err)
	assert.True(t, md.Allowed, "once the block has ended")
}

// TestBlockObserved: a blocked decision is reported as denied; Block,
// Penalize and Reset report nothing.
func TestBlockObserved(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var mu sync.Mutex
	var events []Event
	obs := ObserverFunc(func(_ context.Context, e Event) {
		mu.Lock()
		defer mu.Unlock()
		events = append(events, e)
	})
	k, _ := newReconfigKeyed(t, FixedWindowPolicy(10, time.Minute), WithObserver(obs))
	require.NoError(t, k.Block(ctx, "key", time.Second))
	require.NoError(t, k.Penalize(ctx, "key", 3))
	require.NoError(t, k.Reset(ctx, "other"))
	_, _ = k.AllowN(ctx, "key", 1)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, events, 1)
	assert.Equal(t, OutcomeDenied, events[0].Outcome)
	assert.Equal(t, time.Second, events[0].Decision.RetryAfter)
}

// TestBlockErrors: bad durations and contexts, and a full block table.
func TestBlockErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k, clk := newReconfigKeyed(t, FixedWindowPolicy(10, time.Minute), WithMaxKeys(2))
	err := k.Block(ctx, "key", maxPeriod+1)
	assert.EqualError(t, err, "ratelimit: block duration 876000h0m0.000000001s must be at most 876000h0m0s")
	require.NoError(t, k.Block(ctx, "key", maxPeriod), "100 years is allowed")
	//lint:ignore SA1012 a nil context is what is tested
	assert.Error(t, k.Block(nil, "key", time.Second)) //nolint:staticcheck
	//lint:ignore SA1012 a nil context is what is tested
	assert.Error(t, k.Reset(nil, "key")) //nolint:staticcheck
	//lint:ignore SA1012 a nil context is what is tested
	assert.Error(t, k.Penalize(nil, "key", 1)) //nolint:staticcheck

	require.NoError(t, k.Reset(ctx, "key"))
	require.NoError(t, k.Block(ctx, "a", time.Second))
	require.NoError(t, k.Block(ctx, "b", time.Minute))
	assert.ErrorIs(t, k.Block(ctx, "c", time.Second), ErrTooManyKeys, "as many blocks as keys at most")
	require.NoError(t, k.Block(ctx, "a", time.Hour), "replacing a block needs no room")
	clk.Add(time.Hour)
	require.NoError(t, k.Block(ctx, "c", time.Second), "ended blocks make room")
	assert.LessOrEqual(t, k.blocks.count.Load(), int64(2))
}

// plainKeyed is a KeyedLimiter that is not a KeyAdmin.
type plainKeyed struct{ KeyedLimiter }
