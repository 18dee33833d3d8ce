package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// failSafe bounds every real-time wait in these tests. Limiter time never
// passes in real time here: it moves only with the mock clock. failSafe
// only turns a hang (a bug) into a failure.
const failSafe = 10 * time.Second

// since returns the mock time elapsed since testStart. The waiters' clock
// is a fakeclock.NewAnnouncing: each timer a waiter starts is announced, so
// a test knows, without polling, that the waiter has taken its place and is
// about to block; the timer's channel is buffered, so advancing the mock
// from then on releases it deterministically.
func since(c Clock) time.Duration { return c.Now().Sub(testStart) }

type waitResult struct {
	id  int
	err error
	at  time.Duration // mock time since testStart when WaitN returned
}

// startWaiter calls l.WaitN(ctx, n) in a goroutine and reports to out.
func startWaiter(ctx context.Context, l Limiter, c *fakeclock.Mock, id, n int, out chan<- waitResult) {
	go func() {
		err := l.WaitN(ctx, n)
		out <- waitResult{id: id, err: err, at: since(c)}
	}()
}

func recvResult(t *testing.T, ch <-chan waitResult) waitResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(failSafe):
		t.Fatalf("no waiter returned within %v", failSafe)
		return waitResult{}
	}
}

// assertNoResult checks that no waiter has returned. A waiter whose timer
// has not fired cannot return, so this holds at once or never.
func assertNoResult(t *testing.T, ch <-chan waitResult) {
	t.Helper()
	select {
	case r := <-ch:
		t.Errorf("waiter %d returned (err %v) at %v, want still waiting", r.id, r.err, r.at)
	default:
	}
}

// waitNow runs WaitN on a frozen clock and returns its error; it must
// return without starting a timer.
func waitNow(ctx context.Context, t *testing.T, l Limiter, c *fakeclock.Mock, n int) error {
	t.Helper()
	before := since(c)
	out := make(chan waitResult, 1)
	startWaiter(ctx, l, c, 0, n, out)
	r := recvResult(t, out)
	c.None(t)
	assert.Equalf(t, before, r.at, "WaitN(%d) returned at mock time %v, want at once", n, r.at)
	return r.err
}

// TestTokenBucketWaitFIFO: waiters queued in a known order are released in
// that order, each at its exact time.
func TestTokenBucketWaitFIFO(t *testing.T) {
	t.Parallel()
	c := fakeclock.NewAnnouncing(testStart)
	b, err := NewTokenBucket(Per(1, time.Second), 2, WithClock(c))
	require.NoError(t, err)
	require.True(t, b.AllowN(2).Allowed)

	ctx := context.Background()
	out := make(chan waitResult, 8)
	ns := []int{1, 2, 1, 1, 2}
	wantTimers := []time.Duration{1, 3, 4, 5, 7}
	for i, n := range ns {
		startWaiter(ctx, b, c, i, n, out)
		got := c.Next(t)
		assert.Equalf(t, wantTimers[i]*time.Second, got, "waiter %d (n=%d) timer", i, n)
	}
	assert.False(t, b.Allow(), "Allow with 5 waiters queued")

	mock := c.Mock
	mock.Add(999 * time.Millisecond)
	assertNoResult(t, out)
	mock.Add(time.Millisecond)
	prev := time.Duration(0)
	for i := range ns {
		if i > 0 {
			mock.Add((wantTimers[i] - wantTimers[i-1]) * time.Second)
		}
		r := recvResult(t, out)
		assert.Equalf(t, i, r.id, "waiter released at %v", r.at)
		assert.NoError(t, r.err)
		assert.Equalf(t, wantTimers[i]*time.Second, r.at, "release time of waiter %d", r.id)
		assert.Greater(t, r.at, prev)
		prev = r.at
		assertNoResult(t, out)
	}
	// Every token was handed to a waiter: none is left over.
	assert.False(t, b.Allow(), "Allow right after the last waiter")
	mock.Add(time.Second)
	assert.True(t, b.Allow(), "Allow a token's time after the last waiter")
}

// TestTokenBucketWaitImmediate: with tokens in the bucket WaitN returns at
// once, without a timer, and takes them.
func TestTokenBucketWaitImmediate(t *testing.T) {
	t.Parallel()
	c := fakeclock.NewAnnouncing(testStart)
	b, err := NewTokenBucket(Per(1, time.Second), 3, WithClock(c))
	require.NoError(t, err)
	require.NoError(t, waitNow(context.Background(), t, b, c, 2))
	assert.Equal(t, 1, b.Peek(0).Remaining)
}

