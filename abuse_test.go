package ratelimit

// Adversarial tests: what a careless or hostile caller can do to the core
// limiters. Done contexts at every step of Wait, concurrent refunds, policy
// changes under traffic, and nil or typed-nil values wherever an interface
// is accepted.

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// waitHome is one way to wait: a single limiter, or a key of a Keyed one.
type waitHome struct {
	name  string
	waitN func(ctx context.Context, n int) error
	allow func() bool
	peek  func() Decision // Peek(0)
}

// waitHomes returns, for policy p on clock c, a single limiter and a Keyed
// one, each exhausted if exhaust is set.
func waitHomes(t *testing.T, p Policy, c Clock) []waitHome {
	t.Helper()
	single, err := p.NewLimiter(WithClock(c))
	require.NoError(t, err)
	sl := single.(testLimiter)
	k, err := NewKeyed(p, WithClock(c))
	require.NoError(t, err)
	ctx := context.Background()
	return []waitHome{
		{
			name: "single", waitN: single.WaitN, allow: single.Allow,
			peek: func() Decision { return sl.Peek(0) },
		},
		{
			name:  "keyed",
			waitN: func(ctx context.Context, n int) error { return k.WaitN(ctx, "k", n) },
			allow: func() bool { return k.Allow(ctx, "k") },
			peek:  func() Decision { return must(k.Peek(ctx, "k", 0)) },
		},
	}
}

func exhaust(t *testing.T, h waitHome) {
	t.Helper()
	for i := 0; h.allow(); i++ {
		require.Less(t, i, 1000, "limiter never denied")
	}
}

// TestAbuseDoneContextBeforeWait: a WaitN whose context is already done,
// or whose deadline has passed, returns the context's error at once and
// takes nothing, for every algorithm, single and keyed, full or exhausted.
func TestAbuseDoneContextBeforeWait(t *testing.T) {
	t.Parallel()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	for _, p := range testPolicies {
		for _, exhausted := range []bool{false, true} {
			c := fakeclock.New(testStart)
			for _, h := range waitHomes(t, p, c) {
				if exhausted {
					exhaust(t, h)
				}
				before := h.peek()
				for _, ctx := range []context.Context{cancelled, expired} {
					err := h.waitN(ctx, 1)
					require.Errorf(t, err, "%v %s exhausted=%v", p, h.name, exhausted)
					assert.Truef(t, errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded),
						"%v %s: WaitN with a done context = %v", p, h.name, err)
					assert.Equalf(t, before, h.peek(), "%v %s: quota after WaitN on a done context", p, h.name)
				}
			}
		}
	}
}

// TestAbuseDeadlineTooShort: a WaitN whose deadline comes before the wait
// could end returns ErrDeadline at once and takes nothing.
func TestAbuseDeadlineTooShort(t *testing.T) {
	t.Parallel()
	for _, p := range testPolicies {
		c := fakeclock.New(testStart)
		for _, h := range waitHomes(t, p, c) {
			exhaust(t, h)
			before := h.peek()
			ctx, cancel := context.WithTimeout(context.Background(), time.Nanosecond+before.RetryAfter/1000)
			err := h.waitN(ctx, 1)
			cancel()
			require.Errorf(t, err, "%v %s", p, h.name)
			assert.ErrorIsf(t, err, context.DeadlineExceeded, "%v %s", p, h.name)
			assert.Equalf(t, before, h.peek(), "%v %s: quota after a refused wait", p, h.name)
		}
	}
}

// TestAbuseCancelWhileWaiting: a waiter cancelled while it sleeps returns
// context.Canceled and leaves the quota as it found it, for every
// algorithm, single and keyed.
func TestAbuseCancelWhileWaiting(t *testing.T) {
	t.Parallel()
	for _, p := range testPolicies {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			t.Parallel()
			c := fakeclock.NewAnnouncing(testStart)
			for _, h := range waitHomes(t, p, c) {
				exhaust(t, h)
				if p.Algorithm == LeakyBucketAlgorithm && h.name == "single" {
					// The shaper refuses a full queue at once: make room
					// for one, behind the rest. (Keyed's WaitN meters.)
					c.Add(p.Period)
				}
				before := h.peek()
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				go func() { done <- h.waitN(ctx, 1) }()
				c.Next(t)
				cancel()
				select {
				case err := <-done:
					assert.ErrorIsf(t, err, context.Canceled, "%s", h.name)
				case <-time.After(failSafe):
					t.Fatalf("%s: cancelled waiter did not return", h.name)
				}
				assert.Equalf(t, before, h.peek(), "%s: quota after a cancelled wait", h.name)
			}
		})
	}
}

