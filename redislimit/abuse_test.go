package redislimit

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Adversarial tests: callers that give up, policies that change under
// traffic, concurrent refunds, secrets in keys. The rules are those of
// DESIGN.md's "Failure semantics".

// refusedClient returns a client of an address that refuses connections.
func refusedClient(t *testing.T, ctxTimeouts bool) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: ctxTimeouts})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// failurePolicies are the three failure policies as options.
var failurePolicies = []struct {
	name string
	opt  Option
}{
	{"open", WithFailurePolicy(FailOpen)},
	{"closed", WithFailurePolicy(FailClosed)},
	{"local", WithLocalFallback(1)},
}

// requireCanceled checks the answer to a caller whose ctx was done: a
// denial and the ctx's error, not a Redis failure.
func requireCanceled(t *testing.T, what string, d ratelimit.Decision, err, want error) {
	t.Helper()
	require.Falsef(t, d.Allowed, "%s with a done ctx = %+v, %v; want a denial", what, d, err)
	require.ErrorIsf(t, err, want, "%s with a done ctx", what)
	require.NotErrorIsf(t, err, ErrUnavailable, "%s with a done ctx: the caller's cancellation is not a Redis failure", what)
	require.Positivef(t, d.RetryAfter, "%s with a done ctx: RetryAfter", what)
}

// TestCanceledContextBeforeCall: a ctx already done gets a denial and
// ctx.Err() under every failure policy, charges nothing, reports nothing
// and does not open the breaker.
func TestCanceledContextBeforeCall(t *testing.T) {
	t.Parallel()
	_, live := startRedis(t)
	canceled, cancel := context.WithCancel(bg())
	cancel()
	expired, cancel2 := context.WithDeadline(bg(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, fp := range failurePolicies {
		for _, backend := range []string{"live", "refused"} {
			t.Run(fp.name+"/"+backend, func(t *testing.T) {
				t.Parallel()
				var c redis.UniversalClient = live
				if backend == "refused" {
					c = refusedClient(t, true)
				}
				logs := &logRecorder{}
				p := ratelimit.FixedWindowPolicy(3, time.Hour)
				l := mustNew(t, c, p, fp.opt, WithPrefix(uniquePrefix(t)), WithTimeout(200*time.Millisecond),
					WithLogger(logs.logger()), WithErrorReportInterval(0))
				for _, ctx := range []struct {
					ctx  context.Context
					want error
				}{{canceled, context.Canceled}, {expired, context.DeadlineExceeded}} {
					for range 5 {
						d, err := l.AllowN(ctx.ctx, "k", 1)
						requireCanceled(t, "AllowN", d, err, ctx.want)
						require.False(t, l.Allow(ctx.ctx, "k"), "Allow with a done ctx")
						d, err = l.Peek(ctx.ctx, "k", 1)
						requireCanceled(t, "Peek", d, err, ctx.want)
						require.ErrorIs(t, l.WaitN(ctx.ctx, "k", 1), ctx.want, "WaitN with a done ctx")
					}
				}
				require.Zero(t, logs.len(), "error reported for the caller's own cancellation")
				require.False(t, l.wire.BreakerOpen(), "breaker opened by the caller's own cancellation")
				if backend == "live" {
					d, err := l.Peek(bg(), "k", 0)
					require.NoError(t, err)
					require.Equal(t, 3, d.Remaining, "quota charged by calls with a done ctx")
				}
			})
		}
	}
}

// stopServer SIGSTOPs srv and returns a function that continues it
// (also called when t ends).
func stopServer(t *testing.T, pid int) func() {
	t.Helper()
	require.NoError(t, syscall.Kill(pid, syscall.SIGSTOP))
	var once sync.Once
	cont := func() { once.Do(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) }
	t.Cleanup(cont)
	return cont
}

// TestCanceledContextMidCall: a ctx that ends while Redis (hung) has not
// answered gets a denial and ctx.Err(), on the lone-caller path and the
// pipelined one, under every failure policy; nothing is reported and the
// breaker stays closed.
func TestCanceledContextMidCall(t *testing.T) {
	t.Parallel()
	for _, ctxTimeouts := range []bool{false, true} {
		for _, fp := range failurePolicies {
			t.Run(fmt.Sprintf("%s/ctxtimeouts=%t", fp.name, ctxTimeouts), func(t *testing.T) {
				t.Parallel()
				srv, _ := startRedis(t)
				if srv.PID() == 0 {
					t.Skip("needs a redis-server owned by the test")
				}
				c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: ctxTimeouts})
				t.Cleanup(func() { _ = c.Close() })
				logs := &logRecorder{}
				l := mustNew(t, c, ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 5), fp.opt, WithPrefix(uniquePrefix(t)),
					WithTimeout(time.Second), WithLogger(logs.logger()), WithErrorReportInterval(0))
				_, err := l.AllowN(bg(), "warm", 1)
				require.NoError(t, err)
				cont := stopServer(t, srv.PID())
				var wg sync.WaitGroup
				for i := range 8 { // several at once: the pipelined path too
					wg.Add(1)
					go func() {
						defer wg.Done()
						var ctx context.Context
						var cancel context.CancelFunc
						want := context.Canceled
						if i%2 == 0 {
							ctx, cancel = context.WithCancel(bg())
							time.AfterFunc(50*time.Millisecond, cancel)
						} else {
							ctx, cancel = context.WithTimeout(bg(), 50*time.Millisecond)
							want = context.DeadlineExceeded
						}
						defer cancel()
						start := time.Now()
						var d ratelimit.Decision
						var err error
						switch i % 4 {
						case 0, 1:
							d, err = l.AllowN(ctx, "k", 1)
						case 2:
							d, err = l.Peek(ctx, "k", 1)
						case 3:
							err = l.WaitN(ctx, "k", 1)
							assert.ErrorIs(t, err, want, "WaitN cancelled mid-call")
							assert.NotErrorIs(t, err, ErrUnavailable, "WaitN cancelled mid-call")
							return
						}
						assert.Falsef(t, d.Allowed, "call %d cancelled mid-call = %+v, %v; want a denial", i, d, err)
						assert.ErrorIsf(t, err, want, "call %d cancelled mid-call", i)
						assert.NotErrorIsf(t, err, ErrUnavailable, "call %d cancelled mid-call", i)
						// A lone caller runs its call on its own goroutine
						// (ctxtimeouts): go-redis honours the deadline (the
						// limiter's timeout) but not a cancellation, so it
						// may return as late as the timeout, still denied.
						assert.Less(t, time.Since(start), 2*time.Second+faultMargin, "call %d: returned long after its ctx ended", i)
					}()
				}
				wg.Wait()
				cont()
				require.Zero(t, logs.len(), "error reported for the callers' own cancellation")
				require.False(t, l.wire.BreakerOpen(), "breaker opened by the callers' own cancellation")
				_, err = l.AllowN(bg(), "after", 1)
				require.NoError(t, err, "after SIGCONT")
			})
		}
	}
}

