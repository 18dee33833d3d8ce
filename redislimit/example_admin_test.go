package redislimit_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/redislimit"
)

// exampleClock is a clock that moves only when told, so that the examples
// print the same durations every run (with redislimit.WithClock, the
// scripts decide on it instead of the Redis server's clock).
type exampleClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *exampleClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *exampleClock) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func (c *exampleClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// examplePrefix is a key prefix of its own for each example run, so that
// runs do not share state on one Redis.
func examplePrefix() string { return fmt.Sprintf("example:%d:", time.Now().UnixNano()) }

// A limit of 10,000 requests a day, the day being the customer's calendar
// day in New York (23 or 25 hours long when the clocks change), on Redis.
// RetryAfter points at the next midnight there; without WithClock the
// day's end comes from the Redis server's clock.
func Example_dailyQuota() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	ny, _ := time.LoadLocation("America/New_York")
	clock := &exampleClock{t: time.Date(2026, 3, 7, 18, 0, 0, 0, ny)} // the day before the clocks spring forward

	daily := ratelimit.QuotaPolicy(10_000, ratelimit.Calendar{Unit: ratelimit.Daily, Location: ny})
	limiter, err := redislimit.New(client, daily,
		redislimit.WithPrefix(examplePrefix()), redislimit.WithClock(clock))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	d, _ := limiter.AllowN(ctx, "customer-42", 9_999)
	fmt.Println(d.Allowed, d.Remaining, d.ResetAfter)
	d, _ = limiter.AllowN(ctx, "customer-42", 2)
	fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)

	clock.Add(6 * time.Hour) // past midnight: March 8, a day of 23 hours
	d, _ = limiter.AllowN(ctx, "customer-42", 2)
	fmt.Println(d.Allowed, d.Remaining, d.ResetAfter)
	// Output:
	// true 1 6h0m0s
	// false 1 6h0m0s
	// true 9998 23h0m0s
}

// A customer upgrades from 100 to 1,000 requests a minute, keeping what
// they used; later, in an incident, every key is tightened to 100 again,
// scaling what each used. Keys are converted the first time they are
// touched after a change, inside the decision script.
func ExampleLimiter_SetPolicy() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	clock := &exampleClock{t: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}

	limiter, err := redislimit.New(client, ratelimit.FixedWindowPolicy(100, time.Minute),
		redislimit.WithPrefix(examplePrefix()), redislimit.WithClock(clock))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	limiter.AllowN(ctx, "customer-42", 60)

	_ = limiter.SetPolicy(ratelimit.FixedWindowPolicy(1000, time.Minute), ratelimit.KeepUsed)
	d, _ := limiter.Peek(ctx, "customer-42", 0)
	fmt.Println(d.Limit, d.Remaining)

	_ = limiter.SetPolicy(ratelimit.FixedWindowPolicy(100, time.Minute), ratelimit.ScaleUsed)
	d, _ = limiter.Peek(ctx, "customer-42", 0)
	fmt.Println(d.Limit, d.Remaining)
	// Output:
	// 1000 940
	// 100 94
}

// A process deployed after a change of policy (100 a minute, then 1,000)
// is told the policy before with WithPrevious, so that it converts the
// state keys still hold under it as SetPolicy does.
func ExampleWithPrevious() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	clock := &exampleClock{t: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}
	prefix := examplePrefix()
	ctx := context.Background()

	before, err := redislimit.New(client, ratelimit.FixedWindowPolicy(100, time.Minute),
		redislimit.WithPrefix(prefix), redislimit.WithClock(clock))
	if err != nil {
		fmt.Println(err)
		return
	}
	before.AllowN(ctx, "customer-42", 60)

	after, err := redislimit.New(client, ratelimit.FixedWindowPolicy(1000, time.Minute),
		redislimit.WithPrevious(ratelimit.FixedWindowPolicy(100, time.Minute), ratelimit.ScaleUsed),
		redislimit.WithPrefix(prefix), redislimit.WithClock(clock))
	if err != nil {
		fmt.Println(err)
		return
	}
	d, _ := after.Peek(ctx, "customer-42", 0)
	fmt.Println(d.Limit, d.Remaining) // 60% used of 100 is 600 of 1,000
	// Output:
	// 1000 400
}

// Abuse handling on Redis: a failed login costs 10 extra, a key is blocked
// for 15 minutes (whatever the policy says, in every process sharing the
// Redis), and support resets a key, which also lifts its block.
func ExampleLimiter_Block() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	clock := &exampleClock{t: time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)}

	logins, err := redislimit.New(client, ratelimit.TokenBucketPolicy(ratelimit.Per(20, time.Minute), 20),
		redislimit.WithPrefix(examplePrefix()), redislimit.WithClock(clock))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	_ = logins.Penalize(ctx, "203.0.113.7", 10)
	d, _ := logins.Peek(ctx, "203.0.113.7", 0)
	fmt.Println("after the penalty:", d.Remaining)

	_ = logins.Block(ctx, "203.0.113.7", 15*time.Minute)
	clock.Add(5 * time.Minute)
	d, _ = logins.AllowN(ctx, "203.0.113.7", 1)
	fmt.Println("blocked:", d.Allowed, d.RetryAfter)

	_ = logins.Reset(ctx, "203.0.113.7")
	d, _ = logins.AllowN(ctx, "203.0.113.7", 1)
	fmt.Println("after Reset:", d.Allowed, d.Remaining)
	// Output:
	// after the penalty: 10
	// blocked: false 10m0s
	// after Reset: true 19
}
