package redislimit

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/require"
)

// The bound of issue 27: 64 streams reserve an estimate, work, and settle
// an actual cost that differs from it by up to m either way. What is
// provable, for the requests admitted in one fixed window W: at the last
// admission in W, t*, the window's count was at most the limit, and it
// held every request admitted in W at its actual cost if settled by t*
// and at its estimate otherwise (other contributions are overruns, >= 0,
// and a give-back never takes the count below 0); so their actual costs
// add up to at most the limit plus (actual - estimate) of those still in
// flight at t*: at most 64 (one per stream), each at most m. Per window:
// excess <= 64m. For the token bucket the same argument over the whole
// run (at the last admission the debt, at least everything charged minus
// everything refilled, was within the capacity): total <= capacity +
// refill x elapsed + 64m. Debt carries, so a single second of the bucket
// may take more; its excess per second is reported, not bounded.
//
// Time is a manual clock that a driver moves in steps of 10ms; every
// reservation is made under a read lock the driver's move waits for, so
// the window a request was admitted in is known exactly, while its settle
// comes some steps later, from any window.

// boundRun is the outcome of one bound run.
type boundRun struct {
	perWindow []int64 // actual cost admitted, per window (or second)
	admitted  int64
	settled   int64
}

// runBound drives streams reservers on r (made on mock) for windows
// windows of w, with estimate est and actuals est + [-m, +m].
func runBound(t *testing.T, r ratelimit.Reserver, mock *fakeclock.Manual, w time.Duration, windows int, est, m int) boundRun {
	t.Helper()
	const streams, step = 64, 10 * time.Millisecond
	var (
		mu    sync.RWMutex // reservations hold it shared, the driver's moves exclusively
		tick  atomic.Value // chan struct{}: closed at the next move
		stop  atomic.Bool  // set after the last move
		total = make([]atomic.Int64, windows+2)
		res   boundRun
		count atomic.Int64
		setl  atomic.Int64
		errc  = make(chan error, streams)
	)
	tick.Store(make(chan struct{}))
	start := mock.Now()
	windowOf := func(now time.Time) int { return int(now.Sub(start) / w) }
	waitTicks := func(k int) {
		for range k {
			<-tick.Load().(chan struct{})
		}
	}
	var wg sync.WaitGroup
	for s := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(s), 27))
			ctx := context.Background()
			for !stop.Load() {
				mu.RLock()
				next := tick.Load().(chan struct{})
				now := mock.Now()
				rv, err := r.ReserveN(ctx, "k", est, time.Hour)
				mu.RUnlock()
				if err != nil {
					errc <- err
					return
				}
				if !rv.Allowed {
					<-next // retry at the next move (WaitN-like)
					continue
				}
				count.Add(1)
				waitTicks(rng.IntN(4)) // the work: 0-3 steps
				actual := est + rng.IntN(2*m+1) - m
				if err := rv.Settle(ctx, actual); err != nil {
					errc <- err
					return
				}
				setl.Add(1)
				if i := windowOf(now); i < len(total) {
					total[i].Add(int64(actual))
				}
			}
		}()
	}
	for range windows * int(w/step) {
		time.Sleep(100 * time.Microsecond) // let the streams run
		mu.Lock()
		mock.Add(step)
		old := tick.Load().(chan struct{})
		tick.Store(make(chan struct{}))
		close(old)
		mu.Unlock()
	}
	stop.Store(true)
	// Release streams waiting on ticks: keep moving until all are done.
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true
		case <-time.After(time.Millisecond):
			mu.Lock()
			mock.Add(step)
			old := tick.Load().(chan struct{})
			tick.Store(make(chan struct{}))
			close(old)
			mu.Unlock()
		}
	}
	close(errc)
	for err := range errc {
		require.NoError(t, err)
	}
	res.admitted, res.settled = count.Load(), setl.Load()
	for i := range windows {
		res.perWindow = append(res.perWindow, total[i].Load())
	}
	return res
}

// excess returns the worst and the mean excess over limit per window.
func (b boundRun) excess(limit int64) (worst int64, mean float64) {
	var sum int64
	for _, v := range b.perWindow {
		worst = max(worst, v-limit)
		sum += v - limit
	}
	return worst, float64(sum) / float64(len(b.perWindow))
}

