package ratelimit_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/rlkit/ratelimit"
)

// A customer upgrades: the limit is loosened and what they used so far
// carries over. Later, during an incident, every key is tightened.
func ExampleKeyed_SetPolicy() {
	mock := newMock()
	ctx := context.Background()
	limiter, _ := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(100, time.Minute), ratelimit.WithClock(mock))
	limiter.AllowN(ctx, "customer-42", 60)

	// Upgrade to 1,000 a minute, keeping the 60 used.
	_ = limiter.SetPolicy(ratelimit.FixedWindowPolicy(1000, time.Minute), ratelimit.KeepUsed)
	d, _ := limiter.Peek(ctx, "customer-42", 0)
	fmt.Println(d.Limit, d.Remaining)

	// Incident: tighten to 100 a minute, scaling what was used (6% of it).
	_ = limiter.SetPolicy(ratelimit.FixedWindowPolicy(100, time.Minute), ratelimit.ScaleUsed)
	d, _ = limiter.Peek(ctx, "customer-42", 0)
	fmt.Println(d.Limit, d.Remaining)
	// Output:
	// 1000 940
	// 100 94
}

// Support resets a customer's quota; abuse handling blocks a key for 15
// minutes and charges a failed login 10 extra events.
func ExampleKeyed_Block() {
	mock := newMock()
	ctx := context.Background()
	logins, _ := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(20, time.Minute), 20), ratelimit.WithClock(mock))

	_ = logins.Penalize(ctx, "203.0.113.7", 10) // a failed login costs 10
	d, _ := logins.Peek(ctx, "203.0.113.7", 0)
	fmt.Println("after the penalty:", d.Remaining)

	_ = logins.Block(ctx, "203.0.113.7", 15*time.Minute)
	d, _ = logins.AllowN(ctx, "203.0.113.7", 1)
	fmt.Println("blocked:", d.Allowed, d.RetryAfter)

	_ = logins.Reset(ctx, "203.0.113.7") // forgets the state and lifts the block
	d, _ = logins.AllowN(ctx, "203.0.113.7", 1)
	fmt.Println("after Reset:", d.Allowed, d.Remaining)
	// Output:
	// after the penalty: 10
	// blocked: false 15m0s
	// after Reset: true 19
}

// A customer moves from the free tier (100 a minute) to pro (10,000 a
// minute): record the new plan first, so that new requests go to pro, then
// move what the key used with MoveKey, from the old tier's limiter to the
// Tiered (which stands for the key's tier now).
func ExampleMoveKey_tiered() {
	mock := newMock()
	ctx := context.Background()
	free, _ := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(100, time.Minute), ratelimit.WithClock(mock))
	pro, _ := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(10_000, time.Minute), ratelimit.WithClock(mock))
	var mu sync.Mutex
	plans := map[string]string{"customer-42": "free"}
	tiered, _ := ratelimit.NewTiered(func(_ context.Context, key string) string {
		mu.Lock()
		defer mu.Unlock()
		return plans[key]
	}, map[string]ratelimit.KeyedLimiter{"free": free, "pro": pro})

	tiered.AllowN(ctx, "customer-42", 60)

	mu.Lock()
	plans["customer-42"] = "pro"
	mu.Unlock()
	if err := ratelimit.MoveKey(ctx, "customer-42", free, tiered, ratelimit.ScaleUsed); err != nil {
		fmt.Println(err)
	}
	d, _ := tiered.Peek(ctx, "customer-42", 0)
	fmt.Println(d.Limit, d.Remaining) // 60% of the free quota used is 60% of pro's
	// Output:
	// 10000 4000
}

// MoveKey moves a key between any two keyed limiters that implement
// KeyAdmin, such as two policies kept side by side.
func ExampleMoveKey() {
	mock := newMock()
	ctx := context.Background()
	basic, _ := ratelimit.NewKeyed(ratelimit.SlidingLogPolicy(10, time.Minute), ratelimit.WithClock(mock))
	premium, _ := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(50, time.Minute), 50), ratelimit.WithClock(mock))
	basic.AllowN(ctx, "key", 8)

	_ = ratelimit.MoveKey(ctx, "key", basic, premium, ratelimit.KeepUsed)
	d, _ := premium.Peek(ctx, "key", 0)
	b, _ := basic.Peek(ctx, "key", 0)
	fmt.Println(d.Remaining, b.Remaining)
	// Output:
	// 42 10
}
