package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlkit/ratelimit/internal/errs"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testStart is the mock time at which the tests begin: a whole number of
// 2-hour periods since the Unix epoch, so every window used in these tests
// (1ms .. 2h) starts exactly there.
var testStart = time.Unix(1_699_999_200, 0)

// testLimiter is what every exported limiter offers beyond [Limiter].
type testLimiter interface {
	Limiter
}

// wantAllow is the Decision of an admitted request.
func wantAllow(limit, remaining int, reset time.Duration) Decision {
	return Decision{Allowed: true, Limit: limit, Remaining: remaining, ResetAfter: reset}
}

// wantDeny is the Decision of a denied request.
func wantDeny(limit, remaining int, retry, reset time.Duration) Decision {
	return Decision{Limit: limit, Remaining: remaining, RetryAfter: retry, ResetAfter: reset}
}

// step is one call in a scripted timeline: at testStart+at, call AllowN(n)
// (or Peek(n) when peek is set) and expect want, every field exactly.
type step struct {
	at   time.Duration
	n    int
	peek bool
	want Decision
}

// runSteps plays steps on l, whose clock is mock, checking every Decision.
func runSteps(t *testing.T, l testLimiter, mock *fakeclock.Mock, steps []step) {
	t.Helper()
	for i, s := range steps {
		if at := testStart.Add(s.at); !mock.Now().Equal(at) {
			mock.Set(at) // Set yields for 1ms of real time: only when needed
		}
		var got Decision
		verb := "AllowN"
		if s.peek {
			verb = "Peek"
			got = l.Peek(s.n)
		} else {
			got = l.AllowN(s.n)
		}
		assert.Equalf(t, s.want, got, "step %d: %s(%d) at %v = %+v, want %+v", i, verb, s.n, s.at, got, s.want)
	}
}

// repeatSteps returns count copies of s.
func repeatSteps(count int, s step) []step {
	out := make([]step, count)
	for i := range out {
		out[i] = s
	}
	return out
}

