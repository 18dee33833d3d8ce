package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// homes wraps an in-memory *Keyed for each way AllowAll can meet it: as
// itself (the locked path), hidden behind KeyedLimiter (charge, peek the
// rest once one denies, refund), and as the only tier of a Tiered.
var homes = map[string]func(t *testing.T, k *Keyed) KeyedLimiter{
	"keyed":  func(_ *testing.T, k *Keyed) KeyedLimiter { return k },
	"refund": func(_ *testing.T, k *Keyed) KeyedLimiter { return otherLimiter{k} },
	"tiered": func(t *testing.T, k *Keyed) KeyedLimiter {
		tl, err := NewTiered(func(context.Context, string) string { return "only" }, map[string]KeyedLimiter{"only": k})
		require.NoError(t, err)
		return tl
	},
}

// TestAllowAllReportsLongestRetryAfter: with a 1/s and a 1/h limit, in
// either order, the second request is denied with the hour's RetryAfter,
// whichever dimension denies first; waiting it then succeeds.
func TestAllowAllReportsLongestRetryAfter(t *testing.T) {
	t.Parallel()
	for name, home := range homes {
		for _, hourFirst := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/hourFirst=%v", name, hourFirst), func(t *testing.T) {
				t.Parallel()
				mock := fakeclock.NewManual(testStart)
				sec, err := NewKeyed(TokenBucketPolicy(Per(1, time.Second), 1), WithClock(mock))
				require.NoError(t, err)
				hour, err := NewKeyed(TokenBucketPolicy(Per(1, time.Hour), 1), WithClock(mock))
				require.NoError(t, err)
				dims := []Dimension{
					{Name: "second", Limiter: home(t, sec), Key: "k"},
					{Name: "hour", Limiter: home(t, hour), Key: "k"},
				}
				if hourFirst {
					dims[0], dims[1] = dims[1], dims[0]
				}
				ctx := context.Background()
				md, err := AllowAll(ctx, 1, dims...)
				require.NoError(t, err)
				require.True(t, md.Allowed)
				mock.Add(time.Millisecond)
				md, err = AllowAll(ctx, 1, dims...)
				require.NoError(t, err)
				require.False(t, md.Allowed)
				assert.Equal(t, "hour", dims[md.Index].Name, "the reported dimension")
				assert.Equal(t, time.Hour-time.Millisecond, md.RetryAfter)
				mock.Add(md.RetryAfter - 1)
				md, _ = AllowAll(ctx, 1, dims...)
				require.False(t, md.Allowed, "one nanosecond before RetryAfter")
				mock.Add(1)
				md, err = AllowAll(ctx, 1, dims...)
				require.NoError(t, err)
				assert.True(t, md.Allowed, "after waiting the announced RetryAfter")
			})
		}
	}
}

// TestWaitRetryAfterSucceedsSingle: for every algorithm, a denied single
// limiter admits the same request after exactly the RetryAfter it announced.
func TestWaitRetryAfterSucceedsSingle(t *testing.T) {
	t.Parallel()
	for _, p := range testPolicies {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			t.Parallel()
			mock := fakeclock.NewManual(testStart)
			l, err := p.NewLimiter(WithClock(mock))
			require.NoError(t, err)
			for i := 0; i < 50; i++ {
				mock.Add(7 * time.Millisecond)
				d := l.AllowN(2)
				if d.Allowed {
					continue
				}
				mock.Add(d.RetryAfter)
				require.True(t, l.AllowN(2).Allowed, "AllowN(2) after RetryAfter %v", d.RetryAfter)
			}
		})
	}
}

// TestWaitRetryAfterSucceedsKeyed is the same for a Keyed limiter.
func TestWaitRetryAfterSucceedsKeyed(t *testing.T) {
	t.Parallel()
	for _, p := range testPolicies {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			t.Parallel()
			mock := fakeclock.NewManual(testStart)
			k, err := NewKeyed(p, WithClock(mock))
			require.NoError(t, err)
			ctx := context.Background()
			for i := 0; i < 50; i++ {
				mock.Add(7 * time.Millisecond)
				d, err := k.AllowN(ctx, "k", 2)
				require.NoError(t, err)
				if d.Allowed {
					continue
				}
				mock.Add(d.RetryAfter)
				d, err = k.AllowN(ctx, "k", 2)
				require.NoError(t, err)
				require.True(t, d.Allowed, "AllowN(2) after RetryAfter")
			}
		})
	}
}

// TestWaitRetryAfterSucceedsAllowAll: AllowAll over every pair of
// algorithms, in every home, admits the same request after the RetryAfter
// it announced.
func TestWaitRetryAfterSucceedsAllowAll(t *testing.T) {
	t.Parallel()
	for name, home := range homes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			for _, pa := range testPolicies {
				for _, pb := range testPolicies {
					mock := fakeclock.NewManual(testStart)
					pb := pb
					pb.Limit *= 3
					pb.Period *= 5
					a, err := NewKeyed(pa, WithClock(mock))
					require.NoError(t, err)
					b, err := NewKeyed(pb, WithClock(mock))
					require.NoError(t, err)
					dims := []Dimension{{Name: "a", Limiter: home(t, a), Key: "k"}, {Name: "b", Limiter: home(t, b), Key: "k"}}
					ctx := context.Background()
					for i := 0; i < 60; i++ {
						mock.Add(11 * time.Millisecond)
						md, err := AllowAll(ctx, 2, dims...)
						require.NoError(t, err)
						if md.Allowed {
							continue
						}
						mock.Add(md.RetryAfter)
						md, err = AllowAll(ctx, 2, dims...)
						require.NoError(t, err)
						require.True(t, md.Allowed, "%v + %v step %d: AllowAll(2) after RetryAfter", pa, pb, i)
					}
				}
			}
		})
	}
}

