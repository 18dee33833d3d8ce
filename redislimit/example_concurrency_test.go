package redislimit_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit/redislimit"
)

// ExampleNewConcurrency lets each customer run at most 2 report exports
// at once, across every instance of the service: a third is refused until
// one ends. The permits expire 10s after their last renewal if the
// process holding them dies; while it lives it renews them, and the
// export stops if its permit is lost.
func ExampleNewConcurrency() {
	client := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer client.Close()

	exports, err := redislimit.NewConcurrency(client, 2,
		redislimit.WithPrefix("example-cc:"),
		redislimit.WithPermitExpiry(10*time.Second),
	)
	if err != nil {
		log.Fatal(err)
	}
	defer exports.Close()
	ctx := context.Background()
	_ = exports.Reset(ctx, "customer-42") // a fresh start for the example

	first, d, _ := exports.TryAcquire(ctx, "customer-42", 1)
	fmt.Println("first:", d.Allowed, "free:", d.Remaining)
	second, d, _ := exports.TryAcquire(ctx, "customer-42", 1)
	fmt.Println("second:", d.Allowed, "free:", d.Remaining)
	_, d, _ = exports.TryAcquire(ctx, "customer-42", 1)
	fmt.Println("third:", d.Allowed, "free:", d.Remaining)

	// The work selects on Lost: if the permit could not be renewed, it may
	// soon be another holder's.
	select {
	case <-first.Lost():
		fmt.Println("lost: stop the export")
	default:
		// ... run the export ...
	}
	first.Release()
	second.Release()

	// Acquire waits (FIFO within this process) until a permit is free.
	wctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	p, err := exports.Acquire(wctx, "customer-42", 2)
	if err != nil {
		log.Fatal(err)
	}
	defer p.Release()
	n, _ := exports.InFlight(ctx, "customer-42")
	fmt.Println("in flight:", n)
	// Output:
	// first: true free: 1
	// second: true free: 0
	// third: false free: 0
	// in flight: 2
}
