// Package benchkeys generates the keys of the keyed benchmarks' random-
// traffic modes (BenchmarkKeyed's 1Mrandom, in the root package and in the
// benchmarks module): up to a million distinct keys of 14 to 24 bytes that
// look like keys a server derives from a request ("tenant-42/user:004711"),
// a shuffled order to insert them in, and a cheap pseudo-random generator
// for choosing the key of each lookup.
//
// A lookup regenerates its key's bytes from the key's index into a scratch
// buffer (Buf.Lookup), instead of reading a stored []string: the bytes are
// then hot in cache and are not the string the limiter holds, as with a key
// just parsed from a request, and no million-entry slice adds a cache miss
// of its own to every lookup. Choosing an index (Rand.Index) and writing
// its key cost a few nanoseconds (BenchmarkLookupKey), the same for every
// limiter measured.
package benchkeys

import (
	"math/bits"
	"unsafe"
)

const (
	// MaxN is the number of distinct keys: Append(dst, i) needs i < MaxN.
	MaxN = 1_000_000
	// MinLen and MaxLen bound the length of a key.
	MinLen, MaxLen = 14, 24
)

// prefixes are the keys' prefixes, one of each length from 8 to 18 bytes;
// a key is a prefix and its index's six decimal digits.
var prefixes = [...]string{
	"org-4/u:",
	"org-42/u:",
	"org-42/ip:",
	"tenant-4/u:",
	"tenant-4/ip:",
	"tenant-42/ip:",
	"tenant-42/key:",
	"tenant-42/user:",
	"tenant-42/token:",
	"tenant-420/token:",
	"tenant-4200/token:",
}

// prefix is one of prefixes in a key-sized array, so that a Buf takes it
// with one fixed-size copy, and its length.
type prefix struct {
	b [MaxLen]byte
	n int
}

var prefixTable = func() (t [len(prefixes)]prefix) {
	for i, p := range prefixes {
		t[i].n = copy(t[i].b[:], p)
	}
	return t
}()

// digits2 holds "00" to "99", the two digits of each number below 100.
var digits2 = func() (d [100][2]byte) {
	for i := range d {
		d[i] = [2]byte{byte('0' + i/10), byte('0' + i%10)}
	}
	return d
}()

// A Buf is a scratch buffer holding one key, written by Key or Lookup.
type Buf struct {
	b [MaxLen]byte
}

// Key writes key i (i < MaxN) into b and returns it; the slice shares b's
// memory and changes with the next Key or Lookup. The key is a prefix of 8
// to 18 bytes chosen by a hash of i, so that lengths spread evenly over
// MinLen to MaxLen whatever range of indexes is used, followed by i in six
// decimal digits, which makes the keys of distinct indexes distinct.
func (b *Buf) Key(i uint32) []byte {
	p := &prefixTable[uint64(i*0x9E3779B9)*uint64(len(prefixTable))>>32]
	b.b = p.b
	hi, lo := i/10000%100, i%10000
	mid, lo := lo/100, lo%100
	d := (*[6]byte)(b.b[p.n : p.n+6])
	d[0], d[1] = digits2[hi][0], digits2[hi][1]
	d[2], d[3] = digits2[mid][0], digits2[mid][1]
	d[4], d[5] = digits2[lo][0], digits2[lo][1]
	return b.b[:p.n+6]
}

// Lookup writes key i into b like Key and returns it as a string over b's
// memory, without allocating. The string changes with the next Key or
// Lookup, so it may only be passed where nothing keeps it: to a limiter
// looking up a key it already holds. A limiter that stores the caller's
// string when it meets a new key (a Go map does) would be corrupted by a
// new key passed this way; callers check that the number of keys held is
// unchanged after their lookups.
func (b *Buf) Lookup(i uint32) string {
	k := b.Key(i)
	return unsafe.String(unsafe.SliceData(k), len(k))
}

// Key returns key i as a freshly allocated string.
func Key(i uint32) string {
	var b Buf
	return string(b.Key(i))
}

// Shuffled returns the indexes 0 to n-1 in a random order drawn from seed,
// the order in which to insert the keys.
func Shuffled(n int, seed uint64) []uint32 {
	idx := make([]uint32, n)
	for i := range idx {
		idx[i] = uint32(i)
	}
	r := NewRand(seed)
	for i := n - 1; i > 0; i-- { // Fisher-Yates
		j := r.Index(uint32(i + 1))
		idx[i], idx[j] = idx[j], idx[i]
	}
	return idx
}

// Rand is a small, fast pseudo-random generator (wyrand) for choosing keys:
// one per goroutine, as it is not safe for concurrent use. Its methods
// inline.
type Rand struct{ s uint64 }

// NewRand returns a generator seeded with seed; distinct seeds give
// distinct sequences.
func NewRand(seed uint64) Rand { return Rand{s: seed * 0x9E3779B97F4A7C15} }

// Uint64 returns the next pseudo-random number.
func (r *Rand) Uint64() uint64 {
	r.s += 0xa0761d6478bd642f
	hi, lo := bits.Mul64(r.s, r.s^0xe7037ed1a0b428db)
	return hi ^ lo
}

// Index returns a pseudo-random number in [0, n) for n > 0 (multiply-shift:
// the bias, below n/2^32, does not matter here).
func (r *Rand) Index(n uint32) uint32 {
	return uint32(uint64(uint32(r.Uint64())) * uint64(n) >> 32)
}
