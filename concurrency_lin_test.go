package ratelimit_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/rlkit/ratelimit/internal/testkit/lincheck"
	"github.com/stretchr/testify/require"
)

// TestConcurrencyLinearizable: a concurrent history of TryAcquire and
// Release on one key, 16 goroutines, is accepted by porcupine against the
// sequential semaphore (lincheck.SemaphoreModel): every admission and
// every Remaining is one a single-threaded semaphore could have given.
func TestConcurrencyLinearizable(t *testing.T) {
	const limit, workers, perWorker = 4, 16, 60
	c := newConcurrency(t, limit)
	ctx := context.Background()
	start := time.Now()
	stamp := func() int64 { return int64(time.Since(start)) }
	var mu sync.Mutex
	var ops []porcupine.Operation
	record := func(op porcupine.Operation) {
		mu.Lock()
		ops = append(ops, op)
		mu.Unlock()
	}
	var nextID atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for range perWorker {
				id := int(nextID.Add(1))
				n := 1 + rng.IntN(3)
				call := stamp()
				p, d, err := c.TryAcquire(ctx, "k", n)
				ret := stamp()
				if err != nil {
					t.Error(err)
					return
				}
				record(porcupine.Operation{ClientId: w, Input: lincheck.SemInput{Acquire: true, ID: id, N: n},
					Call: call, Output: lincheck.SemOutput{Allowed: d.Allowed, Remaining: d.Remaining}, Return: ret})
				if !d.Allowed {
					continue
				}
				if rng.IntN(2) == 0 {
					time.Sleep(time.Duration(rng.IntN(20)) * time.Microsecond)
				}
				call = stamp()
				p.Release()
				record(porcupine.Operation{ClientId: w, Input: lincheck.SemInput{ID: id}, Call: call, Output: lincheck.SemOutput{}, Return: stamp()})
			}
		}()
	}
	wg.Wait()
	verdict := porcupine.CheckOperationsTimeout(lincheck.SemaphoreModel(limit), ops, 60*time.Second)
	require.Equal(t, porcupine.Ok, verdict, "%d operations", len(ops))

	// The model refuses what a broken semaphore would do: two holders of
	// the last permit at once.
	bad := []porcupine.Operation{
		{ClientId: 0, Input: lincheck.SemInput{Acquire: true, ID: 1, N: limit}, Call: 0, Output: lincheck.SemOutput{Allowed: true}, Return: 1},
		{ClientId: 1, Input: lincheck.SemInput{Acquire: true, ID: 2, N: 1}, Call: 2, Output: lincheck.SemOutput{Allowed: true}, Return: 3},
	}
	require.Equal(t, porcupine.Illegal, porcupine.CheckOperationsTimeout(lincheck.SemaphoreModel(limit), bad, time.Second))
}
