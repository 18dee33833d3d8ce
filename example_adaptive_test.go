package ratelimit_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/rlkit/ratelimit"
)

// A service protected by an adaptive limit: requests that find it full
// are shed at once (an HTTP server answers 503 with Retry-After), the
// critical ones last.
func ExampleNewAdaptive() {
	svc, err := ratelimit.NewAdaptive(ratelimit.AdaptiveConfig{Initial: 5})
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	var inFlight []ratelimit.Flight
	for _, p := range []ratelimit.Priority{
		ratelimit.PriorityDefault, ratelimit.PriorityDefault, ratelimit.PriorityDefault, ratelimit.PriorityDefault,
		ratelimit.PrioritySheddable, ratelimit.PriorityDefault, ratelimit.PriorityDefault,
		ratelimit.PriorityCritical, ratelimit.PriorityCritical,
	} {
		f, d := svc.Acquire(ctx, p)
		if !d.Allowed {
			fmt.Printf("%-9s shed (limit %d, retry after %v)\n", p, d.Limit, d.RetryAfter)
			continue
		}
		fmt.Printf("%-9s admitted, %d in flight\n", p, svc.InFlight())
		inFlight = append(inFlight, f) // the work would run here
	}
	for _, f := range inFlight {
		f.Success() // or Dropped when it timed out, Ignore when the client went away
	}
	// Output:
	// default   admitted, 1 in flight
	// default   admitted, 2 in flight
	// default   admitted, 3 in flight
	// default   admitted, 4 in flight
	// sheddable shed (limit 5, retry after 1ms)
	// default   admitted, 5 in flight
	// default   shed (limit 5, retry after 1ms)
	// critical  admitted, 6 in flight
	// critical  shed (limit 5, retry after 1ms)
}

// exampleClock is a clock the example moves by hand.
type exampleClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *exampleClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *exampleClock) After(d time.Duration) <-chan time.Time {
	ch := make(chan time.Time, 1)
	ch <- c.Now().Add(d)
	return ch
}

func (c *exampleClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// The limit follows the latency. A service of 30 workers takes 10ms a
// request; beyond 30 at a time the requests queue, and the latency grows
// with them. With 100 requests always waiting, the limit rises from its
// Initial 20 to about 30·(1+Tolerance), where the latency is 10% above the
// unloaded one; when half the workers go, it follows them down.
func Example_adaptive() {
	clk := &exampleClock{t: time.Unix(1_700_000_000, 0)}
	svc, err := ratelimit.NewAdaptive(ratelimit.AdaptiveConfig{}, ratelimit.WithClock(clk))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	// serve runs rounds of 100 requests (3 s of them), each round's
	// admitted requests taking the latency of a queue in front of the
	// workers.
	serve := func(rounds, workers int) {
		for range rounds {
			var admitted []ratelimit.Flight
			for range 100 {
				if f, d := svc.Acquire(ctx, ratelimit.PriorityDefault); d.Allowed {
					admitted = append(admitted, f)
				}
			}
			clk.add(10 * time.Millisecond * time.Duration(max(len(admitted), workers)) / time.Duration(workers))
			for _, f := range admitted {
				f.Success()
			}
		}
	}
	fmt.Println("limit at the start:", svc.Limit())
	serve(300, 30)
	fmt.Println("limit with 30 workers:", svc.Limit())
	serve(300, 15)
	fmt.Println("limit with 15 workers:", svc.Limit())
	// Output:
	// limit at the start: 20
	// limit with 30 workers: 33
	// limit with 15 workers: 17
}