// TestRefundIgnoresCallerContext: a refund made with a ctx that is done,
// or ends while the refund is in flight, still lands on Redis.
func TestRefundIgnoresCallerContext(t *testing.T) {
	t.Parallel()
	srv, c := startRedis(t)
	p := ratelimit.FixedWindowPolicy(5, time.Hour)
	l := mustNew(t, c, p, WithPrefix(uniquePrefix(t)))
	for range 5 {
		d, err := l.AllowN(bg(), "k", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	d, err := l.AllowN(bg(), "k", 1)
	require.NoError(t, err)
	require.False(t, d.Allowed)

	canceled, cancel := context.WithCancel(bg())
	cancel()
	require.NoError(t, l.RefundN(canceled, "k", 2), "RefundN with a done ctx")
	d, err = l.Peek(bg(), "k", 0)
	require.NoError(t, err)
	require.Equal(t, 2, d.Remaining, "quota after a refund of 2 with a done ctx")

	if srv.PID() == 0 {
		return
	}
	// Cancelled while Redis is hung: the refund lands once it answers.
	cont := stopServer(t, srv.PID())
	ctx, cancel := context.WithCancel(bg())
	time.AfterFunc(30*time.Millisecond, cancel)
	time.AfterFunc(150*time.Millisecond, cont)
	require.NoError(t, l.RefundN(ctx, "k", 3), "RefundN cancelled mid-call")
	d, err = l.Peek(bg(), "k", 0)
	require.NoError(t, err)
	require.Equal(t, 5, d.Remaining, "quota after a refund cancelled mid-call")
}

// TestPoliciesDoNotShareState: limiters of one algorithm with different
// policies, on one client and the default prefix, keep apart; a policy
// change on the same prefix starts fresh instead of locking keys out.
func TestPoliciesDoNotShareState(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for _, pair := range [][2]ratelimit.Policy{
		{ratelimit.FixedWindowPolicy(100, time.Minute), ratelimit.FixedWindowPolicy(10, time.Minute)},
		{ratelimit.SlidingCounterPolicy(100, time.Minute), ratelimit.SlidingCounterPolicy(10, time.Minute)},
		{ratelimit.SlidingLogPolicy(100, time.Minute), ratelimit.SlidingLogPolicy(10, time.Minute)},
		{ratelimit.TokenBucketPolicy(ratelimit.Per(100, time.Minute), 100), ratelimit.TokenBucketPolicy(ratelimit.Per(10, time.Minute), 10)},
		{ratelimit.LeakyBucketPolicy(100, time.Second), ratelimit.LeakyBucketPolicy(10, 6*time.Second)},
	} {
		t.Run(name(pair[0]), func(t *testing.T) {
			key := uniquePrefix(t) + "client"
			api := mustNew(t, c, pair[0])
			search := mustNew(t, c, pair[1])
			for i := range 10 {
				d, err := api.AllowN(bg(), key, 1)
				require.NoError(t, err)
				require.Truef(t, d.Allowed, "api call %d", i+1)
				d, err = search.AllowN(bg(), key, 1)
				require.NoError(t, err)
				require.Truef(t, d.Allowed, "search call %d of 10: denied, its state is shared with api's", i+1)
			}
			d, err := search.AllowN(bg(), key, 1)
			require.NoError(t, err)
			require.False(t, d.Allowed, "search call 11 of 10")
			d, err = api.Peek(bg(), key, 0)
			require.NoError(t, err)
			require.GreaterOrEqual(t, d.Remaining, 90, "api after 10 of its own calls")
		})
	}
	// Lengthening a window on the same prefix: fresh, not locked out.
	for _, pair := range [][2]ratelimit.Policy{
		{ratelimit.FixedWindowPolicy(5, time.Minute), ratelimit.FixedWindowPolicy(5, time.Hour)},
		{ratelimit.SlidingCounterPolicy(5, time.Minute), ratelimit.SlidingCounterPolicy(5, time.Hour)},
		{ratelimit.SlidingLogPolicy(5, time.Minute), ratelimit.SlidingLogPolicy(5, time.Hour)},
		{ratelimit.TokenBucketPolicy(ratelimit.Per(5, time.Minute), 5), ratelimit.TokenBucketPolicy(ratelimit.Per(5, time.Hour), 5)},
	} {
		t.Run("change/"+name(pair[0]), func(t *testing.T) {
			prefix := uniquePrefix(t)
			before := mustNew(t, c, pair[0], WithPrefix(prefix))
			for {
				d, err := before.AllowN(bg(), "k", 1)
				require.NoError(t, err)
				if !d.Allowed {
					break
				}
			}
			after := mustNew(t, c, pair[1], WithPrefix(prefix))
			require.NotEqual(t, before.Key("k"), after.Key("k"))
			d, err := after.AllowN(bg(), "k", 1)
			require.NoError(t, err)
			require.Truef(t, d.Allowed, "first call after the policy change = %+v", d)
			ttl, err := c.PTTL(bg(), after.Key("k")).Result()
			require.NoError(t, err)
			require.LessOrEqual(t, ttl, 2*pair[1].Period)
		})
	}
}

const secret = "sk_live_SECRET"

// TestKeyNamesHideKeys: Redis key names hold a fixed-length digest of the
// key, not the key, unless WithPlainKeys; Key returns the real name; the
// hash tag is the same for one key under every policy.
func TestKeyNamesHideKeys(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	prefix := uniquePrefix(t)
	for _, p := range policies() {
		l := mustNew(t, c, p, WithPrefix(prefix))
		_, err := l.AllowN(bg(), secret, 1)
		require.NoError(t, err)
		name := l.Key(secret)
		require.NotContains(t, name, "SECRET")
		require.Len(t, l.Key(strings.Repeat("x", 1000)), len(name), "key names have a fixed length")
		require.Len(t, l.Key(""), len(name))
		tag := name[strings.IndexByte(name, '{'):]
		other := mustNew(t, c, ratelimit.FixedWindowPolicy(1, time.Second), WithPrefix(prefix)).Key(secret)
		require.True(t, strings.HasSuffix(other, tag), "the same key has the same hash tag under every policy")
	}
	keys, err := c.Keys(bg(), prefix+"*").Result()
	require.NoError(t, err)
	require.NotEmpty(t, keys)
	for _, k := range keys {
		require.NotContains(t, k, "SECRET", "Redis key name")
	}
	// Key is the real name: the state lives there.
	l := mustNew(t, c, ratelimit.FixedWindowPolicy(5, time.Hour), WithPrefix(prefix))
	_, err = l.AllowN(bg(), secret, 1)
	require.NoError(t, err)
	n, err := c.Exists(bg(), l.Key(secret)).Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "no state at Key(key)")

	plain := mustNew(t, c, ratelimit.FixedWindowPolicy(5, time.Hour), WithPrefix(prefix), WithPlainKeys())
	require.True(t, strings.HasSuffix(plain.Key("user42"), ":{user42}"), "WithPlainKeys: %s", plain.Key("user42"))
	_, err = plain.AllowN(bg(), "user42", 1)
	require.NoError(t, err)
	n, err = c.Exists(bg(), plain.Key("user42")).Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

// TestSecretsNeverInErrors runs a key that is a secret through every
// operation against a Redis that refuses connections, under every failure
// policy, with and without the breaker: no error, no log record and no
// observed Event contains it.
func TestSecretsNeverInErrors(t *testing.T) {
	t.Parallel()
	for _, fp := range failurePolicies {
		for _, brk := range []time.Duration{0, time.Hour} {
			t.Run(fmt.Sprintf("%s/breaker=%v", fp.name, brk), func(t *testing.T) {
				t.Parallel()
				var mu sync.Mutex
				var texts []string
				logs := &logRecorder{}
				collect := func(err error) {
					if err != nil {
						mu.Lock()
						texts = append(texts, err.Error(), fmt.Sprintf("%+v", err), fmt.Sprintf("%#v", err))
						mu.Unlock()
					}
				}
				mock := clock.NewMock() // WaitN sleeps on it under the local fallback
				l := mustNew(t, refusedClient(t, true), ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Second), 5), fp.opt,
					WithBreaker(brk), WithTimeout(30*time.Millisecond), withLocalClock(mock), WithLogger(logs.logger()), WithErrorReportInterval(0),
					WithObserver(ratelimit.ObserverFunc(func(_ context.Context, e ratelimit.Event) {
						mu.Lock()
						texts = append(texts, fmt.Sprintf("%v", e), fmt.Sprintf("%+v", e), fmt.Sprintf("%#v", e), e.Name)
						mu.Unlock()
					})))
				for range 3 {
					_, err := l.AllowN(bg(), secret, 1)
					collect(err)
					_, err = l.Peek(bg(), secret, 1)
					collect(err)
					collect(l.RefundN(bg(), secret, 1))
					ctx, cancel := context.WithTimeout(bg(), 100*time.Millisecond)
					collect(l.WaitN(ctx, secret, 1))
					cancel()
				}
				texts = append(texts, logs.texts()...)
				require.NotZero(t, logs.len(), "nothing logged")
				require.NotEmpty(t, texts)
				for _, s := range texts {
					require.NotContains(t, s, "SECRET")
				}
			})
		}
	}
}