// TestTokenBucketWaitCancel: a cancelled waiter returns context.Canceled at
// once and gives its token back when nobody queued behind it.
func TestTokenBucketWaitCancel(t *testing.T) {
	t.Parallel()
	c := fakeclock.NewAnnouncing(testStart)
	b, err := NewTokenBucket(Per(1, time.Second), 1, WithClock(c))
	require.NoError(t, err)
	require.True(t, b.Allow())

	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan waitResult, 1)
	startWaiter(ctx, b, c, 0, 1, out)
	require.Equal(t, time.Second, c.Next(t))
	cancel()
	r := recvResult(t, out)
	assert.ErrorIs(t, r.err, context.Canceled)
	assert.Zero(t, r.at, "returned at mock time %v, want at once", r.at)

	assert.False(t, b.Allow(), "the bucket was empty before the waiter came")
	c.Add(time.Second)
	assert.True(t, b.Allow(), "a token's time later: the cancelled waiter's token is back")
	assert.False(t, b.Allow())
}

// TestTokenBucketWaitCancelWithQueueBehind: a cancelled waiter with
// another behind it does not give its place back (the one behind keeps
// its release time), so the count stays exact.
func TestTokenBucketWaitCancelWithQueueBehind(t *testing.T) {
	t.Parallel()
	c := fakeclock.NewAnnouncing(testStart)
	b, err := NewTokenBucket(Per(1, time.Second), 1, WithClock(c))
	require.NoError(t, err)
	require.True(t, b.Allow())

	ctxA, cancelA := context.WithCancel(context.Background())
	out := make(chan waitResult, 2)
	startWaiter(ctxA, b, c, 0, 1, out)
	require.Equal(t, time.Second, c.Next(t))
	startWaiter(context.Background(), b, c, 1, 1, out)
	require.Equal(t, 2*time.Second, c.Next(t))
	cancelA()
	r := recvResult(t, out)
	assert.Equal(t, 0, r.id)
	assert.ErrorIs(t, r.err, context.Canceled)

	c.Add(time.Second)
	assertNoResult(t, out)
	assert.False(t, b.Allow(), "at 1s: the token is held for the waiter at 2s")
	c.Add(time.Second)
	r = recvResult(t, out)
	assert.Equal(t, waitResult{id: 1, at: 2 * time.Second}, r)
	assert.False(t, b.Allow(), "at 2s: the waiter took it")
	c.Add(time.Second)
	assert.True(t, b.Allow(), "at 3s")
}

// waitCase is a limiter whose next wait is far longer than an hour.
type waitCase struct {
	name    string
	make    func(t *testing.T, c Clock) testLimiter
	consume int // events to take first
}

var longWaitCases = []waitCase{
	{"tokenbucket", func(t *testing.T, c Clock) testLimiter {
		l, err := NewTokenBucket(Per(1, 2*time.Hour), 2, WithClock(c))
		require.NoError(t, err)
		return l
	}, 2},
	{"leakybucket", func(t *testing.T, c Clock) testLimiter {
		l, err := NewLeakyBucket(2, 2*time.Hour, WithClock(c))
		require.NoError(t, err)
		return l
	}, 1}, // one in: room for one more, released after 2h
	{"fixedwindow", func(t *testing.T, c Clock) testLimiter {
		l, err := NewFixedWindow(2, 2*time.Hour, WithClock(c))
		require.NoError(t, err)
		return l
	}, 2},
	{"slidinglog", func(t *testing.T, c Clock) testLimiter {
		l, err := NewSlidingLog(2, 2*time.Hour, WithClock(c))
		require.NoError(t, err)
		return l
	}, 2},
	{"slidingcounter", func(t *testing.T, c Clock) testLimiter {
		l, err := NewSlidingCounter(2, 2*time.Hour, WithClock(c))
		require.NoError(t, err)
		return l
	}, 2},
}

