package ratelimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// reconfigAlgorithms are the algorithms SetPolicy is tested on.
var reconfigAlgorithms = []Algorithm{
	TokenBucketAlgorithm,
	LeakyBucketAlgorithm,
	FixedWindowAlgorithm,
	SlidingLogAlgorithm,
	SlidingCounterAlgorithm,
	QuotaAlgorithm,
}

// policyOf returns a policy of algo admitting limit events in a minute:
// a bucket refilled (or drained) in a minute, or a one-minute window; for
// the calendar quota, limit events per UTC day.
func policyOf(algo Algorithm, limit int) Policy {
	switch algo {
	case TokenBucketAlgorithm:
		return TokenBucketPolicy(Per(limit, time.Minute), limit)
	case LeakyBucketAlgorithm:
		return LeakyBucketPolicy(limit, time.Minute/time.Duration(limit))
	case FixedWindowAlgorithm:
		return FixedWindowPolicy(limit, time.Minute)
	case SlidingLogAlgorithm:
		return SlidingLogPolicy(limit, time.Minute)
	case SlidingCounterAlgorithm:
		return SlidingCounterPolicy(limit, time.Minute)
	case QuotaAlgorithm:
		return QuotaPolicy(limit, Calendar{Unit: Daily})
	}
	panic(fmt.Sprintf("no test policy for %v", algo))
}

var modes = []Inheritance{KeepUsed, ScaleUsed, StartFresh}

// wantUsed is the used amount after one change from a limit of from to
// one of to with mode, as the docs define it.
func wantUsed(used, from, to int, mode Inheritance) int {
	switch mode {
	case KeepUsed:
		return min(used, to)
	case ScaleUsed:
		return (used*to + from - 1) / from
	}
	return 0
}

// newReconfigKeyed returns a Keyed running p on a manual clock at a whole
// minute.
func newReconfigKeyed(t *testing.T, p Policy, opts ...Option) (*Keyed, *fakeclock.Manual) {
	t.Helper()
	clk := fakeclock.NewManual(testStart)
	k, err := NewKeyed(p, append([]Option{WithClock(clk)}, opts...)...)
	require.NoError(t, err)
	return k, clk
}

// TestSetPolicyConvertsUsed: for every algorithm and mode, a key that used
// 6 of 10 and a limit tightened to 4 or loosened to 40 reports exactly the
// Remaining the mode defines; a Peek converts without storing, the first
// AllowN stores the converted state and forgets the old one.
func TestSetPolicyConvertsUsed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, algo := range reconfigAlgorithms {
		for _, to := range []int{4, 40} {
			for _, mode := range modes {
				t.Run(fmt.Sprintf("%v/10to%d/%v", algo, to, mode), func(t *testing.T) {
					t.Parallel()
					k, _ := newReconfigKeyed(t, policyOf(algo, 10))
					require.True(t, must(k.AllowN(ctx, "key", 6)).Allowed)
					require.NoError(t, k.SetPolicy(policyOf(algo, to), mode))
					assert.Equal(t, policyOf(algo, to), k.Policy())

					want := to - wantUsed(6, 10, to, mode)
					d := must(k.Peek(ctx, "key", 0))
					assert.Equal(t, to, d.Limit, "Peek(0).Limit after SetPolicy")
					assert.Equal(t, want, d.Remaining, "Peek(0).Remaining after SetPolicy(%d, %v)", to, mode)
					assert.Equal(t, 0, k.cur.Load().store.len(), "Peek stored the converted state")
					assert.Equal(t, 1, k.Len(), "the old state is still held")

					d = must(k.AllowN(ctx, "key", 1))
					assert.Equal(t, want > 0, d.Allowed, "AllowN(1) with %d remaining", want)
					assert.Equal(t, to, d.Limit)
					if want > 0 {
						assert.Equal(t, want-1, d.Remaining, "AllowN(1).Remaining")
					} else {
						assert.Positive(t, d.RetryAfter)
					}
					assert.Equal(t, 1, k.cur.Load().store.len(), "AllowN stores the converted state")
					assert.Equal(t, 1, k.Len(), "and forgets the old one")

					// A key never seen starts fresh under the new policy.
					assert.Equal(t, to, must(k.Peek(ctx, "other", 0)).Remaining)
				})
			}
		}
	}
}

