package ratelimit

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recorder is an Observer that keeps every Event.
type recorder struct {
	mu     sync.Mutex
	events []Event
	ctxs   []context.Context
}

func (r *recorder) Observe(ctx context.Context, e Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
	r.ctxs = append(r.ctxs, ctx)
}

// take returns the events recorded since the last take.
func (r *recorder) take() []Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := r.events
	r.events, r.ctxs = nil, nil
	return e
}

// observerPolicies admit 2 events, then deny for a long time: an hour per
// event.
var observerPolicies = []Policy{
	TokenBucketPolicy(Per(1, time.Hour), 2),
	LeakyBucketPolicy(2, time.Hour),
	FixedWindowPolicy(2, time.Hour),
	SlidingLogPolicy(2, time.Hour),
	SlidingCounterPolicy(2, time.Hour),
	QuotaPolicy(2, Calendar{Unit: Daily}),
}

// wantEvent checks one Event's fields other than Latency.
func wantEvent(t *testing.T, got []Event, p Policy, home Home, n int, outcome Outcome, wait bool, errIs error) {
	t.Helper()
	require.Len(t, got, 1, "events for one call")
	e := got[0]
	assert.Equal(t, "api", e.Name, "Limit")
	assert.Equal(t, p.Algorithm, e.Algorithm, "Algorithm")
	assert.Equal(t, home, e.Home, "Home")
	assert.Equal(t, n, e.N, "N")
	assert.Equal(t, outcome, e.Outcome, "Outcome")
	assert.Equal(t, wait, e.Wait, "Wait")
	assert.Equal(t, p.Limit, e.Decision.Limit, "Decision.Limit")
	assert.Equal(t, outcome == OutcomeAllowed, e.Decision.Allowed, "Decision.Allowed")
	if errIs == nil {
		assert.NoError(t, e.Err)
	} else {
		assert.ErrorIs(t, e.Err, errIs)
	}
	assert.GreaterOrEqual(t, e.Latency, time.Duration(0), "Latency")
	assert.NotContains(t, fmt.Sprintf("%+v", e), "secret-key", "an Event must never hold the key")
}

// TestObserverSingleLimiter: every AllowN and WaitN of a single limiter
// reports exactly one Event, with the right outcome, for every algorithm;
// Peek reports nothing, and the retries of a WaitN report nothing.
func TestObserverSingleLimiter(t *testing.T) {
	t.Parallel()
	for _, p := range observerPolicies {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			t.Parallel()
			rec := &recorder{}
			clk := fakeclock.NewInstant(testStart)
			l, err := p.NewLimiter(WithClock(clk), WithObserver(rec), WithName("api"))
			require.NoError(t, err)

			d := l.AllowN(2)
			require.True(t, d.Allowed)
			wantEvent(t, rec.take(), p, HomeMemory, 2, OutcomeAllowed, false, nil)

			assert.False(t, l.Allow())
			wantEvent(t, rec.take(), p, HomeMemory, 1, OutcomeDenied, false, nil)

			l.AllowN(0)
			wantEvent(t, rec.take(), p, HomeMemory, 0, OutcomeError, false, ErrInvalidN)
			l.AllowN(3)
			wantEvent(t, rec.take(), p, HomeMemory, 3, OutcomeError, false, ErrExceedsLimit)

			l.Peek(1)
			l.Peek(0)
			assert.Empty(t, rec.take(), "Peek is not a decision")

			// A WaitN that waits (the window algorithms retry after each
			// RetryAfter; the buckets take their place in line) reports
			// one Event, when it returns. A full leaky bucket refuses
			// waiters: let one event drain first.
			if p.Algorithm == LeakyBucketAlgorithm {
				<-clk.After(time.Hour)
			}
			require.NoError(t, l.WaitN(context.Background(), 1))
			wantEvent(t, rec.take(), p, HomeMemory, 1, OutcomeAllowed, true, nil)

			require.Error(t, l.WaitN(context.Background(), 3))
			wantEvent(t, rec.take(), p, HomeMemory, 3, OutcomeError, true, ErrExceedsLimit)

			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			require.ErrorIs(t, l.Wait(ctx), context.Canceled)
			wantEvent(t, rec.take(), p, HomeMemory, 1, OutcomeError, true, context.Canceled)
		})
	}
}