// TestNewTypedNilClient: a typed nil client is an error, not a panic.
func TestNewTypedNilClient(t *testing.T) {
	t.Parallel()
	p := ratelimit.FixedWindowPolicy(1, time.Second)
	for _, c := range []redis.UniversalClient{(*redis.Client)(nil), (*redis.ClusterClient)(nil), (*redis.Ring)(nil), nil} {
		require.NotPanics(t, func() {
			l, err := New(c, p)
			require.Errorf(t, err, "New(%T(nil))", c)
			require.Nil(t, l)
			require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
			require.True(t, strings.HasPrefix(err.Error(), "ratelimit: invalid configuration: redislimit.New: client is nil"), err.Error())
			require.Contains(t, err.Error(), "client is nil")
		})
	}
}

// TestFailLocalPolicy: WithLocalFallback selects the local fallback, and
// the last failure option given wins; WithFailurePolicy cannot select the
// fallback (it does not know the instances sharing the limit): given the
// fallback's value, it is an error that names WithLocalFallback.
func TestFailLocalPolicy(t *testing.T) {
	t.Parallel()
	c := refusedClient(t, false)
	p := ratelimit.FixedWindowPolicy(10, time.Second)
	for _, tc := range []struct {
		opts  []Option
		want  FailurePolicy
		local bool
	}{
		{[]Option{WithLocalFallback(2)}, failLocal, true},
		{[]Option{WithFailurePolicy(FailClosed), WithLocalFallback(2)}, failLocal, true},
		{[]Option{WithLocalFallback(2), WithFailurePolicy(FailClosed)}, FailClosed, false},
	} {
		l, err := New(c, p, tc.opts...)
		require.NoError(t, err)
		require.Equal(t, tc.want, l.failure)
		require.Equal(t, tc.local, l.cur.Load().fallback != nil)
	}
	_, err := New(c, p, WithFailurePolicy(failLocal))
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	require.Contains(t, err.Error(), "WithLocalFallback(instances)")
	require.Equal(t, "local", failLocal.String())
}

