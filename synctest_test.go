//go:build go1.25

package ratelimit

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSynctestDefaultClock runs every algorithm, single and keyed, with the
// default clock (no WithClock) inside a testing/synctest bubble, whose fake
// time moves only when every goroutine in it is blocked: AllowN and Peek,
// then a WaitN that sleeps for exactly the announced wait of fake time.
func TestSynctestDefaultClock(t *testing.T) {
	t.Parallel()
	for _, p := range clockTestPolicies {
		for _, keyed := range []bool{false, true} {
			name := p.Algorithm.String() + "/single"
			if keyed {
				name = p.Algorithm.String() + "/keyed"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				synctest.Test(t, func(t *testing.T) {
					h := newHomeUnderTest(t, p, keyed, nil) // nil: the default clock

					fill, wait := 2, time.Duration(0)
					if h.queues {
						fill, wait = 1, time.Second
					}
					require.True(t, h.allowN(fill).Allowed, "AllowN(%d) on a fresh limiter", fill)
					assert.Equal(t, 2-fill, h.peek(0).Remaining)
					if !h.queues {
						d := h.peek(1)
						require.False(t, d.Allowed, "Peek(1) on a full limiter")
						wait = d.RetryAfter
					}

					start := time.Now()
					require.NoError(t, h.waitN(context.Background(), 1))
					assert.Equal(t, wait, time.Since(start), "fake time WaitN slept")

					// A waiter in another goroutine is blocked until the
					// bubble's time reaches its release.
					if !h.queues {
						for i := 0; i < 2 && h.allowN(1).Allowed; i++ {
						} // use up what the new window or refill gave
						wait = h.peek(1).RetryAfter
						require.Positive(t, wait)
					} else {
						wait = time.Second // behind the event just released
					}
					done := make(chan error, 1)
					go func() { done <- h.waitN(context.Background(), 1) }()
					synctest.Wait()
					time.Sleep(wait - time.Nanosecond)
					synctest.Wait()
					select {
					case err := <-done:
						t.Fatalf("WaitN returned %v before its wait of %v", err, wait)
					default:
					}
					time.Sleep(time.Nanosecond)
					synctest.Wait()
					select {
					case err := <-done:
						require.NoError(t, err)
					default:
						t.Fatalf("WaitN still blocked after %v of fake time", wait)
					}
				})
			})
		}
	}
}
