package ratelimit_test

import (
	"context"
	"fmt"

	"github.com/rlkit/ratelimit"
)

// At most two report exports in flight per customer: a third is refused
// until one of the two finishes.
func ExampleNewConcurrency() {
	exports, err := ratelimit.NewConcurrency(2)
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	for i := 1; i <= 3; i++ {
		p, d, err := exports.TryAcquire(ctx, "customer-42", 1)
		if err != nil {
			panic(err)
		}
		fmt.Printf("export %d: allowed=%v, %d of %d free\n", i, d.Allowed, d.Remaining, d.Limit)
		defer p.Release() // the work would run here; releasing a denied (zero) Permit does nothing
	}
	// Output:
	// export 1: allowed=true, 1 of 2 free
	// export 2: allowed=true, 0 of 2 free
	// export 3: allowed=false, 0 of 2 free
}

// A worker loop waits for a free permit instead of being refused: Acquire
// serves the waiters of a key in order, and gives up with the context.
func ExampleConcurrency_Acquire() {
	db, err := ratelimit.NewConcurrency(1) // one long query at a time per tenant
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	done := make(chan string)
	for _, job := range []string{"a", "b", "c"} {
		p, err := db.Acquire(ctx, "tenant-7", 1)
		if err != nil {
			panic(err)
		}
		go func() {
			defer p.Release()
			done <- job // the query would run here, holding the permit
		}()
		fmt.Println("ran", <-done)
	}
	// Output:
	// ran a
	// ran b
	// ran c
}