// TestAbuseNilContext: a nil context is an error, not a panic.
func TestAbuseNilContext(t *testing.T) {
	t.Parallel()
	var nilCtx context.Context
	for _, p := range testPolicies {
		c := fakeclock.New(testStart)
		for _, h := range waitHomes(t, p, c) {
			var err error
			require.NotPanicsf(t, func() { err = h.waitN(nilCtx, 1) }, "%v %s", p, h.name)
			require.Errorf(t, err, "%v %s", p, h.name)
			assert.Truef(t, strings.HasPrefix(err.Error(), "ratelimit: "), "%v %s: %v", p, h.name, err)
		}
	}
	k, err := NewKeyed(FixedWindowPolicy(1, time.Second))
	require.NoError(t, err)
	var md MultiDecision
	require.NotPanics(t, func() {
		md, err = AllowAll(nilCtx, 1, Dimension{Name: "a", Limiter: otherLimiter{k}, Key: "k"})
	})
	require.Error(t, err)
	assert.False(t, md.Allowed)
}

// TestAbuseConcurrentRefunds: many goroutines admit and refund the same
// key at once, and refund keys they never charged: every algorithm ends
// with a fresh quota, never above it.
func TestAbuseConcurrentRefunds(t *testing.T) {
	t.Parallel()
	for _, p := range testPolicies {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			t.Parallel()
			c := fakeclock.NewManual(testStart)
			k, err := NewKeyed(p, WithClock(c))
			require.NoError(t, err)
			ctx := context.Background()
			var wg sync.WaitGroup
			for g := range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 200 {
						if d, _ := k.AllowN(ctx, "k", 1); d.Allowed {
							assert.NoError(t, k.RefundN(ctx, "k", 1))
						}
						if g%4 == 0 {
							assert.NoError(t, k.RefundN(ctx, "k", 1)) // never charged
							assert.NoError(t, k.RefundN(ctx, "never-seen", 3))
						}
						d := must(k.Peek(ctx, "k", 0))
						assert.GreaterOrEqual(t, d.Remaining, 0)
						assert.LessOrEqual(t, d.Remaining, p.Limit)
					}
				}()
			}
			wg.Wait()
			assert.Equal(t, p.Limit, must(k.Peek(ctx, "k", 0)).Remaining, "quota after balanced refunds")
			assert.Equal(t, p.Limit, must(k.Peek(ctx, "never-seen", 0)).Remaining, "a refund never raises a key above fresh")
			for _, n := range []int{0, -1} {
				assert.ErrorIs(t, k.RefundN(ctx, "k", n), ErrInvalidN)
			}
		})
	}
}

// TestAbusePolicyChangeMidTraffic: SetRate and SetLimit while goroutines
// call Allow, Peek and WaitN: no race, Remaining stays within [0, Limit],
// and every waiter returns (admitted, or refused when its n no longer
// fits).
func TestAbusePolicyChangeMidTraffic(t *testing.T) {
	t.Parallel()
	tb, err := NewTokenBucket(Per(1000, time.Second), 10)
	require.NoError(t, err)
	lb, err := NewLeakyBucket(10, time.Millisecond)
	require.NoError(t, err)
	fw, err := NewFixedWindow(10, 10*time.Millisecond)
	require.NoError(t, err)
	sl, err := NewSlidingLog(10, 10*time.Millisecond)
	require.NoError(t, err)
	sc, err := NewSlidingCounter(10, 10*time.Millisecond)
	require.NoError(t, err)
	changes := map[string]struct {
		l      testLimiter
		change func(i int) error
	}{
		"tokenbucket":    {tb, func(i int) error { return tb.SetRate(Per(500+i, time.Second), 1+i%10) }},
		"leakybucket":    {lb, func(i int) error { return lb.SetRate(1+i%10, time.Duration(1+i%3)*time.Millisecond) }},
		"fixedwindow":    {fw, func(i int) error { return fw.SetLimit(1 + i%10) }},
		"slidinglog":     {sl, func(i int) error { return sl.SetLimit(1 + i%10) }},
		"slidingcounter": {sc, func(i int) error { return sc.SetLimit(1 + i%10) }},
	}
	for name, tc := range changes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			// Workers do a fixed amount of work and yield, so that the
			// goroutine changing the policy is not starved.
			var wg sync.WaitGroup
			for g := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 200 {
						switch g % 3 {
						case 0:
							tc.l.Allow()
						case 1:
							d := tc.l.Peek(0)
							if d.Remaining < 0 || d.Remaining > max(d.Limit, 10) {
								t.Errorf("Peek(0) = %+v", d)
								return
							}
						case 2:
							err := tc.l.WaitN(ctx, 1+g%5)
							if err != nil && !errors.Is(err, ErrExceedsLimit) && !errors.Is(err, ErrQueueFull) {
								t.Errorf("WaitN: %v", err)
								return
							}
						}
						runtime.Gosched()
					}
				}()
			}
			done := make(chan struct{})
			go func() { wg.Wait(); close(done) }()
			for i := 0; ; i++ {
				select {
				case <-done:
					require.NoError(t, ctx.Err(), "a waiter hung")
					return
				default:
				}
				require.NoError(t, tc.change(i))
				time.Sleep(100 * time.Microsecond)
			}
		})
	}
}

