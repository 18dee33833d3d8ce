package ratelimit

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// heapAfterGC returns the bytes of live heap objects after a full
// collection.
func heapAfterGC() uint64 {
	runtime.GC()
	runtime.GC() // finalizers and sync.Pool victims of the first
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// TestSetPolicyMemoryPerChange: a change of policy costs memory for the
// keys its generation holds, and under 1 KB without keys. Before the fix
// a generation that held no key was dropped but kept its whole sharded
// store (64 shards or more, 12.5 KB) as long as an older generation held
// a key: 1,000 changes over one dormant key took 12 MB. Here 200 limiters
// each hold a key in their first generation and go through as many
// changes as are kept: the heap may grow by the kept generations of each,
// under 1 KB per change, and by one current store (which replaces the one
// holding the key), not by a store per change. Not parallel: it measures
// the heap.
func TestSetPolicyMemoryPerChange(t *testing.T) {
	ctx := context.Background()
	const limiters = 200
	ks := make([]*Keyed, limiters)
	for i := range ks {
		k, _ := newReconfigKeyed(t, FixedWindowPolicy(10, time.Hour))
		require.True(t, must(k.AllowN(ctx, "dormant", 3)).Allowed)
		require.NoError(t, k.SetPolicy(FixedWindowPolicy(11, time.Hour), KeepUsed))
		ks[i] = k
	}
	// Every limiter now holds the dormant key in its old generation and
	// nothing in its current one: the changes below each leave one more
	// generation with no key behind.
	changes := keptPolicies - 1
	before := heapAfterGC()
	for _, k := range ks {
		for i := range changes {
			require.NoError(t, k.SetPolicy(FixedWindowPolicy(12+i%2, time.Hour), KeepUsed))
		}
	}
	after := heapAfterGC()
	perChange := (int64(after) - int64(before)) / (limiters * int64(changes))
	t.Logf("%d changes on each of %d limiters: %+d bytes of heap per change", changes, limiters, perChange)
	require.Less(t, perChange, int64(1024), "heap per change without keys")
	for _, k := range ks {
		require.Equal(t, k.Policy().Limit-3, must(k.Peek(ctx, "dormant", 0)).Remaining, "the dormant key converted through every kept change")
	}
	runtime.KeepAlive(ks)
}

// TestSetPolicyMemoryThousandChanges is the measurement: one
// dormant key and 1,000 changes cost 12 MB before the fix (12.5 KB per
// change); now the heap grows by less than 1 KB per change. Not parallel:
// it measures the heap.
func TestSetPolicyMemoryThousandChanges(t *testing.T) {
	ctx := context.Background()
	k, _ := newReconfigKeyed(t, FixedWindowPolicy(10, time.Hour))
	require.True(t, must(k.AllowN(ctx, "dormant", 3)).Allowed)
	before := heapAfterGC()
	for i := range 1000 {
		require.NoError(t, k.SetPolicy(FixedWindowPolicy(11+i%2, time.Hour), KeepUsed))
	}
	after := heapAfterGC()
	perChange := (int64(after) - int64(before)) / 1000
	t.Logf("1,000 changes over one dormant key: %+d bytes of heap per change", perChange)
	require.Less(t, perChange, int64(1024))
	runtime.KeepAlive(k)
}

// BenchmarkKeyedAfterChanges measures a decision of a new key after 0, 1
// and 1,000 changes of policy while one dormant key holds the first
// generation: before the fix a new key walked every generation kept (all
// of them, as the dormant key kept the chain), now at most four.
func BenchmarkKeyedAfterChanges(b *testing.B) {
	ctx := context.Background()
	for _, changes := range []int{0, 1, 1000} {
		b.Run("changes="+strconv.Itoa(changes), func(b *testing.B) {
			k, err := NewKeyed(FixedWindowPolicy(1_000_000, time.Hour))
			if err != nil {
				b.Fatal(err)
			}
			if _, err := k.AllowN(ctx, "dormant", 1); err != nil {
				b.Fatal(err)
			}
			for i := range changes {
				if err := k.SetPolicy(FixedWindowPolicy(1_000_000+(i+1)%3, time.Hour), KeepUsed); err != nil {
					b.Fatal(err)
				}
			}
			keys := make([]string, 1<<16)
			for i := range keys {
				keys[i] = "new" + strconv.Itoa(i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if _, err := k.AllowN(ctx, keys[i&(len(keys)-1)], 1); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
