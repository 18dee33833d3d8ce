package redislimit

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/eventrec"
	"github.com/stretchr/testify/require"
)

// events is an Observer that keeps every Event it is given.
type events struct{ eventrec.Recorder }

// requireOne checks that exactly one Event was received since the last
// take, for a call that returned d and err, with outcome want, and returns
// it.
func (o *events) requireOne(t *testing.T, what string, want ratelimit.Outcome, n int, d ratelimit.Decision, err error) ratelimit.Event {
	t.Helper()
	got := o.Take()
	require.Lenf(t, got, 1, "%s: %d events, want exactly 1: %+v", what, len(got), got)
	e := got[0]
	require.Equalf(t, want, e.Outcome, "%s: Outcome (event %+v)", what, e)
	require.Equalf(t, "login", e.Name, "%s: Limit", what)
	require.Equalf(t, ratelimit.HomeRedis, e.Home, "%s: Home", what)
	require.Equalf(t, n, e.N, "%s: N", what)
	require.Equalf(t, d, e.Decision, "%s: Decision is not what the caller got", what)
	require.Equalf(t, err, e.Err, "%s: Err is not what the caller got", what)
	require.Positivef(t, e.Latency, "%s: Latency", what)
	return e
}

// TestObserverAllowNOutcomes: every AllowN call on a live Redis is
// observed exactly once, with the outcome, the limit's name, algorithm,
// home, n and the Decision and error the caller got: admitted, denied by
// Redis, denied by the deny cache, an impossible n,
// a done ctx and a nil ctx.
func TestObserverAllowNOutcomes(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for _, p := range []ratelimit.Policy{
		ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 3),
		ratelimit.LeakyBucketPolicy(3, time.Hour),
		ratelimit.FixedWindowPolicy(3, time.Hour),
		ratelimit.SlidingLogPolicy(3, time.Hour),
		ratelimit.SlidingCounterPolicy(3, time.Hour),
	} {
		t.Run(name(p), func(t *testing.T) {
			t.Parallel()
			obs := &events{}
			l := mustNew(t, c, p, WithPrefix(uniquePrefix(t)), WithObserver(obs), WithName("login"))
			ctx := bg()
			d, err := l.AllowN(ctx, "k", p.Limit)
			require.NoError(t, err)
			require.True(t, d.Allowed)
			e := obs.requireOne(t, "admitted", ratelimit.OutcomeAllowed, p.Limit, d, err)
			require.Equal(t, p.Algorithm, e.Algorithm)
			require.False(t, e.Wait)

			d, err = l.AllowN(ctx, "k", 1) // Redis denies
			require.NoError(t, err)
			require.False(t, d.Allowed)
			obs.requireOne(t, "denied", ratelimit.OutcomeDenied, 1, d, err)

			d, err = l.AllowN(ctx, "k", 1) // the deny cache denies (but the sliding counter's)
			require.NoError(t, err)
			obs.requireOne(t, "denied again", ratelimit.OutcomeDenied, 1, d, err)

			d, err = l.AllowN(ctx, "k", p.Limit+1)
			require.NoError(t, err)
			require.Equal(t, ratelimit.RetryNever, d.RetryAfter)
			obs.requireOne(t, "n above the limit", ratelimit.OutcomeDenied, p.Limit+1, d, err)

			done, cancel := context.WithCancel(ctx)
			cancel()
			d, err = l.AllowN(done, "k", 1)
			require.ErrorIs(t, err, context.Canceled)
			obs.requireOne(t, "done ctx", ratelimit.OutcomeError, 1, d, err)
			require.False(t, l.Allow(done, "k"))
			require.Len(t, obs.Take(), 1, "Allow: one event")

			//lint:ignore SA1012 a nil ctx is what is tested
			d, err = l.AllowN(nil, "k", 1)
			require.ErrorIs(t, err, errNilContext)
			obs.requireOne(t, "nil ctx", ratelimit.OutcomeError, 1, d, err)

			// Peek and RefundN are not decisions.
			_, err = l.Peek(ctx, "k", 1)
			require.NoError(t, err)
			require.NoError(t, l.RefundN(ctx, "k", 1))
			require.Empty(t, obs.Take(), "Peek or RefundN observed")
		})
	}
}

// TestObserverConcurrentCalls: calls that share pipelines (the batcher)
// or run alone (the lone caller, with ContextTimeoutEnabled) are each
// observed exactly once, with the outcome of their own Decision.
func TestObserverConcurrentCalls(t *testing.T) {
	t.Parallel()
	srv, _ := startRedis(t)
	for _, ctxTimeouts := range []bool{false, true} {
		t.Run(fmt.Sprintf("ctxtimeouts=%t", ctxTimeouts), func(t *testing.T) {
			t.Parallel()
			c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: ctxTimeouts})
			t.Cleanup(func() { _ = c.Close() })
			obs := &events{}
			l := mustNew(t, c, ratelimit.FixedWindowPolicy(50, time.Hour), WithPrefix(uniquePrefix(t)),
				WithObserver(obs), WithName("login"))
			const workers, calls = 16, 20
			var wg sync.WaitGroup
			var mu sync.Mutex
			var allowed, denied int
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range calls {
						d, err := l.AllowN(bg(), fmt.Sprintf("k%d", (w+i)%4), 1)
						if err != nil {
							t.Error(err)
							return
						}
						mu.Lock()
						if d.Allowed {
							allowed++
						} else {
							denied++
						}
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			got := obs.Take()
			require.Len(t, got, workers*calls, "events")
			var gotAllowed, gotDenied int
			for _, e := range got {
				require.Equal(t, e.Decision.Allowed, e.Outcome == ratelimit.OutcomeAllowed, "%+v", e)
				switch e.Outcome {
				case ratelimit.OutcomeAllowed:
					gotAllowed++
				case ratelimit.OutcomeDenied:
					gotDenied++
				default:
					t.Fatalf("unexpected outcome in %+v", e)
				}
			}
			require.Equal(t, allowed, gotAllowed)
			require.Equal(t, denied, gotDenied)
			require.Equal(t, 4*50, allowed, "admitted: 4 keys of 50")
		})
	}
}