// TestSetPolicyNeverLocksOut: a key that had used its whole quota when its
// limit was tightened (KeepUsed: fully used under the new one) is back to
// a full quota once its new state is idle, at most one window of the new
// policy later (two for the sliding counter, which has a first event back
// well before).
func TestSetPolicyNeverLocksOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, algo := range reconfigAlgorithms {
		t.Run(algo.String(), func(t *testing.T) {
			t.Parallel()
			k, clk := newReconfigKeyed(t, policyOf(algo, 10))
			require.True(t, must(k.AllowN(ctx, "key", 10)).Allowed)
			p := policyOf(algo, 4)
			require.NoError(t, k.SetPolicy(p, KeepUsed))
			d := must(k.AllowN(ctx, "key", 1))
			require.False(t, d.Allowed)
			if algo == SlidingCounterAlgorithm {
				assert.LessOrEqual(t, d.RetryAfter, 2*p.window(), "RetryAfter after a tightening")
			} else {
				assert.LessOrEqual(t, d.RetryAfter, p.window(), "RetryAfter after a tightening")
			}
			wait := p.window()
			if algo == SlidingCounterAlgorithm {
				clk.Add(p.window() + p.window()/2)
				assert.Positive(t, must(k.Peek(ctx, "key", 0)).Remaining, "sliding counter 1.5 windows later")
				wait = p.window() / 2
			}
			clk.Add(wait)
			assert.Equal(t, 4, must(k.Peek(ctx, "key", 0)).Remaining, "Remaining once the new state is idle")
		})
	}
}

// TestSetPolicyStepByStep: a key untouched across two changes goes through
// each with its own mode and limit; a key touched between them was
// converted at the first.
func TestSetPolicyStepByStep(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, algo := range reconfigAlgorithms {
		t.Run(algo.String(), func(t *testing.T) {
			t.Parallel()
			k, _ := newReconfigKeyed(t, policyOf(algo, 10))
			require.True(t, must(k.AllowN(ctx, "untouched", 6)).Allowed)
			require.True(t, must(k.AllowN(ctx, "touched", 6)).Allowed)

			require.NoError(t, k.SetPolicy(policyOf(algo, 4), ScaleUsed)) // 6 of 10 -> 3 of 4
			// AllowN(0) admits nothing but touches the key, which converts it.
			assert.Equal(t, 1, must(k.AllowN(ctx, "touched", 0)).Remaining, "touched after the first change")
			assert.Equal(t, 1, k.cur.Load().store.len(), "the touched key is converted")
			require.NoError(t, k.SetPolicy(policyOf(algo, 20), KeepUsed)) // 3 -> 3 of 20
			// Directly from 10 to 20 with KeepUsed it would have kept 6.
			assert.Equal(t, 17, must(k.Peek(ctx, "untouched", 0)).Remaining, "untouched across both changes")
			assert.Equal(t, 17, must(k.Peek(ctx, "touched", 0)).Remaining, "converted at each change")
			require.NoError(t, k.SetPolicy(policyOf(algo, 5), StartFresh))
			assert.Equal(t, 5, must(k.Peek(ctx, "untouched", 0)).Remaining, "StartFresh at the end of the chain")
			assert.Equal(t, 5, must(k.AllowN(ctx, "untouched", 0)).Remaining)
		})
	}
}