// TestWaitDeadline: a wait of 2h with a 1h deadline returns ErrDeadline
// (also context.DeadlineExceeded) at once and consumes nothing.
func TestWaitDeadline(t *testing.T) {
	t.Parallel()
	for _, tc := range longWaitCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := fakeclock.NewAnnouncing(testStart)
			l := tc.make(t, c)
			require.True(t, l.AllowN(tc.consume).Allowed)
			before := l.Peek(0)
			ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
			defer cancel()
			err := waitNow(ctx, t, l, c, 1)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrDeadline)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			assert.True(t, strings.HasPrefix(err.Error(), "ratelimit:"), "error %q", err)
			assert.NoError(t, ctx.Err(), "the context itself is not done")
			assert.Equal(t, before, l.Peek(0), "quota after a refused wait")

			// Waiting is fine when the deadline is far enough.
			ctx2, cancel2 := context.WithTimeout(context.Background(), 10*time.Hour)
			defer cancel2()
			out := make(chan waitResult, 1)
			startWaiter(ctx2, l, c, 1, 1, out)
			d := c.Next(t)
			assert.GreaterOrEqual(t, d, 2*time.Hour)
			c.Add(d)
			r := recvResult(t, out)
			assert.NoError(t, r.err)
		})
	}
}

// TestWaitInvalidN: n <= 0 and n over the limit return at once with
// ErrInvalidN and ErrExceedsLimit, and a done context returns its error,
// for every algorithm, consuming nothing.
func TestWaitInvalidN(t *testing.T) {
	t.Parallel()
	for _, tc := range limiterCases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := fakeclock.NewAnnouncing(testStart)
			l := newCaseLimiter(t, tc, 4, time.Second, c)
			require.True(t, l.AllowN(4).Allowed)
			before := l.Peek(0)
			ctx := context.Background()
			for _, n := range []int{0, -1, -1000} {
				err := waitNow(ctx, t, l, c, n)
				assert.ErrorIsf(t, err, ErrInvalidN, "WaitN(%d)", n)
				assert.NotErrorIs(t, err, ErrExceedsLimit)
				if err != nil {
					assert.True(t, strings.HasPrefix(err.Error(), "ratelimit:"), "error %q", err)
				}
			}
			for _, n := range []int{5, 1 << 40} {
				err := waitNow(ctx, t, l, c, n)
				assert.ErrorIsf(t, err, ErrExceedsLimit, "WaitN(%d)", n)
				assert.NotErrorIs(t, err, ErrInvalidN)
				if err != nil {
					assert.True(t, strings.HasPrefix(err.Error(), "ratelimit:"), "error %q", err)
					assert.Contains(t, err.Error(), fmt.Sprintf("n=%d", n))
				}
			}
			done, cancel := context.WithCancel(context.Background())
			cancel()
			assert.ErrorIs(t, waitNow(done, t, l, c, 1), context.Canceled)
			assert.Equal(t, before, l.Peek(0), "quota after refused waits")
			c.Add(before.ResetAfter)
			assert.Equal(t, 4, l.Peek(0).Remaining, "full after ResetAfter %v: the refused waits reserved nothing", before.ResetAfter)
		})
	}
}

// TestLeakyBucketShaper: callers are released one per leakEvery, first
// come first served, and refused at once when the queue is full.
func TestLeakyBucketShaper(t *testing.T) {
	t.Parallel()
	const every = 100 * time.Millisecond
	c := fakeclock.NewAnnouncing(testStart)
	b, err := NewLeakyBucket(3, every, WithClock(c))
	require.NoError(t, err)
	ctx := context.Background()
	out := make(chan waitResult, 8)

	// The first caller goes at once; the next ones wait their turn even
	// though the bucket has room: no bursts.
	require.NoError(t, waitNow(ctx, t, b, c, 1))
	startWaiter(ctx, b, c, 1, 1, out)
	require.Equal(t, every, c.Next(t))
	startWaiter(ctx, b, c, 2, 1, out)
	require.Equal(t, 2*every, c.Next(t))

	// The queue holds 3: the fourth is refused at once.
	err = waitNow(ctx, t, b, c, 1)
	assert.ErrorIs(t, err, ErrQueueFull)
	assert.False(t, b.Allow(), "the meter sees the full queue too")

	releases := []time.Duration{0}
	c.Add(every - 1)
	assertNoResult(t, out)
	c.Add(1)
	r := recvResult(t, out)
	require.Equal(t, 1, r.id)
	require.NoError(t, r.err)
	releases = append(releases, r.at)

	// A place is free again: a new caller queues behind waiter 2.
	startWaiter(ctx, b, c, 3, 1, out)
	require.Equal(t, 2*every, c.Next(t))
	for _, id := range []int{2, 3} {
		c.Add(every)
		r := recvResult(t, out)
		require.Equal(t, id, r.id)
		require.NoError(t, r.err)
		releases = append(releases, r.at)
		assertNoResult(t, out)
	}
	assert.Equal(t, []time.Duration{0, every, 2 * every, 3 * every}, releases, "release times")
}

