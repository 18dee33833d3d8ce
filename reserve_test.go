package ratelimit_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// reserveClock starts on a whole second, so that window arithmetic in the
// tests below is plain.
func reserveClock() *fakeclock.Manual { return fakeclock.NewManual(time.Unix(1_700_000_000, 0)) }

func newKeyedAt(t *testing.T, p ratelimit.Policy, c ratelimit.Clock) *ratelimit.Keyed {
	t.Helper()
	k, err := ratelimit.NewKeyed(p, ratelimit.WithClock(c))
	require.NoError(t, err)
	return k
}

func reserve(t *testing.T, l ratelimit.Reserver, key string, n int) *ratelimit.Reservation {
	t.Helper()
	r, err := l.ReserveN(context.Background(), key, n, time.Minute)
	require.NoError(t, err)
	require.NotNil(t, r)
	return r
}

func remaining(t *testing.T, l ratelimit.KeyedLimiter, key string) int {
	t.Helper()
	d, err := l.Peek(context.Background(), key, 0)
	require.NoError(t, err)
	return d.Remaining
}

func settleOK(t *testing.T, r *ratelimit.Reservation, actual int) {
	t.Helper()
	require.NoError(t, r.Settle(context.Background(), actual))
}

func TestReserveTokenBucketGivesBackAndGoesIntoDebt(t *testing.T) {
	t.Parallel()
	c := reserveClock()
	k := newKeyedAt(t, ratelimit.TokenBucketPolicy(ratelimit.Per(10, time.Second), 10), c)

	r := reserve(t, k, "a", 4)
	require.True(t, r.Allowed)
	assert.Equal(t, 6, r.Remaining, "the estimate is charged at once")
	settleOK(t, r, 2)
	assert.Equal(t, 8, remaining(t, k, "a"), "an actual below the estimate gives the difference back")

	r = reserve(t, k, "a", 4) // 4 left
	settleOK(t, r, 9)         // 5 more than reserved: 1 token of debt
	d, err := k.Peek(context.Background(), "a", 0)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "a bucket in debt reports itself overdrawn")
	assert.Equal(t, 0, d.Remaining)
	d, err = k.AllowN(context.Background(), "a", 1)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	assert.Equal(t, 200*time.Millisecond, d.RetryAfter, "the overrun is waited out: 1 token of debt + 1 token wanted at 10/s")
	c.Add(200 * time.Millisecond)
	d, err = k.AllowN(context.Background(), "a", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
}

func TestReserveTokenBucketGivesBackNoMoreThanFull(t *testing.T) {
	t.Parallel()
	c := reserveClock()
	k := newKeyedAt(t, ratelimit.TokenBucketPolicy(ratelimit.Per(10, time.Second), 10), c)
	r := reserve(t, k, "a", 8)
	c.Add(time.Second) // refilled to full meanwhile
	settleOK(t, r, 0)
	assert.Equal(t, 10, remaining(t, k, "a"))
	d, err := k.AllowN(context.Background(), "a", 10)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	d, err = k.AllowN(context.Background(), "a", 1)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "a settlement never raises a bucket above full")
}

func TestReserveLeakyBucket(t *testing.T) {
	t.Parallel()
	c := reserveClock()
	k := newKeyedAt(t, ratelimit.LeakyBucketPolicy(4, 100*time.Millisecond), c)
	r := reserve(t, k, "a", 3)
	assert.Equal(t, 1, r.Remaining)
	settleOK(t, r, 1)
	assert.Equal(t, 3, remaining(t, k, "a"))
	r = reserve(t, k, "a", 2) // level 3 of 4
	settleOK(t, r, 6)         // level 7: 3 beyond capacity
	d, err := k.AllowN(context.Background(), "a", 1)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	assert.Equal(t, 400*time.Millisecond, d.RetryAfter, "level 7 drains to 3 before one more fits in 4")
}

func TestReserveFixedWindow(t *testing.T) {
	t.Parallel()
	c := reserveClock()
	k := newKeyedAt(t, ratelimit.FixedWindowPolicy(10, time.Second), c)

	r := reserve(t, k, "a", 5)
	settleOK(t, r, 2)
	assert.Equal(t, 8, remaining(t, k, "a"), "given back within the reservation's window")

	r = reserve(t, k, "a", 5) // 3 left in this window
	settleOK(t, r, 12)        // 7 over: the window is 4 beyond its limit
	d, err := k.Peek(context.Background(), "a", 0)
	require.NoError(t, err)
	assert.False(t, d.Allowed)
	assert.Equal(t, 0, d.Remaining)

	c.Add(time.Second) // a new window: the overrun stayed in the old one
	assert.Equal(t, 10, remaining(t, k, "a"))

	r = reserve(t, k, "a", 5)
	c.Add(time.Second)
	settleOK(t, r, 1) // within its minute of expiry
	assert.Equal(t, 10, remaining(t, k, "a"), "nothing is given back to a window that has ended")

	r = reserve(t, k, "a", 5)
	c.Add(time.Second)
	settleOK(t, r, 8)
	assert.Equal(t, 7, remaining(t, k, "a"), "an overrun settled after its window ended is charged to the window in force")
}