// concatSteps joins scripts.
func concatSteps(parts ...[]step) []step {
	var out []step
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// limiterCase describes one algorithm for the tests that run on all five.
type limiterCase struct {
	name string
	// exactRetry is false for the sliding counter, whose RetryAfter is an
	// estimate (sufficient, never 0) rather than exact.
	exactRetry bool
	// make returns a limiter with quota limit that is fully back after per
	// of idleness.
	make func(limit int, per time.Duration, opts ...Option) (testLimiter, error)
	// sim returns the same algorithm as make, driven directly by decide.
	sim func(t testing.TB, limit int, per time.Duration) sim
}

var limiterCases = []limiterCase{
	{
		name:       "tokenbucket",
		exactRetry: true,
		make: func(limit int, per time.Duration, opts ...Option) (testLimiter, error) {
			l, err := NewTokenBucket(Per(limit, per), limit, opts...)
			if err != nil {
				return nil, err
			}
			return l, nil
		},
		sim: func(t testing.TB, limit int, per time.Duration) sim { return newTokenBucketSim(t, limit, limit, per) },
	},
	{
		name:       "leakybucket",
		exactRetry: true,
		make: func(limit int, per time.Duration, opts ...Option) (testLimiter, error) {
			l, err := NewLeakyBucket(limit, per/time.Duration(limit), opts...)
			if err != nil {
				return nil, err
			}
			return l, nil
		},
		sim: func(t testing.TB, limit int, per time.Duration) sim {
			return newLeakyBucketSim(t, limit, per/time.Duration(limit))
		},
	},
	{
		name:       "fixedwindow",
		exactRetry: true,
		make: func(limit int, per time.Duration, opts ...Option) (testLimiter, error) {
			l, err := NewFixedWindow(limit, per, opts...)
			if err != nil {
				return nil, err
			}
			return l, nil
		},
		sim: func(t testing.TB, limit int, per time.Duration) sim { return newFixedWindowSim(t, limit, per) },
	},
	{
		name:       "slidinglog",
		exactRetry: true,
		make: func(limit int, per time.Duration, opts ...Option) (testLimiter, error) {
			l, err := NewSlidingLog(limit, per, opts...)
			if err != nil {
				return nil, err
			}
			return l, nil
		},
		sim: func(t testing.TB, limit int, per time.Duration) sim { return newSlidingLogSim(t, limit, per) },
	},
	{
		name:       "slidingcounter",
		exactRetry: false,
		make: func(limit int, per time.Duration, opts ...Option) (testLimiter, error) {
			l, err := NewSlidingCounter(limit, per, opts...)
			if err != nil {
				return nil, err
			}
			return l, nil
		},
		sim: func(t testing.TB, limit int, per time.Duration) sim { return newSlidingCounterSim(t, limit, per) },
	},
}

// newCaseLimiter returns tc's limiter with quota limit per per on mock.
func newCaseLimiter(t *testing.T, tc limiterCase, limit int, per time.Duration, mock Clock) testLimiter {
	t.Helper()
	l, err := tc.make(limit, per, WithClock(mock))
	require.NoError(t, err)
	require.NotNil(t, l)
	return l
}

// sim is one algorithm and its state, driven with explicit Unix-ns times.
type sim interface {
	// allowN is AllowN (commit) or Peek(n) (no commit) at now.
	allowN(now int64, n int, commit bool) Decision
	// quota is Peek(0) at now.
	quota(now int64) Decision
	limit() int64
	// clone returns an independent copy, for peeking at other times.
	clone() sim
}

type simOf[S any, A algorithm[S]] struct {
	alg       A
	st        S
	copyState func(*S) S // nil: S is a plain value
}

func (s *simOf[S, A]) allowN(now int64, n int, commit bool) Decision {
	if !commit {
		// What AllowN would return, on a copy: unlike Peek, AllowN(0) is
		// a denial.
		return s.clone().allowN(now, n, true)
	}
	return decideN(s.alg, &s.st, now, n, consume).decision(s.alg.limit())
}

func (s *simOf[S, A]) quota(now int64) Decision {
	return s.alg.decide(&s.st, now, 0, inspect).decision(s.alg.limit())
}

func (s *simOf[S, A]) limit() int64 { return s.alg.limit() }

func (s *simOf[S, A]) clone() sim {
	c := *s
	if s.copyState != nil {
		c.st = s.copyState(&s.st)
	}
	return &c
}

func newTokenBucketSim(t testing.TB, capacity, refill int, per time.Duration) sim {
	t.Helper()
	alg, err := newTokenBucketAlg(capacity, refill, per, policyParams)
	require.NoError(t, err)
	return &simOf[tbState, *tokenBucketAlg]{alg: alg}
}

func newLeakyBucketSim(t testing.TB, capacity int, leakEvery time.Duration) sim {
	t.Helper()
	alg, err := newLeakyBucketAlg(capacity, leakEvery, policyParams)
	require.NoError(t, err)
	return &simOf[lbState, *leakyBucketAlg]{alg: alg}
}

func newFixedWindowSim(t testing.TB, limit int, window time.Duration) sim {
	t.Helper()
	alg, err := newFixedWindowAlg(limit, window, policyParams)
	require.NoError(t, err)
	return &simOf[fwState, *fixedWindowAlg]{alg: alg}
}

func newSlidingLogSim(t testing.TB, limit int, window time.Duration) sim {
	t.Helper()
	alg, err := newSlidingLogAlg(limit, window, policyParams)
	require.NoError(t, err)
	return &simOf[slState, *slidingLogAlg]{alg: alg, copyState: copySlState}
}

func newSlidingCounterSim(t testing.TB, limit int, window time.Duration) sim {
	t.Helper()
	alg, err := newSlidingCounterAlg(limit, window, policyParams)
	require.NoError(t, err)
	return &simOf[scState, *slidingCounterAlg]{alg: alg}
}

// copySlState deep-copies a sliding log's state by replaying its entries
// into a fresh ring.
func copySlState(st *slState) slState {
	c := slState{total: st.total}
	for i := 0; i < st.log.Len(); i++ {
		e := st.log.At(i)
		c.log.AddBack(e.TS, e.N, math.MaxInt)
	}
	return c
}

func TestLimitReportsConfiguration(t *testing.T) {
	t.Parallel()
	for _, tc := range limiterCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			l := newCaseLimiter(t, tc, 7, 7*time.Second, fakeclock.New(testStart))
			assert.Equal(t, 7, l.Peek(0).Limit)
			assert.Equal(t, wantAllow(7, 7, 0), l.Peek(0), "Peek(0) of a fresh limiter")
		})
	}
}

// TestInvalidNConsumesNothing checks that n <= 0 and n > limit are denied
// with RetryNever, by AllowN and Peek alike, and consume nothing.
func TestInvalidNConsumesNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range limiterCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mock := fakeclock.New(testStart)
			l := newCaseLimiter(t, tc, 4, time.Second, mock)
			require.True(t, l.AllowN(1).Allowed)
			before := l.Peek(0)
			require.Equal(t, 3, before.Remaining)
			want := wantDeny(4, 3, RetryNever, before.ResetAfter)
			for _, n := range []int{0, -1, -100, math.MinInt, 5, 1000, math.MaxInt} {
				got := l.AllowN(n)
				assert.Equalf(t, want, got, "AllowN(%d) at %v = %+v, want %+v", n, mock.Now(), got, want)
				if n == 0 {
					continue // Peek(0) is the documented way to read the current quota
				}
				got = l.Peek(n)
				assert.Equalf(t, want, got, "Peek(%d) at %v = %+v, want %+v", n, mock.Now(), got, want)
			}
			assert.Equal(t, before, l.Peek(0), "Peek(0) after invalid requests")
			admitted := 0
			for range 4 {
				if l.Allow() {
					admitted++
				}
			}
			assert.Equal(t, 3, admitted, "events admitted after 1 of 4 was used")
		})
	}
}

