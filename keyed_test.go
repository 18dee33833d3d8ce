package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testPolicies holds one policy of each algorithm, with rates that are not
// round numbers so that fractional arithmetic is exercised.
var testPolicies = []Policy{
	TokenBucketPolicy(Per(7, 300*time.Millisecond), 5),
	LeakyBucketPolicy(4, 70*time.Millisecond),
	FixedWindowPolicy(6, time.Second),
	SlidingLogPolicy(6, time.Second),
	SlidingCounterPolicy(6, time.Second),
	// 22:14 UTC: the tests' clocks start at 22:00 and 22:13:20 UTC, so
	// long timelines cross a period boundary.
	QuotaPolicy(6, Calendar{Unit: Daily, Hour: 22, Minute: 14}),
}

// TestKeyedMatchesSingle drives, for every algorithm, several keys of one
// Keyed limiter and one single limiter per key through the same random
// timeline on one mock clock, and demands identical Decisions.
func TestKeyedMatchesSingle(t *testing.T) {
	t.Parallel()
	for _, p := range testPolicies {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			t.Parallel()
			mock := fakeclock.NewManual(time.Unix(1_700_000_000, 123_456_789))
			keyed, err := NewKeyed(p, WithClock(mock))
			require.NoError(t, err)
			keys := []string{"alice", "bob", "carol"}
			single := map[string]Limiter{}
			for _, k := range keys {
				single[k], err = p.NewLimiter(WithClock(mock))
				require.NoError(t, err)
			}
			rng := rand.New(rand.NewPCG(1, uint64(p.Algorithm)))
			ctx := context.Background()
			for step := range 5000 {
				mock.Add(time.Duration(rng.IntN(40_000_000))) // up to 40ms
				key := keys[rng.IntN(len(keys))]
				n := rng.IntN(p.Limit+2) - 0 // 0..limit+1: includes the invalid ones
				got, err := keyed.AllowN(ctx, key, n)
				require.NoError(t, err)
				want := single[key].AllowN(n)
				require.Equal(t, want, got, "step %d: AllowN(%q, %d) at %v", step, key, n, mock.Now())
			}
		})
	}
}

// TestKeyedRefundUndoes checks that AllowN followed at once by RefundN
// leaves a key exactly as if neither had happened: two keys with the same
// history, one of which also takes and refunds, decide alike ever after.
func TestKeyedRefundUndoes(t *testing.T) {
	t.Parallel()
	for _, p := range testPolicies {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			t.Parallel()
			mock := fakeclock.NewManual(time.Unix(1_700_000_000, 0))
			keyed, err := NewKeyed(p, WithClock(mock))
			require.NoError(t, err)
			ctx := context.Background()
			rng := rand.New(rand.NewPCG(2, uint64(p.Algorithm)))
			for step := range 3000 {
				mock.Add(time.Duration(rng.IntN(60_000_000)))
				n := 1 + rng.IntN(p.Limit)
				if rng.IntN(3) == 0 {
					d, err := keyed.AllowN(ctx, "x", n)
					require.NoError(t, err)
					if d.Allowed {
						require.NoError(t, keyed.RefundN(ctx, "x", n))
					}
					continue
				}
				dx, err := keyed.AllowN(ctx, "x", n)
				require.NoError(t, err)
				dy, err := keyed.AllowN(ctx, "y", n)
				require.NoError(t, err)
				require.Equal(t, dy, dx, "step %d: AllowN(%d) at %v", step, n, mock.Now())
			}
		})
	}
}

func TestKeyedInvalidN(t *testing.T) {
	t.Parallel()
	k, err := NewKeyed(FixedWindowPolicy(3, time.Second))
	require.NoError(t, err)
	ctx := context.Background()
	for _, n := range []int{-1, 0, 4} {
		d, err := k.AllowN(ctx, "k", n)
		require.NoError(t, err)
		assert.False(t, d.Allowed, "AllowN(%d)", n)
		assert.Equal(t, RetryNever, d.RetryAfter, "AllowN(%d)", n)
	}
	assert.Equal(t, 0, k.Len(), "a never-admitted request must not store its key")
	assert.ErrorIs(t, k.WaitN(ctx, "k", 4), ErrExceedsLimit)
	assert.ErrorIs(t, k.WaitN(ctx, "k", 0), ErrInvalidN)
	assert.ErrorIs(t, k.RefundN(ctx, "k", 0), ErrInvalidN)
}

func TestNewKeyedErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p    Policy
		opts []Option
		want string
	}{
		{Policy{}, nil, "ratelimit.Policy.Algorithm"},
		{TokenBucketPolicy(Per(1, time.Second), 0), nil, "ratelimit.Policy.Limit"},
		{SlidingLogPolicy(5, 0), nil, "ratelimit.Policy.Period"},
		{FixedWindowPolicy(5, time.Second), []Option{WithMaxKeys(-1)}, "WithMaxKeys"},
	} {
		k, err := NewKeyed(tc.p, tc.opts...)
		assert.Nil(t, k)
		require.ErrorIs(t, err, ErrInvalidConfig)
		assert.Contains(t, err.Error(), tc.want)
		assert.Regexp(t, "^ratelimit: ", err.Error())
	}
}

// TestKeyedReclaimsOnlyIdleKeys shows that a key is forgotten only when its
// state is back to fresh: a used key survives any number of other keys
// being inserted until its quota is full again.
func TestKeyedReclaimsOnlyIdleKeys(t *testing.T) {
	t.Parallel()
	mock := fakeclock.NewManual(time.Unix(1_700_000_000, 0))
	// 10 per minute: a used key is idle again 6s after its last token.
	k, err := NewKeyed(TokenBucketPolicy(Per(10, time.Minute), 10), WithClock(mock), WithMaxKeys(64*4))
	require.NoError(t, err)
	ctx := context.Background()
	for range 10 {
		d, err := k.AllowN(ctx, "victim", 1)
		require.NoError(t, err)
		require.True(t, d.Allowed)
	}
	// Flood other keys: the victim stays held and still has no tokens.
	for i := range 10_000 {
		_, _ = k.AllowN(ctx, "flood-"+strconv.Itoa(i), 1)
	}
	d := must(k.Peek(ctx, "victim", 1))
	assert.False(t, d.Allowed, "victim got a fresh bucket from eviction: %+v", d)
	assert.LessOrEqual(t, k.Len(), 64*4)

	// Once everything is full again, new keys reclaim the old ones.
	mock.Add(time.Minute)
	for i := range 10_000 {
		d, err := k.AllowN(ctx, "later-"+strconv.Itoa(i), 1)
		require.NoError(t, err, "key %d", i)
		require.True(t, d.Allowed)
		mock.Add(6 * time.Second) // the previous key is full again
	}
	assert.LessOrEqual(t, k.Len(), 64*4)
}

// TestKeyedCapDeniesNewKeysOnly fills a small Keyed limiter with busy keys:
// new keys are denied with ErrTooManyKeys, existing ones go on.
func TestKeyedCapDeniesNewKeysOnly(t *testing.T) {
	t.Parallel()
	mock := fakeclock.NewManual(time.Unix(0, 0))
	k, err := NewKeyed(FixedWindowPolicy(5, time.Hour), WithClock(mock), WithMaxKeys(64))
	require.NoError(t, err)
	ctx := context.Background()
	var held []string
	tooMany := 0
	for i := range 1000 {
		key := "k" + strconv.Itoa(i)
		d, err := k.AllowN(ctx, key, 1)
		if errors.Is(err, ErrTooManyKeys) {
			tooMany++
			assert.False(t, d.Allowed)
			assert.Equal(t, time.Second, d.RetryAfter)
			continue
		}
		require.NoError(t, err)
		require.True(t, d.Allowed)
		held = append(held, key)
	}
	assert.Equal(t, 64, k.Len(), "one key per shard")
	assert.Equal(t, 1000-64, tooMany)
	for _, key := range held {
		d, err := k.AllowN(ctx, key, 4)
		require.NoError(t, err)
		assert.True(t, d.Allowed, "existing key %s must keep its quota", key)
	}
}

