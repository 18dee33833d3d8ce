//go:build go1.25

package ratelimit_test

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The waiting form of the concurrency limiter, in synctest bubbles: time
// moves only when every goroutine waits, so "still waiting" is exact.

// acquireAsync starts an Acquire and returns the channel its Permit (or
// error) arrives on.
func acquireAsync(ctx context.Context, c *ratelimit.Concurrency, key string, n int) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		p, err := c.Acquire(ctx, key, n)
		ch <- acquired{p, err}
	}()
	return ch
}

type acquired struct {
	p   ratelimit.Permit
	err error
}

func pending(ch <-chan acquired) bool {
	select {
	case a := <-ch:
		panic(a)
	default:
		return true
	}
}

func TestConcurrencyAcquireIsFIFO(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newConcurrency(t, 3)
		first, _, err := c.TryAcquire(ctx, "k", 2)
		require.NoError(t, err)
		big := acquireAsync(ctx, c, "k", 3) // cannot fit until everything is back
		synctest.Wait()
		small := acquireAsync(ctx, c, "k", 1) // would fit, but waits behind big
		synctest.Wait()
		assert.True(t, pending(big))
		assert.True(t, pending(small))
		_, d, err := c.TryAcquire(ctx, "k", 1)
		require.NoError(t, err)
		assert.False(t, d.Allowed, "TryAcquire does not jump the queue")
		assert.Equal(t, 1, d.Remaining)

		first.Release()
		b := <-big
		require.NoError(t, b.err)
		synctest.Wait()
		assert.True(t, pending(small), "the head went first")
		assert.Equal(t, 3, c.InFlight("k"))
		b.p.Release()
		s := <-small
		require.NoError(t, s.err)
		s.p.Release()
		assert.Equal(t, 0, c.Len())
	})
}

func TestConcurrencyAcquireHonoursContext(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newConcurrency(t, 2)
		hold, _, err := c.TryAcquire(context.Background(), "k", 1)
		require.NoError(t, err)

		// A cancelled head of the queue lets those behind it in.
		ctx, cancel := context.WithCancel(context.Background())
		head := acquireAsync(ctx, c, "k", 2)
		synctest.Wait()
		behind := acquireAsync(context.Background(), c, "k", 1)
		synctest.Wait()
		assert.True(t, pending(behind))
		cancel()
		h := <-head
		require.ErrorIs(t, h.err, context.Canceled)
		assert.Equal(t, ratelimit.Permit{}, h.p)
		b := <-behind
		require.NoError(t, b.err)
		assert.Equal(t, 2, c.InFlight("k"))

		// A deadline that passes while waiting: the deadline's error, nothing held.
		dctx, dcancel := context.WithTimeout(context.Background(), time.Second)
		defer dcancel()
		start := time.Now()
		_, err = c.Acquire(dctx, "k", 1)
		require.ErrorIs(t, err, context.DeadlineExceeded)
		assert.Equal(t, time.Second, time.Since(start))
		hold.Release()
		b.p.Release()
		assert.Equal(t, 0, c.Len(), "no waiter and no permit left behind")

		// A done ctx is refused before anything is taken.
		_, err = c.Acquire(ctx, "k", 1)
		require.ErrorIs(t, err, context.Canceled)
		assert.Equal(t, 0, c.InFlight("k"))
	})
}

func TestConcurrencyBlock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx := context.Background()
		c := newConcurrency(t, 1)
		hold, _, err := c.TryAcquire(ctx, "k", 1)
		require.NoError(t, err)
		waiter := acquireAsync(ctx, c, "k", 1)
		synctest.Wait()

		require.NoError(t, c.Block(ctx, "k", time.Minute))
		hold.Release()
		synctest.Wait()
		assert.True(t, pending(waiter), "a waiter queued before the block waits for its end")
		_, d, err := c.TryAcquire(ctx, "k", 1)
		require.NoError(t, err)
		assert.Equal(t, ratelimit.Decision{Limit: 1, RetryAfter: time.Minute, ResetAfter: time.Minute}, d)
		short, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		_, err = c.Acquire(short, "k", 1)
		require.ErrorIs(t, err, ratelimit.ErrDeadline, "refused at once: the block outlasts the deadline")
		require.ErrorIs(t, err, context.DeadlineExceeded, "as WaitN's")

		start := time.Now()
		w := <-waiter
		require.NoError(t, w.err)
		assert.Equal(t, time.Minute, time.Since(start), "served when the block ended")
		w.p.Release()

		require.Error(t, c.Block(ctx, "k", 101*365*24*time.Hour))
		require.NoError(t, c.Block(ctx, "k", time.Hour))
		require.NoError(t, c.Block(ctx, "k", 0), "d <= 0 lifts the block")
		_, d, err = c.TryAcquire(ctx, "k", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	})
}

// TestConcurrencyWaitersAllServed: many waiters with mixed weights on one
// key are all served, in order, and in flight never exceeds the limit.
func TestConcurrencyWaitersAllServed(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newConcurrency(t, 4)
		var mu sync.Mutex
		inFlight, maxSeen, served := 0, 0, 0
		var wg sync.WaitGroup
		for i := range 100 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				n := 1 + i%4
				p, err := c.Acquire(context.Background(), "k", n)
				if !assert.NoError(t, err) {
					return
				}
				mu.Lock()
				inFlight += n
				maxSeen = max(maxSeen, inFlight)
				served++
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				inFlight -= n
				mu.Unlock()
				p.Release()
			}()
		}
		wg.Wait()
		assert.Equal(t, 100, served)
		assert.LessOrEqual(t, maxSeen, 4)
		assert.Equal(t, 0, c.Len())
	})
}

// TestConcurrencyBlockLiftedEarly: an Acquire waiting out a block is served
// as soon as the block is lifted (or shortened), not at the end it saw.
func TestConcurrencyBlockLiftedEarly(t *testing.T) {
	for _, lift := range []string{"Block(0)", "Reset", "shorter Block"} {
		t.Run(lift, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				ctx := context.Background()
				c := newConcurrency(t, 1)
				require.NoError(t, c.Block(ctx, "k", time.Hour))
				require.NoError(t, c.Block(ctx, "blocked-too", time.Hour))
				waiter := acquireAsync(ctx, c, "k", 1)
				other := acquireAsync(ctx, c, "blocked-too", 1)
				synctest.Wait()
				start := time.Now()
				time.Sleep(time.Minute)
				switch lift {
				case "Block(0)":
					require.NoError(t, c.Block(ctx, "k", 0))
				case "Reset":
					require.NoError(t, c.Reset(ctx, "k"))
				case "shorter Block":
					require.NoError(t, c.Block(ctx, "k", time.Second))
				}
				w := <-waiter
				require.NoError(t, w.err)
				want := time.Minute
				if lift == "shorter Block" {
					want += time.Second
				}
				assert.Equal(t, want, time.Since(start))
				w.p.Release()
				synctest.Wait()
				assert.True(t, pending(other), "a waiter of another key looked again and is still blocked")
				require.NoError(t, c.Block(ctx, "blocked-too", 0))
				o := <-other
				require.NoError(t, o.err)
				o.p.Release()
			})
		})
	}
}
