package redislimit_test

import (
	"context"
	"log"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/redislimit"
)

// ExampleWithLeases serves a hot key (a shared tenant taking a million
// requests a second across its instances) from leases: each instance takes
// about 10ms of the key's traffic from Redis in one script and decides in
// memory, instead of one script per decision. Cold keys are decided one
// script each as before. At shutdown the instance gives back what its
// leases still hold. It needs a Redis server, so it has no output to
// check.
func ExampleWithLeases() {
	client := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
	defer client.Close()

	limiter, err := redislimit.New(client, ratelimit.FixedWindowPolicy(1_000_000, time.Second),
		redislimit.WithLeases(redislimit.LeaseConfig{
			Target:   10 * time.Millisecond, // a lease covers about 10ms of the key's traffic
			Lifetime: 50 * time.Millisecond, // and is used for 50ms at most
			MaxShare: 16,                    // and holds at most 1/16 of the limit
		}),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		if err := limiter.ReleaseLeases(ctx); err != nil {
			log.Print(err)
		}
	}()

	if limiter.Allow(context.Background(), "tenant-7") {
		// serve the request
	}
}