func TestReserveQuota(t *testing.T) {
	t.Parallel()
	c := fakeclock.NewManual(time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC))
	k := newKeyedAt(t, ratelimit.QuotaPolicy(100, ratelimit.Calendar{Unit: ratelimit.Daily}), c)
	r := reserve(t, k, "a", 50)
	settleOK(t, r, 20)
	assert.Equal(t, 80, remaining(t, k, "a"))
	r, err := k.ReserveN(context.Background(), "a", 50, 24*time.Hour)
	require.NoError(t, err)
	c.Add(14 * time.Hour) // midnight: the next day
	settleOK(t, r, 70)
	assert.Equal(t, 80, remaining(t, k, "a"), "the overrun of yesterday's reservation is charged to today")
}

func TestReserveSlidingCounter(t *testing.T) {
	t.Parallel()
	c := reserveClock()
	k := newKeyedAt(t, ratelimit.SlidingCounterPolicy(10, time.Second), c)
	r := reserve(t, k, "a", 6)
	c.Add(1500 * time.Millisecond) // half-way through the next window: 6 weigh 3
	assert.Equal(t, 7, remaining(t, k, "a"))
	settleOK(t, r, 2) // the previous window now holds 2, weighing 1
	assert.Equal(t, 9, remaining(t, k, "a"), "the previous window still counts, so it is given back there")

	r = reserve(t, k, "a", 4)
	settleOK(t, r, 14) // 10 more in the current window
	d, err := k.Peek(context.Background(), "a", 0)
	require.NoError(t, err)
	assert.False(t, d.Allowed)

	r = reserve(t, k, "b", 5)
	c.Add(2 * time.Second)
	settleOK(t, r, 0)
	assert.Equal(t, 10, remaining(t, k, "b"))
}

func TestReserveRefusesTheSlidingLog(t *testing.T) {
	t.Parallel()
	k := newKeyedAt(t, ratelimit.SlidingLogPolicy(10, time.Second), reserveClock())
	r, err := k.ReserveN(context.Background(), "a", 3, time.Minute)
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "sliding window log")
	require.NotNil(t, r)
	assert.False(t, r.Allowed)
	assert.Equal(t, 10, remaining(t, k, "a"), "a refused reservation charges nothing")
	assert.ErrorIs(t, r.Settle(context.Background(), 1), ratelimit.ErrReservationSettled)
}

func TestReserveExpiresAtItsEstimate(t *testing.T) {
	t.Parallel()
	c := reserveClock()
	k := newKeyedAt(t, ratelimit.FixedWindowPolicy(10, time.Hour), c)
	r, err := k.ReserveN(context.Background(), "a", 6, time.Minute)
	require.NoError(t, err)
	c.Add(time.Minute - time.Nanosecond)
	early, err := k.ReserveN(context.Background(), "a", 1, time.Minute)
	require.NoError(t, err)
	c.Add(time.Nanosecond) // r's expiry: settled at its estimate
	require.ErrorIs(t, r.Settle(context.Background(), 0), ratelimit.ErrReservationSettled)
	assert.Equal(t, 3, remaining(t, k, "a"), "an expired reservation keeps its estimate charged")
	settleOK(t, early, 0) // still within its own expiry
	assert.Equal(t, 4, remaining(t, k, "a"))
}

func TestReserveSettlesOnce(t *testing.T) {
	t.Parallel()
	k := newKeyedAt(t, ratelimit.FixedWindowPolicy(100, time.Hour), reserveClock())
	r := reserve(t, k, "a", 50)
	var wg sync.WaitGroup
	var ok atomic.Int32
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := r.Settle(context.Background(), 10)
			if err == nil {
				ok.Add(1)
			} else {
				assert.ErrorIs(t, err, ratelimit.ErrReservationSettled)
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, int32(1), ok.Load(), "one Settle settles")
	assert.Equal(t, 90, remaining(t, k, "a"), "the difference was given back once")
}