// TestPeekDoesNotConsume checks that Peek(n) reports what AllowN(n) would
// and leaves the quota untouched.
func TestPeekDoesNotConsume(t *testing.T) {
	t.Parallel()
	for _, tc := range limiterCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mock := fakeclock.New(testStart)
			l := newCaseLimiter(t, tc, 4, time.Second, mock)
			mock.Add(123 * time.Millisecond)
			for range 3 {
				for n := 1; n <= 4; n++ {
					got := l.Peek(n)
					assert.Truef(t, got.Allowed, "Peek(%d) = %+v on a full limiter", n, got)
					assert.Equalf(t, 4-n, got.Remaining, "Peek(%d) = %+v", n, got)
					assert.Zerof(t, got.RetryAfter, "Peek(%d) = %+v", n, got)
				}
			}
			peek := l.Peek(3)
			got := l.AllowN(3)
			assert.Equal(t, peek, got, "AllowN(3) after Peek(3)")
			peek = l.Peek(2)
			assert.False(t, peek.Allowed, "Peek(2) with 1 left = %+v", peek)
			got = l.AllowN(2)
			assert.Equal(t, peek, got, "AllowN(2) after Peek(2)")
			assert.True(t, l.Allow(), "the last event after peeks")
		})
	}
}

// retryScenario consumes pre (at, n) pairs then makes a request at req
// that every algorithm configured with quota 4 per second denies.
type retryScenario struct {
	name  string
	pre   []step // want is ignored
	reqAt time.Duration
	reqN  int
}

var retryScenarios = []retryScenario{
	{name: "empty-one", pre: []step{{at: 0, n: 4}}, reqAt: 100 * time.Millisecond, reqN: 1},
	{name: "empty-all", pre: []step{{at: 0, n: 4}}, reqAt: 100 * time.Millisecond, reqN: 4},
	{name: "partial", pre: []step{{at: 0, n: 1}, {at: 300 * time.Millisecond, n: 3}}, reqAt: 600 * time.Millisecond, reqN: 4},
	{name: "two-batches", pre: []step{{at: 0, n: 2}, {at: 400 * time.Millisecond, n: 2}}, reqAt: 500 * time.Millisecond, reqN: 3},
	{name: "late-window", pre: []step{{at: 1337 * time.Millisecond, n: 4}}, reqAt: 1500 * time.Millisecond, reqN: 2},
	{name: "same-instant", pre: []step{{at: 700 * time.Millisecond, n: 3}}, reqAt: 700 * time.Millisecond, reqN: 2},
}

func playPre(t *testing.T, l testLimiter, mock *fakeclock.Mock, pre []step) {
	t.Helper()
	for _, s := range pre {
		mock.Set(testStart.Add(s.at))
		l.AllowN(s.n)
	}
}

// TestRetryAfterExact checks that retrying after RetryAfter succeeds and,
// for every algorithm but the sliding counter, that retrying 1ns earlier
// does not.
func TestRetryAfterExact(t *testing.T) {
	t.Parallel()
	for _, tc := range limiterCases {
		for _, sc := range retryScenarios {
			t.Run(tc.name+"/"+sc.name, func(t *testing.T) {
				t.Parallel()
				mock := fakeclock.New(testStart)
				l := newCaseLimiter(t, tc, 4, time.Second, mock)
				playPre(t, l, mock, sc.pre)
				mock.Set(testStart.Add(sc.reqAt))
				d := l.AllowN(sc.reqN)
				require.Falsef(t, d.Allowed, "AllowN(%d) at %v = %+v, want a denial", sc.reqN, sc.reqAt, d)
				require.Positivef(t, d.RetryAfter, "AllowN(%d) at %v = %+v: RetryAfter must be > 0 on a denial", sc.reqN, sc.reqAt, d)
				require.NotEqualf(t, RetryNever, d.RetryAfter, "AllowN(%d) at %v = %+v", sc.reqN, sc.reqAt, d)
				if tc.exactRetry {
					mock.Add(d.RetryAfter - 1)
					early := l.Peek(sc.reqN)
					assert.Falsef(t, early.Allowed, "Peek(%d) RetryAfter-1ns after %+v = %+v, want a denial", sc.reqN, d, early)
					if early.RetryAfter != RetryNever {
						assert.Equalf(t, time.Duration(1), early.RetryAfter, "Peek(%d) 1ns before retry time", sc.reqN)
					}
					mock.Add(1)
				} else {
					mock.Add(d.RetryAfter)
				}
				got := l.AllowN(sc.reqN)
				assert.Truef(t, got.Allowed, "AllowN(%d) RetryAfter after %+v = %+v, want allowed", sc.reqN, d, got)
			})
		}
	}
}

