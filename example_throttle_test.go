package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/rlkit/ratelimit"
)

// A client asks its Throttle before each send and tells it each answer:
// once the server fails more than half the attempts (K = 2), requests are
// refused locally, without reaching it.
func ExampleNewThrottle() {
	clk := newMock() // at a window's start
	th, err := ratelimit.NewThrottle(ratelimit.ThrottleConfig{K: 2}, ratelimit.WithClock(clk))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	send := func(up bool) {
		if d := th.Attempt(ctx, "api.example.com"); !d.Allowed {
			fmt.Printf("refused locally, retry after %v\n", d.RetryAfter.Round(time.Second))
			return
		}
		th.Record("api.example.com", up) // the server's answer: accepted or not
		fmt.Println("sent, accepted:", up)
	}
	send(true)
	for i := 0; i < 3; i++ {
		send(false) // the server goes down
	}
	send(false)
	// Output:
	// sent, accepted: true
	// sent, accepted: false
	// sent, accepted: false
	// refused locally, retry after 1m0s
	// refused locally, retry after 1m0s
}