// TestObserverFallback: while Redis refuses connections, every call is
// observed once as a Fallback with the failure policy's Decision and the
// error, wrapping ErrUnavailable: the call that tried Redis, and the calls
// the breaker answered (ErrBreakerOpen), under every failure policy. A
// done ctx is still an Error, not a Fallback.
func TestObserverFallback(t *testing.T) {
	t.Parallel()
	for _, fp := range failurePolicies {
		t.Run(fp.name, func(t *testing.T) {
			t.Parallel()
			obs := &events{}
			l := mustNew(t, refusedClient(t, true), ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 5), fp.opt,
				WithTimeout(50*time.Millisecond), WithBreaker(time.Hour), WithObserver(obs), WithName("login"))
			d, err := l.AllowN(bg(), "k", 1)
			require.ErrorIs(t, err, ErrUnavailable)
			require.NotErrorIs(t, err, ErrBreakerOpen)
			obs.requireOne(t, "Redis refused", ratelimit.OutcomeFallback, 1, d, err)
			require.Equal(t, fp.name != "closed", d.Allowed, "the failure policy's Decision")
			for i := range 3 {
				d, err = l.AllowN(bg(), "k", 2)
				require.ErrorIs(t, err, ErrBreakerOpen)
				obs.requireOne(t, fmt.Sprintf("breaker open, call %d", i), ratelimit.OutcomeFallback, 2, d, err)
			}
			done, cancel := context.WithCancel(bg())
			cancel()
			d, err = l.AllowN(done, "k", 1)
			obs.requireOne(t, "done ctx with Redis down", ratelimit.OutcomeError, 1, d, err)
		})
	}
}

// TestObserverWaitN: a WaitN call is observed once when it returns, with
// Wait set: Allowed after waiting (its retries are not observed), Error
// for an impossible n or a wait that would outlast the deadline, Fallback
// when FailClosed refuses for want of Redis. Latency includes the wait.
func TestObserverWaitN(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	obs := &events{}
	const every = 30 * time.Millisecond
	l := mustNew(t, c, ratelimit.TokenBucketPolicy(ratelimit.Per(1, every), 1), WithPrefix(uniquePrefix(t)),
		WithObserver(obs), WithName("login"), WithDenyCache(0))
	ctx := bg()
	require.NoError(t, l.Wait(ctx, "k"))
	e := obs.requireOne(t, "Wait, no wait", ratelimit.OutcomeAllowed, 1, obs.peekDecision(), nil)
	require.True(t, e.Wait)

	require.NoError(t, l.WaitN(ctx, "k", 1)) // waits about every
	e = obs.requireOne(t, "WaitN after waiting", ratelimit.OutcomeAllowed, 1, obs.peekDecision(), nil)
	require.True(t, e.Wait)
	require.GreaterOrEqual(t, e.Latency, every/2, "Latency does not include the wait")

	err := l.WaitN(ctx, "k", 2)
	require.ErrorIs(t, err, ratelimit.ErrExceedsLimit)
	e = obs.requireOne(t, "WaitN above the limit", ratelimit.OutcomeError, 2, obs.peekDecision(), err)
	require.True(t, e.Wait)

	// A wait of an hour against a deadline of seconds: refused at once,
	// however slow a loaded machine makes the round trip to Redis.
	slow := mustNew(t, c, ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 1), WithPrefix(uniquePrefix(t)),
		WithObserver(obs), WithName("login"), WithDenyCache(0))
	require.NoError(t, slow.Wait(ctx, "k"))
	obs.requireOne(t, "Wait on the slow limiter", ratelimit.OutcomeAllowed, 1, obs.peekDecision(), nil)
	short, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	err = slow.WaitN(short, "k", 1)
	require.ErrorIs(t, err, ratelimit.ErrDeadline)
	obs.requireOne(t, "WaitN past the deadline", ratelimit.OutcomeError, 1, obs.peekDecision(), err)

	closed := mustNew(t, refusedClient(t, true), ratelimit.TokenBucketPolicy(ratelimit.Per(1, every), 1), WithFailurePolicy(FailClosed),
		WithTimeout(50*time.Millisecond), WithObserver(obs), WithName("login"))
	err = closed.WaitN(ctx, "k", 1)
	require.ErrorIs(t, err, ErrUnavailable)
	obs.requireOne(t, "WaitN, FailClosed, Redis refused", ratelimit.OutcomeFallback, 1, obs.peekDecision(), err)
}

// peekDecision returns the Decision of the one pending Event, so that
// requireOne can check the rest of it for a call that returns no Decision
// (WaitN).
func (o *events) peekDecision() ratelimit.Decision {
	all := o.All()
	if len(all) != 1 {
		return ratelimit.Decision{}
	}
	return all[0].Decision
}