// TestResetAfterExact checks that after ResetAfter the limiter is back to
// its full quota, and 1ns earlier it is not.
func TestResetAfterExact(t *testing.T) {
	t.Parallel()
	for _, tc := range limiterCases {
		for _, sc := range retryScenarios {
			t.Run(tc.name+"/"+sc.name, func(t *testing.T) {
				t.Parallel()
				mock := fakeclock.New(testStart)
				l := newCaseLimiter(t, tc, 4, time.Second, mock)
				playPre(t, l, mock, sc.pre)
				mock.Set(testStart.Add(sc.reqAt))
				d := l.Peek(0)
				require.Positivef(t, d.ResetAfter, "Peek(0) at %v = %+v after use", sc.reqAt, d)
				require.Less(t, d.Remaining, d.Limit)
				mock.Add(d.ResetAfter - 1)
				got := l.Peek(0)
				assert.Lessf(t, got.Remaining, got.Limit, "Peek(0) ResetAfter-1ns after %+v = %+v, want less than full", d, got)
				assert.Equalf(t, time.Duration(1), got.ResetAfter, "Peek(0) ResetAfter-1ns after %+v = %+v", d, got)
				mock.Add(1)
				got = l.Peek(0)
				assert.Equalf(t, wantAllow(4, 4, 0), got, "Peek(0) ResetAfter after %+v = %+v", d, got)

				// The ResetAfter of an admitting AllowN is exact too.
				a := l.AllowN(2)
				require.True(t, a.Allowed)
				mock.Add(a.ResetAfter)
				got = l.Peek(0)
				assert.Equalf(t, wantAllow(4, 4, 0), got, "Peek(0) ResetAfter after AllowN(2) = %+v", a)
			})
		}
	}
}

// TestDeniedEventsNotRecorded floods one limiter with requests, most of
// them denied, and replays only the admitted ones on a twin: from then on
// both must report the same quota at every time.
func TestDeniedEventsNotRecorded(t *testing.T) {
	t.Parallel()
	for _, tc := range limiterCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mock1, mock2 := fakeclock.New(testStart), fakeclock.New(testStart)
			flooded := newCaseLimiter(t, tc, 4, time.Second, mock1)
			twin := newCaseLimiter(t, tc, 4, time.Second, mock2)
			admitted, denied := 0, 0
			for at := time.Duration(0); at < 1500*time.Millisecond; at += 37 * time.Millisecond {
				mock1.Set(testStart.Add(at))
				mock2.Set(testStart.Add(at))
				for _, n := range []int{1, 1, 4, 2, 1, 3, 1, 1, 1, 1, 1, 1, 1, 1} {
					if d := flooded.AllowN(n); d.Allowed {
						admitted++
						require.Truef(t, twin.AllowN(n).Allowed, "twin denied AllowN(%d) at %v that the flooded limiter admitted", n, at)
					} else {
						denied++
					}
				}
			}
			require.Positive(t, admitted)
			require.Greater(t, denied, 10*admitted, "the flood must be mostly denials")
			for _, at := range []time.Duration{1500, 1600, 1750, 1800, 1999, 2000, 2100, 2250, 2600, 3000, 5000} {
				at *= time.Millisecond
				mock1.Set(testStart.Add(at))
				mock2.Set(testStart.Add(at))
				got, want := flooded.Peek(0), twin.Peek(0)
				assert.Equalf(t, want, got, "Peek(0) at %v after a flood = %+v, want %+v as without the denials", at, got, want)
			}
		})
	}
}

// TestClockBackwardsNeverMints steps the mock clock back after using the
// quota: nothing may be admitted that would not be without the step.
func TestClockBackwardsNeverMints(t *testing.T) {
	t.Parallel()
	backs := []time.Duration{1, time.Millisecond, 250 * time.Millisecond, time.Second, 1500 * time.Millisecond, time.Hour, 10 * time.Second}
	for _, tc := range limiterCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const at = 10*time.Second + 400*time.Millisecond
			for _, back := range backs {
				mock := fakeclock.New(testStart)
				l := newCaseLimiter(t, tc, 4, time.Second, mock)
				mock.Set(testStart.Add(at))
				require.True(t, l.AllowN(4).Allowed)
				mock.Set(testStart.Add(at - back))
				for range 3 {
					d := l.AllowN(1)
					assert.Falsef(t, d.Allowed, "AllowN(1) %v before using the full quota = %+v", back, d)
					assert.Equalf(t, 0, d.Remaining, "AllowN(1) %v before using the full quota = %+v", back, d)
				}
				// Back to where we were, and on: exactly like a limiter that
				// never saw the clock go back.
				twinMock := fakeclock.New(testStart)
				twin := newCaseLimiter(t, tc, 4, time.Second, twinMock)
				twinMock.Set(testStart.Add(at))
				require.True(t, twin.AllowN(4).Allowed)
				for _, fwd := range []time.Duration{0, 1, 100 * time.Millisecond, 250 * time.Millisecond, 600 * time.Millisecond, time.Second, 3 * time.Second} {
					mock.Set(testStart.Add(at + fwd))
					twinMock.Set(testStart.Add(at + fwd))
					got, want := l.Peek(0), twin.Peek(0)
					assert.Equalf(t, want, got, "Peek(0) %v after the back step of %v = %+v, want %+v", fwd, back, got, want)
				}
			}
		})
	}
}

