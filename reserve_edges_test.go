package ratelimit_test

import (
	"context"
	"errors"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// admitN counts how many of tries single-event AllowN calls k admits for key.
func admitN(t *testing.T, k ratelimit.KeyedLimiter, key string, tries int) int {
	t.Helper()
	n := 0
	for range tries {
		d, err := k.AllowN(context.Background(), key, 1)
		require.NoError(t, err)
		if d.Allowed {
			n++
		}
	}
	return n
}

// A reservation made under the old policy gives nothing back into the state
// SetPolicy(..., StartFresh) started fresh, which never held its estimate
// (a give-back there would let the window admit twice its limit).
func TestReserveSettleAfterStartFreshMints(t *testing.T) {
	for _, p := range []ratelimit.Policy{
		ratelimit.FixedWindowPolicy(10, time.Minute),
		ratelimit.SlidingCounterPolicy(10, time.Minute),
		ratelimit.TokenBucketPolicy(ratelimit.Per(10, time.Hour), 10),
		ratelimit.LeakyBucketPolicy(10, time.Minute),
	} {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			c := reserveClock()
			k := newKeyedAt(t, p, c)
			r := reserve(t, k, "a", 10)
			require.True(t, r.Allowed)
			require.NoError(t, k.SetPolicy(p, ratelimit.StartFresh))
			got := admitN(t, k, "a", 10) // the fresh quota
			settleOK(t, r, 0)            // the old policy's estimate
			got += admitN(t, k, "a", 10)
			assert.LessOrEqual(t, got, 10, "events admitted under the new policy in one window/refill")
		})
	}
}

// Reset forgets the key ("starts over with a full quota"): a reservation
// made before it gives nothing back into the new state (that would mint).
func TestReserveSettleAfterResetMints(t *testing.T) {
	c := reserveClock()
	k := newKeyedAt(t, ratelimit.FixedWindowPolicy(10, time.Minute), c)
	r := reserve(t, k, "a", 10)
	require.NoError(t, k.Reset(context.Background(), "a"))
	got := admitN(t, k, "a", 10)
	settleOK(t, r, 0)
	got += admitN(t, k, "a", 10)
	assert.LessOrEqual(t, got, 10)
}

// The key of a reservation is reclaimed (idle) and the cap is reached by
// another key: Settle says the overrun cannot be charged yet
// (ErrTooManyKeys), and the reservation stays held, to be settled again.
func TestReserveOverrunLostUnderKeyCap(t *testing.T) {
	c := reserveClock()
	k, err := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(10, time.Second), 10),
		ratelimit.WithClock(c), ratelimit.WithMaxKeys(1))
	require.NoError(t, err)
	r, err := k.ReserveN(context.Background(), "a", 10, time.Hour)
	require.NoError(t, err)
	c.Add(time.Second) // "a" refilled: idle, reclaimable
	d, err := k.AllowN(context.Background(), "b", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	err = r.Settle(context.Background(), 30) // 20 tokens of overrun, and no room for "a"
	require.ErrorIs(t, err, ratelimit.ErrTooManyKeys, "the overrun cannot be charged yet: said so")
	c.Add(time.Second) // "b" refilled: idle, its room can be taken
	require.NoError(t, r.Settle(context.Background(), 30), "a failed settlement is still held, and settles later")
	assert.Equal(t, 0, remaining(t, k, "a"), "the 20-token overrun is charged (debt)")
	assert.ErrorIs(t, r.Settle(context.Background(), 30), ratelimit.ErrReservationSettled)
}

// After SetPolicy to the sliding log, a pending reservation cannot settle:
// Settle says so, once, and the reservation stands at its estimate.
func TestReserveSettleAfterSwitchToSlidingLog(t *testing.T) {
	c := reserveClock()
	k := newKeyedAt(t, ratelimit.FixedWindowPolicy(10, time.Minute), c)
	r := reserve(t, k, "a", 2)
	require.NoError(t, k.SetPolicy(ratelimit.SlidingLogPolicy(10, time.Minute), ratelimit.KeepUsed))
	err := r.Settle(context.Background(), 10) // 8 over
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig, "the log cannot settle: said so")
	assert.Contains(t, err.Error(), "sliding window log")
	assert.Equal(t, 8, remaining(t, k, "a"), "the reservation stands at its estimate (2, kept across the change)")
	assert.ErrorIs(t, r.Settle(context.Background(), 10), ratelimit.ErrReservationSettled, "and is settled")
}

// A nil *Reservation holds nothing: Settle does not panic.
func TestReserveNilReservationSettle(t *testing.T) {
	var r *ratelimit.Reservation
	assert.NotPanics(t, func() { _ = r.Settle(context.Background(), 1) })
}