// TestReservationBound measures and asserts the bound, on Redis and in
// memory, for the fixed window and the token bucket.
func TestReservationBound(t *testing.T) {
	if testing.Short() {
		t.Skip("a load test")
	}
	_, c := startRedis(t)
	const limit, est, m, windows = 1000, 10, 5, 12
	const streams = 64
	policies := []ratelimit.Policy{
		ratelimit.FixedWindowPolicy(limit, time.Second),
		ratelimit.TokenBucketPolicy(ratelimit.Per(limit, time.Second), limit),
	}
	for _, p := range policies {
		for _, home := range []string{"redis", "memory"} {
			t.Run(name(p)+"/"+home, func(t *testing.T) {
				mock := fakeclock.NewManual(mockStart.Truncate(time.Second))
				var r ratelimit.Reserver
				if home == "redis" {
					r = mustNew(t, c, p, WithClock(mock), WithPrefix(uniquePrefix(t)), WithTimeout(5*time.Second))
				} else {
					k, err := ratelimit.NewKeyed(p, ratelimit.WithClock(mock))
					require.NoError(t, err)
					r = k
				}
				b := runBound(t, r, mock, time.Second, windows, est, m)
				worst, mean := b.excess(limit)
				var total int64
				for _, v := range b.perWindow {
					total += v
				}
				t.Logf("%s on %s: %d admitted, %d settled; per window excess over %d: worst %d (%.2f m), mean %.1f (%.2f m); total %d over %d windows",
					name(p), home, b.admitted, b.settled, limit, worst, float64(worst)/m, mean, mean/m, total, windows)
				if p.Algorithm == ratelimit.TokenBucketAlgorithm {
					later := boundRun{perWindow: b.perWindow[1:]}
					lw, lm := later.excess(limit)
					t.Logf("after the first second (the full bucket's burst): worst %d (%.2f m), mean %.1f (%.2f m)", lw, float64(lw)/m, lm, lm/m)
				}
				require.Equal(t, b.admitted, b.settled)
				if p.Algorithm == ratelimit.FixedWindowAlgorithm {
					require.LessOrEqual(t, worst, int64(streams*m), "a window took more than limit + 64m")
				} else {
					// Over the windows counted, plus the requests admitted in
					// the steps after them (not counted): capacity + refill
					// over the windows + 64m.
					require.LessOrEqual(t, total, int64(windows*limit+limit+streams*m), "the bucket took more than capacity + refill + 64m")
				}
			})
		}
	}
}

// TestOrphanReservationsReclaimed: reservations never settled expire on
// time, each at its estimate: records gone from the real server (EXISTS)
// once their expiry has passed, Settle then ErrReservationSettled, and the
// quota they held returns with the window.
func TestOrphanReservationsReclaimed(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	l := mustNew(t, c, ratelimit.TokenBucketPolicy(ratelimit.Per(100, time.Second), 100), WithPrefix(uniquePrefix(t)))
	const expiry = 200 * time.Millisecond
	var held []*ratelimit.Reservation
	before := time.Now() // every record expires after before + expiry
	for range 20 {
		r, err := l.ReserveN(bg(), "k", 5, expiry)
		require.NoError(t, err)
		require.True(t, r.Allowed)
		held = append(held, r)
	}
	keys := recordKeys(t, c, l)
	require.Len(t, keys, 20)
	for _, k := range keys {
		ttl, err := c.PTTL(bg(), k).Result()
		require.NoError(t, err)
		require.True(t, ttl > 0 && ttl <= expiry, "record %s: TTL %v, want within (0, %v]", k, ttl, expiry)
	}
	require.Eventually(t, func() bool {
		n, err := c.Exists(bg(), keys...).Result()
		return err == nil && n == 0
	}, 5*time.Second, 5*time.Millisecond)
	require.False(t, time.Now().Before(before.Add(expiry)), "records gone before their expiry")
	for _, r := range held {
		err := r.Settle(bg(), 0)
		require.True(t, errors.Is(err, ratelimit.ErrReservationSettled), "Settle after expiry = %v", err)
	}
}