// TestDenyCacheInvalidatedByAdmission: denied n=4, admitted n=2, then
// n=4 again must wait what the reference says (4s), not the cached 2s.
func TestDenyCacheInvalidatedByAdmission(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	p := ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Second), 5)
	mock := fakeclock.NewManual(mockStart)
	mem, err := ratelimit.NewKeyed(p, ratelimit.WithClock(mock))
	require.NoError(t, err)
	l := mustNew(t, c, p, WithClock(mock), WithPrefix(uniquePrefix(t)))
	for _, n := range []int{3, 4, 2, 4, 4} {
		want, _ := mem.AllowN(bg(), "k", n)
		got, err := l.AllowN(bg(), "k", n)
		require.NoError(t, err)
		require.Equalf(t, roundDecision(want), got, "AllowN(%d)", n)
	}
	// Waiting the announced RetryAfter succeeds.
	d, _ := l.AllowN(bg(), "k", 4)
	mock.Add(d.RetryAfter)
	d, err = l.AllowN(bg(), "k", 4)
	require.NoError(t, err)
	require.True(t, d.Allowed, "AllowN(4) after the announced RetryAfter = %+v", d)

	// A refund invalidates too.
	d, _ = l.AllowN(bg(), "k", 1)
	require.False(t, d.Allowed)
	require.NoError(t, l.RefundN(bg(), "k", 1))
	d, _ = l.AllowN(bg(), "k", 1)
	require.True(t, d.Allowed, "AllowN after a refund = %+v", d)
}