// TestLeakyBucketShaperCancel: a cancelled caller with nobody behind gives
// its place back: the next caller takes it.
func TestLeakyBucketShaperCancel(t *testing.T) {
	t.Parallel()
	const every = 100 * time.Millisecond
	c := fakeclock.NewAnnouncing(testStart)
	b, err := NewLeakyBucket(3, every, WithClock(c))
	require.NoError(t, err)
	require.NoError(t, waitNow(context.Background(), t, b, c, 1))

	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan waitResult, 2)
	startWaiter(ctx, b, c, 1, 1, out)
	require.Equal(t, every, c.Next(t))
	cancel()
	r := recvResult(t, out)
	assert.ErrorIs(t, r.err, context.Canceled)

	startWaiter(context.Background(), b, c, 2, 1, out)
	assert.Equal(t, every, c.Next(t), "the next caller's wait: the cancelled place is free")
	c.Add(every)
	r = recvResult(t, out)
	assert.Equal(t, waitResult{id: 2, at: every}, r)
}

// TestWindowWaitRollsOver: the window algorithms' Wait returns once the
// window (or the log, or the estimate) has made room, not before.
func TestWindowWaitRollsOver(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	tests := []struct {
		name      string
		make      func(c Clock) (testLimiter, error)
		timer     time.Duration // the first (and only) sleep
		remaining int           // Peek(0).Remaining after the waiter went
	}{
		{"fixedwindow", func(c Clock) (testLimiter, error) { return NewFixedWindow(2, time.Second, WithClock(c)) }, 700 * ms, 1},
		{"slidinglog", func(c Clock) (testLimiter, error) { return NewSlidingLog(2, time.Second, WithClock(c)) }, 1000 * ms, 1},
		// 2 at 300ms: at 1.5s the estimate is 2 x 50% = 1, so 1 more fits.
		{"slidingcounter", func(c Clock) (testLimiter, error) { return NewSlidingCounter(2, time.Second, WithClock(c)) }, 1200 * ms, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			c := fakeclock.NewAnnouncing(testStart)
			l, err := tt.make(c)
			require.NoError(t, err)
			c.Add(300 * ms)
			require.True(t, l.AllowN(2).Allowed)
			out := make(chan waitResult, 1)
			startWaiter(context.Background(), l, c, 0, 1, out)
			require.Equal(t, tt.timer, c.Next(t))
			c.Add(tt.timer - 1)
			assertNoResult(t, out)
			c.Add(1)
			r := recvResult(t, out)
			assert.NoError(t, r.err)
			assert.Equal(t, 300*ms+tt.timer, r.at)
			c.None(t)
			assert.Equal(t, tt.remaining, l.Peek(0).Remaining, "the waiter took one event")
		})
	}
}

// TestWaitCancelTakesNothing: cancelling a wait returns context.Canceled
// and takes nothing. (The leaky bucket, whose full queue refuses waiters,
// is covered by TestLeakyBucketShaperCancel.)
func TestWaitCancelTakesNothing(t *testing.T) {
	t.Parallel()
	for _, tc := range limiterCases {
		if tc.name == "leakybucket" {
			continue
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := fakeclock.NewAnnouncing(testStart)
			l := newCaseLimiter(t, tc, 2, time.Second, c)
			require.True(t, l.AllowN(2).Allowed)
			ctx, cancel := context.WithCancel(context.Background())
			out := make(chan waitResult, 1)
			startWaiter(ctx, l, c, 0, 1, out)
			d := c.Next(t)
			cancel()
			r := recvResult(t, out)
			assert.ErrorIs(t, r.err, context.Canceled)
			c.Add(d)
			assert.True(t, l.Allow(), "the cancelled waiter's event is free %v later", d)
		})
	}
}