// A third-party Reserver returning a nil Reservation panics ReserveAll.
type nilReserver struct{ ratelimit.KeyedLimiter }

func (nilReserver) ReserveN(context.Context, string, int, time.Duration) (*ratelimit.Reservation, error) {
	return nil, errors.New("backend down")
}

func TestReserveReserveAllNilReservation(t *testing.T) {
	k := newKeyedAt(t, ratelimit.FixedWindowPolicy(10, time.Minute), reserveClock())
	assert.NotPanics(t, func() {
		_, _ = ratelimit.ReserveAll(context.Background(), 1, time.Minute,
			ratelimit.Dimension{Limiter: k, Key: "a"},
			ratelimit.Dimension{Limiter: nilReserver{k}, Key: "a"})
	})
	assert.NotPanics(t, func() {
		_, _ = ratelimit.ReserveAll(context.Background(), 1, time.Minute,
			ratelimit.Dimension{Limiter: nilReserver{k}, Key: "a"})
	})
}

// A give-back after SetRate to a slow rate must not overflow the bucket's
// unit arithmetic (n * p with the new p): it leaves the bucket at most full.
func TestReserveGiveBackOverflowAfterSetRate(t *testing.T) {
	c := reserveClock()
	b, err := ratelimit.NewTokenBucket(ratelimit.Per(11, time.Second), 11, ratelimit.WithClock(c))
	require.NoError(t, err)
	r, err := b.ReserveN(11, time.Hour)
	require.NoError(t, err)
	require.True(t, r.Allowed)
	require.NoError(t, b.SetRate(ratelimit.Per(1, 1_000_000_000_000_000_000), 1)) // 1 token per ~31.7 years
	require.Equal(t, 0, b.Peek(0).Remaining)
	settleOK(t, r, 0)
	d := b.Peek(0)
	t.Logf("after give-back: %+v", d)
	assert.LessOrEqual(t, d.Remaining, 1, "never above full")
	assert.True(t, d.Allowed, "the give-back refills the bucket (capped at full)")
	assert.True(t, b.AllowN(1).Allowed)
}

// Reserve/Settle racing SetPolicy, SetRate, Reset, Block and decisions: for
// the race detector.
func TestReserveSettleRaces(t *testing.T) {
	k, err := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(1000, time.Second), 100), ratelimit.WithMaxKeys(8))
	require.NoError(t, err)
	tb, err := ratelimit.NewTokenBucket(ratelimit.Per(1000, time.Second), 100)
	require.NoError(t, err)
	pols := []ratelimit.Policy{
		ratelimit.FixedWindowPolicy(100, 10*time.Millisecond),
		ratelimit.SlidingCounterPolicy(100, 10*time.Millisecond),
		ratelimit.LeakyBucketPolicy(100, time.Millisecond),
		ratelimit.TokenBucketPolicy(ratelimit.Per(1000, time.Second), 100),
	}
	ctx := context.Background()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-done:
				return
			default:
			}
			_ = k.SetPolicy(pols[i%len(pols)], ratelimit.Inheritance(1+i%3))
			_ = tb.SetRate(ratelimit.Per(1000+i%7, time.Second), 100+i%5)
			_ = k.Reset(ctx, "k1")
			_ = k.Block(ctx, "k2", time.Microsecond)
		}
	}()
	var workers sync.WaitGroup
	for g := range 8 {
		workers.Add(1)
		go func() {
			defer workers.Done()
			for i := range 2000 {
				key := []string{"k0", "k1", "k2", "k3"}[(g+i)%4]
				r, _ := ratelimit.ReserveAll(ctx, 3, time.Second,
					ratelimit.Dimension{Limiter: k, Key: key, N: 1},
					ratelimit.Dimension{Limiter: k, Key: key + "t"})
				r2, _ := tb.ReserveN(2, time.Second)
				_, _ = k.AllowN(ctx, key, 1)
				_ = r.Settle(ctx, i%7)
				_ = r2.Settle(ctx, i%5)
			}
		}()
	}
	workers.Wait()
	close(done)
	wg.Wait()
}

// composite is a user's Reserver over two limiters (a global one and a
// per-key one), built on ReserveAll as the docs suggest.
type composite struct {
	ratelimit.KeyedLimiter
	global *ratelimit.Keyed
}

func (c composite) ReserveN(ctx context.Context, key string, n int, expiry time.Duration) (*ratelimit.Reservation, error) {
	return ratelimit.ReserveAll(ctx, n, expiry,
		ratelimit.Dimension{Limiter: c.global, Key: "all"},
		ratelimit.Dimension{Limiter: c.KeyedLimiter, Key: key})
}