// TestDenyCacheMicrosecondTime: with client time at a sub-microsecond
// instant, the cache must not deny past the moment the script (which
// truncates to the microsecond) admits.
func TestDenyCacheMicrosecondTime(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for _, p := range []ratelimit.Policy{
		ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Second), 1),
		ratelimit.LeakyBucketPolicy(1, time.Second),
		ratelimit.SlidingLogPolicy(1, time.Second),
	} {
		mock := fakeclock.NewManual(mockStart)
		mock.Add(500 * time.Nanosecond)
		l := mustNew(t, c, p, WithClock(mock), WithPrefix(uniquePrefix(t)))
		d, err := l.AllowN(bg(), "k", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
		d, err = l.AllowN(bg(), "k", 1)
		require.NoError(t, err)
		require.False(t, d.Allowed)
		// The script decided at the truncated microsecond; its RetryAfter
		// counts from there.
		mock.Add(d.RetryAfter - 500*time.Nanosecond)
		d, err = l.AllowN(bg(), "k", 1)
		require.NoError(t, err)
		require.Truef(t, d.Allowed, "%v: AllowN at the moment the script admits = %+v", p, d)
	}
}

// TestBreakerOnByDefault: with default options, Redis refusing
// connections costs the first call its timeout and the next ones nothing;
// the error says "connection refused"; WithBreaker(0) turns it off.
func TestBreakerOnByDefault(t *testing.T) {
	t.Parallel()
	for _, ctxTimeouts := range []bool{false, true} {
		t.Run(fmt.Sprintf("ctxtimeouts=%t", ctxTimeouts), func(t *testing.T) {
			t.Parallel()
			p := ratelimit.FixedWindowPolicy(5, time.Second)
			var dials atomic.Int64
			var dialer net.Dialer
			c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: ctxTimeouts,
				Dialer: func(ctx context.Context, network, addr string) (net.Conn, error) {
					dials.Add(1)
					return dialer.DialContext(ctx, network, addr)
				}})
			t.Cleanup(func() { _ = c.Close() })
			l, err := New(c, p, WithTimeout(time.Second))
			require.NoError(t, err)
			d, err := l.AllowN(bg(), "k", 1)
			require.True(t, d.Allowed, "FailOpen")
			require.ErrorIs(t, err, ErrUnavailable)
			require.NotErrorIs(t, err, ErrBreakerOpen)
			require.Contains(t, err.Error(), "connection refused", "the error names the cause")
			require.Positive(t, dials.Load(), "the first call tried Redis")
			for range 20 {
				before := dials.Load()
				_, err = l.AllowN(bg(), "k", 1)
				require.ErrorIs(t, err, ErrBreakerOpen, "after a failure, the breaker answers")
				require.Contains(t, err.Error(), "connection refused")
				// Answered without trying Redis: no dial. (The test
				// bounded the call by 500 ms, a latency a loaded machine
				// can come near.)
				require.Equal(t, before, dials.Load(), "a call answered by the breaker dialed Redis")
			}

			off, err := New(refusedClient(t, ctxTimeouts), p, WithTimeout(20*time.Millisecond), WithBreaker(0))
			require.NoError(t, err)
			for range 2 {
				_, err = off.AllowN(bg(), "k", 1)
				require.ErrorIs(t, err, ErrUnavailable)
				require.NotErrorIs(t, err, ErrBreakerOpen)
			}
		})
	}
}

