package redislimit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/require"
)

// The concurrency limit on a real Redis: configuration, the permits'
// life (acquire, release, renewal, loss), waiting, the failure policy and
// the observer. Renewal and expiry run on the Redis server's clock, so
// the tests that watch them wait in real time, with the shortest expiry
// (1s) and bounds of whole renewal periods.

// newCC returns a Concurrency on c with a prefix of its own, closed when
// t ends.
func newCC(t testing.TB, c redis.UniversalClient, limit int, opts ...Option) *Concurrency {
	t.Helper()
	cc, err := NewConcurrency(c, limit, append([]Option{WithPrefix(uniquePrefix(t))}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

func isLost(p ratelimit.Permit) bool {
	select {
	case <-p.Lost():
		return true
	default:
		return false
	}
}

func TestConcurrencyConfig(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for _, tc := range []struct {
		limit int
		opts  []Option
		want  string
	}{
		{0, nil, "limit must be positive"},
		{-1, nil, "limit must be positive"},
		{4, []Option{WithLeases(LeaseConfig{})}, "WithLeases does not apply"},
		{4, []Option{WithDenyCache(10)}, "WithDenyCache does not apply"},
		{4, []Option{WithPrevious(ratelimit.FixedWindowPolicy(1, time.Second), ratelimit.KeepUsed)}, "WithPrevious does not apply"},
		{4, []Option{WithLocalFallback(2)}, "WithLocalFallback does not apply"},
		{4, []Option{WithClock(fakeclock.NewManual(mockStart))}, "WithClock does not apply"},
		{4, []Option{WithPermitExpiry(999 * time.Millisecond)}, "WithPermitExpiry must be"},
		{4, []Option{WithPermitExpiry(time.Hour + time.Millisecond)}, "WithPermitExpiry must be"},
		{4, []Option{WithPermitExpiry(1500*time.Millisecond + time.Microsecond)}, "WithPermitExpiry must be"},
		{4, []Option{WithTimeout(0)}, "WithTimeout must be positive"},
	} {
		_, err := NewConcurrency(c, tc.limit, tc.opts...)
		require.ErrorIs(t, err, ratelimit.ErrInvalidConfig, tc.want)
		require.ErrorContains(t, err, tc.want)
		require.ErrorContains(t, err, "ratelimit:")
	}
	_, err := NewConcurrency(nil, 4)
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	_, err = New(c, ratelimit.FixedWindowPolicy(1, time.Second), WithPermitExpiry(time.Second))
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	require.ErrorContains(t, err, "WithPermitExpiry applies only to NewConcurrency")
	cc, err := NewConcurrency(c, 4, WithPermitExpiry(time.Hour), WithPlainKeys(), WithBreaker(0),
		WithFailurePolicy(FailClosed), WithName("x"), WithLogger(nil), WithErrorReportInterval(0), WithTimeout(time.Second))
	require.NoError(t, err)
	require.Equal(t, 4, cc.Limit())
	require.NoError(t, cc.Close())
	require.NoError(t, cc.Close())
}

func TestConcurrencyAcquireRelease(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	cc := newCC(t, c, 5)
	ctx := bg()
	p1, d, err := cc.TryAcquire(ctx, "k", 2)
	require.NoError(t, err)
	require.Equal(t, ratelimit.Decision{Allowed: true, Limit: 5, Remaining: 3}, d)
	p2, d, err := cc.TryAcquire(ctx, "k", 3)
	require.NoError(t, err)
	require.Equal(t, ratelimit.Decision{Allowed: true, Limit: 5, Remaining: 0}, d)
	p3, d, err := cc.TryAcquire(ctx, "k", 1)
	require.NoError(t, err)
	require.Equal(t, ratelimit.Decision{Limit: 5, Remaining: 0}, d)
	require.True(t, isLost(p3), "a denial's zero Permit holds nothing")
	// Another key is independent.
	_, d, err = cc.TryAcquire(ctx, "other", 5)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	n, err := cc.InFlight(ctx, "k")
	require.NoError(t, err)
	require.Equal(t, 5, n)

	require.False(t, isLost(p1))
	copy1 := p1
	p1.Release()
	require.True(t, isLost(p1))
	copy1.Release() // idempotent, through any copy
	p1.Release()
	n, _ = cc.InFlight(ctx, "k")
	require.Equal(t, 3, n, "a second Release released nothing more")

	_, d, err = cc.TryAcquire(ctx, "k", 3)
	require.NoError(t, err)
	require.False(t, d.Allowed)
	require.Equal(t, 2, d.Remaining)
	p4, d, _ := cc.TryAcquire(ctx, "k", 2)
	require.True(t, d.Allowed)
	p2.Release()
	p4.Release()
	n, _ = cc.InFlight(ctx, "k")
	require.Equal(t, 0, n)

	for _, bad := range []int{0, -1, 6} {
		_, d, err := cc.TryAcquire(ctx, "k", bad)
		require.Error(t, err)
		require.Equal(t, ratelimit.RetryNever, d.RetryAfter)
		_, err = cc.Acquire(ctx, "k", bad)
		require.Error(t, err)
	}
	_, _, err = cc.TryAcquire(ctx, "k", 0)
	require.ErrorIs(t, err, ratelimit.ErrInvalidN)
	_, _, err = cc.TryAcquire(ctx, "k", 6)
	require.ErrorIs(t, err, ratelimit.ErrExceedsLimit)
	//lint:ignore SA1012 a nil ctx is an error, tested
	_, _, err = cc.TryAcquire(nil, "k", 1) //nolint:staticcheck
	require.Error(t, err)

	require.NoError(t, cc.Close())
	_, _, err = cc.TryAcquire(ctx, "k", 1)
	require.ErrorIs(t, err, errClosed)
}

// TestConcurrencyReleaseNeverAnothers: a Release of a permit that expired
// and was given to another holder does not release the other's.
func TestConcurrencyReleaseNeverAnothers(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	a := newCC(t, c, 1, WithPermitExpiry(time.Second))
	prefix := a.base
	p, d, err := a.TryAcquire(bg(), "k", 1)
	require.NoError(t, err)
	require.True(t, d.Allowed)
	require.NoError(t, a.Close()) // stops renewing: p expires on Redis in 1s
	select {
	case <-p.Lost():
	case <-time.After(2 * time.Second):
		t.Fatal("an unrenewed permit's Lost did not close")
	}
	b, err := NewConcurrency(c, 1, WithPrefix(prefix[:len(prefix)-len("cc:1:{")]), WithPermitExpiry(time.Second))
	require.NoError(t, err)
	defer b.Close()
	var q ratelimit.Permit
	require.Eventually(t, func() bool {
		var d ratelimit.Decision
		q, d, _ = b.TryAcquire(bg(), "k", 1)
		return d.Allowed
	}, 3*time.Second, 10*time.Millisecond)
	p.Release() // the old holder's late Release
	n, err := b.InFlight(bg(), "k")
	require.NoError(t, err)
	require.Equal(t, 1, n, "the late Release released the new holder's permit")
	require.False(t, isLost(q))
	q.Release()
}

// TestConcurrencyRenewal: a permit held for several expiries stays held
// (renewed), and its Lost channel stays open; one whose member is deleted
// behind its back is lost at the next renewal.
func TestConcurrencyRenewal(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	// Renewed every 667ms, lost 1.6s after the last renewal was sent:
	// two rounds may be slow (a loaded machine) without losing anything.
	cc := newCC(t, c, 2, WithPermitExpiry(2*time.Second), WithTimeout(500*time.Millisecond))
	p, _, err := cc.TryAcquire(bg(), "k", 1)
	require.NoError(t, err)
	q, _, err := cc.TryAcquire(bg(), "j", 1)
	require.NoError(t, err)
	time.Sleep(4500 * time.Millisecond) // more than two expiries
	require.False(t, isLost(p))
	n, err := cc.InFlight(bg(), "k")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NoError(t, c.Del(bg(), cc.key("k")).Err())
	select {
	case <-p.Lost():
	case <-time.After(2 * time.Second): // a renewal round runs every 667ms
		t.Fatal("a permit gone from Redis was not lost at the next renewal")
	}
	require.False(t, isLost(q))
	p.Release()
	q.Release()
	require.NoError(t, cc.Reset(bg(), "j"))
}

func TestConcurrencyResetLosesLocalPermits(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	cc := newCC(t, c, 2)
	p, _, _ := cc.TryAcquire(bg(), "k", 2)
	require.NoError(t, cc.Reset(bg(), "k"))
	require.True(t, isLost(p))
	n, _ := cc.InFlight(bg(), "k")
	require.Equal(t, 0, n)
	p.Release()
	q, d, _ := cc.TryAcquire(bg(), "k", 2)
	require.True(t, d.Allowed)
	q.Release()
}

// TestConcurrencyAcquireWaitsFIFO: Acquires wait while the key is full, in
// the order they arrived, and one whose ctx ends gives up its place.
func TestConcurrencyAcquireWaitsFIFO(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	cc := newCC(t, c, 1)
	p, _, _ := cc.TryAcquire(bg(), "k", 1)
	ctx, cancel := context.WithTimeout(bg(), 50*time.Millisecond)
	defer cancel()
	_, err := cc.Acquire(ctx, "k", 1)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			q, err := cc.Acquire(bg(), "k", 1)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			q.Release()
		}()
		// Queued in order i: wait until it is in the queue.
		require.Eventually(t, func() bool {
			cc.mu.Lock()
			defer cc.mu.Unlock()
			q := cc.queues[cc.key("k")]
			return q != nil && len(q.w) == i+1
		}, time.Second, time.Millisecond)
	}
	p.Release()
	wg.Wait()
	require.Equal(t, []int{0, 1, 2, 3}, order)
	cc.mu.Lock()
	require.Empty(t, cc.queues)
	require.Empty(t, cc.held)
	cc.mu.Unlock()
}

// TestConcurrencyFailurePolicy: with Redis unreachable FailOpen admits with
// a Permit holding nothing (its Lost open until Release), FailClosed denies.
func TestConcurrencyFailurePolicy(t *testing.T) {
	t.Parallel()
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1})
	defer dead.Close()
	open := newCC(t, dead, 3, WithTimeout(50*time.Millisecond), WithBreaker(0))
	p, d, err := open.TryAcquire(bg(), "k", 1)
	require.ErrorIs(t, err, ErrUnavailable)
	require.Equal(t, ratelimit.Decision{Allowed: true, Limit: 3, Remaining: 2}, d)
	require.False(t, isLost(p))
	p.Release()
	require.True(t, isLost(p))
	p, err = open.Acquire(bg(), "k", 1)
	require.NoError(t, err, "FailOpen: Acquire admits")
	p.Release()

	closed := newCC(t, dead, 3, WithTimeout(50*time.Millisecond), WithFailurePolicy(FailClosed))
	p, d, err = closed.TryAcquire(bg(), "k", 1)
	require.ErrorIs(t, err, ErrUnavailable)
	require.Equal(t, ratelimit.Decision{Limit: 3, RetryAfter: FailClosedRetryAfter}, d)
	require.True(t, isLost(p))
	_, err = closed.Acquire(bg(), "k", 1)
	require.ErrorIs(t, err, ErrUnavailable)
	_, err = closed.InFlight(bg(), "k")
	require.ErrorIs(t, err, ErrUnavailable)
}

func TestConcurrencyObserver(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	obs := &events{}
	cc := newCC(t, c, 2, WithObserver(obs), WithName("login"))
	p, d, err := cc.TryAcquire(bg(), "k", 2)
	e := obs.requireOne(t, "admitted", ratelimit.OutcomeAllowed, 2, d, err)
	require.Equal(t, ratelimit.ConcurrencyAlgorithm, e.Algorithm)
	_, d, err = cc.TryAcquire(bg(), "k", 1)
	obs.requireOne(t, "denied", ratelimit.OutcomeDenied, 1, d, err)
	p.Release()
	got := obs.Take()
	require.Len(t, got, 1)
	require.Equal(t, ratelimit.OutcomeReleased, got[0].Outcome)
	require.Equal(t, ratelimit.Decision{Allowed: true, Limit: 2, Remaining: 2}, got[0].Decision)
	p.Release()
	require.Empty(t, obs.Take(), "a second Release reports nothing")
	q, err := cc.Acquire(bg(), "k", 1)
	require.NoError(t, err)
	got = obs.Take()
	require.Len(t, got, 1)
	require.True(t, got[0].Wait)
	require.Equal(t, ratelimit.OutcomeAllowed, got[0].Outcome)
	q.Release()
}