// TestSetPolicyAcrossAlgorithms: the used amount crosses from one algorithm
// to another; the sliding log re-times it to the conversion.
func TestSetPolicyAcrossAlgorithms(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, from := range reconfigAlgorithms {
		for _, to := range reconfigAlgorithms {
			if from == to {
				continue
			}
			t.Run(from.String()+"->"+to.String(), func(t *testing.T) {
				t.Parallel()
				k, clk := newReconfigKeyed(t, policyOf(from, 10))
				require.True(t, must(k.AllowN(ctx, "key", 6)).Allowed)
				require.NoError(t, k.SetPolicy(policyOf(to, 8), KeepUsed))
				d := must(k.AllowN(ctx, "key", 2))
				require.True(t, d.Allowed)
				assert.Equal(t, 0, d.Remaining, "6 used kept, 2 more of 8")
				assert.Equal(t, to, k.Policy().Algorithm)
				clk.Add(24 * time.Hour) // idle under every test policy, the daily quota's too
				assert.Equal(t, 8, must(k.Peek(ctx, "key", 0)).Remaining)
			})
		}
	}
	t.Run("slidinglog re-times", func(t *testing.T) {
		t.Parallel()
		k, clk := newReconfigKeyed(t, SlidingLogPolicy(10, time.Minute))
		require.True(t, must(k.AllowN(ctx, "key", 10)).Allowed)
		clk.Add(30 * time.Second)
		require.NoError(t, k.SetPolicy(SlidingLogPolicy(20, time.Minute), KeepUsed))
		d := must(k.AllowN(ctx, "key", 10))
		require.True(t, d.Allowed)
		// The old events would have left at 1m; converted at 30s they leave
		// at 1m30s.
		clk.Add(30 * time.Second)
		assert.Equal(t, 0, must(k.Peek(ctx, "key", 0)).Remaining, "at 1m: re-timed events still count")
		clk.Add(30 * time.Second)
		assert.Equal(t, 20, must(k.Peek(ctx, "key", 0)).Remaining, "at 1m30s")
	})
}

// TestSetPolicyPrunesIdleGenerations: once every state of an older policy
// is idle its store is forgotten, decisions go back to the fast path, and
// no decision changed.
func TestSetPolicyPrunesIdleGenerations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, algo := range reconfigAlgorithms {
		t.Run(algo.String(), func(t *testing.T) {
			t.Parallel()
			p := policyOf(algo, 10)
			k, clk := newReconfigKeyed(t, p)
			for i := range 50 {
				require.True(t, must(k.AllowN(ctx, fmt.Sprint("k", i), 5)).Allowed)
			}
			require.NoError(t, k.SetPolicy(policyOf(algo, 20), KeepUsed))
			require.True(t, k.chained.Load())
			assert.Equal(t, 15, must(k.Peek(ctx, "k0", 0)).Remaining)
			old := k.cur.Load().prev.Load()
			clk.Add(time.Duration(idleBy(p, clk.Now().UnixNano()) - clk.Now().UnixNano() - 1))
			_ = must(k.Peek(ctx, "new", 0))
			assert.True(t, k.chained.Load(), "pruned a nanosecond early")
			clk.Add(time.Nanosecond)
			assert.Equal(t, 20, must(k.Peek(ctx, "k1", 0)).Remaining)
			assert.False(t, k.chained.Load(), "the idle generation is pruned")
			assert.Nil(t, k.cur.Load().prev.Load())
			assert.True(t, old.dropped.Load())
			assert.Equal(t, 0, k.Len())
			assert.Equal(t, int64(0), k.keys.Load(), "the key count forgets the dropped keys")
		})
	}
}

// TestSetPolicyRefundAndPenalizeConvert: RefundN and Penalize convert a
// key before acting on it.
func TestSetPolicyRefundAndPenalizeConvert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, algo := range reconfigAlgorithms {
		t.Run(algo.String(), func(t *testing.T) {
			t.Parallel()
			k, _ := newReconfigKeyed(t, policyOf(algo, 10))
			require.True(t, must(k.AllowN(ctx, "r", 6)).Allowed)
			require.True(t, must(k.AllowN(ctx, "p", 6)).Allowed)
			require.NoError(t, k.SetPolicy(policyOf(algo, 20), KeepUsed))
			require.NoError(t, k.RefundN(ctx, "r", 2))
			assert.Equal(t, 16, must(k.Peek(ctx, "r", 0)).Remaining, "6 used, converted, 2 refunded")
			require.NoError(t, k.Penalize(ctx, "p", 4))
			assert.Equal(t, 10, must(k.Peek(ctx, "p", 0)).Remaining, "6 used, converted, 4 penalty")
		})
	}
}

