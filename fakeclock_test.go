package ratelimit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeClock is a Clock written from scratch, as a user of this package
// would write one for their tests: it implements Now and After and nothing
// else, and time moves only when the test calls Advance. It is not
// internal/testkit/fakeclock on purpose: TestHandWrittenFakeClockDrivesEveryAlgorithm
// shows that a Clock owing nothing to github.com/benbjohnson/clock drives
// every limiter.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	pending []fakeTimer
}

type fakeTimer struct {
	at time.Time
	ch chan time.Time
}

func newFakeClock(start time.Time) *fakeClock { return &fakeClock{now: start} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a channel with room for one value, so that firing it never
// blocks on a waiter that gave up.
func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.pending = append(c.pending, fakeTimer{at: c.now.Add(d), ch: ch})
	return ch
}

// Advance moves the time forward by d and fires every timer that is due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.pending[:0]
	for _, t := range c.pending {
		if t.at.After(c.now) {
			kept = append(kept, t)
			continue
		}
		t.ch <- c.now
	}
	c.pending = kept
}

// Pending returns the number of timers not yet fired.
func (c *fakeClock) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.pending)
}

// awaitTimer waits (in real time, briefly) until some goroutine has set a
// timer on c: a waiter has gone to sleep.
func awaitTimer(t *testing.T, c *fakeClock) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); c.Pending() == 0; {
		require.True(t, time.Now().Before(deadline), "no waiter set a timer on the fake clock")
		time.Sleep(50 * time.Microsecond)
	}
}

// clockTestPolicies hold 2 events, and free one after a second or two.
var clockTestPolicies = []Policy{
	TokenBucketPolicy(Per(1, time.Second), 2),
	LeakyBucketPolicy(2, time.Second),
	FixedWindowPolicy(2, 2*time.Second),
	SlidingLogPolicy(2, 2*time.Second),
	SlidingCounterPolicy(2, 2*time.Second),
	QuotaPolicy(2, Calendar{Unit: Daily, Location: time.FixedZone("UTC+2", 2*3600)}),
}

// homeUnderTest is a single limiter or a key of a Keyed, seen the same way.
type homeUnderTest struct {
	allowN func(n int) Decision
	peek   func(n int) Decision
	waitN  func(ctx context.Context, n int) error
	// queues is set for a single leaky bucket, whose WaitN queues behind
	// the events in the bucket instead of waiting for AllowN to admit.
	queues bool
}

func newHomeUnderTest(t *testing.T, p Policy, keyed bool, c Clock) homeUnderTest {
	t.Helper()
	if keyed {
		k, err := NewKeyed(p, WithClock(c))
		require.NoError(t, err)
		ctx := context.Background()
		return homeUnderTest{
			allowN: func(n int) Decision { return must(k.AllowN(ctx, "key", n)) },
			peek:   func(n int) Decision { return must(k.Peek(ctx, "key", n)) },
			waitN:  func(ctx context.Context, n int) error { return k.WaitN(ctx, "key", n) },
		}
	}
	l, err := p.NewLimiter(WithClock(c))
	require.NoError(t, err)
	return homeUnderTest{allowN: l.AllowN, peek: l.Peek, waitN: l.WaitN, queues: p.Algorithm == LeakyBucketAlgorithm}
}

// TestHandWrittenFakeClockDrivesEveryAlgorithm drives every algorithm,
// single and keyed, on a fake clock that owes nothing to
// github.com/benbjohnson/clock: AllowN and Peek, then a WaitN that blocks
// until the test advances the fake by exactly the announced wait.
func TestHandWrittenFakeClockDrivesEveryAlgorithm(t *testing.T) {
	t.Parallel()
	for _, p := range clockTestPolicies {
		for _, keyed := range []bool{false, true} {
			name := p.Algorithm.String() + "/single"
			if keyed {
				name = p.Algorithm.String() + "/keyed"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				clk := newFakeClock(testStart)
				h := newHomeUnderTest(t, p, keyed, clk)

				// The shaper queues behind one event; every other home is
				// filled up and waits for the RetryAfter it announces.
				fill, wait := 2, time.Duration(0)
				if h.queues {
					fill, wait = 1, time.Second
				}
				require.True(t, h.allowN(fill).Allowed, "AllowN(%d) on a fresh limiter", fill)
				assert.Equal(t, 2-fill, h.peek(0).Remaining, "Peek(0).Remaining after AllowN(%d)", fill)
				if !h.queues {
					d := h.peek(1)
					require.False(t, d.Allowed, "Peek(1) on a full limiter")
					require.Positive(t, d.RetryAfter)
					wait = d.RetryAfter
					assert.Equal(t, d, h.allowN(1), "AllowN(1) = what Peek(1) said")
				}

				done := make(chan error, 1)
				go func() { done <- h.waitN(context.Background(), 1) }()
				awaitTimer(t, clk)
				clk.Advance(wait - time.Nanosecond)
				select {
				case err := <-done:
					t.Fatalf("WaitN returned %v a nanosecond before its wait of %v", err, wait)
				default: // its timer has not fired: it is still blocked
				}
				clk.Advance(time.Nanosecond)
				select {
				case err := <-done:
					require.NoError(t, err)
				case <-time.After(10 * time.Second):
					t.Fatal("WaitN still blocked after the fake clock reached its release time")
				}
				assert.Equal(t, testStart.Add(wait), clk.Now())
			})
		}
	}
}