// TestErrorReportsRateLimited: the logger hears at most one failure per
// report interval per limiter, and each report says how many failures were
// left out since the previous one, with the limit's name and algorithm.
func TestErrorReportsRateLimited(t *testing.T) {
	t.Parallel()
	logs := &logRecorder{}
	mock := fakeclock.NewManual(mockStart)
	l, err := New(refusedClient(t, true), ratelimit.FixedWindowPolicy(5, time.Second), WithTimeout(20*time.Millisecond),
		WithBreaker(0), withLocalClock(mock), WithLogger(logs.logger()), WithName("login"))
	require.NoError(t, err)
	for range 10 {
		_, err := l.AllowN(bg(), "k", 1)
		require.Error(t, err)
	}
	require.Equal(t, 1, logs.len(), "the logger heard every failure")
	mock.Add(defaultErrorReportInterval)
	_, err = l.AllowN(bg(), "k", 1)
	require.Error(t, err)
	require.Equal(t, 2, logs.len())
	first, second := logs.attrs(0), logs.attrs(1)
	require.EqualValues(t, 0, first["suppressed"].Int64())
	require.EqualValues(t, 9, second["suppressed"].Int64())
	require.Equal(t, "login", second["limit"].String())
	require.Equal(t, ratelimit.FixedWindowAlgorithm.String(), second["algorithm"].String())
	reported, ok := second["error"].Any().(error)
	require.True(t, ok, "error attribute is %T, want an error", second["error"].Any())
	require.ErrorIs(t, reported, ErrUnavailable)
	logs.mu.Lock()
	require.Equal(t, slog.LevelError, logs.records[1].Level)
	require.Equal(t, "ratelimit: redis unavailable", logs.records[1].Message)
	logs.mu.Unlock()
}

// TestErrorReportInterval: WithErrorReportInterval(0) reports every
// failure that tried Redis; without WithLogger the limiter reports nothing
// (not even to slog.Default(): the errors are returned, and a server
// serving the limit logs them, once); WithLogger(nil) reports nothing
// either. Not parallel: it sets the default logger.
func TestErrorReportInterval(t *testing.T) {
	logs := &logRecorder{}
	every := mustNew(t, refusedClient(t, true), ratelimit.FixedWindowPolicy(5, time.Second), WithTimeout(20*time.Millisecond),
		WithBreaker(0), WithLogger(logs.logger()), WithErrorReportInterval(0))
	for range 3 {
		_, err := every.AllowN(bg(), "k", 1)
		require.ErrorIs(t, err, ErrUnavailable)
	}
	require.Equal(t, 3, logs.len())

	before := slog.Default()
	t.Cleanup(func() { slog.SetDefault(before) })
	def := &logRecorder{}
	byDefault := mustNew(t, refusedClient(t, true), ratelimit.FixedWindowPolicy(5, time.Second), WithTimeout(20*time.Millisecond),
		WithBreaker(0))
	silenced := mustNew(t, refusedClient(t, true), ratelimit.FixedWindowPolicy(5, time.Second), WithTimeout(20*time.Millisecond),
		WithBreaker(0), WithLogger(nil), WithErrorReportInterval(0))
	slog.SetDefault(def.logger()) // after New: the default is read at each report
	_, err := byDefault.AllowN(bg(), "k", 1)
	require.ErrorIs(t, err, ErrUnavailable)
	require.Equal(t, 0, def.len(), "a report on slog.Default() without WithLogger")
	for range 3 {
		_, err := silenced.AllowN(bg(), "k", 1)
		require.ErrorIs(t, err, ErrUnavailable)
	}
	require.Equal(t, 0, def.len(), "WithLogger(nil) reported")
	require.Equal(t, 3, logs.len(), "WithLogger(nil) reported")
}