// TestSetPolicyErrors: a bad policy or mode changes nothing.
func TestSetPolicyErrors(t *testing.T) {
	t.Parallel()
	k, _ := newReconfigKeyed(t, FixedWindowPolicy(10, time.Minute))
	err := k.SetPolicy(FixedWindowPolicy(10, time.Minute), 0)
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.EqualError(t, err, "ratelimit: invalid configuration: ratelimit.Keyed.SetPolicy mode must be KeepUsed, ScaleUsed or StartFresh, got Inheritance(0)")
	assert.ErrorIs(t, k.SetPolicy(FixedWindowPolicy(10, time.Minute), 4), ErrInvalidConfig)
	err = k.SetPolicy(FixedWindowPolicy(0, time.Minute), KeepUsed)
	require.ErrorIs(t, err, ErrInvalidConfig)
	assert.Contains(t, err.Error(), "ratelimit.Policy.Limit")
	assert.ErrorIs(t, k.SetPolicy(Policy{}, KeepUsed), ErrInvalidConfig)
	assert.Equal(t, FixedWindowPolicy(10, time.Minute), k.Policy())
	assert.False(t, k.chained.Load())
}

// TestSetPolicyUnderConcurrentTraffic: goroutines hammer a few keys with
// AllowN, Peek, Penalize-free AllowAll and WaitN-free traffic while another
// flips the policy (across algorithms and modes) many times. Time stands
// still, so every algorithm counts like a counter, and this bound holds:
// a key admits at most the final limit plus what each change could forget
// of its usage (KeepUsed and ScaleUsed: old limit - new limit when
// tightening; StartFresh: the old limit). A key admitted under two
// generations at once, or a conversion that lost a charge, breaks it.
func TestSetPolicyUnderConcurrentTraffic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := fakeclock.NewManual(testStart)
	k1, err := NewKeyed(policyOf(TokenBucketAlgorithm, 10), WithClock(clk))
	require.NoError(t, err)
	k2, err := NewKeyed(policyOf(FixedWindowAlgorithm, 10), WithClock(clk))
	require.NoError(t, err)
	keys := []string{"a", "b", "c"}
	limiters := []*Keyed{k1, k2}
	admitted := make([][]atomic.Int64, len(limiters))
	for i := range admitted {
		admitted[i] = make([]atomic.Int64, len(keys))
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for !stop.Load() {
				runtime.Gosched() // let SetPolicy in on a machine with few CPUs
				ki := rng.IntN(len(keys))
				n := 1 + rng.IntN(3)
				switch rng.IntN(4) {
				case 0, 1:
					li := rng.IntN(len(limiters))
					if d, _ := limiters[li].AllowN(ctx, keys[ki], n); d.Allowed {
						admitted[li][ki].Add(int64(n))
					}
				case 2:
					kj := rng.IntN(len(keys))
					md, _ := AllowAll(ctx, n,
						Dimension{Name: "one", Limiter: k1, Key: keys[ki]},
						Dimension{Name: "two", Limiter: k2, Key: keys[kj]})
					if md.Allowed {
						admitted[0][ki].Add(int64(n))
						admitted[1][kj].Add(int64(n))
					}
				default:
					d, _ := limiters[rng.IntN(len(limiters))].Peek(ctx, keys[ki], 0)
					assert.GreaterOrEqual(t, d.Remaining, 0)
					assert.LessOrEqual(t, d.Remaining, d.Limit)
				}
			}
		}()
	}
	bound := make([]int64, len(limiters))
	last := []int{10, 10}
	rng := rand.New(rand.NewPCG(99, 1))
	for range 100 {
		for li, k := range limiters {
			limit := 3 + rng.IntN(20)
			algo := reconfigAlgorithms[rng.IntN(len(reconfigAlgorithms))]
			mode := modes[rng.IntN(len(modes))]
			require.NoError(t, k.SetPolicy(policyOf(algo, limit), mode))
			// Convert every key at once, racing the traffic: one left
			// untouched across more than keptPolicies changes (a loaded
			// machine starves goroutines) would start fresh, outside the
			// bound.
			for _, key := range keys {
				_, _ = k.AllowN(ctx, key, 0)
			}
			switch mode {
			case StartFresh:
				bound[li] += int64(last[li])
			default:
				bound[li] += int64(max(last[li]-limit, 0))
			}
			last[li] = limit
		}
		time.Sleep(50 * time.Microsecond)
	}
	time.Sleep(5 * time.Millisecond)
	stop.Store(true)
	wg.Wait()
	for li, k := range limiters {
		for ki, key := range keys {
			got := admitted[li][ki].Load()
			want := bound[li] + int64(last[li])
			assert.LessOrEqual(t, got, want, "limiter %d key %q: admitted %d, bound %d", li, key, got, want)
			d := must(k.Peek(ctx, key, 0))
			assert.LessOrEqual(t, int64(d.Limit-d.Remaining), got, "used more than admitted")
		}
	}
}