func TestReserveDenied(t *testing.T) {
	t.Parallel()
	k := newKeyedAt(t, ratelimit.FixedWindowPolicy(10, time.Second), reserveClock())
	reserve(t, k, "a", 8)
	r := reserve(t, k, "a", 5)
	assert.False(t, r.Allowed)
	assert.Equal(t, 2, r.Remaining)
	assert.Equal(t, time.Second, r.RetryAfter)
	assert.ErrorIs(t, r.Settle(context.Background(), 0), ratelimit.ErrReservationSettled)
	assert.Equal(t, 2, remaining(t, k, "a"), "a denied reservation holds nothing, so settling it gives nothing")
}

func TestReserveBadInput(t *testing.T) {
	t.Parallel()
	k := newKeyedAt(t, ratelimit.FixedWindowPolicy(10, time.Second), reserveClock())
	ctx := context.Background()
	for _, expiry := range []time.Duration{0, -time.Second, 25 * time.Hour} {
		r, err := k.ReserveN(ctx, "a", 1, expiry)
		require.ErrorIs(t, err, ratelimit.ErrInvalidConfig, "expiry %v", expiry)
		assert.Contains(t, err.Error(), "expiry")
		assert.False(t, r.Allowed)
	}
	r, err := k.ReserveN(ctx, "a", 11, time.Second)
	require.NoError(t, err, "an n above the limit is a denial, as for AllowN")
	assert.False(t, r.Allowed)
	assert.Equal(t, ratelimit.RetryNever, r.RetryAfter)
	//lint:ignore SA1012 a nil context is the bad input under test
	_, err = k.ReserveN(nil, "a", 1, time.Second) //nolint:staticcheck
	assert.Error(t, err)

	r = reserve(t, k, "a", 3)
	err = r.Settle(ctx, -1)
	require.ErrorIs(t, err, ratelimit.ErrInvalidN)
	assert.Contains(t, err.Error(), "actual")
	settleOK(t, r, 3) // the bad call changed nothing
	assert.Equal(t, 7, remaining(t, k, "a"))
}

// plainKeyed is a KeyedLimiter that is not a Reserver.
type plainKeyed struct{ ratelimit.KeyedLimiter }

func TestReserveAllRequestsAndTokens(t *testing.T) {
	t.Parallel()
	c := reserveClock()
	requests := newKeyedAt(t, ratelimit.FixedWindowPolicy(60, time.Minute), c)
	tokens := newKeyedAt(t, ratelimit.FixedWindowPolicy(90_000, time.Minute), c)
	dims := []ratelimit.Dimension{
		{Name: "requests", Limiter: requests, Key: "key-1", N: 1},
		{Name: "tokens", Limiter: tokens, Key: "key-1"},
	}
	ctx := context.Background()
	r, err := ratelimit.ReserveAll(ctx, 2000, time.Minute, dims...)
	require.NoError(t, err)
	require.True(t, r.Allowed)
	assert.Equal(t, 59, remaining(t, requests, "key-1"))
	assert.Equal(t, 88_000, remaining(t, tokens, "key-1"))
	settleOK(t, r, 1200)
	assert.Equal(t, 59, remaining(t, requests, "key-1"), "a dimension with its own N settles unchanged")
	assert.Equal(t, 88_800, remaining(t, tokens, "key-1"))
	assert.ErrorIs(t, r.Settle(ctx, 0), ratelimit.ErrReservationSettled)

	// A denial by the tokens leaves the requests as they were.
	r, err = ratelimit.ReserveAll(ctx, 90_000, time.Minute, dims...)
	require.NoError(t, err)
	assert.False(t, r.Allowed)
	assert.Equal(t, 1, r.Index)
	assert.Equal(t, 59, remaining(t, requests, "key-1"), "the request dimension was given back")
	assert.Equal(t, 88_800, remaining(t, tokens, "key-1"))

	// A denial by the first dimension: the second is asked, not charged,
	// and the longest RetryAfter is reported.
	small := newKeyedAt(t, ratelimit.FixedWindowPolicy(1, 10*time.Second), c)
	reserve(t, small, "key-1", 1)
	r, err = ratelimit.ReserveAll(ctx, 100_000, time.Minute, ratelimit.Dimension{Name: "small", Limiter: small, Key: "key-1", N: 1}, dims[1])
	require.NoError(t, err)
	assert.False(t, r.Allowed)
	assert.Equal(t, ratelimit.RetryNever, r.RetryAfter, "100,000 tokens can never fit in 90,000")
	assert.Equal(t, 88_800, remaining(t, tokens, "key-1"))
}

