//go:build go1.25

package ratelimit_test

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rlkit/ratelimit"
)

// TestExampleSynctest is the runnable tutorial for testing code that uses
// a limiter with testing/synctest (Go 1.25+). An Example function cannot
// show it, since synctest.Test needs a *testing.T; this test is written as
// a user would write theirs, and the package documentation points here.
//
// Inside the bubble, the time package runs on fake time that moves only when
// every goroutine in the bubble is blocked, and a limiter built there with
// the default clock (no WithClock) reads that time: nothing to inject, and a
// WaitN of an hour returns at once in real time.
func TestExampleSynctest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Build the limiter inside the bubble.
		limiter, err := ratelimit.NewTokenBucket(ratelimit.Per(1, time.Hour), 1)
		if err != nil {
			t.Fatal(err)
		}
		if !limiter.Allow() {
			t.Fatal("the first event was refused")
		}
		d := limiter.Peek(1)
		if d.Allowed || d.RetryAfter != time.Hour {
			t.Fatalf("Peek(1) = %+v, want a denial for an hour", d)
		}

		// Wait sleeps for exactly the announced hour of fake time.
		start := time.Now()
		if err := limiter.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
		if waited := time.Since(start); waited != time.Hour {
			t.Fatalf("Wait took %v of fake time, want 1h", waited)
		}

		// A deadline shorter than the wait fails at once, without waiting.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := limiter.Wait(ctx); err == nil {
			t.Fatal("Wait with a one-minute deadline succeeded; want ErrDeadline")
		}
		if time.Since(start) != time.Hour {
			t.Fatal("a Wait that cannot meet its deadline must not sleep")
		}
	})
}
