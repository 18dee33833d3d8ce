package benchkeys

import "testing"

// TestKeys checks that the MaxN keys are distinct, within MinLen..MaxLen,
// spread over every length, and that Key and Buf.Lookup agree.
func TestKeys(t *testing.T) {
	seen := make(map[string]uint32, MaxN)
	var byLen [MaxLen + 1]int
	var buf Buf
	for i := range uint32(MaxN) {
		k := string(buf.Key(i))
		if j, dup := seen[k]; dup {
			t.Fatalf("keys %d and %d are both %q", j, i, k)
		}
		seen[k] = i
		if len(k) < MinLen || len(k) > MaxLen {
			t.Fatalf("key %d %q has %d bytes, want %d to %d", i, k, len(k), MinLen, MaxLen)
		}
		byLen[len(k)]++
	}
	for l := MinLen; l <= MaxLen; l++ {
		// Eleven lengths: each should hold about 1/11 of the keys.
		if n := byLen[l]; n < MaxN/11*9/10 || n > MaxN/11*11/10 {
			t.Errorf("%d keys of %d bytes, want about %d", n, l, MaxN/11)
		}
	}
	for _, i := range []uint32{0, 1, 4711, MaxN - 1} {
		if got, want := Key(i), buf.Lookup(i); got != want {
			t.Errorf("Key(%d) = %q, Buf.Lookup gives %q", i, got, want)
		}
	}
	if got := Key(4711); got[len(got)-6:] != "004711" {
		t.Errorf("Key(4711) = %q, want it to end in 004711", got)
	}
}

// TestShuffled checks that Shuffled returns a permutation, not the identity,
// and the same one for the same seed.
func TestShuffled(t *testing.T) {
	const n = 10_000
	p, q := Shuffled(n, 1), Shuffled(n, 1)
	seen := make([]bool, n)
	fixed := 0
	for i, v := range p {
		if v >= n || seen[v] {
			t.Fatalf("index %d: %d repeated or out of range", i, v)
		}
		seen[v] = true
		if v == uint32(i) {
			fixed++
		}
		if q[i] != v {
			t.Fatalf("index %d: %d, then %d with the same seed", i, v, q[i])
		}
	}
	if fixed > 10 {
		t.Errorf("%d of %d indexes in place: not shuffled", fixed, n)
	}
}

// TestIndex checks that Index stays in range and reaches every value, and
// that distinct seeds give distinct sequences.
func TestIndex(t *testing.T) {
	const n = 1000
	r := NewRand(1)
	var hits [n]int
	for range 100 * n {
		i := r.Index(n)
		if i >= n {
			t.Fatalf("Index(%d) = %d", n, i)
		}
		hits[i]++
	}
	for i, h := range hits {
		if h < 50 || h > 150 {
			t.Errorf("value %d drawn %d times in %d, want about 100", i, h, 100*n)
		}
	}
	a, b := NewRand(1), NewRand(2)
	a1, b1 := a.Uint64(), b.Uint64()
	a2, b2 := a.Uint64(), b.Uint64()
	if a1 == b1 && a2 == b2 {
		t.Error("seeds 1 and 2 give the same sequence")
	}
}

// TestAppendAllocs checks that a lookup's key costs no allocation.
func TestAppendAllocs(t *testing.T) {
	var buf Buf
	r := NewRand(1)
	if n := testing.AllocsPerRun(1000, func() { sink = buf.Lookup(r.Index(MaxN)) }); n != 0 {
		t.Errorf("%v allocations per key, want 0", n)
	}
}

var sink string

// BenchmarkLookupKey measures what the random modes add to each lookup:
// choosing an index and writing its key into a scratch buffer.
func BenchmarkLookupKey(b *testing.B) {
	var buf Buf
	r := NewRand(1)
	for range b.N {
		sink = buf.Lookup(r.Index(MaxN))
	}
}