// TestAbuseDoneContextsUnderLoad: callers whose contexts end at random
// moments, mixed with ordinary callers, on a live Redis: no more than the
// limit is ever admitted, and every admission was charged.
func TestAbuseDoneContextsUnderLoad(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	p := ratelimit.SlidingLogPolicy(50, time.Hour)
	l := mustNew(t, c, p, WithPrefix(uniquePrefix(t)))
	var admitted atomic.Int64
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := newRand(uint64(w))
			for range 40 {
				ctx, cancel := context.WithTimeout(bg(), time.Duration(rng.IntN(300))*time.Microsecond)
				if rng.IntN(3) == 0 {
					cancel()
				}
				d, err := l.AllowN(ctx, "k", 1)
				cancel()
				if d.Allowed {
					admitted.Add(1)
					require.NoError(t, err)
				} else if err != nil {
					require.NotErrorIs(t, err, ErrUnavailable)
				}
			}
		}()
	}
	wg.Wait()
	require.LessOrEqual(t, admitted.Load(), int64(p.Limit))
	d, err := l.Peek(bg(), "k", 0)
	require.NoError(t, err)
	// Every admission was charged (calls abandoned in flight may have been
	// charged too: at most Remaining = limit - admitted).
	require.LessOrEqual(t, d.Remaining, p.Limit-int(admitted.Load()))
}

// TestAbuseConcurrentRefunds: refunds racing admissions and each other
// never raise a key above a fresh state, and the deny cache never keeps
// denying once refunds have restored quota.
func TestAbuseConcurrentRefunds(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for _, p := range []ratelimit.Policy{
		ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 20),
		ratelimit.FixedWindowPolicy(20, time.Hour),
		ratelimit.SlidingLogPolicy(20, time.Hour),
		ratelimit.LeakyBucketPolicy(20, time.Hour),
	} {
		t.Run(name(p), func(t *testing.T) {
			l := mustNew(t, c, p, WithPrefix(uniquePrefix(t)))
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 30 {
						if (w+i)%3 == 0 {
							ctx, cancel := context.WithCancel(bg())
							cancel() // a refund does not depend on its caller
							assert.NoError(t, l.RefundN(ctx, "k", 1))
						} else {
							_, err := l.AllowN(bg(), "k", 1)
							assert.NoError(t, err)
						}
					}
				}()
			}
			wg.Wait()
			d, err := l.Peek(bg(), "k", 0)
			require.NoError(t, err)
			require.LessOrEqual(t, d.Remaining, p.Limit)
			require.NoError(t, l.RefundN(bg(), "k", p.Limit))
			d, err = l.AllowN(bg(), "k", p.Limit)
			require.NoError(t, err)
			require.True(t, d.Allowed, "AllowN(limit) after a full refund = %+v", d)
		})
	}
}