// TestSetPolicyConcurrentWithTimeAndPruning: the same traffic while time
// moves and older generations are pruned: nothing deadlocks, every
// Decision is within its limit, and once traffic stops and every state is
// idle each key has its full quota.
func TestSetPolicyConcurrentWithTimeAndPruning(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := fakeclock.NewManual(testStart)
	k, err := NewKeyed(policyOf(SlidingLogAlgorithm, 10), WithClock(clk), WithMaxKeys(64))
	require.NoError(t, err)
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 8))
			for !stop.Load() {
				runtime.Gosched()
				key := fmt.Sprint("k", rng.IntN(40))
				switch rng.IntN(5) {
				case 0:
					_ = k.Penalize(ctx, key, 1+rng.IntN(5))
				case 1:
					_ = k.Reset(ctx, key)
				case 2:
					_ = k.Block(ctx, key, time.Duration(rng.IntN(3))*time.Second)
				default:
					d, err := k.AllowN(ctx, key, 1+rng.IntN(2))
					if err == nil {
						assert.GreaterOrEqual(t, d.Remaining, 0)
						assert.LessOrEqual(t, d.Remaining, d.Limit)
					}
				}
			}
		}()
	}
	rng := rand.New(rand.NewPCG(5, 5))
	for range 100 {
		algo := reconfigAlgorithms[rng.IntN(len(reconfigAlgorithms))]
		require.NoError(t, k.SetPolicy(policyOf(algo, 3+rng.IntN(20)), modes[rng.IntN(len(modes))]))
		clk.Add(time.Duration(rng.IntN(20)) * time.Second)
		time.Sleep(20 * time.Microsecond)
	}
	stop.Store(true)
	wg.Wait()
	clk.Add(24 * time.Hour) // idle under every test policy, the daily quota's too
	limit := k.Policy().Limit
	for i := range 40 {
		assert.Equal(t, limit, must(k.Peek(ctx, fmt.Sprint("k", i), 0)).Remaining)
	}
	_, _ = k.AllowN(ctx, "last", 1)
	assert.False(t, k.chained.Load(), "every older generation pruned")
	assert.Equal(t, int64(k.Len()), k.keys.Load(), "key count")
}

