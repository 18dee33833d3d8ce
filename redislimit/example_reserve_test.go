package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/redislimit"
)

// ExampleLimiter_ReserveN budgets LLM tokens per API key on Redis, shared
// by every instance of a gateway: reserve the request's max_tokens before
// calling the model, then settle the tokens the answer reports. Less gives
// the difference back; more goes into the bucket's debt, which later
// requests wait out. A reservation never settled is settled at its
// estimate when its expiry has passed.
func ExampleLimiter_ReserveN() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()
	clock := &exampleClock{t: time.Date(2026, 12, 2, 9, 0, 0, 0, time.UTC)}

	// 90,000 tokens a minute, in bursts of up to 90,000.
	tokens := ratelimit.TokenBucketPolicy(ratelimit.Per(90_000, time.Minute), 90_000)
	limiter, err := redislimit.New(client, tokens,
		redislimit.WithPrefix(examplePrefix()), redislimit.WithClock(clock))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()

	r, _ := limiter.ReserveN(ctx, "api-key-7", 4_000, time.Minute) // max_tokens
	fmt.Println("reserved:", r.Allowed, r.Remaining)
	// ... the upstream answers, reporting 1,250 tokens used ...
	_ = r.Settle(ctx, 1_250)
	d, _ := limiter.Peek(ctx, "api-key-7", 0)
	fmt.Println("after settling 1250:", d.Remaining)

	// An answer that used more than reserved: the overrun is charged,
	// 6,250 tokens of debt; 1,250 more fit after 5s (1,500 a second).
	r, _ = limiter.ReserveN(ctx, "api-key-7", 80_000, time.Minute)
	_ = r.Settle(ctx, 95_000)
	d, _ = limiter.Peek(ctx, "api-key-7", 1_250)
	fmt.Println("after an overrun:", d.Allowed, d.RetryAfter)

	// Settled once: a second Settle changes nothing.
	err = r.Settle(ctx, 0)
	fmt.Println(errors.Is(err, ratelimit.ErrReservationSettled))

	// Output:
	// reserved: true 86000
	// after settling 1250: 88750
	// after an overrun: false 5s
	// true
}