func TestReserveAllBadInput(t *testing.T) {
	t.Parallel()
	k := newKeyedAt(t, ratelimit.FixedWindowPolicy(10, time.Second), reserveClock())
	ctx := context.Background()
	cases := map[string][]ratelimit.Dimension{
		"must not be nil":      {{Name: "a", Limiter: k, Key: "x"}, {Name: "b", Key: "x"}},
		"must not be negative": {{Name: "a", Limiter: k, Key: "x", N: -1}},
		"cannot reserve":       {{Name: "a", Limiter: k, Key: "x"}, {Name: "plain", Limiter: plainKeyed{k}, Key: "x"}},
	}
	for want, dims := range cases {
		r, err := ratelimit.ReserveAll(ctx, 1, time.Minute, dims...)
		require.ErrorIs(t, err, ratelimit.ErrInvalidConfig, want)
		assert.Contains(t, err.Error(), want)
		assert.False(t, r.Allowed)
	}
	_, err := ratelimit.ReserveAll(ctx, 1, 0, ratelimit.Dimension{Limiter: k, Key: "x"})
	assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	assert.Equal(t, 10, remaining(t, k, "x"), "nothing was charged by any bad call")
}

func TestReserveThroughTiered(t *testing.T) {
	t.Parallel()
	c := reserveClock()
	free := newKeyedAt(t, ratelimit.FixedWindowPolicy(10, time.Second), c)
	logged := newKeyedAt(t, ratelimit.SlidingLogPolicy(10, time.Second), c)
	tiers, err := ratelimit.NewTiered(func(_ context.Context, key string) string { return key }, map[string]ratelimit.KeyedLimiter{"free": free, "log": logged})
	require.NoError(t, err)
	r, err := tiers.ReserveN(context.Background(), "free", 4, time.Minute)
	require.NoError(t, err)
	settleOK(t, r, 1)
	assert.Equal(t, 9, remaining(t, free, "free"))
	_, err = tiers.ReserveN(context.Background(), "log", 4, time.Minute)
	assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	_, err = tiers.ReserveN(context.Background(), "gold", 4, time.Minute)
	assert.ErrorIs(t, err, ratelimit.ErrUnknownTier)
}

func TestAllowAllChargesADimensionItsOwnN(t *testing.T) {
	t.Parallel()
	c := reserveClock()
	requests := newKeyedAt(t, ratelimit.FixedWindowPolicy(5, time.Minute), c)
	tokens := newKeyedAt(t, ratelimit.FixedWindowPolicy(1000, time.Minute), c)
	for name, wrap := range map[string]func(ratelimit.KeyedLimiter) ratelimit.KeyedLimiter{
		"atomic": func(l ratelimit.KeyedLimiter) ratelimit.KeyedLimiter { return l },
		"refund": func(l ratelimit.KeyedLimiter) ratelimit.KeyedLimiter { return plainKeyed{l} },
	} {
		key := "k-" + name
		dims := []ratelimit.Dimension{
			{Name: "requests", Limiter: wrap(requests), Key: key, N: 1},
			{Name: "tokens", Limiter: wrap(tokens), Key: key},
		}
		d, err := ratelimit.AllowAll(context.Background(), 300, dims...)
		require.NoError(t, err)
		require.True(t, d.Allowed, name)
		assert.Equal(t, 4, remaining(t, requests, key), name)
		assert.Equal(t, 700, remaining(t, tokens, key), name)
		d, err = ratelimit.AllowAll(context.Background(), 800, dims...)
		require.NoError(t, err)
		assert.False(t, d.Allowed, name)
		assert.Equal(t, 4, remaining(t, requests, key), "%s: refunded its own N", name)
		_, err = ratelimit.AllowAll(context.Background(), 1, ratelimit.Dimension{Name: "bad", Limiter: wrap(tokens), Key: key, N: -2})
		assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig, name)
	}
}

// failingReserver admits with an error and holds nothing it can settle,
// as a home failing open does.
type failingReserver struct{ *ratelimit.Keyed }

var errDown = errors.New("store down")

func (f failingReserver) ReserveN(ctx context.Context, key string, n int, expiry time.Duration) (*ratelimit.Reservation, error) {
	r, err := f.Keyed.ReserveN(ctx, key, n, expiry)
	return r, errors.Join(err, errDown)
}