// TestWaitCancelNoGoroutineLeak cancels many waiters on every algorithm
// and checks that the goroutine count returns to where it was.
//
// Not parallel: it counts goroutines, so it must not share the process
// with running tests. Non-parallel tests run before every parallel one is
// released, so the count is stable here.
func TestWaitCancelNoGoroutineLeak(t *testing.T) {
	base := runtime.NumGoroutine()
	c := fakeclock.NewAnnouncing(testStart)
	ctx, cancel := context.WithCancel(context.Background())
	out := make(chan waitResult, 64)
	waiters := 0
	for _, tc := range limiterCases {
		l := newCaseLimiter(t, tc, 8, time.Second, c)
		consume := 8
		if tc.name == "leakybucket" {
			consume = 2 // leave room in the queue for 6 waiters
		}
		require.True(t, l.AllowN(consume).Allowed)
		for range 6 {
			startWaiter(ctx, l, c, waiters, 1, out)
			c.Next(t)
			waiters++
		}
	}
	assert.Greater(t, runtime.NumGoroutine(), base, "waiters are running")
	cancel()
	for range waiters {
		r := recvResult(t, out)
		assert.ErrorIs(t, r.err, context.Canceled)
	}
	// The waiters have sent their results; let their goroutines exit.
	deadline := time.Now().Add(failSafe)
	for runtime.NumGoroutine() > base && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	assert.LessOrEqual(t, runtime.NumGoroutine(), base, "goroutines after cancelling %d waiters", waiters)
}

// TestWaitErrorsAreDistinct: the sentinels callers branch on do not match
// each other.
func TestWaitErrorsAreDistinct(t *testing.T) {
	t.Parallel()
	all := []error{ErrInvalidConfig, ErrInvalidN, ErrExceedsLimit, ErrQueueFull, ErrDeadline}
	for i, a := range all {
		for j, b := range all {
			assert.Equalf(t, i == j, errors.Is(a, b), "errors.Is(%v, %v)", a, b)
		}
	}
}

// TestTokenBucketPeekWhileWaiterQueued: a waiter that reserved tokens the
// bucket does not have yet overdraws it, and Peek(0) says so (Allowed
// false, Remaining 0) until the waiter's tokens have refilled, as its doc
// says.
func TestTokenBucketPeekWhileWaiterQueued(t *testing.T) {
	t.Parallel()
	c := fakeclock.NewAnnouncing(testStart)
	b, err := NewTokenBucket(Per(10, time.Second), 1, WithClock(c))
	require.NoError(t, err)
	ctx := context.Background()
	require.True(t, b.Allow())
	out := make(chan waitResult, 1)
	startWaiter(ctx, b, c, 1, 1, out)
	require.Equal(t, 100*time.Millisecond, c.Next(t))
	d := b.Peek(0)
	assert.False(t, d.Allowed, "Peek(0) while a waiter holds tokens the bucket lacks")
	assert.Equal(t, 0, d.Remaining)
	c.Add(100 * time.Millisecond)
	require.NoError(t, recvResult(t, out).err)
	d = b.Peek(0)
	assert.True(t, d.Allowed, "Peek(0) once the waiter's token has refilled")
}

// TestLeakyBucketAllowNMetersIndependently: AllowN does not queue behind
// callers waiting in WaitN: it admits at once while the bucket has room
// (queued waiters' events count as occupying it), and its event takes the
// next place in the schedule, so waiters already queued keep their release
// times and later ones queue behind it. The long-run rate holds.
func TestLeakyBucketAllowNMetersIndependently(t *testing.T) {
	t.Parallel()
	const every = 100 * time.Millisecond
	c := fakeclock.NewAnnouncing(testStart)
	b, err := NewLeakyBucket(4, every, WithClock(c))
	require.NoError(t, err)
	ctx := context.Background()
	out := make(chan waitResult, 4)
	require.NoError(t, waitNow(ctx, t, b, c, 1))
	startWaiter(ctx, b, c, 1, 1, out)
	require.Equal(t, every, c.Next(t))
	assert.True(t, b.Allow(), "AllowN admits at once although a waiter is queued")
	startWaiter(ctx, b, c, 2, 1, out)
	require.Equal(t, 3*every, c.Next(t), "a later waiter queues behind the AllowN event")
	assert.False(t, b.Allow(), "the bucket is full: 1 released, 2 waiting, 1 metered")
	c.Add(every)
	r := recvResult(t, out)
	assert.Equal(t, waitResult{id: 1, at: every}, r, "the earlier waiter keeps its release time")
	c.Add(2 * every)
	r = recvResult(t, out)
	assert.Equal(t, waitResult{id: 2, at: 3 * every}, r)
}