// TestObserverKeyed: the same for Keyed, plus a key cap refusal, and the
// context passed through. (Shadow mode is the server's to report: a
// limiter reports the denial it makes, see httplimit.)
func TestObserverKeyed(t *testing.T) {
	t.Parallel()
	for _, p := range observerPolicies {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			t.Parallel()
			rec := &recorder{}
			clk := fakeclock.NewInstant(testStart)
			k, err := NewKeyed(p, WithClock(clk), WithObserver(rec), WithName("api"), WithMaxKeys(1))
			require.NoError(t, err)
			type ctxKey struct{}
			ctx := context.WithValue(context.Background(), ctxKey{}, "request")
			const key = "secret-key"

			_, err = k.AllowN(ctx, key, 2)
			require.NoError(t, err)
			wantEvent(t, rec.take(), p, HomeKeyed, 2, OutcomeAllowed, false, nil)

			assert.False(t, k.Allow(ctx, key))
			rec.mu.Lock()
			require.Len(t, rec.ctxs, 1)
			assert.Equal(t, "request", rec.ctxs[0].Value(ctxKey{}), "the Observer gets the caller's ctx")
			rec.mu.Unlock()
			wantEvent(t, rec.take(), p, HomeKeyed, 1, OutcomeDenied, false, nil)

			_, err = k.AllowN(ctx, key, 0)
			require.NoError(t, err)
			wantEvent(t, rec.take(), p, HomeKeyed, 0, OutcomeError, false, ErrInvalidN)

			_, err = k.AllowN(ctx, "secret-key-2", 1) // the cap is one key
			require.ErrorIs(t, err, ErrTooManyKeys)
			wantEvent(t, rec.take(), p, HomeKeyed, 1, OutcomeError, false, ErrTooManyKeys)

			_, _ = k.Peek(ctx, key, 1)
			_ = k.RefundN(ctx, key, 1)
			assert.Empty(t, rec.take(), "Peek and RefundN are not decisions")
			_, err = k.AllowN(ctx, key, 1) // take back what was refunded
			require.NoError(t, err)
			rec.take()

			require.NoError(t, k.WaitN(ctx, key, 1)) // retries on the step clock
			wantEvent(t, rec.take(), p, HomeKeyed, 1, OutcomeAllowed, true, nil)
			require.NoError(t, k.Wait(ctx, key))
			wantEvent(t, rec.take(), p, HomeKeyed, 1, OutcomeAllowed, true, nil)

			done, cancel := context.WithCancel(ctx)
			cancel()
			require.ErrorIs(t, k.WaitN(done, key, 1), context.Canceled)
			wantEvent(t, rec.take(), p, HomeKeyed, 1, OutcomeError, true, context.Canceled)
		})
	}
}

// TestObserverAllowAllKeyed: AllowAll's locked path decides without
// Keyed.AllowN, and reports one Event per dimension to that dimension's
// Observer, with the dimension's own verdict.
func TestObserverAllowAllKeyed(t *testing.T) {
	t.Parallel()
	clk := fakeclock.NewManual(testStart)
	recA, recB := &recorder{}, &recorder{}
	a, err := NewKeyed(FixedWindowPolicy(5, time.Hour), WithClock(clk), WithObserver(recA), WithName("api"))
	require.NoError(t, err)
	b, err := NewKeyed(FixedWindowPolicy(1, time.Hour), WithClock(clk), WithObserver(recB), WithName("api"))
	require.NoError(t, err)
	quiet, err := NewKeyed(FixedWindowPolicy(5, time.Hour), WithClock(clk))
	require.NoError(t, err)
	tiered, err := NewTiered(func(context.Context, string) string { return "b" }, map[string]KeyedLimiter{"b": b})
	require.NoError(t, err)
	ctx := context.Background()
	dims := []Dimension{{Name: "a", Limiter: a, Key: "secret-key"}, {Name: "b", Limiter: tiered, Key: "secret-key"}, {Name: "quiet", Limiter: quiet, Key: "secret-key"}}

	md, err := AllowAll(ctx, 1, dims...)
	require.NoError(t, err)
	require.True(t, md.Allowed)
	wantEvent(t, recA.take(), a.Policy(), HomeKeyed, 1, OutcomeAllowed, false, nil)
	wantEvent(t, recB.take(), b.Policy(), HomeKeyed, 1, OutcomeAllowed, false, nil)

	md, err = AllowAll(ctx, 1, dims...)
	require.NoError(t, err)
	require.False(t, md.Allowed)
	// a would admit: its own verdict is Allowed, though nothing was charged.
	wantEvent(t, recA.take(), a.Policy(), HomeKeyed, 1, OutcomeAllowed, false, nil)
	wantEvent(t, recB.take(), b.Policy(), HomeKeyed, 1, OutcomeDenied, false, nil)
	assert.Equal(t, 4, must(a.Peek(ctx, "secret-key", 0)).Remaining, "a denied request charges nothing")
}

// TestObserverDoesNotAllocate: with an Observer set, AllowN allocates
// nothing, single and keyed.
func TestObserverDoesNotAllocate(t *testing.T) {
	obs := ObserverFunc(func(context.Context, Event) {})
	clk := fakeclock.NewManual(testStart)
	ctx := context.Background()
	for _, p := range observerPolicies {
		l, err := p.NewLimiter(WithClock(clk), WithObserver(obs), WithName("api"))
		require.NoError(t, err)
		k, err := NewKeyed(p, WithClock(clk), WithObserver(obs), WithName("api"))
		require.NoError(t, err)
		_, _ = k.AllowN(ctx, "key", 1)
		assert.Zero(t, testing.AllocsPerRun(100, func() { l.AllowN(1) }), "%v: single AllowN", p.Algorithm)
		assert.Zero(t, testing.AllocsPerRun(100, func() { _, _ = k.AllowN(ctx, "key", 1) }), "%v: keyed AllowN", p.Algorithm)
	}
}