// TestClockBackwardsPartialQuota checks that events admitted while the
// clock is behind never leave more quota than the same events at the
// latest time seen.
func TestClockBackwardsPartialQuota(t *testing.T) {
	t.Parallel()
	for _, tc := range limiterCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			const at = 10*time.Second + 400*time.Millisecond
			mock, twinMock := fakeclock.New(testStart), fakeclock.New(testStart)
			l := newCaseLimiter(t, tc, 4, time.Second, mock)
			twin := newCaseLimiter(t, tc, 4, time.Second, twinMock)
			mock.Set(testStart.Add(at))
			twinMock.Set(testStart.Add(at))
			require.True(t, l.AllowN(2).Allowed)
			require.True(t, twin.AllowN(2).Allowed)
			mock.Set(testStart.Add(at - time.Hour))
			admitted := 0
			for range 10 {
				if l.Allow() {
					admitted++
				}
			}
			assert.LessOrEqual(t, admitted, 2, "events admitted an hour back with 2 left")
			// The twin gets the same events at the latest time seen.
			if admitted > 0 {
				require.True(t, twin.AllowN(admitted).Allowed)
			}
			for _, fwd := range []time.Duration{0, 1, 100 * time.Millisecond, 250 * time.Millisecond, 600 * time.Millisecond, time.Second, 3 * time.Second} {
				mock.Set(testStart.Add(at + fwd))
				twinMock.Set(testStart.Add(at + fwd))
				got, want := l.Peek(0), twin.Peek(0)
				assert.LessOrEqualf(t, got.Remaining, want.Remaining, "Peek(0) %v after the back step = %+v, more than %+v", fwd, got, want)
			}
		})
	}
}

// TestConcurrentAllowAdmitsExactlyLimit hammers one limiter from 64
// goroutines on a frozen clock: exactly the limit is admitted.
func TestConcurrentAllowAdmitsExactlyLimit(t *testing.T) {
	t.Parallel()
	const limit, goroutines, perGoroutine = 1000, 64, 40
	for _, tc := range limiterCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mock := fakeclock.New(testStart)
			mock.Add(123 * time.Millisecond)
			l := newCaseLimiter(t, tc, limit, time.Minute, mock)
			var admitted, weighted atomic.Int64
			var wg sync.WaitGroup
			start := make(chan struct{})
			for g := range goroutines {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for i := range perGoroutine {
						if g%4 == 0 && i%5 == 0 {
							if d := l.AllowN(3); d.Allowed {
								weighted.Add(3)
							}
							_ = l.Peek(2)
							continue
						}
						if l.Allow() {
							admitted.Add(1)
						}
					}
				}()
			}
			close(start)
			wg.Wait()
			assert.Equal(t, int64(limit), admitted.Load()+weighted.Load(), "events admitted by %d goroutines on a frozen clock", goroutines)
			d := l.Peek(1)
			assert.False(t, d.Allowed, "Peek(1) after the hammering = %+v", d)
			assert.Equal(t, 0, d.Remaining, "Peek(1) after the hammering = %+v", d)
			assert.False(t, l.Allow())
		})
	}
}

// saturate drives s from start to start+elapsed in steps of step, admitting
// single events at each step until one is denied, and returns the number
// admitted at each step.
func saturate(t *testing.T, s sim, start int64, elapsed, step time.Duration) []int64 {
	t.Helper()
	counts := make([]int64, 0, elapsed/step+1)
	for now := start; now <= start+int64(elapsed); now += int64(step) {
		var c int64
		for {
			d := s.allowN(now, 1, true)
			if !d.Allowed {
				break
			}
			c++
			if c > s.limit() {
				t.Fatalf("more than limit %d admitted at %d", s.limit(), now)
			}
		}
		counts = append(counts, c)
	}
	return counts
}

func sum(xs []int64) int64 {
	var s int64
	for _, x := range xs {
		s += x
	}
	return s
}

