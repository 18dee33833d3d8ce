package redislimit

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSetPolicyConcurrentEveryAlgorithm: goroutines hammer three keys while
// SetPolicy flips between policies of every algorithm and mode, the clock
// standing still (so nothing refills or ends). Each change can hand a key
// at most what it forgets: StartFresh the old limit, KeepUsed and ScaleUsed
// the amount the limit shrinks by. So the events admitted for a key are at
// most the sum of those plus the final limit, and the key's used amount at
// the end is at most what was admitted.
func TestSetPolicyConcurrentEveryAlgorithm(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for seed := range uint64(3) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			first := reconfigPolicy(ratelimit.TokenBucketAlgorithm, 10)
			l, _ := clientLimiter(t, c, first, WithTimeout(10*time.Second))
			keys := []string{"a", "b", "c"}
			admitted := make([]atomic.Int64, len(keys))
			var stop atomic.Bool
			var wg sync.WaitGroup
			for g := range 12 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					rng := rand.New(rand.NewPCG(seed, uint64(g)))
					for !stop.Load() {
						ki := rng.IntN(len(keys))
						if rng.IntN(4) == 0 {
							d, err := l.Peek(bg(), keys[ki], 0)
							if assert.NoError(t, err) {
								assert.GreaterOrEqual(t, d.Remaining, 0)
								assert.LessOrEqual(t, d.Remaining, d.Limit)
							}
							continue
						}
						n := 1 + rng.IntN(3)
						d, err := l.AllowN(bg(), keys[ki], n)
						assert.NoError(t, err)
						if d.Allowed {
							admitted[ki].Add(int64(n))
						}
					}
				}()
			}
			rng := rand.New(rand.NewPCG(seed, 99))
			bound, last := int64(0), first.Limit
			for range 40 {
				limit := 3 + rng.IntN(20)
				p := reconfigPolicy(allAlgorithms[rng.IntN(len(allAlgorithms))], limit)
				mode := allModes[rng.IntN(len(allModes))]
				require.NoError(t, l.SetPolicy(p, mode))
				touch(t, l, keys)
				if mode == ratelimit.StartFresh {
					bound += int64(last)
				} else {
					bound += int64(max(last-limit, 0))
				}
				last = limit
				time.Sleep(time.Millisecond)
				runtime.Gosched()
			}
			time.Sleep(5 * time.Millisecond)
			stop.Store(true)
			wg.Wait()
			total := int64(0)
			for ki, key := range keys {
				got := admitted[ki].Load()
				total += got
				assert.LessOrEqual(t, got, bound+int64(last), "key %q: admitted %d, bound %d", key, got, bound+int64(last))
				d, err := l.Peek(bg(), key, 0)
				require.NoError(t, err)
				assert.LessOrEqual(t, int64(d.Limit-d.Remaining), got, "key %q: used more than admitted", key)
			}
			assert.Positive(t, total)
		})
	}
}

// TestSetPolicyLoosenConcurrentKeepsEveryEvent: with time standing still,
// changes that only loosen the limit with KeepUsed (across every
// algorithm) forget nothing, so whatever the interleaving, each key's used
// amount at the end equals the events admitted for it: a charge lost in a
// conversion, or an event admitted under a policy already converted away,
// breaks the equality.
func TestSetPolicyLoosenConcurrentKeepsEveryEvent(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	l, _ := clientLimiter(t, c, reconfigPolicy(ratelimit.SlidingLogAlgorithm, 5), WithTimeout(10*time.Second))
	keys := []string{"a", "b", "c"}
	admitted := make([]atomic.Int64, len(keys))
	var stop atomic.Bool
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), 9))
			for !stop.Load() {
				ki := rng.IntN(len(keys))
				if rng.IntN(3) == 0 {
					_, err := l.Peek(bg(), keys[ki], 0)
					assert.NoError(t, err)
					continue
				}
				d, err := l.AllowN(bg(), keys[ki], 1)
				assert.NoError(t, err)
				if d.Allowed {
					admitted[ki].Add(1)
				}
			}
		}()
	}
	limit := 5
	rng := rand.New(rand.NewPCG(3, 3))
	for range 40 {
		limit += 1 + rng.IntN(3)
		require.NoError(t, l.SetPolicy(reconfigPolicy(allAlgorithms[rng.IntN(len(allAlgorithms))], limit), ratelimit.KeepUsed))
		touch(t, l, keys)
		time.Sleep(500 * time.Microsecond)
	}
	stop.Store(true)
	wg.Wait()
	total := int64(0)
	for ki, key := range keys {
		d, err := l.Peek(bg(), key, 0)
		require.NoError(t, err)
		got := admitted[ki].Load()
		total += got
		assert.Equal(t, got, int64(d.Limit-d.Remaining), "key %q: used = admitted", key)
	}
	assert.Greater(t, total, int64(30), "traffic admitted while the policy changed")
}

// touch converts every key to l's current policy at once (AllowN of 0,
// which admits nothing), racing the traffic: a key that the traffic left
// untouched across more than keptPolicies changes (goroutines starved on
// a loaded machine) would start fresh, outside the bounds these tests
// check.
func touch(t *testing.T, l *Limiter, keys []string) {
	t.Helper()
	for _, k := range keys {
		_, err := l.AllowN(bg(), k, 0)
		require.NoError(t, err)
	}
}