// TestKeyedFloodMemoryBound sends 5,000,000 distinct keys at a Keyed
// limiter capped at 100,000 keys, on a clock that moves so that early keys
// become idle but about 120,000 would be live at a time: the flood reaches
// the cap, new keys are then refused with ErrTooManyKeys, and the key count
// and the live heap stay bounded: at most maxKeys keys, and at most 120
// bytes for each key the cap allows (token bucket, 10-20 byte keys; about
// 56 measured).
func TestKeyedFloodMemoryBound(t *testing.T) {
	if testing.Short() {
		t.Skip("5M-key flood skipped in -short mode")
	}
	const (
		maxKeys = 100_000
		flood   = 5_000_000
		perKey  = 120 // bytes
	)
	mock := fakeclock.NewManual(time.Unix(1_700_000_000, 0))
	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	k, err := NewKeyed(TokenBucketPolicy(Per(100, time.Minute), 100), WithClock(mock), WithMaxKeys(maxKeys))
	require.NoError(t, err)
	ctx := context.Background()
	denied := 0
	for i := range flood {
		if i%200 == 0 {
			// A key refills its one token in 600ms, so about 120,000 keys
			// would be live at a time: more than the cap, and the rest must
			// be reclaimed.
			mock.Add(time.Millisecond)
		}
		if _, err := k.AllowN(ctx, "ip-"+strconv.Itoa(i), 1); err != nil {
			require.ErrorIs(t, err, ErrTooManyKeys)
			denied++
		}
	}
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	heap := int64(after.HeapAlloc) - int64(before.HeapAlloc)
	t.Logf("keys held %d, denied %d, heap %d bytes (%.0f bytes per cap key)", k.Len(), denied, heap, float64(heap)/maxKeys)
	assert.LessOrEqual(t, k.Len(), maxKeys)
	assert.Greater(t, denied, flood/10, "new keys refused once the cap is reached")
	assert.Less(t, heap, int64(maxKeys*perKey), "heap grew beyond %d bytes per key", perKey)
	runtime.KeepAlive(k)
}

// TestKeyedConcurrentExact hammers many keys from many goroutines on a
// frozen clock: every key admits exactly its limit.
func TestKeyedConcurrentExact(t *testing.T) {
	t.Parallel()
	for _, p := range testPolicies {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			t.Parallel()
			mock := fakeclock.NewManual(time.Unix(1_700_000_000, 0))
			k, err := NewKeyed(p, WithClock(mock))
			require.NoError(t, err)
			const keys, workers, tries = 50, 32, 40
			var admitted [keys]atomic.Int64
			var wg sync.WaitGroup
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range tries * keys {
						key := (i + w) % keys
						d, err := k.AllowN(context.Background(), fmt.Sprint("key-", key), 1)
						if err == nil && d.Allowed {
							admitted[key].Add(1)
						}
					}
				}()
			}
			wg.Wait()
			for i := range keys {
				assert.Equal(t, int64(p.Limit), admitted[i].Load(), "key %d", i)
			}
		})
	}
}

func TestKeyedWait(t *testing.T) {
	t.Parallel()
	mock := fakeclock.NewAnnouncing(time.Unix(1_700_000_000, 0))
	k, err := NewKeyed(TokenBucketPolicy(Per(1, time.Second), 1), WithClock(mock))
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, k.WaitN(ctx, "w", 1))

	done := make(chan error, 1)
	go func() { done <- k.WaitN(ctx, "w", 1) }()
	mock.Next(t)
	select {
	case err := <-done:
		t.Fatalf("WaitN returned %v before the token refilled", err)
	default:
	}
	mock.Add(time.Second)
	require.NoError(t, <-done)

	tctx, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	slow, err := NewKeyed(TokenBucketPolicy(Per(1, 2*time.Hour), 1), WithClock(mock))
	require.NoError(t, err)
	require.NoError(t, slow.WaitN(tctx, "w", 1))
	err = slow.WaitN(tctx, "w", 1)
	assert.ErrorIs(t, err, ErrDeadline)
	assert.ErrorIs(t, err, context.DeadlineExceeded)

	cctx, cancelNow := context.WithCancel(ctx)
	go func() { done <- slow.WaitN(cctx, "w", 1) }()
	mock.Next(t)
	cancelNow()
	assert.ErrorIs(t, <-done, context.Canceled)
}

