package limitset

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// newWindow returns a fixed window of limit an hour on a clock that
// stands still.
func newWindow(t *testing.T, limit int) *ratelimit.Keyed {
	t.Helper()
	k, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(limit, time.Hour), ratelimit.WithClock(fakeclock.New(time.Unix(1767225600, 0))))
	require.NoError(t, err)
	return k
}

// TestFlightsQueueWhatMayComeBack: with 1 of quota, 64 goroutines
// reserving and settling at 0 are never refused (they take turns), and
// the key is forgotten once they are done.
func TestFlightsQueueWhatMayComeBack(t *testing.T) {
	t.Parallel()
	k := newWindow(t, 1)
	var f flights
	ctx := context.Background()
	var refused, inside, most atomic.Int64
	var wg sync.WaitGroup
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				r, fl, err := f.reserve(ctx, "a", func() (*ratelimit.Reservation, error) { return k.ReserveN(ctx, "a", 1, time.Minute) })
				if !r.Allowed || err != nil {
					refused.Add(1)
					continue
				}
				if n := inside.Add(1); n > most.Load() {
					most.Store(n)
				}
				inside.Add(-1)
				assert.NoError(t, r.Settle(ctx, 0))
				f.leave("a", fl, true)
			}
		}()
	}
	wg.Wait()
	assert.Zero(t, refused.Load())
	assert.LessOrEqual(t, most.Load(), int64(1), "one holder at a time")
	assert.Empty(t, f.keys, "no key left")
}

// TestFlightsRefuseWhatIsSpent: a refusal with nothing held is final at
// once; one with a reservation held waits for it, and is refused if it
// settles as spent; a waiter whose context ends gets its error.
func TestFlightsRefuseWhatIsSpent(t *testing.T) {
	t.Parallel()
	k := newWindow(t, 1)
	var f flights
	ctx := context.Background()
	try := func() (*ratelimit.Reservation, error) { return k.ReserveN(ctx, "a", 1, time.Minute) }

	r, fl, err := f.reserve(ctx, "a", try)
	require.NoError(t, err)
	require.True(t, r.Allowed)

	cctx, cancel := context.WithCancel(ctx)
	cancel()
	r2, fl2, err := f.reserve(cctx, "a", try)
	assert.False(t, r2.Allowed)
	assert.Nil(t, fl2)
	assert.True(t, errors.Is(err, context.Canceled), "waiting, its context ended: %v", err)

	got := make(chan *ratelimit.Reservation, 1)
	go func() {
		r, _, _ := f.reserve(ctx, "a", try)
		got <- r
	}()
	require.NoError(t, r.Settle(ctx, 1)) // spent
	f.leave("a", fl, true)
	assert.False(t, (<-got).Allowed, "refused once the holder settled as spent")

	r3, _, err := f.reserve(ctx, "a", try)
	assert.NoError(t, err)
	assert.False(t, r3.Allowed, "nothing held: refused at once")
	assert.Empty(t, f.keys)
}
