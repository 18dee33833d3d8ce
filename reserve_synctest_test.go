//go:build go1.25

package ratelimit_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestReserveBoundUnderConcurrentStreams is the bound of docs/reservations.md,
// measured: 64 streams reserve an estimate, work for a random time, and
// settle an actual cost that differs from the estimate by a random amount
// in [-m, +m], for 20 windows of simulated time (synctest: the figures are
// exact and the run is fast). It counts the actual cost of the work
// admitted in each window.
//
// What holds for any interleaving, and is asserted: a window admits by
// estimate at most its limit, so its actual cost exceeds the limit by at
// most the overruns of the reservations in flight, 64·m; and because a
// bucket carries an overrun as debt, over the whole run a bucket admits at
// most capacity + rate·time + 64·m. What the random differences give on
// average is logged, and asserted loosely: across the run, the excess per
// window stays within one maximum overrun m.
func TestReserveBoundUnderConcurrentStreams(t *testing.T) {
	const (
		limit   = 1000
		streams = 64
		est     = 40
		m       = 20
		windows = 20
	)
	for _, tc := range []struct {
		name   string
		policy ratelimit.Policy
		bucket bool
	}{
		{"token bucket", ratelimit.TokenBucketPolicy(ratelimit.Per(limit, time.Second), limit), true},
		{"leaky bucket", ratelimit.LeakyBucketPolicy(limit, time.Second/limit), true},
		{"fixed window", ratelimit.FixedWindowPolicy(limit, time.Second), false},
		{"sliding counter", ratelimit.SlidingCounterPolicy(limit, time.Second), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				k, err := ratelimit.NewKeyed(tc.policy)
				require.NoError(t, err)
				// Start on a window boundary, so that windows of admission
				// are the limiter's own.
				time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
				start := time.Now()
				end := start.Add(windows * time.Second)
				var (
					mu      sync.Mutex
					actual  [windows + 1]int64
					maxOver int
				)
				var wg sync.WaitGroup
				for s := range streams {
					wg.Add(1)
					go func() {
						defer wg.Done()
						rng := rand.New(rand.NewPCG(uint64(s), 27))
						for time.Now().Before(end) {
							r, err := k.ReserveN(context.Background(), "k", est, time.Minute)
							if !assert.NoError(t, err) {
								return
							}
							if !r.Allowed {
								time.Sleep(r.RetryAfter)
								continue
							}
							w := int(time.Since(start) / time.Second)
							time.Sleep(time.Duration(1+rng.IntN(300)) * time.Millisecond)
							diff := rng.IntN(2*m+1) - m
							assert.NoError(t, r.Settle(context.Background(), est+diff))
							mu.Lock()
							actual[w] += int64(est + diff)
							maxOver = max(maxOver, diff)
							mu.Unlock()
						}
					}()
				}
				wg.Wait()

				var total, worst int64
				for w := range windows {
					excess := actual[w] - limit
					if w > 0 || !tc.bucket { // a bucket's first window adds its burst
						worst = max(worst, excess)
					}
					total += actual[w]
					if !tc.bucket {
						assert.LessOrEqual(t, actual[w], int64(limit+streams*m), "window %d", w)
					}
					if tc.bucket {
						// Everything admitted up to the end of window w.
						var upTo int64
						for i := 0; i <= w; i++ {
							upTo += actual[i]
						}
						assert.LessOrEqual(t, upTo, int64(limit+(w+1)*limit+streams*m), "up to window %d", w)
					}
				}
				avgExcess := float64(total-windows*limit) / windows
				if tc.bucket {
					// The first window starts full: a burst of a whole
					// capacity on top of the rate, once.
					avgExcess -= float64(limit) / windows
				}
				t.Logf("%s: worst window %+d over the limit (%.2f m), average %+.1f a window (%.2f m); largest overrun drawn %d",
					tc.name, worst, float64(worst)/m, avgExcess, avgExcess/m, maxOver)
				if tc.bucket {
					// Debt carries every overrun into later windows: on
					// average nothing is admitted beyond the rate but the
					// overruns still in flight at the end.
					assert.LessOrEqual(t, avgExcess, float64(streams*m)/windows, "average excess a window")
				}
			})
		})
	}
}