// TestAbusePolicyChangeMidTraffic: a new policy deployed while the old
// one still serves traffic on the same prefix: each counts alone, neither
// locks the other's keys, and the new one starts with a full quota.
func TestAbusePolicyChangeMidTraffic(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	prefix := uniquePrefix(t)
	old := mustNew(t, c, ratelimit.FixedWindowPolicy(10, time.Minute), WithPrefix(prefix))
	neu := mustNew(t, c, ratelimit.FixedWindowPolicy(30, time.Hour), WithPrefix(prefix))
	var oldAdmitted, newAdmitted atomic.Int64
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, n := old, &oldAdmitted
			if w%2 == 1 {
				l, n = neu, &newAdmitted
			}
			for range 20 {
				d, err := l.AllowN(bg(), "k", 1)
				assert.NoError(t, err)
				if d.Allowed {
					n.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	require.EqualValues(t, 10, oldAdmitted.Load(), "old policy")
	require.EqualValues(t, 30, newAdmitted.Load(), "new policy")
}

// TestDocumentedKeyName: the example key name in docs/redis.md and the
// README is the real one.
func TestDocumentedKeyName(t *testing.T) {
	t.Parallel()
	l := mustNew(t, refusedClient(t, false), ratelimit.TokenBucketPolicy(ratelimit.Per(100, time.Minute), 20))
	require.Equal(t, "ratelimit:tb:53a22938:{6j_UO-HlfWLhY9rhn8dAvQ}", l.Key("user:42"))
}

// cancelOnDeny is a KeyedLimiter that denies and cancels the request's
// ctx, as a client that goes away right after the denial.
type cancelOnDeny struct {
	ratelimit.KeyedLimiter
	cancel context.CancelFunc
}

func (c cancelOnDeny) AllowN(context.Context, string, int) (ratelimit.Decision, error) {
	c.cancel()
	return ratelimit.Decision{Limit: 1, RetryAfter: time.Second}, nil
}

// TestAllowAllRefundAfterClientLeft: AllowAll charges a Redis limit, a
// later dimension denies and the client goes away at that moment: the
// refund still lands, and the Redis limit is back to its full quota.
func TestAllowAllRefundAfterClientLeft(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	l := mustNew(t, c, ratelimit.FixedWindowPolicy(5, time.Hour), WithPrefix(uniquePrefix(t)))
	for range 3 {
		ctx, cancel := context.WithCancel(bg())
		d, _ := ratelimit.AllowAll(ctx, 1,
			ratelimit.Dimension{Name: "redis", Limiter: l, Key: "k"},
			ratelimit.Dimension{Name: "deny", Limiter: cancelOnDeny{cancel: cancel}, Key: "k"})
		cancel()
		require.False(t, d.Allowed)
	}
	d, err := l.Peek(bg(), "k", 0)
	require.NoError(t, err)
	require.Equal(t, 5, d.Remaining, "denied requests left charged on Redis")
}

// TestTimeoutReportedAsTimeout: a hung Redis (connected, not answering)
// is reported as a timeout, not as a connection failure.
func TestTimeoutReportedAsTimeout(t *testing.T) {
	t.Parallel()
	for _, ctxTimeouts := range []bool{false, true} {
		t.Run(fmt.Sprintf("ctxtimeouts=%t", ctxTimeouts), func(t *testing.T) {
			t.Parallel()
			srv, _ := startRedis(t)
			if srv.PID() == 0 {
				t.Skip("needs a redis-server owned by the test")
			}
			c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: ctxTimeouts})
			t.Cleanup(func() { _ = c.Close() })
			logs := &logRecorder{}
			l := mustNew(t, c, ratelimit.FixedWindowPolicy(5, time.Hour), WithPrefix(uniquePrefix(t)),
				WithTimeout(100*time.Millisecond), WithLogger(logs.logger()))
			_, err := l.AllowN(bg(), "warm", 1)
			require.NoError(t, err)
			cont := stopServer(t, srv.PID())
			d, err := l.AllowN(bg(), secret, 1)
			cont()
			require.True(t, d.Allowed, "FailOpen")
			require.ErrorIs(t, err, ErrUnavailable)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.Contains(t, err.Error(), "no reply within 100ms")
			require.NotContains(t, err.Error(), "cannot connect")
			require.NotContains(t, err.Error(), "SECRET")
			require.Equal(t, 1, logs.len(), "error not reported")
			reported, ok := logs.attrs(0)["error"].Any().(error)
			require.True(t, ok)
			require.Equal(t, err.Error(), reported.Error())
		})
	}
}

// TestNilContext: a nil ctx is a denial and an error from AllowN, Peek and
// WaitN, never a panic (it panicked before); RefundN, which does not
// depend on ctx, still refunds.
func TestNilContext(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	l := mustNew(t, c, ratelimit.FixedWindowPolicy(2, time.Hour), WithPrefix(uniquePrefix(t)))
	var nilCtx context.Context
	require.NotPanics(t, func() {
		d, err := l.AllowN(nilCtx, "k", 1)
		require.Error(t, err)
		require.False(t, d.Allowed)
		require.False(t, l.Allow(nilCtx, "k"))
		d, err = l.Peek(nilCtx, "k", 1)
		require.Error(t, err)
		require.False(t, d.Allowed)
		require.Error(t, l.WaitN(nilCtx, "k", 1))
		_, err = l.AllowN(bg(), "k", 2)
		require.NoError(t, err)
		require.NoError(t, l.RefundN(nilCtx, "k", 1))
	})
	d, err := l.Peek(bg(), "k", 0)
	require.NoError(t, err)
	require.Equal(t, 1, d.Remaining, "RefundN with a nil ctx refunded nothing")
}
