// Command workerpool runs a pool of workers that call a rate-limited
// backend: all workers share one quota of 20 calls a second (bursts of 5),
// and each tenant also has its own quota of 8 a second (bursts of 2), so a
// busy tenant cannot take the whole pool. Workers block in Wait until
// the limiters admit them, and a context cancels everything on time-out or
// Ctrl-C.
//
// The limiters are token buckets because their Wait queues any number of
// callers: a worker that returns the error of Wait never dies of a full
// queue. A LeakyBucket's Wait refuses callers beyond its capacity at once
// (ErrQueueFull); use one for N workers only with a capacity of N+1 or more.
//
//	go run ./examples/workerpool
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"sync"
	"time"

	"github.com/rlkit/ratelimit"
)

type job struct {
	id     int
	tenant string
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := run(ctx); err != nil {
		log.Fatal(err)
	}
}

func run(ctx context.Context) error { return runWith(ctx, 8, 36) }

// runWith runs the pool with the given number of workers and jobs. A worker
// stops at the first error of Wait, as a worker loop usually does.
func runWith(ctx context.Context, workers, jobs int) error {
	global, err := ratelimit.NewTokenBucket(ratelimit.Per(20, time.Second), 5)
	if err != nil {
		return err
	}
	perTenant, err := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(8, time.Second), 2))
	if err != nil {
		return err
	}

	queue := make(chan job)
	go func() {
		defer close(queue)
		tenants := []string{"acme", "globex", "initech"}
		for i := range jobs {
			select {
			case queue <- job{id: i + 1, tenant: tenants[i%len(tenants)]}:
			case <-ctx.Done():
				return
			}
		}
	}()

	start := time.Now()
	var (
		mu      sync.Mutex
		started = map[string][]time.Duration{}
		wg      sync.WaitGroup
		errs    = make(chan error, workers)
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range queue {
				// The tenant's quota first, then the shared one, so a
				// worker holding a shared token never waits on a tenant.
				if err := perTenant.Wait(ctx, j.tenant); err != nil {
					report(j, err)
					errs <- err
					return
				}
				if err := global.Wait(ctx); err != nil {
					report(j, err)
					errs <- err
					return
				}
				at := time.Since(start)
				mu.Lock()
				started[j.tenant] = append(started[j.tenant], at)
				mu.Unlock()
				call(j)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	close(errs)
	if err := <-errs; err != nil && ctx.Err() == nil {
		return fmt.Errorf("a worker died: %w", err)
	}

	total := 0
	for _, tenant := range []string{"acme", "globex", "initech"} {
		ts := started[tenant]
		total += len(ts)
		fmt.Printf("%-8s %2d calls, started at %s\n", tenant, len(ts), timeline(ts))
	}
	fmt.Printf("%d calls in %v: %.1f a second (shared limit 20/s after a burst of 5)\n",
		total, elapsed.Round(10*time.Millisecond), float64(total)/elapsed.Seconds())
	return ctx.Err()
}

// call stands for the rate-limited backend call.
func call(job) { time.Sleep(5 * time.Millisecond) }

func report(j job, err error) {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return // shutting down
	}
	log.Printf("job %d (%s): %v", j.id, j.tenant, err)
}

// timeline renders start times in milliseconds.
func timeline(ts []time.Duration) string {
	var b strings.Builder
	for i, t := range ts {
		if i > 0 {
			b.WriteString(" ")
		}
		fmt.Fprintf(&b, "%d", t.Milliseconds())
	}
	return b.String() + " ms"
}
