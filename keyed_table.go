package ratelimit

import "encoding/binary"

// table is the hash table of one keyed shard: string keys to states S.
//
// It is built for a lookup that misses the CPU caches, as one among a
// million keys usually does: the key's bytes (up to inlineKey of them), 32
// bits of its hash and its state live together in one slot of an
// open-addressing array, so deciding for a key held in its home slot reads
// one slot, 48 bytes for most states, and follows no pointer. A Go map, or
// an index of positions into a separate array of entries holding string
// headers, takes two or three dependent cache misses for the same lookup.
// Keys longer than inlineKey bytes are kept out of line, in a side slice,
// at the cost of those extra misses.
//
// Probing is linear, so the slots after the home slot are the adjacent
// memory the hardware fetches next. Deletion shifts later slots back
// (backward-shift deletion), so there are no tombstones. The table grows by
// 1.25x when an insert would lift its load above 4/5, so its load stays
// between about 0.64 and 0.8 whatever the number of keys: Go maps size
// themselves in powers of two and can sit at under half load. The bytes per
// key measured are in benchmarks/README.md.
//
// A table is not safe for concurrent use; its shard's lock guards it.
type table[S any] struct {
	slots  []slot[S]
	n      int      // keys held
	long   []string // keys longer than inlineKey; "" marks a free entry
	free   []uint32 // indexes of free entries of long
	cursor int      // next slot the idle sweep looks at
}

// inlineKey is the longest key a slot holds in place: with the hash and
// the meta byte, the key part of a slot is 32 bytes.
const inlineKey = 27

// slot is one position of the table.
type slot[S any] struct {
	hash uint32 // low 32 bits of the key's hash
	// meta is 0 for an empty slot, 1+len(key) for a key held in kb, and
	// longMeta for a key held in table.long at the index in kb[:4].
	meta uint8
	kb   [inlineKey]byte
	st   S
}

const longMeta = 0xff

// longIndex returns the index in table.long of the key of s, whose meta
// is longMeta.
func (s *slot[S]) longIndex() uint32 { return binary.LittleEndian.Uint32(s.kb[:4]) }

// setLongIndex records that the key of s is at index i of table.long.
func (s *slot[S]) setLongIndex(i uint32) { binary.LittleEndian.PutUint32(s.kb[:4], i) }

const (
	tableMinSlots = 8
	// The table grows by growNum/growDen when an insert would lift its load
	// above maxLoadNum/maxLoadDen, and shrinks when deletes drop it below
	// 1/minLoadDen.
	maxLoadNum, maxLoadDen = 4, 5
	growNum, growDen       = 5, 4
	minLoadDen             = 5
)

// len returns the number of keys.
func (t *table[S]) len() int { return t.n }

// home returns the slot a 32-bit hash starts probing at: the hash scaled to
// the table's size, which needs no power-of-two size.
func (t *table[S]) home(h uint32) int {
	return int(uint64(h) * uint64(len(t.slots)) >> 32)
}

// metaOf returns the meta byte of a slot holding key.
func metaOf(key string) uint8 {
	if len(key) > inlineKey {
		return longMeta
	}
	return uint8(len(key)) + 1
}

// find returns the slot index of key, whose hash is h, or -1.
func (t *table[S]) find(key string, h uint32) int {
	n := len(t.slots)
	if n == 0 {
		return -1
	}
	m := metaOf(key)
	for i := t.home(h); ; {
		s := &t.slots[i]
		if s.meta == 0 {
			return -1
		}
		if s.hash == h && s.meta == m {
			if m != longMeta {
				if string(s.kb[:len(key)]) == key {
					return i
				}
			} else if t.long[s.longIndex()] == key {
				return i
			}
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
		return &t.slots[i].st
	}
	return nil
}

// state returns the state in slot i, which must hold a key. The pointer is
// valid until the table is next changed.
func (t *table[S]) state(i int) *S { return &t.slots[i].st }

// insert adds key, which must be absent, with a zero state, and returns the
// state. The table copies key: the caller's string is not kept.
func (t *table[S]) insert(key string, h uint32) *S {
	if (t.n+1)*maxLoadDen > len(t.slots)*maxLoadNum {
		t.resize(max(tableMinSlots, len(t.slots)*growNum/growDen))
	}
	s := slot[S]{hash: h, meta: metaOf(key)}
	if s.meta == longMeta {
		s.setLongIndex(t.keepLong(key))
	} else {
		copy(s.kb[:], key)
	}
	t.n++
	return &t.slots[t.place(s)].st
}

// keepLong stores a copy of a long key in t.long and returns its index.
func (t *table[S]) keepLong(key string) uint32 {
	key = string([]byte(key)) // a copy: the caller's string is not kept
	if n := len(t.free); n > 0 {
		i := t.free[n-1]
		t.free = t.free[:n-1]
		t.long[i] = key
		return i
	}
	t.long = append(t.long, key)
	return uint32(len(t.long) - 1)
}

// place puts s in the first empty slot from its home and returns its index.
func (t *table[S]) place(s slot[S]) int {
	n := len(t.slots)
	i := t.home(s.hash)
	for t.slots[i].meta != 0 {
		if i++; i == n {
			i = 0
		}
	}
	t.slots[i] = s
	return i
}

// resize rebuilds the table with n slots. It also compacts the long keys,
// so that a shrinking table does not keep the room of long keys deleted.
func (t *table[S]) resize(n int) {
	old := t.slots
	t.slots = make([]slot[S], n)
	var long []string
	if len(t.free) > 0 {
		long = make([]string, 0, len(t.long)-len(t.free))
	}
	for i := range old {
		s := &old[i]
		if s.meta == 0 {
			continue
		}
		if long != nil && s.meta == longMeta {
			long = append(long, t.long[s.longIndex()])
			s.setLongIndex(uint32(len(long) - 1))
		}
		t.place(*s)
	}
	if long != nil {
		t.long, t.free = long, nil
	}
	t.cursor = 0
}

// delete removes the key in slot i, which must hold one. Later slots may
// move back into i (backward-shift deletion), so a sweep going up the
// table looks at slot i again.
func (t *table[S]) delete(i int) {
	if s := &t.slots[i]; s.meta == longMeta {
		j := s.longIndex()
		t.long[j] = ""
		t.free = append(t.free, j)
		if len(t.free) == len(t.long) {
			t.long, t.free = nil, nil
		}
	}
	t.deleteSlot(i)
	t.n--
	if len(t.slots) > tableMinSlots && t.n*minLoadDen < len(t.slots) {
		t.resize(max(tableMinSlots, t.n*2))
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
		s := &t.slots[j]
		if s.meta == 0 {
			break
		}
		// s may move into the hole at i only if its home is not in (i, j].
		k := t.home(s.hash)
		if (i < j && (k <= i || k > j)) || (i > j && k <= i && k > j) {
			t.slots[i] = *s
			i = j
		}
	}
	t.slots[i] = slot[S]{}
}
