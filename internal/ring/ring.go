// Package ring provides the growable ring buffer of timestamped counts that
// the sliding log keeps per limiter.
package ring

import (
	"math/bits"
	"sync"
	"unsafe"
)

// Entry is n events recorded at the same time.
type Entry struct {
	TS int64 // Unix nanoseconds
	N  int64 // events at TS, >= 1
}

// Log is a FIFO of entries in a ring buffer that grows on demand, doubling
// up to a maximum number of entries, and halves when a quarter full, so
// that a non-empty log never holds more than 4 slots per entry. The zero
// value is an empty log holding no memory. A Log is not safe for concurrent
// use. A Log may be moved (copied, the original no longer used) but not
// shared: a copy shares the buffer, which a resize of either gives to a
// pool that hands it to another Log.
type Log struct {
	buf  []Entry
	head int // index of the oldest entry
	n    int // number of entries
}

// minCap is the smallest buffer a non-empty Log holds.
const minCap = 1

// Len returns the number of entries.
func (l *Log) Len() int { return l.n }

// Cap returns the number of entries the buffer holds without growing.
func (l *Log) Cap() int { return len(l.buf) }

// At returns the i-th oldest entry, 0 <= i < Len().
func (l *Log) At(i int) Entry {
	return l.buf[l.slot(i)]
}

// slot returns the index in buf of the i-th oldest entry, 0 <= i <
// len(buf): head + i wrapped by one subtraction rather than a division
// (buffers are not always a power of two), which the sliding log's
// critical section would pay several times per decision.
func (l *Log) slot(i int) int {
	j := l.head + i
	if j >= len(l.buf) {
		j -= len(l.buf)
	}
	return j
}

// Front returns the oldest entry. The log must not be empty.
func (l *Log) Front() Entry { return l.buf[l.head] }

// Back returns the newest entry. The log must not be empty.
func (l *Log) Back() Entry { return l.At(l.n - 1) }

// PopFront removes the oldest entry. The log must not be empty. The slot
// it leaves keeps its stale contents: an Entry holds no pointer, and
// clearing it would cost a store to a line that is otherwise only read.
func (l *Log) PopFront() {
	l.head = l.slot(1)
	l.n--
	if l.n == 0 {
		l.head = 0
	}
	// Halve at a quarter full: the buffer then holds at most 4 slots per
	// entry, and a halved buffer is at most half full, so it takes a
	// quarter of the old size in pushes to grow again or an eighth in pops
	// to shrink again: amortized O(1), with no resize on every swing.
	if len(l.buf) > minCap && l.n <= len(l.buf)/4 {
		l.resize(max(len(l.buf)/2, minCap))
	}
}

// TrimBack removes n events from the newest entry, and the entry itself
// when none are left. The log must not be empty and n must be at most the
// newest entry's count.
func (l *Log) TrimBack(n int64) {
	back := &l.buf[l.slot(l.n-1)]
	back.N -= n
	if back.N > 0 {
		return
	}
	l.n--
	if l.n == 0 {
		l.head = 0
	}
}

// AddBack records n events at ts. They merge into the newest entry when it
// has the same time (or a later one: timestamps never go backwards in the
// log, so late events are kept as long as the newest). Otherwise a new entry
// is appended, growing the buffer by doubling but to no more than maxEntries
// entries unless the log already holds that many.
func (l *Log) AddBack(ts, n int64, maxEntries int) {
	if l.n > 0 {
		back := &l.buf[l.slot(l.n-1)]
		if ts <= back.TS {
			back.N += n
			return
		}
	}
	if l.n == len(l.buf) {
		c := max(2*len(l.buf), minCap)
		if c > maxEntries {
			c = max(maxEntries, l.n+1)
		}
		l.resize(c)
	}
	l.buf[l.slot(l.n)] = Entry{TS: ts, N: n}
	l.n++
}

// resize moves the entries to a new buffer of size c >= l.n, and gives
// the old one to the pool of its size.
func (l *Log) resize(c int) {
	nb := getBuf(c)
	// The entries in at most two runs: the oldest up to the end of the
	// buffer, then the wrapped ones from its start.
	if l.n > 0 {
		k := copy(nb[:l.n], l.buf[l.head:min(l.head+l.n, len(l.buf))])
		copy(nb[k:l.n], l.buf)
	}
	putBuf(l.buf)
	l.buf, l.head = nb, 0
}

// Buffers of 1<<pooledMinShift to 1<<pooledMaxShift entries (powers of
// two) that a log has outgrown or shrunk out of are kept in pools, one per
// size, for the next log that needs one, until the garbage collector
// clears them (within two cycles, as any sync.Pool). A log whose traffic
// pauses for most of a window drains, halving its buffer on the way down,
// and doubles it back as traffic resumes. With BenchmarkAllow's window of
// 100 µs on a loaded machine that happened several hundred times a second,
// each time a dozen allocations of up to 64 KB under the limiter's mutex,
// and the garbage collector's work they brought: the pools make that round
// trip allocate only its small buffers. A log holds no more memory than
// before; buffers it gave up wait in a pool instead of for the collector.
// Smaller buffers cost less to allocate than to pool; larger ones are rare.
const (
	pooledMinShift = 6  // 64 entries, 1 KB
	pooledMaxShift = 16 // 65,536 entries, 1 MB
)

// pools[i] holds *Entry, the first of a buffer of 1<<(i+pooledMinShift)
// entries: a pointer, so that Put allocates no interface box.
var pools [pooledMaxShift - pooledMinShift + 1]sync.Pool

// poolIndex returns the pool for buffers of c entries, or -1.
func poolIndex(c int) int {
	if c < 1<<pooledMinShift || c > 1<<pooledMaxShift || c&(c-1) != 0 {
		return -1
	}
	return bits.TrailingZeros(uint(c)) - pooledMinShift
}

// getBuf returns a buffer of c entries; those of a pooled buffer are
// stale, which no log reads before writing.
func getBuf(c int) []Entry {
	if i := poolIndex(c); i >= 0 {
		if p, _ := pools[i].Get().(*Entry); p != nil {
			return unsafe.Slice(p, c)
		}
	}
	return make([]Entry, c)
}

// putBuf gives buf to the pool of its size, if it has one.
func putBuf(buf []Entry) {
	if i := poolIndex(len(buf)); i >= 0 {
		pools[i].Put(&buf[0])
	}
}
