package ring

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// entries returns the log's entries, oldest first.
func entries(l *Log) []Entry {
	var out []Entry
	for i := 0; i < l.Len(); i++ {
		out = append(out, l.At(i))
	}
	return out
}

// seq returns entries with timestamps from..to and count 1.
func seq(from, to int64) []Entry {
	var out []Entry
	for ts := from; ts <= to; ts++ {
		out = append(out, Entry{TS: ts, N: 1})
	}
	return out
}

func TestZeroValueHoldsNoMemory(t *testing.T) {
	t.Parallel()
	var l Log
	assert.Equal(t, 0, l.Len())
	assert.Equal(t, 0, l.Cap())
	assert.Empty(t, entries(&l))
}

// TestGrowByDoubling: the buffer starts at minCap on first use and doubles
// when full.
func TestGrowByDoubling(t *testing.T) {
	t.Parallel()
	var l Log
	want := map[int]int{1: 1, 2: 2, 3: 4, 4: 4, 5: 8, 8: 8, 9: 16, 16: 16, 17: 32, 33: 64, 64: 64, 65: 128}
	for i := 1; i <= 65; i++ {
		l.AddBack(int64(i), 1, 1000)
		require.Equal(t, i, l.Len())
		if c, ok := want[i]; ok {
			assert.Equalf(t, c, l.Cap(), "Cap after %d entries", i)
		}
	}
	assert.Equal(t, seq(1, 65), entries(&l))
}

// TestGrowCappedAtMaxEntries: doubling stops at maxEntries and goes beyond
// it one entry at a time, only when the log already holds that many.
func TestGrowCappedAtMaxEntries(t *testing.T) {
	t.Parallel()
	tests := []struct {
		maxEntries int
		caps       []int // Cap after the 1st, 2nd, ... AddBack
	}{
		{maxEntries: 1, caps: []int{1, 2, 3}},
		{maxEntries: 3, caps: []int{1, 2, 3, 4}},
		{maxEntries: 4, caps: []int{1, 2, 4, 4, 5}},
		{maxEntries: 6, caps: []int{1, 2, 4, 4, 6, 6, 7, 8}},
		{maxEntries: 10, caps: []int{1, 2, 4, 4, 8, 8, 8, 8, 10, 10, 11}},
	}
	for _, tt := range tests {
		var l Log
		for i, want := range tt.caps {
			l.AddBack(int64(i+1), 1, tt.maxEntries)
			assert.Equalf(t, want, l.Cap(), "maxEntries %d: Cap after %d entries", tt.maxEntries, i+1)
		}
		assert.Equal(t, seq(1, int64(len(tt.caps))), entries(&l))
	}
}

// TestAddBackMerges: events at the newest entry's time, or earlier, join
// that entry instead of taking a new one.
func TestAddBackMerges(t *testing.T) {
	t.Parallel()
	var l Log
	l.AddBack(10, 2, 8)
	l.AddBack(10, 3, 8)
	assert.Equal(t, []Entry{{TS: 10, N: 5}}, entries(&l))
	l.AddBack(9, 1, 8)
	assert.Equal(t, []Entry{{TS: 10, N: 6}}, entries(&l), "a late event joins the newest entry")
	l.AddBack(11, 4, 8)
	assert.Equal(t, []Entry{{TS: 10, N: 6}, {TS: 11, N: 4}}, entries(&l))
	assert.Equal(t, Entry{TS: 10, N: 6}, l.Front())
	assert.Equal(t, Entry{TS: 11, N: 4}, l.Back())
	assert.Equal(t, 2, l.Cap())
}

