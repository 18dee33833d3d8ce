package ratelimit_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newConcurrency(t *testing.T, limit int, opts ...ratelimit.Option) *ratelimit.Concurrency {
	t.Helper()
	c, err := ratelimit.NewConcurrency(limit, opts...)
	require.NoError(t, err)
	return c
}

func TestConcurrencyTryAcquireCountsWhatIsInFlight(t *testing.T) {
	ctx := context.Background()
	c := newConcurrency(t, 3)
	var held []ratelimit.Permit
	for i := range 3 {
		p, d, err := c.TryAcquire(ctx, "k", 1)
		require.NoError(t, err)
		assert.Equal(t, ratelimit.Decision{Allowed: true, Limit: 3, Remaining: 2 - i}, d)
		held = append(held, p)
	}
	p, d, err := c.TryAcquire(ctx, "k", 1)
	require.NoError(t, err)
	assert.Equal(t, ratelimit.Decision{Limit: 3}, d, "full: denied, nothing free, no time to wait")
	p.Release() // the zero Permit: nothing
	assert.Equal(t, 3, c.InFlight("k"))

	_, d, err = c.TryAcquire(ctx, "other", 3)
	require.NoError(t, err)
	assert.True(t, d.Allowed, "each key has its own permits")
	assert.Equal(t, 2, c.Len())

	held[0].Release()
	assert.Equal(t, 2, c.InFlight("k"))
	_, d, err = c.TryAcquire(ctx, "k", 2)
	require.NoError(t, err)
	assert.False(t, d.Allowed, "2 more do not fit beside 2 of 3")
	assert.Equal(t, 1, d.Remaining)
	_, d, err = c.TryAcquire(ctx, "k", 1)
	require.NoError(t, err)
	assert.True(t, d.Allowed)
	assert.Equal(t, 0, d.Remaining)
}

func TestConcurrencyInvalidN(t *testing.T) {
	ctx := context.Background()
	c := newConcurrency(t, 3)
	for _, tc := range []struct {
		n    int
		want error
	}{{0, ratelimit.ErrInvalidN}, {-1, ratelimit.ErrInvalidN}, {4, ratelimit.ErrExceedsLimit}} {
		p, d, err := c.TryAcquire(ctx, "k", tc.n)
		require.ErrorIs(t, err, tc.want, "n=%d", tc.n)
		assert.Contains(t, err.Error(), "ratelimit:")
		assert.Equal(t, ratelimit.RetryNever, d.RetryAfter)
		assert.False(t, d.Allowed)
		assert.Equal(t, ratelimit.Permit{}, p)
		_, err = c.Acquire(ctx, "k", tc.n)
		require.ErrorIs(t, err, tc.want, "Acquire n=%d refuses at once", tc.n)
	}
	assert.Equal(t, 0, c.Len())
	//lint:ignore SA1012 a nil ctx is refused, not a panic
	_, _, err := c.TryAcquire(nil, "k", 1)
	require.Error(t, err)
	//lint:ignore SA1012 a nil ctx is refused, not a panic
	_, err = c.Acquire(nil, "k", 1)
	require.Error(t, err)
}

func TestNewConcurrencyRejectsBadConfig(t *testing.T) {
	for _, limit := range []int{0, -1} {
		_, err := ratelimit.NewConcurrency(limit)
		require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
		assert.Contains(t, err.Error(), "NewConcurrency limit must be positive")
	}
	_, err := ratelimit.NewConcurrency(1, ratelimit.WithDefaultTier("free"))
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "WithDefaultTier does not apply to ratelimit.NewConcurrency")
	_, err = ratelimit.NewConcurrency(1, ratelimit.WithMaxKeys(0))
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
}

// TestPermitReleaseIsIdempotent: a Permit released twice, or a copy of it,
// releases once, and a stale Permit never releases the permits of the
// holder its record was reused for.
func TestPermitReleaseIsIdempotent(t *testing.T) {
	ctx := context.Background()
	c := newConcurrency(t, 2)
	p1, _, err := c.TryAcquire(ctx, "k", 1)
	require.NoError(t, err)
	other, _, err := c.TryAcquire(ctx, "k", 1)
	require.NoError(t, err)
	copied := p1
	p1.Release()
	p1.Release()
	copied.Release()
	assert.Equal(t, 1, c.InFlight("k"), "released once")

	p2, d, err := c.TryAcquire(ctx, "k", 1) // likely on p1's record
	require.NoError(t, err)
	require.True(t, d.Allowed)
	p1.Release()
	copied.Release()
	assert.Equal(t, 2, c.InFlight("k"), "a stale Permit releases nothing of p2's")
	p2.Release()
	other.Release()
	assert.Equal(t, 0, c.InFlight("k"))
	assert.Equal(t, 0, c.Len(), "a key with nothing in flight is forgotten")
}

