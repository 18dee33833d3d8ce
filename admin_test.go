package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

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
			clk := newFakeClock(testStart)
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
			awaitTimer(t, clk)
			clk.Advance(time.Hour - time.Nanosecond)
			select {
			case err := <-done:
				t.Fatalf("WaitN returned %v before the block ended", err)
			default:
			}
			clk.Advance(time.Nanosecond)
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
	clk := newManualClock(testStart)
	a, err := NewKeyed(FixedWindowPolicy(10, time.Minute), WithClock(clk))
	require.NoError(t, err)
	b, err := NewKeyed(TokenBucketPolicy(PerMinute(10), 10), WithClock(clk))
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

// TestPenalizeEveryAlgorithm: a penalty charges min(n, remaining) as an
// admitted AllowN would, never overdraws, creates a key, ignores a block,
// and refuses n <= 0.
func TestPenalizeEveryAlgorithm(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, algo := range reconfigAlgorithms {
		t.Run(algo.String(), func(t *testing.T) {
			t.Parallel()
			p := policyOf(algo, 10)
			k, clk := newReconfigKeyed(t, p)
			require.True(t, must(k.AllowN(ctx, "key", 3)).Allowed)
			require.NoError(t, k.Penalize(ctx, "key", 2))
			assert.Equal(t, 5, must(k.Peek(ctx, "key", 0)).Remaining)

			require.NoError(t, k.Penalize(ctx, "key", math.MaxInt))
			d := must(k.Peek(ctx, "key", 0))
			assert.Equal(t, 0, d.Remaining, "after a huge penalty")
			assert.True(t, d.Allowed, "Peek(0) is denied only when overdrawn")
			require.NoError(t, k.Penalize(ctx, "key", 1))
			recovery := p.Window()
			if algo == SlidingCounterAlgorithm {
				recovery = 2 * p.Window()
			}
			assert.LessOrEqual(t, must(k.Peek(ctx, "key", 1)).RetryAfter, recovery, "no overdraw")
			clk.Add(recovery)
			assert.Equal(t, 10, must(k.Peek(ctx, "key", 0)).Remaining, "recovered")

			require.NoError(t, k.Penalize(ctx, "fresh", 4))
			assert.Equal(t, 6, must(k.Peek(ctx, "fresh", 0)).Remaining, "a penalty creates the key")
			require.NoError(t, k.Penalize(ctx, "huge", math.MaxInt))
			assert.Equal(t, 0, must(k.Peek(ctx, "huge", 0)).Remaining)

			require.NoError(t, k.Block(ctx, "fresh", time.Second))
			require.NoError(t, k.Penalize(ctx, "fresh", 1))
			require.NoError(t, k.Block(ctx, "fresh", 0))
			assert.Equal(t, 5, must(k.Peek(ctx, "fresh", 0)).Remaining, "a penalty ignores the block")

			for _, n := range []int{0, -1} {
				err := k.Penalize(ctx, "key", n)
				assert.ErrorIs(t, err, ErrInvalidN, "Penalize(%d)", n)
			}
		})
	}
}

func TestPenalizeNeedsRoom(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k, _ := newReconfigKeyed(t, FixedWindowPolicy(10, time.Minute), WithMaxKeys(1))
	require.NoError(t, k.Penalize(ctx, "a", 1))
	assert.ErrorIs(t, k.Penalize(ctx, "b", 1), ErrTooManyKeys)
	require.NoError(t, k.Penalize(ctx, "a", 1), "a held key needs no room")
	assert.Equal(t, 8, must(k.Peek(ctx, "a", 0)).Remaining)
}

// TestResetEveryAlgorithm: Reset gives a key a full quota back, under the
// current policy and any earlier one its state is still held under.
func TestResetEveryAlgorithm(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, algo := range reconfigAlgorithms {
		t.Run(algo.String(), func(t *testing.T) {
			t.Parallel()
			k, _ := newReconfigKeyed(t, policyOf(algo, 10))
			require.True(t, must(k.AllowN(ctx, "key", 10)).Allowed)
			require.True(t, must(k.AllowN(ctx, "old", 10)).Allowed)
			require.NoError(t, k.Reset(ctx, "key"))
			assert.Equal(t, 10, must(k.AllowN(ctx, "key", 1)).Remaining+1)
			require.NoError(t, k.Reset(ctx, "never-seen"))

			require.NoError(t, k.SetPolicy(policyOf(algo, 10), KeepUsed))
			require.NoError(t, k.SetPolicy(policyOf(algo, 12), KeepUsed))
			require.NoError(t, k.Reset(ctx, "old"))
			assert.Equal(t, 12, must(k.Peek(ctx, "old", 0)).Remaining, "the unconverted state is forgotten")
			assert.Equal(t, 12, must(k.AllowN(ctx, "old", 1)).Remaining+1)
			assert.Equal(t, 2, k.Len())
		})
	}
}

// plainKeyed is a KeyedLimiter that is not a KeyAdmin.
type plainKeyed struct{ KeyedLimiter }

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
			clk := newManualClock(testStart)
			free, err := NewKeyed(TokenBucketPolicy(PerMinute(100), 100), WithClock(clk))
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
			require.NoError(t, tiered.Move(ctx, "cust", "free", tc.mode))
			assert.Equal(t, tc.want, must(tiered.Peek(ctx, "cust", 0)).Remaining)
			assert.Equal(t, 100, must(free.Peek(ctx, "cust", 0)).Remaining, "the old tier forgets the key")
		})
	}
}

func TestTieredAdminDelegates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newManualClock(testStart)
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

	assert.ErrorIs(t, tiered.Move(ctx, "free", "gold", KeepUsed), ErrUnknownTier)
	assert.EqualError(t, tiered.Move(ctx, "free", "plain", KeepUsed), notAdmin)
	require.NoError(t, tiered.Penalize(ctx, "free", 5))
	require.NoError(t, tiered.Move(ctx, "free", "free", KeepUsed), "same tier")
	assert.Equal(t, 95, must(free.Peek(ctx, "free", 0)).Remaining, "a move within one limiter changes nothing")

	withDefault, err := NewTiered(func(context.Context, string) string { return "gold" }, map[string]KeyedLimiter{"free": free}, WithDefaultTier("free"))
	require.NoError(t, err)
	require.NoError(t, withDefault.Move(ctx, "free", "silver", KeepUsed), "an unknown tier is the default one")
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