// TestSetPolicyLoosenKeepsEveryEvent: with time standing still, changes
// that only loosen the limit with KeepUsed forget nothing, so whatever the
// interleaving of traffic (AllowN, AllowAll, Peek) and changes (across
// algorithms), each key's used amount at the end equals exactly the events
// admitted for it. A charge lost in a conversion, or an event admitted
// under a generation already converted, breaks the equality.
func TestSetPolicyLoosenKeepsEveryEvent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := fakeclock.NewManual(testStart)
	k1, err := NewKeyed(policyOf(SlidingLogAlgorithm, 5), WithClock(clk))
	require.NoError(t, err)
	k2, err := NewKeyed(policyOf(TokenBucketAlgorithm, 5), WithClock(clk))
	require.NoError(t, err)
	keys := []string{"a", "b", "c"}
	limiters := []*Keyed{k1, k2}
	var admitted [2][3]atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for i := 0; !stop.Load(); i++ {
				if i%8 == 0 {
					runtime.Gosched()
				}
				ki := rng.IntN(len(keys))
				switch rng.IntN(3) {
				case 0:
					li := rng.IntN(len(limiters))
					if d, _ := limiters[li].AllowN(ctx, keys[ki], 1); d.Allowed {
						admitted[li][ki].Add(1)
					}
				case 1:
					kj := rng.IntN(len(keys))
					md, _ := AllowAll(ctx, 1,
						Dimension{Name: "one", Limiter: k1, Key: keys[ki]},
						Dimension{Name: "two", Limiter: k2, Key: keys[kj]})
					if md.Allowed {
						admitted[0][ki].Add(1)
						admitted[1][kj].Add(1)
					}
				default:
					_, _ = limiters[rng.IntN(len(limiters))].Peek(ctx, keys[ki], 0)
				}
			}
		}()
	}
	limit := 5
	rng := rand.New(rand.NewPCG(3, 3))
	for range 150 {
		limit += 1 + rng.IntN(3)
		for _, k := range limiters {
			algo := reconfigAlgorithms[rng.IntN(len(reconfigAlgorithms))]
			require.NoError(t, k.SetPolicy(policyOf(algo, limit), KeepUsed))
			// AllowN(0) converts each key at once, racing the traffic: a key
			// the traffic left untouched for more than keptPolicies changes
			// (a loaded machine starves goroutines) would start fresh.
			for _, key := range keys {
				_, _ = k.AllowN(ctx, key, 0)
			}
		}
		runtime.Gosched()
	}
	stop.Store(true)
	wg.Wait()
	total := int64(0)
	for li, k := range limiters {
		for ki, key := range keys {
			d := must(k.Peek(ctx, key, 0))
			got := admitted[li][ki].Load()
			total += got
			assert.Equal(t, got, int64(d.Limit-d.Remaining), "limiter %d key %q: used = admitted", li, key)
		}
	}
	assert.Greater(t, total, int64(100), "traffic admitted while the policy changed")
}

// TestSetPolicyInAllowAll: AllowAll converts a key as AllowN does when it
// admits, and stores nothing when another dimension denies.
func TestSetPolicyInAllowAll(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, algo := range reconfigAlgorithms {
		t.Run(algo.String(), func(t *testing.T) {
			t.Parallel()
			k, clk := newReconfigKeyed(t, policyOf(algo, 10))
			other, err := NewKeyed(FixedWindowPolicy(1, time.Minute), WithClock(clk))
			require.NoError(t, err)
			require.True(t, must(k.AllowN(ctx, "a", 6)).Allowed)
			require.True(t, must(k.AllowN(ctx, "b", 6)).Allowed)
			require.True(t, must(other.AllowN(ctx, "full", 1)).Allowed)
			require.NoError(t, k.SetPolicy(policyOf(algo, 20), KeepUsed))

			md, err := AllowAll(ctx, 1, Dimension{Name: "k", Limiter: k, Key: "a"}, Dimension{Name: "o", Limiter: other, Key: "free"})
			require.NoError(t, err)
			require.True(t, md.Allowed)
			assert.Equal(t, 13, must(k.Peek(ctx, "a", 0)).Remaining, "6 kept, 1 admitted")

			md, err = AllowAll(ctx, 1, Dimension{Name: "k", Limiter: k, Key: "b"}, Dimension{Name: "o", Limiter: other, Key: "full"})
			require.NoError(t, err)
			require.False(t, md.Allowed)
			assert.Equal(t, 1, md.Index)
			assert.Equal(t, 14, must(k.Peek(ctx, "b", 0)).Remaining, "nothing charged")
			assert.Equal(t, 1, k.cur.Load().store.len(), "a denied request stores no conversion")
		})
	}
}