// TestShrinkWhenMostlyEmpty: popping halves the buffer whenever it is at
// most a quarter full, down to minCap, so it never holds more than 4 slots
// per entry.
func TestShrinkWhenMostlyEmpty(t *testing.T) {
	t.Parallel()
	var l Log
	for i := int64(1); i <= 64; i++ {
		l.AddBack(i, 1, 1000)
	}
	require.Equal(t, 64, l.Cap())
	wantCap := func(n int) int {
		switch {
		case n >= 17:
			return 64
		case n >= 9:
			return 32
		case n >= 5:
			return 16
		case n >= 3:
			return 8
		case n == 2:
			return 4
		case n == 1:
			return 2
		}
		return 1
	}
	for n := 63; n >= 0; n-- {
		l.PopFront()
		require.Equal(t, n, l.Len())
		assert.Equalf(t, wantCap(n), l.Cap(), "Cap with %d entries left", n)
		assert.Equalf(t, seq(int64(65-n), 64), entries(&l), "entries with %d left", n)
	}
	// Empty again, it takes new entries from the start of its buffer.
	l.AddBack(100, 1, 1000)
	assert.Equal(t, []Entry{{TS: 100, N: 1}}, entries(&l))
}

// TestOrderAcrossWrapAround: entries stay oldest first when the ring wraps
// and when it grows or shrinks while wrapped.
func TestOrderAcrossWrapAround(t *testing.T) {
	t.Parallel()
	var l Log
	for i := int64(1); i <= 8; i++ {
		l.AddBack(i, 1, 100)
	}
	require.Equal(t, 8, l.Cap())
	for range 3 {
		l.PopFront()
	}
	require.Equal(t, 8, l.Cap(), "5 of 8 is not mostly empty")
	for i := int64(9); i <= 11; i++ {
		l.AddBack(i, 1, 100)
	}
	require.Equal(t, 8, l.Cap(), "the freed slots are reused")
	assert.Equal(t, seq(4, 11), entries(&l), "wrapped")
	assert.Equal(t, Entry{TS: 4, N: 1}, l.Front())
	assert.Equal(t, Entry{TS: 11, N: 1}, l.Back())

	l.AddBack(12, 1, 100)
	assert.Equal(t, 16, l.Cap())
	assert.Equal(t, seq(4, 12), entries(&l), "grown while wrapped")

	for range 4 {
		l.PopFront()
	}
	assert.Equal(t, 16, l.Cap(), "5 of 16 is more than a quarter")
	l.PopFront()
	assert.Equal(t, 8, l.Cap())
	assert.Equal(t, seq(9, 12), entries(&l), "shrunk")
	for i := int64(13); i <= 16; i++ {
		l.AddBack(i, 1, 100)
	}
	l.PopFront()
	l.AddBack(17, 1, 100)
	assert.Equal(t, 8, l.Cap())
	assert.Equal(t, seq(10, 17), entries(&l), "wrapped after shrinking")
}

// TestTrimBack removes events from the newest entry, and the entry once
// empty.
func TestTrimBack(t *testing.T) {
	t.Parallel()
	var l Log
	l.AddBack(1, 2, 8)
	l.AddBack(2, 3, 8)
	l.TrimBack(2)
	assert.Equal(t, []Entry{{TS: 1, N: 2}, {TS: 2, N: 1}}, entries(&l))
	l.TrimBack(1)
	assert.Equal(t, []Entry{{TS: 1, N: 2}}, entries(&l))
	l.TrimBack(2)
	assert.Equal(t, 0, l.Len())
	l.AddBack(5, 1, 8)
	assert.Equal(t, []Entry{{TS: 5, N: 1}}, entries(&l))
}

