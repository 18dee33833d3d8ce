package ratelimit_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/rlkit/ratelimit"
)

// newMock returns a mock clock at a whole second, so windows line up.
func newMock() *clock.Mock {
	m := clock.NewMock()
	m.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	return m
}

func ExampleNewTokenBucket() {
	mock := newMock()
	// Bursts of up to 3, refilled at 10 per second.
	b, err := ratelimit.NewTokenBucket(ratelimit.Per(10, time.Second), 3, ratelimit.WithClock(mock))
	if err != nil {
		panic(err)
	}
	for range 4 {
		d := b.AllowN(1)
		fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)
	}
	mock.Add(100 * time.Millisecond) // exactly one token
	fmt.Println(b.Allow(), b.Allow())
	// Output:
	// true 2 0s
	// true 1 0s
	// true 0 0s
	// false 0 100ms
	// true false
}

func ExampleTokenBucket_Wait() {
	mock := newMock()
	b, _ := ratelimit.NewTokenBucket(ratelimit.Per(1, time.Second), 1, ratelimit.WithClock(mock))
	ctx := context.Background()
	_ = b.Wait(ctx) // the first token is there

	done := make(chan error)
	go func() { done <- b.Wait(ctx) }()
	for b.Peek(0).Remaining == 0 && b.Peek(1).RetryAfter == time.Second {
		time.Sleep(time.Millisecond) // until the waiter has taken its place
	}
	mock.Add(time.Second)
	fmt.Println(<-done)

	// A wait that would outlast the deadline fails at once.
	short, cancel := context.WithTimeout(ctx, time.Millisecond)
	defer cancel()
	err := b.Wait(short)
	fmt.Println(errors.Is(err, context.DeadlineExceeded))
	// Output:
	// <nil>
	// true
}

func ExampleNewLeakyBucket() {
	mock := newMock()
	// A queue of 2 draining one event every 500ms.
	b, _ := ratelimit.NewLeakyBucket(2, 500*time.Millisecond, ratelimit.WithClock(mock))
	fmt.Println(b.Allow(), b.Allow(), b.Allow())
	mock.Add(500 * time.Millisecond)
	fmt.Println(b.Allow(), b.Allow())
	// Output:
	// true true false
	// true false
}

func ExampleLeakyBucket_WaitN() {
	mock := newMock()
	b, _ := ratelimit.NewLeakyBucket(2, time.Second, ratelimit.WithClock(mock))
	ctx := context.Background()
	fmt.Println(b.Wait(ctx)) // released at once
	// The second caller is queued for a second; a third would overflow
	// the queue of 2 and is refused at once rather than left waiting.
	queued, giveUp := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- b.Wait(queued) }()
	for b.Peek(0).Remaining != 0 {
		time.Sleep(time.Millisecond)
	}
	fmt.Println(b.Wait(ctx))
	giveUp() // the queued caller stops waiting
	<-done
	// Output:
	// <nil>
	// ratelimit: queue is full
}

func ExampleNewFixedWindow() {
	mock := newMock()
	w, _ := ratelimit.NewFixedWindow(2, time.Second, ratelimit.WithClock(mock))
	mock.Add(900 * time.Millisecond)
	fmt.Println(w.Allow(), w.Allow(), w.Allow())
	// The window boundary resets the count: 4 events within 200ms.
	mock.Add(200 * time.Millisecond)
	fmt.Println(w.Allow(), w.Allow())
	// Output:
	// true true false
	// true true
}

func ExampleNewSlidingLog() {
	mock := newMock()
	l, _ := ratelimit.NewSlidingLog(2, time.Second, ratelimit.WithClock(mock))
	mock.Add(900 * time.Millisecond)
	fmt.Println(l.Allow(), l.Allow())
	mock.Add(200 * time.Millisecond) // no reset at the boundary
	d := l.AllowN(1)
	fmt.Println(d.Allowed, d.RetryAfter)
	// Output:
	// true true
	// false 800ms
}

func ExampleNewSlidingCounter() {
	mock := newMock()
	c, _ := ratelimit.NewSlidingCounter(10, time.Second, ratelimit.WithClock(mock))
	c.AllowN(10) // a full previous window
	mock.Add(1250 * time.Millisecond)
	// 25% into the next window the estimate is 10 x 75% = 7.5 events.
	fmt.Println(c.Peek(0).Remaining)
	// Output:
	// 2
}

func ExampleNewKeyed() {
	mock := newMock()
	perClient, _ := ratelimit.NewKeyed(
		ratelimit.FixedWindowPolicy(2, time.Minute), ratelimit.WithClock(mock))
	ctx := context.Background()
	for _, client := range []string{"alice", "alice", "alice", "bob"} {
		d, err := perClient.AllowN(ctx, client, 1)
		fmt.Println(client, d.Allowed, d.Remaining, err)
	}
	// Output:
	// alice true 1 <nil>
	// alice true 0 <nil>
	// alice false 0 <nil>
	// bob true 1 <nil>
}