func TestReserveAllReportsEachDimensionsError(t *testing.T) {
	t.Parallel()
	c := reserveClock()
	a := newKeyedAt(t, ratelimit.FixedWindowPolicy(10, time.Second), c)
	b := newKeyedAt(t, ratelimit.FixedWindowPolicy(10, time.Second), c)
	r, err := ratelimit.ReserveAll(context.Background(), 2, time.Minute,
		ratelimit.Dimension{Name: "a", Limiter: a, Key: "x"},
		ratelimit.Dimension{Name: "b", Limiter: failingReserver{b}, Key: "x"})
	require.ErrorIs(t, err, errDown)
	require.True(t, r.Allowed)
	settleOK(t, r, 0)
	assert.Equal(t, 10, remaining(t, a, "x"))
	assert.Equal(t, 10, remaining(t, b, "x"))
}

// singleReserver is what the single limiters but the sliding log offer.
type singleReserver interface {
	ratelimit.Limiter
	ReserveN(n int, expiry time.Duration) (*ratelimit.Reservation, error)
}

// TestReserveSingleMatchesKeyed drives a single limiter and a key of a
// Keyed through the same random timeline of reservations, settlements
// (below, at and above the estimate; in the same window, later, after
// expiry, twice) and decisions, for every algorithm that reserves, and
// demands identical Decisions and Settle errors.
func TestReserveSingleMatchesKeyed(t *testing.T) {
	t.Parallel()
	policies := []ratelimit.Policy{
		ratelimit.TokenBucketPolicy(ratelimit.Per(7, 300*time.Millisecond), 5),
		ratelimit.LeakyBucketPolicy(4, 70*time.Millisecond),
		ratelimit.FixedWindowPolicy(6, time.Second),
		ratelimit.SlidingCounterPolicy(6, time.Second),
		ratelimit.QuotaPolicy(6, ratelimit.Calendar{Unit: ratelimit.Daily, Hour: 22, Minute: 14}),
	}
	for _, p := range policies {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			t.Parallel()
			c := fakeclock.NewManual(time.Date(2026, 12, 1, 22, 13, 50, 0, time.UTC))
			keyed := newKeyedAt(t, p, c)
			l, err := p.NewLimiter(ratelimit.WithClock(c))
			require.NoError(t, err)
			single, ok := l.(singleReserver)
			require.True(t, ok, "%T reserves", l)
			type pair struct{ s, k *ratelimit.Reservation }
			var open []pair
			rng := rand.New(rand.NewPCG(27, uint64(p.Algorithm)))
			ctx := context.Background()
			for step := range 4000 {
				c.Add(time.Duration(rng.IntN(60)) * time.Millisecond)
				switch op := rng.IntN(4); {
				case op == 0 || len(open) == 0:
					n := rng.IntN(p.Limit + 1)
					expiry := time.Duration(1+rng.IntN(2000)) * time.Millisecond
					rs, errS := single.ReserveN(n, expiry)
					rk, errK := keyed.ReserveN(ctx, "k", n, expiry)
					require.Equal(t, errS, errK, "step %d", step)
					require.Equal(t, rs.Decision, rk.Decision, "step %d: ReserveN(%d)", step, n)
					open = append(open, pair{rs, rk})
				case op == 1:
					n := rng.IntN(p.Limit + 1)
					require.Equal(t, single.AllowN(n), mustAllow(t, keyed, n), "step %d: AllowN(%d)", step, n)
				default:
					i := rng.IntN(len(open))
					actual := rng.IntN(2*p.Limit + 1)
					errS := open[i].s.Settle(ctx, actual)
					errK := open[i].k.Settle(ctx, actual)
					require.Equal(t, errS, errK, "step %d: Settle(%d)", step, actual)
					if rng.IntN(3) > 0 { // keep some around, to settle twice
						open = append(open[:i], open[i+1:]...)
					}
				}
				require.Equal(t, single.Peek(0), mustPeek(t, keyed), "step %d: Peek(0) at %v", step, c.Now())
			}
		})
	}
}

func mustAllow(t *testing.T, k *ratelimit.Keyed, n int) ratelimit.Decision {
	t.Helper()
	d, err := k.AllowN(context.Background(), "k", n)
	require.NoError(t, err)
	return d
}

func mustPeek(t *testing.T, k *ratelimit.Keyed) ratelimit.Decision {
	t.Helper()
	d, err := k.Peek(context.Background(), "k", 0)
	require.NoError(t, err)
	return d
}

func TestReserveAllWithoutDimensions(t *testing.T) {
	t.Parallel()
	r, err := ratelimit.ReserveAll(context.Background(), 5, time.Minute)
	require.NoError(t, err)
	assert.True(t, r.Allowed)
	assert.NoError(t, r.Settle(context.Background(), 9), "an admitted reservation settles once, holding nothing")
	assert.ErrorIs(t, r.Settle(context.Background(), 9), ratelimit.ErrReservationSettled)
}