// TestSaturation calls Allow as often as each algorithm admits, every 1ms
// for 60s of simulated time, and checks the total against the exact bound.
func TestSaturation(t *testing.T) {
	t.Parallel()
	// An arbitrary start, aligned to nothing in particular.
	const start = int64(1_699_999_200_123_456_789)
	const elapsed = 60 * time.Second
	const stepLen = time.Millisecond

	t.Run("tokenbucket", func(t *testing.T) {
		t.Parallel()
		// 5 + floor(7 * 60s / 300ms) = 5 + 1400.
		got := sum(saturate(t, newTokenBucketSim(t, 5, 7, 300*time.Millisecond), start, elapsed, stepLen))
		assert.Equal(t, int64(5+7*int64(elapsed)/int64(300*time.Millisecond)), got)
		assert.Equal(t, int64(1405), got)
	})
	t.Run("tokenbucket-thirds", func(t *testing.T) {
		t.Parallel()
		// 3 per second is 333,333,333.3ns per token: 2 + floor(3*60) = 182.
		got := sum(saturate(t, newTokenBucketSim(t, 2, 3, time.Second), start, elapsed, stepLen))
		assert.Equal(t, int64(182), got)
	})
	t.Run("leakybucket", func(t *testing.T) {
		t.Parallel()
		// 5 + floor(60s / 7.3ms) = 5 + 8219.
		got := sum(saturate(t, newLeakyBucketSim(t, 5, 7300*time.Microsecond), start, elapsed, stepLen))
		assert.Equal(t, int64(5)+int64(elapsed)/int64(7300*time.Microsecond), got)
		assert.Equal(t, int64(8224), got)
	})
	t.Run("fixedwindow", func(t *testing.T) {
		t.Parallel()
		const window = 700 * time.Millisecond
		windows := (start+int64(elapsed))/int64(window) - start/int64(window) + 1
		got := sum(saturate(t, newFixedWindowSim(t, 5, window), start, elapsed, stepLen))
		assert.Equal(t, 5*windows, got)
		assert.Equal(t, int64(5*87), got, "60s from an unaligned start touches 87 windows of 700ms")
	})
	t.Run("slidinglog", func(t *testing.T) {
		t.Parallel()
		// All 5 go at start, then again each time they are window old:
		// at start + k*700ms for k = 0..85.
		const window = 700 * time.Millisecond
		counts := saturate(t, newSlidingLogSim(t, 5, window), start, elapsed, stepLen)
		assert.Equal(t, 5*(int64(elapsed/window)+1), sum(counts))
		assert.Equal(t, int64(430), sum(counts))
		for i, c := range counts {
			if i%700 == 0 {
				assert.Equalf(t, int64(5), c, "admitted at step %d", i)
			} else {
				assert.Zerof(t, c, "admitted at step %d", i)
			}
		}
	})
	t.Run("slidingcounter", func(t *testing.T) {
		t.Parallel()
		const limit, window = 5, 700 * time.Millisecond
		counts := saturate(t, newSlidingCounterSim(t, limit, window), start, elapsed, stepLen)
		want := slidingCounterReference(limit, window, start, elapsed, stepLen)
		require.Len(t, counts, len(want))
		for i := range want {
			if counts[i] != want[i] {
				t.Fatalf("step %d (t=%v): admitted %d, reference admits %d", i, time.Duration(i)*stepLen, counts[i], want[i])
			}
		}
		// Never more than limit per aligned window, so never 2x limit in
		// any interval of one window.
		windows := (start+int64(elapsed))/int64(window) - start/int64(window) + 1
		assert.LessOrEqual(t, sum(counts), limit*windows)
		t.Logf("sliding counter admitted %d in %v (%d windows of %d)", sum(counts), elapsed, windows, limit)
	})
}

// slidingCounterReference is an independent model of the sliding counter
// in exact rationals: at each step it admits as many single events as keep
// prev*(w-e)/w + cur + 1 <= limit.
func slidingCounterReference(limit int64, window time.Duration, start int64, elapsed, step time.Duration) []int64 {
	w := int64(window)
	var k, cur, prev int64
	k = start / w
	var out []int64
	for now := start; now <= start+int64(elapsed); now += int64(step) {
		switch nk := now / w; {
		case nk == k+1:
			k, prev, cur = nk, cur, 0
		case nk > k+1:
			k, prev, cur = nk, 0, 0
		}
		e := now - k*w
		// room = limit - cur - prev*(w-e)/w; admitted = max(floor(room), 0).
		room := new(big.Rat).SetFrac64(prev*(w-e), w)
		room.Sub(new(big.Rat).SetInt64(limit-cur), room)
		var c int64
		if room.Sign() > 0 {
			c = new(big.Int).Quo(room.Num(), room.Denom()).Int64()
		}
		cur += c
		out = append(out, c)
	}
	return out
}

