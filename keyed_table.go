package ratelimit

// table is the hash table of one keyed shard: string keys to states S.
//
// It exists because Go maps size themselves in powers of two and split all
// their tables at about the same fill, so a map with a million keys can sit
// at under half load. table grows by 1.5x instead, so its load stays
// between about 0.53 and 0.8 whatever the number of keys, and keeps the
// state inline next to its key (the bytes per key measured both ways are in
// benchmarks/README.md).
//
// Layout: entries is a dense slice of (key, state), with no holes: a delete
// moves the last entry into the hole. slots is an open-addressing index with
// linear probing: each slot holds 32 bits of the key's hash and the entry's
// position plus one (0: empty). Deletion shifts later slots back, so there
// are no tombstones.
//
// A table is not safe for concurrent use; its shard's lock guards it.
type table[S any] struct {
	slots   []slot
	entries []entry[S]
	cursor  int // next entry the idle sweep looks at
}

type slot struct {
	hash uint32 // low 32 bits of the key's hash
	pos  uint32 // index in entries + 1; 0 marks an empty slot
}

type entry[S any] struct {
	key string
	st  S
}

const (
	tableMinSlots = 8
	// The table grows when an insert would lift its load above 4/5, and
	// shrinks when deletes drop it below 1/5.
	maxLoadNum, maxLoadDen = 4, 5
	minLoadDen             = 5
)

// len returns the number of keys.
func (t *table[S]) len() int { return len(t.entries) }

// home returns the slot a 32-bit hash starts probing at: the hash scaled to
// the table's size, which needs no power-of-two size.
func (t *table[S]) home(h uint32) int {
	return int(uint64(h) * uint64(len(t.slots)) >> 32)
}

// find returns the slot index of key, whose hash is h, or -1.
func (t *table[S]) find(key string, h uint32) int {
	n := len(t.slots)
	if n == 0 {
		return -1
	}
	for i := t.home(h); ; {
		s := t.slots[i]
		if s.pos == 0 {
			return -1
		}
		if s.hash == h && t.entries[s.pos-1].key == key {
			return i
		}
		if i++; i == n {
			i = 0
		}
	}
}

// get returns key's state, or nil if key is absent. The pointer is valid
// until the table is next changed.
func (t *table[S]) get(key string, h uint32) *S {
	if i := t.find(key, h); i >= 0 {
		return &t.entries[t.slots[i].pos-1].st
	}
	return nil
}

// insert adds key, which must be absent, with a zero state, and returns the
// state. The table keeps key itself: callers pass a string they own.
func (t *table[S]) insert(key string, h uint32) *S {
	if (len(t.entries)+1)*maxLoadDen > len(t.slots)*maxLoadNum {
		t.resize(max(tableMinSlots, len(t.slots)*3/2))
	}
	t.entries = append(t.entries, entry[S]{key: key})
	t.place(slot{hash: h, pos: uint32(len(t.entries))})
	return &t.entries[len(t.entries)-1].st
}

// place puts s in the first empty slot from its home.
func (t *table[S]) place(s slot) {
	n := len(t.slots)
	i := t.home(s.hash)
	for t.slots[i].pos != 0 {
		if i++; i == n {
			i = 0
		}
	}
	t.slots[i] = s
}

// resize rebuilds the index with n slots.
func (t *table[S]) resize(n int) {
	old := t.slots
	t.slots = make([]slot, n)
	for _, s := range old {
		if s.pos != 0 {
			t.place(s)
		}
	}
}

// deleteEntry removes the entry at index e. hash returns a key's 32-bit
// hash, needed to find the slot of the entry moved into the hole.
func (t *table[S]) deleteEntry(e int, hash func(string) uint32) {
	t.deleteSlot(t.find(t.entries[e].key, hash(t.entries[e].key)))
	last := len(t.entries) - 1
	if e != last {
		moved := t.entries[last].key
		t.slots[t.find(moved, hash(moved))].pos = uint32(e + 1)
		t.entries[e] = t.entries[last]
	}
	t.entries[last] = entry[S]{} // drop references for the GC
	t.entries = t.entries[:last]
	if len(t.slots) > tableMinSlots && len(t.entries)*minLoadDen < len(t.slots) {
		t.resize(max(tableMinSlots, len(t.entries)*2))
		if cap(t.entries) > 2*len(t.entries) {
			t.entries = append([]entry[S](nil), t.entries...)
		}
	}
}

// deleteSlot empties slot i and shifts back the slots after it that would
// otherwise become unreachable (backward-shift deletion).
func (t *table[S]) deleteSlot(i int) {
	n := len(t.slots)
	j := i
	for {
		if j++; j == n {
			j = 0
		}
		s := t.slots[j]
		if s.pos == 0 {
			break
		}
		// s may move into the hole at i only if its home is not in (i, j].
		k := t.home(s.hash)
		if (i < j && (k <= i || k > j)) || (i > j && k <= i && k > j) {
			t.slots[i] = s
			i = j
		}
	}
	t.slots[i] = slot{}
}