func TestPermitLost(t *testing.T) {
	ctx := context.Background()
	c := newConcurrency(t, 2)
	var zero ratelimit.Permit
	assertClosed(t, zero.Lost(), "the zero Permit holds nothing")

	p, _, err := c.TryAcquire(ctx, "k", 1)
	require.NoError(t, err)
	lost := p.Lost()
	assertOpen(t, lost)
	p.Release()
	assertClosed(t, lost, "released")
	assertClosed(t, p.Lost(), "asked after the release")

	p, _, err = c.TryAcquire(ctx, "k", 2)
	require.NoError(t, err)
	lost = p.Lost()
	require.NoError(t, c.Reset(ctx, "k"))
	assertClosed(t, lost, "Reset drops the key's permits")
	assert.Equal(t, 0, c.InFlight("k"))
	later, d, err := c.TryAcquire(ctx, "k", 2)
	require.NoError(t, err)
	require.True(t, d.Allowed, "Reset freed the key")
	p.Release()
	assert.Equal(t, 2, c.InFlight("k"), "a Permit dropped by Reset releases nothing of a later holder's")
	later.Release()
}

func assertClosed(t *testing.T, ch <-chan struct{}, msg string) {
	t.Helper()
	select {
	case <-ch:
	default:
		t.Errorf("Lost is not closed: %s", msg)
	}
}

func assertOpen(t *testing.T, ch <-chan struct{}) {
	t.Helper()
	select {
	case <-ch:
		t.Error("Lost is closed while the permit is held")
	default:
	}
}

func TestConcurrencyMaxKeys(t *testing.T) {
	ctx := context.Background()
	c := newConcurrency(t, 1, ratelimit.WithMaxKeys(2))
	a, _, err := c.TryAcquire(ctx, "a", 1)
	require.NoError(t, err)
	b, _, err := c.TryAcquire(ctx, "b", 1)
	require.NoError(t, err)
	_, d, err := c.TryAcquire(ctx, "c", 1)
	require.ErrorIs(t, err, ratelimit.ErrTooManyKeys)
	assert.Equal(t, time.Second, d.RetryAfter)
	_, err = c.Acquire(ctx, "c", 1)
	require.ErrorIs(t, err, ratelimit.ErrTooManyKeys)
	_, d, err = c.TryAcquire(ctx, "a", 1)
	require.NoError(t, err, "a key held is no new key")
	assert.False(t, d.Allowed)
	a.Release()
	// "a" is parked now (uncounted): "c" has room, and then "a" has none.
	cp, d, err := c.TryAcquire(ctx, "c", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	_, _, err = c.TryAcquire(ctx, "a", 1)
	require.ErrorIs(t, err, ratelimit.ErrTooManyKeys, "a forgotten key counts again when it comes back")
	assert.Equal(t, 2, c.Len())
	b.Release()
	cp.Release()
	assert.Equal(t, 0, c.Len())
}

// TestConcurrencyNeverOvershoots: 64 goroutines on one key, half trying
// and half waiting, each holding its permits for a moment: what the holders
// count in flight never exceeds the limit, and everything is given back.
func TestConcurrencyNeverOvershoots(t *testing.T) {
	const limit, workers, rounds = 5, 64, 300
	c := newConcurrency(t, limit)
	ctx := context.Background()
	var inFlight, maxSeen, admitted atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 1))
			for range rounds {
				n := 1 + rng.IntN(2)
				var p ratelimit.Permit
				if w%2 == 0 {
					var d ratelimit.Decision
					var err error
					p, d, err = c.TryAcquire(ctx, "k", n)
					if !assert.NoError(t, err) || !d.Allowed {
						continue
					}
				} else {
					var err error
					if p, err = c.Acquire(ctx, "k", n); !assert.NoError(t, err) {
						return
					}
				}
				now := inFlight.Add(int64(n))
				for m := maxSeen.Load(); now > m && !maxSeen.CompareAndSwap(m, now); m = maxSeen.Load() {
				}
				admitted.Add(1)
				if rng.IntN(4) == 0 {
					time.Sleep(time.Duration(rng.IntN(50)) * time.Microsecond)
				}
				inFlight.Add(-int64(n))
				p.Release()
				if rng.IntN(3) == 0 {
					p.Release() // a second Release changes nothing
				}
			}
		}()
	}
	wg.Wait()
	assert.LessOrEqual(t, maxSeen.Load(), int64(limit), "in flight never above the limit")
	assert.Equal(t, int64(limit), maxSeen.Load(), "and the limit was reached")
	assert.Greater(t, admitted.Load(), int64(workers*rounds/2), "every waiter was served, some tries too")
	assert.Equal(t, 0, c.InFlight("k"))
	assert.Equal(t, 0, c.Len())
}