// TestConstructorErrors checks that every bad argument returns an error
// that wraps ErrInvalidConfig, starts with "ratelimit:" and names the
// argument, with a nil limiter and no panic.
func TestConstructorErrors(t *testing.T) {
	t.Parallel()
	const tooLong = 100*365*24*time.Hour + 1
	tests := []struct {
		name string
		arg  string
		call func() (any, error)
	}{
		{"tokenbucket/capacity-zero", "capacity", func() (any, error) { return NewTokenBucket(Per(1, time.Second), 0) }},
		{"tokenbucket/capacity-negative", "capacity", func() (any, error) { return NewTokenBucket(Per(1, time.Second), -1) }},
		{"tokenbucket/capacity-min", "capacity", func() (any, error) { return NewTokenBucket(Per(1, time.Second), math.MinInt) }},
		{"tokenbucket/refill-zero", "rate.Events", func() (any, error) { return NewTokenBucket(Per(0, time.Second), 1) }},
		{"tokenbucket/refill-negative", "rate.Events", func() (any, error) { return NewTokenBucket(Per(-5, time.Second), 1) }},
		{"tokenbucket/per-zero", "rate.Per", func() (any, error) { return NewTokenBucket(Per(1, 0), 1) }},
		{"tokenbucket/per-negative", "rate.Per", func() (any, error) { return NewTokenBucket(Per(1, -time.Second), 1) }},
		{"tokenbucket/per-too-long", "rate.Per", func() (any, error) { return NewTokenBucket(Per(1, tooLong), 1) }},
		{"tokenbucket/per-max", "rate.Per", func() (any, error) { return NewTokenBucket(Per(1, math.MaxInt64), 1) }},
		{"tokenbucket/capacity-overflow", "capacity", func() (any, error) { return NewTokenBucket(Per(1, time.Nanosecond), math.MaxInt) }},
		{"tokenbucket/capacity-overflow-slow", "capacity", func() (any, error) { return NewTokenBucket(Per(1, time.Hour), math.MaxInt/1000) }},
		{"leakybucket/capacity-zero", "capacity", func() (any, error) { return NewLeakyBucket(0, time.Second) }},
		{"leakybucket/capacity-negative", "capacity", func() (any, error) { return NewLeakyBucket(-3, time.Second) }},
		{"leakybucket/leakEvery-zero", "leakEvery", func() (any, error) { return NewLeakyBucket(1, 0) }},
		{"leakybucket/leakEvery-negative", "leakEvery", func() (any, error) { return NewLeakyBucket(1, -1) }},
		{"leakybucket/leakEvery-too-long", "leakEvery", func() (any, error) { return NewLeakyBucket(1, tooLong) }},
		{"leakybucket/capacity-overflow", "capacity", func() (any, error) { return NewLeakyBucket(math.MaxInt, time.Second) }},
		{"fixedwindow/limit-zero", "limit", func() (any, error) { return NewFixedWindow(0, time.Second) }},
		{"fixedwindow/limit-negative", "limit", func() (any, error) { return NewFixedWindow(-1, time.Second) }},
		{"fixedwindow/window-zero", "window", func() (any, error) { return NewFixedWindow(1, 0) }},
		{"fixedwindow/window-negative", "window", func() (any, error) { return NewFixedWindow(1, -time.Minute) }},
		{"fixedwindow/window-too-long", "window", func() (any, error) { return NewFixedWindow(1, tooLong) }},
		{"slidinglog/limit-zero", "limit", func() (any, error) { return NewSlidingLog(0, time.Second) }},
		{"slidinglog/limit-negative", "limit", func() (any, error) { return NewSlidingLog(-1, time.Second) }},
		{"slidinglog/window-zero", "window", func() (any, error) { return NewSlidingLog(1, 0) }},
		{"slidinglog/window-negative", "window", func() (any, error) { return NewSlidingLog(1, -1) }},
		{"slidinglog/window-too-long", "window", func() (any, error) { return NewSlidingLog(1, tooLong) }},
		{"slidingcounter/limit-zero", "limit", func() (any, error) { return NewSlidingCounter(0, time.Second) }},
		{"slidingcounter/limit-negative", "limit", func() (any, error) { return NewSlidingCounter(-1, time.Second) }},
		{"slidingcounter/limit-overflow", "limit", func() (any, error) { return NewSlidingCounter(math.MaxInt, time.Second) }},
		{"slidingcounter/window-zero", "window", func() (any, error) { return NewSlidingCounter(1, 0) }},
		{"slidingcounter/window-negative", "window", func() (any, error) { return NewSlidingCounter(1, -1) }},
		{"slidingcounter/window-too-long", "window", func() (any, error) { return NewSlidingCounter(1, tooLong) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var l any
			var err error
			require.NotPanics(t, func() { l, err = tt.call() })
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalidConfig)
			assert.Truef(t, strings.HasPrefix(err.Error(), "ratelimit:"), "error %q does not start with \"ratelimit:\"", err)
			assert.Containsf(t, err.Error(), tt.arg, "error %q does not name the argument %s", err, tt.arg)
			assert.Nil(t, l, "limiter returned with an error")
		})
	}
}

// TestConstructorsAcceptLimits checks the largest valid arguments and the
// nil options.
func TestConstructorsAcceptLimits(t *testing.T) {
	t.Parallel()
	const longest = 100 * 365 * 24 * time.Hour
	// The buckets' overflow guards (capacity x period within 2^60 resp.
	// 2^61 ns, as documented) refuse periods of decades even at capacity 1;
	// 10 years must pass.
	const decade = 10 * 365 * 24 * time.Hour
	_, err := NewTokenBucket(Per(1, decade), 1, nil, WithClock(nil))
	assert.NoError(t, err)
	_, err = NewTokenBucket(Per(1<<53, time.Nanosecond), 1_000_000)
	assert.NoError(t, err)
	_, err = NewLeakyBucket(1, decade)
	assert.NoError(t, err)
	_, err = NewFixedWindow(math.MaxInt32, longest)
	assert.NoError(t, err)
	_, err = NewSlidingLog(math.MaxInt32, longest)
	assert.NoError(t, err)
	_, err = NewSlidingCounter(math.MaxInt32, longest)
	assert.NoError(t, err)
}

