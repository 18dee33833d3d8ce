package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/rlkit/ratelimit"
)

// An LLM gateway's limits per API key: 60 requests a minute and 90,000
// tokens a minute. A completion's tokens are known only once it ran, so
// the gateway reserves max_tokens, then settles the usage the model
// reports: what was not used goes back at once, an overrun is paid for
// by later requests.
func ExampleReserveAll() {
	mock := clock.NewMock()
	requests, err := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(60, time.Minute), 60), ratelimit.WithClock(mock))
	if err != nil {
		panic(err)
	}
	tokens, err := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(90_000, time.Minute), 90_000), ratelimit.WithClock(mock))
	if err != nil {
		panic(err)
	}
	limits := []ratelimit.Dimension{
		{Name: "requests", Limiter: requests, Key: "key-123", N: 1}, // 1 a request, whatever its tokens
		{Name: "tokens", Limiter: tokens, Key: "key-123"},
	}
	ctx := context.Background()

	const maxTokens = 4_000
	r, err := ratelimit.ReserveAll(ctx, maxTokens, 5*time.Minute, limits...)
	if err != nil {
		panic(err)
	}
	d, _ := tokens.Peek(ctx, "key-123", 0)
	fmt.Println("admitted:", r.Allowed, "tokens left:", d.Remaining)

	// ... the completion runs and reports its usage ...
	if err := r.Settle(ctx, 1_250); err != nil {
		panic(err)
	}
	d, _ = tokens.Peek(ctx, "key-123", 0)
	fmt.Println("after settling 1,250 tokens:", d.Remaining)

	// A second settlement changes nothing.
	fmt.Println(r.Settle(ctx, 0))

	// A request whose max_tokens cannot fit is refused before it runs.
	r, _ = ratelimit.ReserveAll(ctx, 100_000, 5*time.Minute, limits...)
	fmt.Println("admitted:", r.Allowed, "denied by:", limits[r.Index].Name, "retry:", r.RetryAfter == ratelimit.RetryNever)
	// Output:
	// admitted: true tokens left: 86000
	// after settling 1,250 tokens: 88750
	// ratelimit: reservation already settled
	// admitted: false denied by: tokens retry: true
}

// A login limit that counts only failures: each attempt reserves one
// failure before the password is checked, and settles 0 when it succeeds.
// With 3 failures allowed, a 4th attempt is refused before it runs while
// 3 are in flight or have failed, and successful logins never use up the
// limit.
func ExampleKeyed_ReserveN() {
	mock := clock.NewMock()
	failures, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(3, 15*time.Minute), ratelimit.WithClock(mock))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	login := func(password string) string {
		r, err := failures.ReserveN(ctx, "alice", 1, time.Minute)
		if err != nil || !r.Allowed {
			return "refused"
		}
		ok := password == "correct horse"
		cost := 1
		if ok {
			cost = 0
		}
		_ = r.Settle(ctx, cost)
		if ok {
			return "welcome"
		}
		return "wrong password"
	}
	for _, pw := range []string{"correct horse", "correct horse", "guess1", "guess2", "correct horse", "guess3", "guess4", "correct horse"} {
		fmt.Println(login(pw))
	}
	// Output:
	// welcome
	// welcome
	// wrong password
	// wrong password
	// welcome
	// wrong password
	// refused
	// refused
}