func TestConcurrencyObserver(t *testing.T) {
	ctx := context.Background()
	var mu sync.Mutex
	var events []ratelimit.Event
	obs := ratelimit.ObserverFunc(func(_ context.Context, e ratelimit.Event) {
		mu.Lock()
		defer mu.Unlock()
		e.Latency = 0
		events = append(events, e)
	})
	c := newConcurrency(t, 2, ratelimit.WithObserver(obs), ratelimit.WithName("exports"))
	p, _, err := c.TryAcquire(ctx, "k", 2)
	require.NoError(t, err)
	_, _, err = c.TryAcquire(ctx, "k", 1)
	require.NoError(t, err)
	_, _, err = c.TryAcquire(ctx, "k", 3)
	require.Error(t, err)
	p.Release()
	p.Release()
	q, err := c.Acquire(ctx, "k", 1)
	require.NoError(t, err)
	q.Release()

	base := ratelimit.Event{Name: "exports", Algorithm: ratelimit.ConcurrencyAlgorithm, Home: ratelimit.HomeKeyed}
	with := func(o ratelimit.Outcome, n int, d ratelimit.Decision, wait bool) ratelimit.Event {
		e := base
		e.Outcome, e.N, e.Decision, e.Wait = o, n, d, wait
		return e
	}
	exceeds := with(ratelimit.OutcomeError, 3, ratelimit.Decision{Limit: 2, RetryAfter: ratelimit.RetryNever}, false)
	exceeds.Err = events[2].Err
	require.ErrorIs(t, exceeds.Err, ratelimit.ErrExceedsLimit)
	assert.Equal(t, []ratelimit.Event{
		with(ratelimit.OutcomeAllowed, 2, ratelimit.Decision{Allowed: true, Limit: 2}, false),
		with(ratelimit.OutcomeDenied, 1, ratelimit.Decision{Limit: 2}, false),
		exceeds,
		with(ratelimit.OutcomeReleased, 2, ratelimit.Decision{Allowed: true, Limit: 2, Remaining: 2}, false),
		with(ratelimit.OutcomeAllowed, 1, ratelimit.Decision{Allowed: true, Limit: 2}, true),
		with(ratelimit.OutcomeReleased, 1, ratelimit.Decision{Allowed: true, Limit: 2, Remaining: 2}, false),
	}, events)
	assert.Equal(t, "released", ratelimit.OutcomeReleased.String())
	assert.Equal(t, "concurrency", ratelimit.ConcurrencyAlgorithm.String())
}

func TestConcurrencyIsNoPolicy(t *testing.T) {
	err := ratelimit.Policy{Algorithm: ratelimit.ConcurrencyAlgorithm, Limit: 3}.Validate()
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "NewConcurrency")
	_, err = ratelimit.NewKeyed(ratelimit.Policy{Algorithm: ratelimit.ConcurrencyAlgorithm, Limit: 3})
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
}

func TestConcurrencyTryAcquireAllocatesNothing(t *testing.T) {
	ctx := context.Background()
	c := newConcurrency(t, 4)
	hold, _, err := c.TryAcquire(ctx, "other", 1) // another key of some shard stays held
	require.NoError(t, err)
	defer hold.Release()
	allocs := testing.AllocsPerRun(1000, func() {
		p, _, _ := c.TryAcquire(ctx, "k", 1)
		p.Release()
	})
	assert.Zero(t, allocs)
}
