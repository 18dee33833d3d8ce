package ratelimit

import (
	"context"
	"hash/maphash"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
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
			switch rng.IntN(8) {
			case 0: // too long to be held inline
				key += strings.Repeat("x", inlineKey)
			case 1: // the longest inline key, and one byte more
				key = (key + strings.Repeat("\x00", inlineKey))[:inlineKey+rng.IntN(2)]
			case 2: // the empty key, and zero bytes that a length must tell apart
				key = strings.Repeat("\x00", rng.IntN(3))
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

// TestTableKeepsNoCallerString checks that the table copies every key it
// stores, inline or long: a caller's buffer reused for the next request
// must not change a stored key.
func TestTableKeepsNoCallerString(t *testing.T) {
	var tb table[tbState]
	buf := []byte(strings.Repeat("a", 40))
	for _, n := range []int{0, 1, inlineKey, inlineKey + 1, 40} {
		key := unsafe.String(unsafe.SliceData(buf), n)
		tb.insert(key, uint32(n)*2654435761)
	}
	for i := range buf {
		buf[i] = 'b'
	}
	for _, n := range []int{0, 1, inlineKey, inlineKey + 1, 40} {
		key := strings.Repeat("a", n)
		require.NotNil(t, tb.get(key, uint32(n)*2654435761), "key of %d bytes changed with the caller's buffer", n)
	}
}

// TestTableShrinkCompactsLongKeys checks that deleting most long keys
// gives their room back once the table shrinks, even while some remain.
func TestTableShrinkCompactsLongKeys(t *testing.T) {
	var tb table[tbState]
	hash := func(k string) uint32 { return uint32(maphash.String(seedForTest, k)) }
	key := func(i int) string { return strconv.Itoa(i) + strings.Repeat("x", inlineKey) }
	for i := range 10_000 {
		tb.insert(key(i), hash(key(i)))
	}
	for i := 10; i < 10_000; i++ {
		tb.delete(tb.find(key(i), hash(key(i))))
	}
	require.Equal(t, 10, tb.len())
	require.LessOrEqual(t, cap(tb.long), 100, "long keys' room kept after deletes")
	for i := range 10 {
		require.NotNil(t, tb.get(key(i), hash(key(i))), "lost %s", key(i))
	}
}

var seedForTest = maphash.MakeSeed()

// TestReclaimVisitsEveryKey checks the idle sweep's cursor over slots:
// with every key idle, sweeping each shard with a fixed budget empties it
// within slots/budget sweeps, although each deletion shifts later slots
// back under the cursor and the table shrinks as it empties.
func TestReclaimVisitsEveryKey(t *testing.T) {
	mock := fakeclock.New(time.Unix(0, 0))
	k, err := NewKeyed(TokenBucketPolicy(Per(1, time.Second), 10), WithClock(mock))
	require.NoError(t, err)
	ctx := context.Background()
	for i := range 5000 {
		require.True(t, k.Allow(ctx, "key-"+strconv.Itoa(i)))
	}
	require.Equal(t, 5000, k.Len())
	mock.Add(time.Second) // every bucket is full again: every key is idle
	st := k.cur.Load().store.(*shardStore[tbState, *tokenBucketAlg])
	now := k.ts.Now()
	for i := range st.shards {
		sh := &st.shards[i]
		sh.mu.Lock()
		sweeps := len(sh.t.slots)/sampleOnInsert + 1
		for j := 0; j < sweeps && sh.t.len() > 0; j++ {
			st.reclaim(sh, now, sampleOnInsert)
		}
		left := sh.t.len()
		sh.mu.Unlock()
		require.Zero(t, left, "shard %d: idle keys left after %d sweeps", i, sweeps)
	}
	require.Zero(t, k.Len())
}

// key returns (a copy of) the key held in the non-empty slot s: the
// tests' way to name a slot's key.
func (t *table[S]) key(s *slot[S]) string {
	if s.meta == longMeta {
		return t.long[s.longIndex()]
	}
	return string(s.kb[:s.meta-1])
}
