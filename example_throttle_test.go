package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/rlkit/ratelimit"
)

// A client asks its Throttle before each send and tells it each answer:
// once the server fails more than half the attempts (K = 2), requests are
// refused locally, without reaching it, but for one probe a second; the
// first probe the server accepts brings the traffic back.
func ExampleNewThrottle() {
	clk := newMock() // at a window's start
	th, err := ratelimit.NewThrottle(ratelimit.ThrottleConfig{K: 2}, ratelimit.WithClock(clk))
	if err != nil {
		panic(err)
	}
	ctx := context.Background()
	up := true
	send := func() {
		if d := th.Attempt(ctx, "api.example.com"); !d.Allowed {
			fmt.Printf("refused locally, next probe in %v\n", d.RetryAfter)
			return
		}
		th.Record("api.example.com", up) // the server's answer: accepted or not
		fmt.Println("sent, accepted:", up)
	}
	send()
	up = false // the server goes down
	send()
	send()
	send()
	clk.Add(time.Second)
	send() // a probe
	up = true
	clk.Add(time.Second)
	send() // a probe, accepted
	send()
	// Output:
	// sent, accepted: true
	// sent, accepted: false
	// sent, accepted: false
	// refused locally, next probe in 1s
	// sent, accepted: false
	// sent, accepted: true
	// sent, accepted: true
}