func TestAllowAllDoesNotAllocate(t *testing.T) {
	mock := fakeclock.NewManual(time.Unix(1_700_000_000, 0))
	a, err := NewKeyed(TokenBucketPolicy(Per(1<<20, time.Second), 1<<20), WithClock(mock))
	require.NoError(t, err)
	b, err := NewKeyed(FixedWindowPolicy(1<<20, time.Hour), WithClock(mock))
	require.NoError(t, err)
	ctx := context.Background()
	dims := []Dimension{{Name: "a", Limiter: a, Key: "k1"}, {Name: "b", Limiter: b, Key: "k2"}}
	_, _ = AllowAll(ctx, 1, dims...) // store the keys
	allocs := testing.AllocsPerRun(1000, func() {
		if md, err := AllowAll(ctx, 1, dims...); err != nil || !md.Allowed {
			t.Fatalf("AllowAll = %+v, %v", md, err)
		}
	})
	assert.Zero(t, allocs, "allocations per AllowAll over two in-memory limits")
}

// otherLimiter hides a *Keyed behind the KeyedLimiter interface, so that
// AllowAll takes its charge-then-refund path as it would for Redis.
type otherLimiter struct{ KeyedLimiter }

// TestAllowAllUnderContention charges two limits from many goroutines on a
// frozen clock: exactly the tighter limit is admitted, and the looser one
// is charged for the admitted requests only, never for a denied one. It
// runs on the atomic in-memory path and on the refund path.
func TestAllowAllUnderContention(t *testing.T) {
	t.Parallel()
	for _, path := range []string{"in-memory", "refund"} {
		for _, p := range testPolicies {
			t.Run(path+"/"+p.Algorithm.String(), func(t *testing.T) {
				t.Parallel()
				mock := fakeclock.NewManual(time.Unix(1_700_000_000, 0))
				loosePolicy := p
				loosePolicy.Limit = 1000
				loose, err := NewKeyed(loosePolicy, WithClock(mock))
				require.NoError(t, err)
				tight, err := NewKeyed(p, WithClock(mock))
				require.NoError(t, err)
				var tightL KeyedLimiter = tight
				if path == "refund" {
					tightL = otherLimiter{tight}
				}
				dims := []Dimension{
					{Name: "loose", Limiter: loose, Key: "client"},
					{Name: "tight", Limiter: tightL, Key: "client"},
				}
				var admitted, deniedByTight atomic.Int64
				var wg sync.WaitGroup
				for range 32 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for range 20 {
							md, err := AllowAll(context.Background(), 1, dims...)
							if err != nil {
								t.Errorf("AllowAll: %v", err)
								return
							}
							if md.Allowed {
								admitted.Add(1)
							} else if md.Index == 1 {
								deniedByTight.Add(1)
							}
						}
					}()
				}
				wg.Wait()
				require.Equal(t, int64(p.Limit), admitted.Load(), "admitted")
				assert.Equal(t, int64(32*20-p.Limit), deniedByTight.Load(), "denials all come from the tight limit")
				rem := must(loose.Peek(context.Background(), "client", 0)).Remaining
				assert.Equal(t, 1000-p.Limit, rem, "the loose limit is charged only for admitted requests")
			})
		}
	}
}