// A dimension with its own N settles unchanged, also in ReserveAll's
// one-dimension path when its Reserver holds more than one part.
func TestReserveDimensionNIgnoredForMultiPartReserver(t *testing.T) {
	for _, withOther := range []bool{false, true} {
		c := reserveClock()
		perKey := newKeyedAt(t, ratelimit.FixedWindowPolicy(100, time.Minute), c)
		global := newKeyedAt(t, ratelimit.FixedWindowPolicy(100, time.Minute), c)
		other := newKeyedAt(t, ratelimit.FixedWindowPolicy(1000, time.Minute), c)
		dims := []ratelimit.Dimension{{Name: "requests", Limiter: composite{perKey, global}, Key: "a", N: 1}}
		if withOther {
			dims = append(dims, ratelimit.Dimension{Name: "tokens", Limiter: other, Key: "a"})
		}
		r, err := ratelimit.ReserveAll(context.Background(), 20, time.Minute, dims...)
		require.NoError(t, err)
		require.True(t, r.Allowed)
		require.Equal(t, 99, remaining(t, perKey, "a"), "N=1 charged")
		settleOK(t, r, 50)
		assert.Equal(t, 99, remaining(t, perKey, "a"), "withOther=%v: a dimension with its own N settles unchanged", withOther)
		assert.Equal(t, 99, remaining(t, global, "all"), "withOther=%v", withOther)
	}
}

// requestsAndTokens is a user's Reserver over a request limit (its own N of
// 1) and a token limit.
type requestsAndTokens struct {
	ratelimit.KeyedLimiter // tokens
	requests               *ratelimit.Keyed
}

func (c requestsAndTokens) ReserveN(ctx context.Context, key string, n int, expiry time.Duration) (*ratelimit.Reservation, error) {
	return ratelimit.ReserveAll(ctx, n, expiry,
		ratelimit.Dimension{Limiter: c.requests, Key: key, N: 1},
		ratelimit.Dimension{Limiter: c.KeyedLimiter, Key: key})
}

// Nested in ReserveAll beside another dimension, the inner dimension's own
// N is kept: the request limit is not settled to the token count.
func TestReserveNestedDimensionNOverwritten(t *testing.T) {
	c := reserveClock()
	requests := newKeyedAt(t, ratelimit.FixedWindowPolicy(100, time.Minute), c)
	tokens := newKeyedAt(t, ratelimit.FixedWindowPolicy(1000, time.Minute), c)
	global := newKeyedAt(t, ratelimit.FixedWindowPolicy(10000, time.Minute), c)
	r, err := ratelimit.ReserveAll(context.Background(), 20, time.Minute,
		ratelimit.Dimension{Limiter: requestsAndTokens{tokens, requests}, Key: "a"},
		ratelimit.Dimension{Limiter: global, Key: "all"})
	require.NoError(t, err)
	require.True(t, r.Allowed)
	require.Equal(t, 99, remaining(t, requests, "a"))
	settleOK(t, r, 50)
	assert.Equal(t, 99, remaining(t, requests, "a"), "the request limit stays charged 1")
	assert.Equal(t, 950, remaining(t, tokens, "a"))
}

// ReserveAll refuses a sliding-log dimension before it reserves anything:
// the earlier dimension is not charged, nor its Observer told.
func TestReserveSlidingLogRefusedAfterReserving(t *testing.T) {
	c := reserveClock()
	var admitted int
	obs := ratelimit.ObserverFunc(func(_ context.Context, e ratelimit.Event) {
		if e.Decision.Allowed {
			admitted++
		}
	})
	k, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(10, time.Minute), ratelimit.WithClock(c), ratelimit.WithObserver(obs))
	require.NoError(t, err)
	log := newKeyedAt(t, ratelimit.SlidingLogPolicy(10, time.Minute), c)
	_, err = ratelimit.ReserveAll(context.Background(), 1, time.Minute,
		ratelimit.Dimension{Limiter: k, Key: "a"}, ratelimit.Dimension{Limiter: log, Key: "a"})
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	assert.Equal(t, 0, admitted, "a configuration error admits nothing, also to the Observer")
}

// One garbage actual (math.MaxInt, a parse error upstream) puts a bucket at
// most one capacity into debt, not ~73 years.
func TestReserveHugeActualLocksBucket(t *testing.T) {
	c := reserveClock()
	b, err := ratelimit.NewTokenBucket(ratelimit.Per(10, time.Second), 10, ratelimit.WithClock(c))
	require.NoError(t, err)
	r, err := b.ReserveN(1, time.Minute)
	require.NoError(t, err)
	err = r.Settle(context.Background(), math.MaxInt)
	d := b.AllowN(1)
	t.Logf("Settle: %v; then AllowN(1): %+v", err, d)
	require.NoError(t, err)
	assert.Equal(t, 1100*time.Millisecond, d.RetryAfter, "one capacity (10) in debt, and one token wanted: 11 at 10/s")
}
