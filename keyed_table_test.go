package ratelimit

import (
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestTableMatchesMap drives a table and a Go map through the same random
// inserts, updates and deletes, with a deliberately poor hash so that
// probe chains are long and wrap around, and checks they always agree.
func TestTableMatchesMap(t *testing.T) {
	t.Parallel()
	for _, hashBits := range []uint{3, 32} {
		hash := func(key string) uint32 {
			h := uint32(2166136261)
			for i := 0; i < len(key); i++ {
				h = (h ^ uint32(key[i])) * 16777619
			}
			if hashBits < 32 {
				h &= 1<<hashBits - 1 // few distinct hashes: long chains
				h <<= 32 - hashBits  // spread over the whole table
			}
			return h
		}
		var tb table[tbState]
		model := map[string]int64{}
		rng := rand.New(rand.NewPCG(7, uint64(hashBits)))
		for step := range 20_000 {
			key := "k" + strconv.Itoa(rng.IntN(300))
			if rng.IntN(4) == 0 { // some keys too long to be held inline
				key += strings.Repeat("x", inlineKey)
			}
			h := hash(key)
			switch op := rng.IntN(10); {
			case op < 5: // insert or update
				st := tb.get(key, h)
				if st == nil {
					st = tb.insert(key, h)
				}
				st.debt++
				model[key]++
			case op < 8: // delete an entry found by key
				if i := tb.find(key, h); i >= 0 {
					tb.delete(i)
					delete(model, key)
				} else {
					_, ok := model[key]
					require.False(t, ok, "step %d: %s in model but not in table", step, key)
				}
			default: // delete at the sweep's position
				if tb.len() > 0 {
					i := rng.IntN(len(tb.slots))
					for tb.slots[i].meta == 0 {
						i = (i + 1) % len(tb.slots)
					}
					delete(model, tb.key(&tb.slots[i]))
					tb.delete(i)
				}
			}
			require.Equal(t, len(model), tb.len(), "step %d", step)
			if step%97 == 0 {
				for k, v := range model {
					st := tb.get(k, hash(k))
					require.NotNil(t, st, "step %d: lost %s", step, k)
					require.Equal(t, v, st.debt, "step %d: %s", step, k)
				}
				used := 0
				for _, s := range tb.slots {
					if s.meta != 0 {
						used++
					}
				}
				require.Equal(t, tb.len(), used, "step %d: slots in use", step)
				long := 0
				for k := range model {
					if len(k) > inlineKey {
						long++
					}
				}
				require.Equal(t, long, len(tb.long)-len(tb.free), "step %d: long keys kept", step)
				require.LessOrEqual(t, tb.len()*maxLoadDen, len(tb.slots)*maxLoadNum, "step %d: load", step)
			}
		}
	}
}

// TestShardBits checks the shard count's rule: 64, or 8 per CPU when that
// is more, at most 4096.
func TestShardBits(t *testing.T) {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for procs, want := range map[int]uint{1: 6, 2: 6, 8: 6, 9: 7, 16: 7, 64: 9, 96: 10, 512: 12, 4096: 12} {
		runtime.GOMAXPROCS(procs)
		require.Equal(t, want, shardBits(), "GOMAXPROCS %d", procs)
	}
}