// TestPenalizeEveryAlgorithm: a penalty charges min(n, remaining) as an
// admitted AllowN would, never overdraws, creates a key, ignores a block,
// and refuses n <= 0.
func TestPenalizeEveryAlgorithm(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, algo := range reconfigAlgorithms {
		t.Run(algo.String(), func(t *testing.T) {
			t.Parallel()
			p := policyOf(algo, 10)
			k, clk := newReconfigKeyed(t, p)
			require.True(t, must(k.AllowN(ctx, "key", 3)).Allowed)
			require.NoError(t, k.Penalize(ctx, "key", 2))
			assert.Equal(t, 5, must(k.Peek(ctx, "key", 0)).Remaining)

			require.NoError(t, k.Penalize(ctx, "key", math.MaxInt))
			d := must(k.Peek(ctx, "key", 0))
			assert.Equal(t, 0, d.Remaining, "after a huge penalty")
			assert.True(t, d.Allowed, "Peek(0) is denied only when overdrawn")
			require.NoError(t, k.Penalize(ctx, "key", 1))
			recovery := p.window()
			if algo == SlidingCounterAlgorithm {
				recovery = 2 * p.window()
			}
			assert.LessOrEqual(t, must(k.Peek(ctx, "key", 1)).RetryAfter, recovery, "no overdraw")
			clk.Add(recovery)
			assert.Equal(t, 10, must(k.Peek(ctx, "key", 0)).Remaining, "recovered")

			require.NoError(t, k.Penalize(ctx, "fresh", 4))
			assert.Equal(t, 6, must(k.Peek(ctx, "fresh", 0)).Remaining, "a penalty creates the key")
			require.NoError(t, k.Penalize(ctx, "huge", math.MaxInt))
			assert.Equal(t, 0, must(k.Peek(ctx, "huge", 0)).Remaining)

			require.NoError(t, k.Block(ctx, "fresh", time.Second))
			require.NoError(t, k.Penalize(ctx, "fresh", 1))
			require.NoError(t, k.Block(ctx, "fresh", 0))
			assert.Equal(t, 5, must(k.Peek(ctx, "fresh", 0)).Remaining, "a penalty ignores the block")

			for _, n := range []int{0, -1} {
				err := k.Penalize(ctx, "key", n)
				assert.ErrorIs(t, err, ErrInvalidN, "Penalize(%d)", n)
			}
		})
	}
}

func TestPenalizeNeedsRoom(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k, _ := newReconfigKeyed(t, FixedWindowPolicy(10, time.Minute), WithMaxKeys(1))
	require.NoError(t, k.Penalize(ctx, "a", 1))
	assert.ErrorIs(t, k.Penalize(ctx, "b", 1), ErrTooManyKeys)
	require.NoError(t, k.Penalize(ctx, "a", 1), "a held key needs no room")
	assert.Equal(t, 8, must(k.Peek(ctx, "a", 0)).Remaining)
}

// TestResetEveryAlgorithm: Reset gives a key a full quota back, under the
// current policy and any earlier one its state is still held under.
func TestResetEveryAlgorithm(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, algo := range reconfigAlgorithms {
		t.Run(algo.String(), func(t *testing.T) {
			t.Parallel()
			k, _ := newReconfigKeyed(t, policyOf(algo, 10))
			require.True(t, must(k.AllowN(ctx, "key", 10)).Allowed)
			require.True(t, must(k.AllowN(ctx, "old", 10)).Allowed)
			require.NoError(t, k.Reset(ctx, "key"))
			assert.Equal(t, 10, must(k.AllowN(ctx, "key", 1)).Remaining+1)
			require.NoError(t, k.Reset(ctx, "never-seen"))

			require.NoError(t, k.SetPolicy(policyOf(algo, 10), KeepUsed))
			require.NoError(t, k.SetPolicy(policyOf(algo, 12), KeepUsed))
			require.NoError(t, k.Reset(ctx, "old"))
			assert.Equal(t, 12, must(k.Peek(ctx, "old", 0)).Remaining, "the unconverted state is forgotten")
			assert.Equal(t, 12, must(k.AllowN(ctx, "old", 1)).Remaining+1)
			assert.Equal(t, 2, k.Len())
		})
	}
}

// TestKeyedWaitIsWaitNOne: Wait is WaitN(ctx, key, 1): it waits out the key's
// RetryAfter on the limiter's clock and admits one event.
func TestKeyedWaitIsWaitNOne(t *testing.T) {
	t.Parallel()
	clk := fakeclock.NewInstant(testStart)
	k, err := NewKeyed(TokenBucketPolicy(Per(1, time.Second), 1), WithClock(clk))
	require.NoError(t, err)
	ctx := context.Background()
	require.NoError(t, k.Wait(ctx, "k"))
	require.Equal(t, testStart, clk.Now(), "the first event needs no wait")
	require.NoError(t, k.Wait(ctx, "k"))
	assert.Equal(t, testStart.Add(time.Second), clk.Now(), "the second waits one refill")
	assert.Equal(t, 0, must(k.Peek(ctx, "k", 0)).Remaining, "and takes the token")
}