// ctxRefundLimiter fails RefundN when its ctx is done, as a network
// backend would.
type ctxRefundLimiter struct {
	*Keyed
	refunds atomic.Int64
}

func (l *ctxRefundLimiter) RefundN(ctx context.Context, key string, n int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	l.refunds.Add(1)
	return l.Keyed.RefundN(ctx, key, n)
}

// cancelOnAllow cancels the request's context once it has been charged: the
// client went away while AllowAll was running.
type cancelOnAllow struct {
	KeyedLimiter
	cancel context.CancelFunc
}

func (l cancelOnAllow) AllowN(ctx context.Context, key string, n int) (Decision, error) {
	d, err := l.KeyedLimiter.AllowN(ctx, key, n)
	l.cancel()
	return d, err
}

// TestAllowAllRefundIgnoresCallerCancellation: a request charged in one
// dimension and denied in the next is refunded even though its context was
// cancelled meanwhile.
func TestAllowAllRefundIgnoresCallerCancellation(t *testing.T) {
	t.Parallel()
	mock := fakeclock.NewManual(testStart)
	k1, err := NewKeyed(FixedWindowPolicy(5, time.Minute), WithClock(mock))
	require.NoError(t, err)
	k2, err := NewKeyed(FixedWindowPolicy(1, time.Minute), WithClock(mock))
	require.NoError(t, err)
	first := &ctxRefundLimiter{Keyed: k1}
	ctx := context.Background()
	require.True(t, k2.Allow(ctx, "k"))
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	md, err := AllowAll(cctx, 1,
		Dimension{Name: "first", Limiter: cancelOnAllow{first, cancel}, Key: "k"},
		Dimension{Name: "second", Limiter: otherLimiter{k2}, Key: "k"},
	)
	require.NoError(t, err)
	require.False(t, md.Allowed)
	assert.Equal(t, int64(1), first.refunds.Load(), "refunds")
	assert.Equal(t, 5, must(k1.Peek(ctx, "k", 0)).Remaining, "the first limit after the refund")
}

// TestAllowAllNilLimiter: a dimension without a limiter is an error that
// names it, and a denial; nothing is charged.
func TestAllowAllNilLimiter(t *testing.T) {
	t.Parallel()
	k, err := NewKeyed(FixedWindowPolicy(5, time.Minute))
	require.NoError(t, err)
	ctx := context.Background()
	for name, l := range map[string]KeyedLimiter{"nil": nil, "typed-nil": (*Keyed)(nil), "typed-nil-tiered": (*Tiered)(nil)} {
		t.Run(name, func(t *testing.T) {
			var md MultiDecision
			require.NotPanics(t, func() {
				md, err = AllowAll(ctx, 1,
					Dimension{Name: "ok", Limiter: k, Key: "k"},
					Dimension{Name: "broken", Limiter: l, Key: "k"},
				)
			})
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalidConfig)
			assert.Contains(t, err.Error(), `"broken"`)
			assert.False(t, md.Allowed)
			assert.Equal(t, 1, md.Index)
			assert.Equal(t, 5, must(k.Peek(ctx, "k", 0)).Remaining, "charged nothing")
		})
	}
}

// TestAllowAllTieredIsAtomic: a Tiered dimension whose tiers are *Keyed
// takes the locked path: while requests are denied by the other dimension,
// a concurrent reader never sees the Tiered limit as used (on the refund
// path it would be charged, then refunded).
func TestAllowAllTieredIsAtomic(t *testing.T) {
	t.Parallel()
	mock := fakeclock.NewManual(testStart)
	tierLim, err := NewKeyed(FixedWindowPolicy(1, time.Hour), WithClock(mock))
	require.NoError(t, err)
	tiered, err := NewTiered(func(context.Context, string) string { return "free" }, map[string]KeyedLimiter{"free": tierLim})
	require.NoError(t, err)
	tight, err := NewKeyed(FixedWindowPolicy(1, time.Hour), WithClock(mock))
	require.NoError(t, err)
	ctx := context.Background()
	require.True(t, tight.Allow(ctx, "k"))
	require.True(t, allResolveKeyed(t, tiered), "a Tiered of *Keyed resolves to *Keyed")

	dims := []Dimension{{Name: "tier", Limiter: tiered, Key: "k"}, {Name: "tight", Limiter: tight, Key: "k"}}
	var stop atomic.Bool
	var seenUsed atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			if must(tierLim.Peek(ctx, "k", 0)).Remaining != 1 {
				seenUsed.Add(1)
			}
		}
	}()
	for range 20000 {
		md, err := AllowAll(ctx, 1, dims...)
		require.NoError(t, err)
		require.False(t, md.Allowed)
		require.Equal(t, 1, md.Index)
	}
	stop.Store(true)
	<-done
	assert.Zero(t, seenUsed.Load(), "reads that saw the tier limit charged by a denied request")
}

var _ = errors.New
