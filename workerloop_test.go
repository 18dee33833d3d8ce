package ratelimit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// runWorkerLoop runs the README's worker loop in workers goroutines over
// jobs jobs and returns how many workers died with an error, and the first
// such error.
func runWorkerLoop(t *testing.T, lim Limiter, workers, jobs int) (died int64, firstErr error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	queue := make(chan int)
	go func() {
		defer close(queue)
		for i := range jobs {
			select {
			case queue <- i:
			case <-ctx.Done():
				return
			}
		}
	}()
	var (
		dead     atomic.Int64
		once     sync.Once
		wg       sync.WaitGroup
		done     atomic.Int64
		errFirst error
	)
	worker := func() error {
		for range queue {
			if err := lim.Wait(ctx); err != nil {
				return err
			}
			done.Add(1)
		}
		return nil
	}
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := worker(); err != nil {
				dead.Add(1)
				once.Do(func() { errFirst = err })
			}
		}()
	}
	wg.Wait()
	if dead.Load() == 0 {
		require.Equal(t, int64(jobs), done.Load(), "jobs processed")
	}
	return dead.Load(), errFirst
}

// TestWorkerLoopPattern runs the README's worker loop with 16 workers and
// the limiter the README recommends for it (a token bucket, whose Wait
// queues any number of callers): no worker dies. A leaky bucket works too
// when its capacity exceeds the number of workers (each released caller's
// event stays in the bucket for one interval, so a worker back at once
// needs a slot beside the others); with less, its Wait refuses the excess
// callers at once with ErrQueueFull, as documented.
func TestWorkerLoopPattern(t *testing.T) {
	t.Parallel()
	const workers, jobs = 16, 160
	t.Run("tokenbucket", func(t *testing.T) {
		t.Parallel()
		lim, err := NewTokenBucket(Per(1000, time.Second), 1) // the README's shape, 100x faster
		require.NoError(t, err)
		died, err := runWorkerLoop(t, lim, workers, jobs)
		assert.Zero(t, died, "workers that died: %v", err)
	})
	t.Run("leakybucket/capacity>workers", func(t *testing.T) {
		t.Parallel()
		lim, err := NewLeakyBucket(workers+1, time.Millisecond)
		require.NoError(t, err)
		died, err := runWorkerLoop(t, lim, workers, jobs)
		assert.Zero(t, died, "workers that died: %v", err)
	})
	t.Run("leakybucket/capacity<workers", func(t *testing.T) {
		t.Parallel()
		lim, err := NewLeakyBucket(10, time.Millisecond)
		require.NoError(t, err)
		died, err := runWorkerLoop(t, lim, workers, jobs)
		assert.Positive(t, died, "the queue holds 10 callers, 16 wait")
		assert.True(t, errors.Is(err, ErrQueueFull), "a worker died of %v", err)
	})
}