func ExampleAllowAll() {
	mock := newMock()
	opt := ratelimit.WithClock(mock)
	perKey, _ := ratelimit.NewKeyed(ratelimit.SlidingLogPolicy(1000, time.Minute), opt)
	logins, _ := ratelimit.NewKeyed(ratelimit.SlidingLogPolicy(2, time.Minute), opt)
	ctx := context.Background()
	for range 3 {
		md, _ := ratelimit.AllowAll(ctx, 1,
			ratelimit.Dimension{Name: "per-key", Limiter: perKey, Key: "key-123"},
			ratelimit.Dimension{Name: "login", Limiter: logins, Key: "203.0.113.7"},
		)
		fmt.Println(md.Allowed, md.Index, md.Remaining)
	}
	// The denied attempt charged neither limit.
	d, _ := perKey.Peek(ctx, "key-123", 0)
	fmt.Println(d.Remaining)
	// Output:
	// true 1 1
	// true 1 0
	// false 1 0
	// 998
}

// planKey is the context key under which this example's authentication
// stores the customer's plan.
type planKey struct{}

// The tier function reads the customer's plan from the request's context,
// where authentication put it: package httplimit passes each request's
// context. An unknown plan (here "trial") is charged in the default tier.
func ExampleNewTiered() {
	mock := newMock()
	opt := ratelimit.WithClock(mock)
	free, _ := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(100, time.Minute), opt)
	pro, _ := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(10_000, time.Minute), opt)
	planOf := func(ctx context.Context, _ string) string {
		plan, _ := ctx.Value(planKey{}).(string)
		return plan
	}
	tiered, err := ratelimit.NewTiered(planOf,
		map[string]ratelimit.KeyedLimiter{"free": free, "pro": pro},
		ratelimit.WithDefaultTier("free"))
	if err != nil {
		panic(err)
	}

	// What an authentication middleware would do for each request.
	authenticated := func(plan string) context.Context {
		return context.WithValue(context.Background(), planKey{}, plan)
	}
	for _, req := range []struct{ key, plan string }{
		{"key-a", "free"}, {"key-b", "pro"}, {"key-c", "trial"},
	} {
		ctx := authenticated(req.plan)
		tier, _, _ := tiered.Tier(ctx, req.key)
		d, _ := tiered.AllowN(ctx, req.key, 1)
		fmt.Println(req.key, tier, d.Limit, d.Remaining)
	}
	// Output:
	// key-a free 100 99
	// key-b pro 10000 9999
	// key-c free 100 99
}

func ExamplePolicy_NewLimiter() {
	mock := newMock()
	// A policy read from configuration, run here as a single limiter; the
	// same Policy runs per key with NewKeyed, or on Redis.
	p := ratelimit.SlidingLogPolicy(2, time.Second)
	l, err := p.NewLimiter(ratelimit.WithClock(mock))
	if err != nil {
		panic(err)
	}
	fmt.Println(p)
	fmt.Println(l.Allow(), l.Allow(), l.Allow())
	fmt.Println(l.Peek(1).RetryAfter)
	mock.Add(time.Second)
	fmt.Println(l.Allow())
	// Output:
	// slidinglog(limit=2, window=1s)
	// true true false
	// 1s
	// true
}

// instantClock is a fake Clock on which every wait ends at once, moving the
// time forward by its length: the few lines any fake of [ratelimit.Clock]
// needs.
type instantClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *instantClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *instantClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

func ExampleKeyed_WaitN() {
	clk := &instantClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	// Each tenant may send 2 jobs a second, in bursts of up to 4.
	perTenant, err := ratelimit.NewKeyed(
		ratelimit.TokenBucketPolicy(ratelimit.Per(2, time.Second), 4), ratelimit.WithClock(clk))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	start := clk.Now()
	for _, batch := range []int{4, 3, 1} {
		if err := perTenant.WaitN(ctx, "tenant-1", batch); err != nil {
			panic(err)
		}
		fmt.Printf("batch of %d sent at +%v\n", batch, clk.Now().Sub(start))
	}
	// A batch larger than the burst can never be sent.
	err = perTenant.WaitN(ctx, "tenant-1", 5)
	fmt.Println(errors.Is(err, ratelimit.ErrExceedsLimit))
	// Output:
	// batch of 4 sent at +0s
	// batch of 3 sent at +1.5s
	// batch of 1 sent at +2s
	// true
}

// An Observer sees every decision, with the limiter's name, its algorithm
// and where it runs, but never the key.
func ExampleWithObserver() {
	mock := newMock()
	count := map[ratelimit.Outcome]int{}
	obs := ratelimit.ObserverFunc(func(_ context.Context, e ratelimit.Event) {
		count[e.Outcome]++ // an exporter would increment a counter here
		fmt.Println(e.Name, e.Algorithm, e.Home, e.Outcome, e.N)
	})
	perKey, _ := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(1, time.Minute),
		ratelimit.WithClock(mock), ratelimit.WithObserver(obs), ratelimit.WithName("per-key"))
	ctx := context.Background()
	perKey.Allow(ctx, "key-123")
	perKey.Allow(ctx, "key-123")
	_, _ = perKey.AllowN(ctx, "key-123", 0)
	fmt.Println(count[ratelimit.OutcomeAllowed], count[ratelimit.OutcomeDenied], count[ratelimit.OutcomeError])
	// Output:
	// per-key fixedwindow keyed allowed 1
	// per-key fixedwindow keyed denied 1
	// per-key fixedwindow keyed error 0
	// 1 1 1
}