// TestAgainstSliceModel runs random operations on a Log and on a plain
// slice and compares them after each, with the memory invariants: the
// buffer holds every entry, never outgrows max(maxEntries, the most
// entries ever held), and a pop that leaves it at most a quarter full
// shrinks it (unless at its minimum).
func TestAgainstSliceModel(t *testing.T) {
	t.Parallel()
	for _, maxEntries := range []int{1, 2, 3, 5, 8, 13, 64} {
		rng := rand.New(rand.NewPCG(uint64(maxEntries), 42))
		var l Log
		var model []Entry
		var ts int64
		peak := 0
		for op := range 5000 {
			// Alternate phases of growth and decline so that the buffer
			// grows and shrinks through several sizes.
			addBelow := 7
			if op/500%2 == 1 {
				addBelow = 3
			}
			switch r := rng.IntN(10); {
			case r < addBelow || len(model) == 0:
				ts += int64(rng.IntN(3)) // 0: merges into the newest entry
				n := int64(1 + rng.IntN(3))
				l.AddBack(ts, n, maxEntries)
				if k := len(model); k > 0 && ts <= model[k-1].TS {
					model[k-1].N += n
				} else {
					model = append(model, Entry{TS: ts, N: n})
				}
			case r < 9:
				prevCap := l.Cap()
				l.PopFront()
				model = model[1:]
				shrink := prevCap > minCap && len(model) <= prevCap/4
				if shrink && l.Cap() >= prevCap || !shrink && l.Cap() != prevCap {
					t.Fatalf("maxEntries %d op %d: PopFront left %d entries, Cap %d -> %d", maxEntries, op, len(model), prevCap, l.Cap())
				}
			default:
				back := model[len(model)-1]
				n := 1 + rng.Int64N(back.N)
				l.TrimBack(n)
				if back.N == n {
					model = model[:len(model)-1]
				} else {
					model[len(model)-1].N -= n
				}
			}
			peak = max(peak, len(model))
			// Plain comparisons in the hot loop: testify is slow under -race.
			if l.Len() != len(model) || l.Cap() < l.Len() || l.Cap() > max(maxEntries, peak) {
				t.Fatalf("maxEntries %d op %d: Len %d Cap %d, model holds %d, peak %d", maxEntries, op, l.Len(), l.Cap(), len(model), peak)
			}
			if len(model) > 0 && (l.Front() != model[0] || l.Back() != model[len(model)-1]) {
				t.Fatalf("maxEntries %d op %d: Front %v Back %v, model %v .. %v", maxEntries, op, l.Front(), l.Back(), model[0], model[len(model)-1])
			}
			if op%97 == 0 || len(model) < 4 {
				require.Equalf(t, append([]Entry(nil), model...), entries(&l), "maxEntries %d op %d", maxEntries, op)
			}
		}
	}
}

// TestPooledBuffersReused: a log that drains and grows back between 64 and
// 1024 entries, the sizes the pools hold, reuses the buffers it gave up
// instead of allocating, and a reused buffer's stale slots never show.
func TestPooledBuffersReused(t *testing.T) {
	var l Log
	var ts int64
	cycle := func() {
		for l.Len() < 1024 {
			ts++
			l.AddBack(ts, ts%7+1, 1<<20)
		}
		for l.Len() > 64 {
			l.PopFront()
		}
	}
	// The 64 entries left: the newest ts.
	left := func() []Entry {
		var want []Entry
		for i := ts - 63; i <= ts; i++ {
			want = append(want, Entry{TS: i, N: i%7 + 1})
		}
		return want
	}
	cycle()
	require.Equal(t, 128, l.Cap())
	require.Equal(t, left(), entries(&l))
	// Another log takes a stale buffer from the pools and still holds
	// exactly its own entries.
	var other Log
	for i := int64(1); i <= 200; i++ {
		other.AddBack(1000*i, 1, 1<<20)
	}
	require.Equal(t, 256, other.Cap())
	for i, e := range entries(&other) {
		require.Equalf(t, Entry{TS: 1000 * int64(i+1), N: 1}, e, "entry %d of a log on pooled buffers", i)
	}
	if raceEnabled {
		t.Skip("sync.Pool drops items at random under the race detector")
	}
	allocs := testing.AllocsPerRun(20, cycle)
	require.Equal(t, left(), entries(&l))
	// Without the pools: 3 allocations a cycle (256, 512, 1024 entries on
	// the way up). A garbage collection in between empties the pools once.
	assert.Less(t, allocs, 0.5, "allocations per drain and regrowth")
}