// TestSetPolicySharesTheKeyCap: WithMaxKeys bounds the keys of every
// generation together; a converted key brings its room along.
func TestSetPolicySharesTheKeyCap(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k, _ := newReconfigKeyed(t, FixedWindowPolicy(10, time.Minute), WithMaxKeys(2))
	require.True(t, must(k.AllowN(ctx, "a", 5)).Allowed)
	require.True(t, must(k.AllowN(ctx, "b", 5)).Allowed)
	require.NoError(t, k.SetPolicy(SlidingLogPolicy(10, time.Minute), KeepUsed))
	_, err := k.AllowN(ctx, "c", 1)
	assert.ErrorIs(t, err, ErrTooManyKeys, "the old generation's keys count")
	d, err := k.AllowN(ctx, "a", 1)
	require.NoError(t, err, "a converted key needs no new room")
	assert.Equal(t, 4, d.Remaining)
	assert.Equal(t, 2, k.Len())
	require.NoError(t, k.Reset(ctx, "b"))
	assert.True(t, must(k.AllowN(ctx, "c", 1)).Allowed, "Reset makes room")
	assert.Equal(t, int64(2), k.keys.Load())
}

// TestSetPolicyDropsEmptyGenerations: a superseded generation that holds
// no key is dropped at once, however often the policy changes, while its
// step still applies to keys held further back; what is left of it is a
// copy without its store.
func TestSetPolicyDropsEmptyGenerations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	k, _ := newReconfigKeyed(t, FixedWindowPolicy(10, time.Minute))
	for range 100 {
		require.NoError(t, k.SetPolicy(FixedWindowPolicy(10, time.Minute), KeepUsed))
	}
	assert.False(t, k.chained.Load(), "no key: no older generation kept")

	require.True(t, must(k.AllowN(ctx, "key", 6)).Allowed)
	first := k.cur.Load()
	for _, limit := range []int{9, 5, 11, 10} { // 6 used -> 6, 5, 5, 5 used
		require.NoError(t, k.SetPolicy(FixedWindowPolicy(limit, time.Minute), KeepUsed))
	}
	dropped := 0
	for g := k.cur.Load().prev.Load(); g != nil && g != first; g = g.prev.Load() {
		assert.True(t, g.dropped.Load())
		assert.IsType(t, droppedStore{}, g.store, "a dropped generation keeps no store")
		dropped++
	}
	assert.Equal(t, keptPolicies-1, dropped, "every empty generation between dropped")
	assert.False(t, first.dropped.Load())
	assert.Equal(t, 5, must(k.Peek(ctx, "key", 0)).Remaining, "every step, one of them a tightening")
}

// variant returns p for an even i, else a policy with p's limit that
// differs from it (a longer period; for a calendar quota, another reset
// hour): a change that leaves a key's remaining quota as it is.
func variant(p Policy, i int) Policy {
	switch {
	case i%2 == 0:
	case p.Algorithm == QuotaAlgorithm:
		p.Calendar.Hour = 1
	default:
		p.Period *= 2
	}
	return p
}

// TestSetPolicyKeepsFourPrevious: a key's state converts across the last
// keptPolicies changes, and a key whose state is older than that starts
// fresh (as on Redis, where a decision probes that many previous policies
// at most), in every algorithm; the store it was in is dropped, and the
// chain holds no more than keptPolicies older generations.
func TestSetPolicyKeepsFourPrevious(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	require.Equal(t, 4, keptPolicies, "the docs say four")
	for _, algo := range reconfigAlgorithms {
		t.Run(algo.String(), func(t *testing.T) {
			t.Parallel()
			k, _ := newReconfigKeyed(t, policyOf(algo, 10))
			// Each change is a real one (setting the policy in force again
			// is none): every other one to a variant with the same limit.
			changes := 0
			change := func() {
				t.Helper()
				changes++
				require.NoError(t, k.SetPolicy(variant(policyOf(algo, 10), changes), KeepUsed))
			}
			require.True(t, must(k.AllowN(ctx, "oldest", 6)).Allowed)
			change()
			require.True(t, must(k.AllowN(ctx, "newer", 6)).Allowed)
			for range keptPolicies - 1 {
				change()
			}
			assert.Equal(t, 4, must(k.Peek(ctx, "oldest", 0)).Remaining, "four changes back: converted")
			change()
			assert.Equal(t, 10, must(k.Peek(ctx, "oldest", 0)).Remaining, "five changes back: fresh")
			assert.Equal(t, 4, must(k.Peek(ctx, "newer", 0)).Remaining, "four changes back: converted")
			depth := 0
			for g := k.cur.Load().prev.Load(); g != nil; g = g.prev.Load() {
				depth++
			}
			assert.Equal(t, keptPolicies, depth)
			assert.Equal(t, 1, k.Len(), "the oldest key is forgotten with its generation")
			change()
			assert.Equal(t, 10, must(k.AllowN(ctx, "newer", 0)).Remaining, "five changes back: fresh")
			assert.False(t, k.chained.Load())
		})
	}
}

