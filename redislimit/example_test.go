package redislimit_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/redislimit"
)

// ExampleNew limits each API key to bursts of 100 requests and 10 per
// second on average, shared by every instance of the service. It needs a
// Redis server, so it has no output to check.
func ExampleNew() {
	client := redis.NewClient(&redis.Options{
		Addr: "localhost:6379",
		// Lets go-redis abandon I/O at each call's deadline, and lets a
		// lone caller run its round trip on its own goroutine.
		ContextTimeoutEnabled: true,
	})
	defer client.Close()

	limiter, err := redislimit.New(client, ratelimit.TokenBucketPolicy(ratelimit.Per(10, time.Second), 100),
		redislimit.WithPrefix("api:"),
		redislimit.WithTimeout(50*time.Millisecond),
		// While Redis is down, each of the 4 instances admits a quarter.
		redislimit.WithLocalFallback(4),
		// Failures are logged through log/slog, at most once per
		// 10 seconds (WithErrorReportInterval), with the number of
		// failures each report stands for; keys appear as digests only.
		redislimit.WithLogger(slog.Default()),
		redislimit.WithName("api"),
	)
	if err != nil {
		log.Fatal(err)
	}

	d, err := limiter.AllowN(context.Background(), "api-key-123", 1)
	if err != nil {
		// Redis could not decide: d is the local fallback's decision
		// (with FailOpen, an admission). Act on it as usual; the error is
		// for metrics, never a reason to fail the request. (A done ctx
		// gives a denial and ctx.Err() instead.)
		_ = errors.Is(err, redislimit.ErrUnavailable) // true
	}
	if !d.Allowed {
		fmt.Printf("429 Too Many Requests, retry in %v\n", d.RetryAfter)
		return
	}
	fmt.Printf("OK, %d requests left\n", d.Remaining)
}