// TestHugeLimitNeverOverAdmits checks that a limit accepted by a
// constructor never lets a count overflow into admitting more than the
// limit. A constructor may refuse the limit instead.
func TestHugeLimitNeverOverAdmits(t *testing.T) {
	t.Parallel()
	for _, tc := range limiterCases {
		for _, limit := range []int{math.MaxInt32, math.MaxInt / 2, math.MaxInt/2 + 1, math.MaxInt} {
			t.Run(fmt.Sprintf("%s/%d", tc.name, limit), func(t *testing.T) {
				t.Parallel()
				mock := fakeclock.New(testStart)
				l, err := tc.make(limit, 100*365*24*time.Hour, WithClock(mock))
				if err != nil {
					assert.ErrorIs(t, err, ErrInvalidConfig)
					assert.Contains(t, err.Error(), "ratelimit:")
					return
				}
				require.NotPanics(t, func() {
					first := l.AllowN(limit)
					require.Truef(t, first.Allowed, "AllowN(%d) on a fresh limiter = %+v", limit, first)
					for _, n := range []int{1, 2, limit} {
						d := l.AllowN(n)
						assert.Falsef(t, d.Allowed, "AllowN(%d) after using the whole limit %d = %+v", n, limit, d)
						assert.GreaterOrEqualf(t, d.Remaining, 0, "AllowN(%d) = %+v", n, d)
					}
				})
			})
		}
	}
}

// TestSettersRejectBadConfig checks that SetRate/SetLimit refuse bad
// arguments and keep the old configuration and state.
func TestSettersRejectBadConfig(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(testStart)
	tb, err := NewTokenBucket(Per(10, time.Second), 5, WithClock(mock))
	require.NoError(t, err)
	lb, err := NewLeakyBucket(5, 100*time.Millisecond, WithClock(mock))
	require.NoError(t, err)
	fw, err := NewFixedWindow(5, time.Second, WithClock(mock))
	require.NoError(t, err)
	sl, err := NewSlidingLog(5, time.Second, WithClock(mock))
	require.NoError(t, err)
	sc, err := NewSlidingCounter(5, time.Second, WithClock(mock))
	require.NoError(t, err)
	limiters := map[string]testLimiter{"tokenbucket": tb, "leakybucket": lb, "fixedwindow": fw, "slidinglog": sl, "slidingcounter": sc}
	for _, l := range limiters {
		require.True(t, l.AllowN(2).Allowed)
	}
	tests := []struct {
		name, arg string
		set       func() error
	}{
		{"tokenbucket", "capacity", func() error { return tb.SetRate(Per(10, time.Second), 0) }},
		{"tokenbucket", "rate.Events", func() error { return tb.SetRate(Per(-1, time.Second), 5) }},
		{"tokenbucket", "rate.Per", func() error { return tb.SetRate(Per(10, 0), 5) }},
		{"tokenbucket", "capacity", func() error { return tb.SetRate(Per(1, time.Nanosecond), math.MaxInt) }},
		{"leakybucket", "capacity", func() error { return lb.SetRate(-1, time.Second) }},
		{"leakybucket", "leakEvery", func() error { return lb.SetRate(5, 0) }},
		{"leakybucket", "capacity", func() error { return lb.SetRate(math.MaxInt, time.Second) }},
		{"fixedwindow", "limit", func() error { return fw.SetLimit(0) }},
		{"slidinglog", "limit", func() error { return sl.SetLimit(-2) }},
		{"slidingcounter", "limit", func() error { return sc.SetLimit(0) }},
		{"slidingcounter", "limit", func() error { return sc.SetLimit(math.MaxInt) }},
	}
	for _, tt := range tests {
		var err error
		require.NotPanics(t, func() { err = tt.set() })
		if assert.Errorf(t, err, "%s: bad %s accepted", tt.name, tt.arg) {
			assert.ErrorIs(t, err, ErrInvalidConfig)
			assert.Truef(t, strings.HasPrefix(err.Error(), "ratelimit:"), "error %q", err)
			assert.Containsf(t, err.Error(), tt.arg, "error %q does not name %s", err, tt.arg)
		}
	}
	for name, l := range limiters {
		assert.Equalf(t, 5, l.Peek(0).Limit, "%s: Peek(0).Limit after rejected changes", name)
		assert.Equalf(t, 3, l.Peek(0).Remaining, "%s: Remaining after rejected changes", name)
	}
}

// TestErrorsMatchSentinels checks the error values callers branch on.
func TestErrorsMatchSentinels(t *testing.T) {
	t.Parallel()
	for _, err := range []error{ErrInvalidConfig, ErrInvalidN, ErrExceedsLimit, ErrQueueFull, ErrDeadline} {
		assert.Truef(t, strings.HasPrefix(err.Error(), "ratelimit: "), "%q", err)
	}
	d := errs.Deadline(ErrDeadline, time.Hour)
	assert.ErrorIs(t, d, ErrDeadline)
	assert.ErrorIs(t, d, context.DeadlineExceeded)
	assert.NotErrorIs(t, d, ErrQueueFull)
	assert.True(t, strings.HasPrefix(d.Error(), "ratelimit:"))
	assert.ErrorIs(t, nError(0, 3), ErrInvalidN)
	assert.ErrorIs(t, nError(4, 3), ErrExceedsLimit)
	assert.NotErrorIs(t, nError(4, 3), ErrInvalidN)
	assert.Contains(t, nError(30, 20).Error(), "n=30")
	var target interface{ Unwrap() []error }
	assert.True(t, errors.As(d, &target))
}

// must returns v, panicking (and so failing the test) if err is not nil. It
// lets a test read a keyed Peek's Decision inline where the error is not
// under test.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