// TestSetPolicyAgainChangesNothing: a configuration reload that sets the
// policy in force again, with KeepUsed or ScaleUsed, is no change: a key
// that used its daily quota and is not touched across twenty reloads
// stays used up (it used to start fresh once four "changes" had passed),
// also when the reload loads the zone anew (another *time.Location of the
// same zone). StartFresh to the same policy still starts every key over.
func TestSetPolicyAgainChangesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	zone := func() *time.Location {
		loc, err := time.LoadLocation("America/New_York")
		require.NoError(t, err)
		return loc
	}
	quota := func() Policy { return QuotaPolicy(5, Calendar{Unit: Daily, Location: zone()}) }
	for _, algo := range reconfigAlgorithms {
		for _, mode := range []Inheritance{KeepUsed, ScaleUsed} {
			t.Run(fmt.Sprintf("%v/%v", algo, mode), func(t *testing.T) {
				t.Parallel()
				p := policyOf(algo, 5)
				if algo == QuotaAlgorithm {
					p = quota()
				}
				k, clk := newReconfigKeyed(t, p)
				require.True(t, must(k.AllowN(ctx, "used", 5)).Allowed)
				for range 20 {
					again := p
					if algo == QuotaAlgorithm {
						again = quota()
					}
					require.NoError(t, k.SetPolicy(again, mode))
					clk.Add(time.Millisecond)
					must(k.AllowN(ctx, "other", 1))
				}
				assert.False(t, must(k.AllowN(ctx, "used", 1)).Allowed, "a used-up key after 20 reloads of its policy")
				assert.Nil(t, k.cur.Load().prev.Load(), "no generation was added")
			})
		}
	}
	t.Run("StartFresh", func(t *testing.T) {
		k, _ := newReconfigKeyed(t, quota())
		require.True(t, must(k.AllowN(ctx, "used", 5)).Allowed)
		require.NoError(t, k.SetPolicy(quota(), StartFresh))
		assert.True(t, must(k.AllowN(ctx, "used", 5)).Allowed)
	})
	t.Run("another zone of the same name", func(t *testing.T) {
		k, _ := newReconfigKeyed(t, quota())
		require.True(t, must(k.AllowN(ctx, "used", 5)).Allowed)
		other := QuotaPolicy(5, Calendar{Unit: Daily, Location: time.FixedZone("America/New_York", 3600)})
		require.NoError(t, k.SetPolicy(other, KeepUsed))
		assert.NotNil(t, k.cur.Load().prev.Load(), "a zone with other offsets is a change")
	})
}

// TestSetPolicyAgainBuildsNothing: setting the policy in force again
// allocates nothing (it used to build a whole sharded store and drop it).
// Not parallel: AllocsPerRun.
func TestSetPolicyAgainBuildsNothing(t *testing.T) {
	for _, algo := range reconfigAlgorithms {
		k, _ := newReconfigKeyed(t, policyOf(algo, 5))
		p := k.Policy()
		assert.Zero(t, testing.AllocsPerRun(10, func() { require.NoError(t, k.SetPolicy(p, KeepUsed)) }), "%v", algo)
	}
}