// TestAbuseWaiterOutlivesLoweredLimit: a waiter for n events on a window
// limiter whose limit is then lowered below n returns ErrExceedsLimit
// instead of waiting forever.
func TestAbuseWaiterOutlivesLoweredLimit(t *testing.T) {
	t.Parallel()
	c := fakeclock.NewAnnouncing(testStart)
	fw, err := NewFixedWindow(5, time.Second, WithClock(c))
	require.NoError(t, err)
	require.True(t, fw.AllowN(5).Allowed)
	done := make(chan error, 1)
	go func() { done <- fw.WaitN(context.Background(), 5) }()
	c.Next(t)
	require.NoError(t, fw.SetLimit(2))
	c.Add(time.Second)
	select {
	case err := <-done:
		assert.ErrorIs(t, err, ErrExceedsLimit)
	case <-time.After(failSafe):
		t.Fatal("waiter did not return after its n stopped fitting")
	}
}

// TestAbuseTypedNilInputs: typed nils given where an interface is accepted
// are configuration errors, never panics.
func TestAbuseTypedNilInputs(t *testing.T) {
	t.Parallel()
	var nilMock *clock.Mock
	var nilOpt optionFunc
	constructors := map[string]func(opts ...Option) error{
		"tokenbucket":    func(o ...Option) error { _, err := NewTokenBucket(Per(1, time.Second), 1, o...); return err },
		"leakybucket":    func(o ...Option) error { _, err := NewLeakyBucket(1, time.Second, o...); return err },
		"fixedwindow":    func(o ...Option) error { _, err := NewFixedWindow(1, time.Second, o...); return err },
		"slidinglog":     func(o ...Option) error { _, err := NewSlidingLog(1, time.Second, o...); return err },
		"slidingcounter": func(o ...Option) error { _, err := NewSlidingCounter(1, time.Second, o...); return err },
		"keyed":          func(o ...Option) error { _, err := NewKeyed(FixedWindowPolicy(1, time.Second), o...); return err },
		"policy":         func(o ...Option) error { _, err := SlidingLogPolicy(1, time.Second).NewLimiter(o...); return err },
	}
	for name, mk := range constructors {
		var err error
		require.NotPanicsf(t, func() { err = mk(WithClock(nilMock)) }, "%s: WithClock(nil *clock.Mock)", name)
		require.ErrorIsf(t, err, ErrInvalidConfig, "%s: WithClock(nil *clock.Mock)", name)
		assert.Containsf(t, err.Error(), "WithClock", "%s", name)
		require.NotPanicsf(t, func() { err = mk(nil, nilOpt, WithClock(nil)) }, "%s: nil options", name)
		assert.NoErrorf(t, err, "%s: nil options are ignored; WithClock(nil) is the real clock", name)
	}

	var nilKeyed *Keyed
	_, err := NewTiered(func(context.Context, string) string { return "a" }, map[string]KeyedLimiter{"a": nilKeyed})
	assert.ErrorIs(t, err, ErrInvalidConfig, "NewTiered with a typed-nil tier")
}

// TestAbuseUnknownTierHidesKey: the error for a key whose tier is unknown
// names the tier, not the key (it may be an API key).
func TestAbuseUnknownTierHidesKey(t *testing.T) {
	t.Parallel()
	k, err := NewKeyed(FixedWindowPolicy(1, time.Second))
	require.NoError(t, err)
	tl, err := NewTiered(func(context.Context, string) string { return "gold" }, map[string]KeyedLimiter{"free": k})
	require.NoError(t, err)
	const secret = "sk_live_abcdef123456"
	ctx := context.Background()
	d, err := tl.AllowN(ctx, secret, 1)
	require.ErrorIs(t, err, ErrUnknownTier)
	assert.False(t, d.Allowed)
	assert.NotContains(t, err.Error(), secret)
	md, err := AllowAll(ctx, 1, Dimension{Name: "plan", Limiter: tl, Key: secret})
	require.ErrorIs(t, err, ErrUnknownTier)
	assert.False(t, md.Allowed)
	assert.NotContains(t, err.Error(), secret)
}
