package ratelimit

import (
	"github.com/rlkit/ratelimit/internal/errs"
	"github.com/rlkit/ratelimit/internal/typednil"
)

// Dimension is one limit that a request must pass: a keyed limiter and the
// key to charge in it, such as the per-API-key limit for "key-123" or the
// login limit for "203.0.113.7".
type Dimension struct {
	// Name identifies the limit in reports and headers, such as "per-key".
	Name string
	// Limiter is the keyed limiter that holds the limit.
	Limiter KeyedLimiter
	// Key is the key to charge.
	Key string
	// N, when not 0, is what this dimension is charged in place of the n
	// the call was given: a request limit beside a token limit charges 1
	// a request, whatever its tokens. Its cost is known in advance, so a
	// [Reservation] settles it unchanged. Negative is an error.
	N int
}

// MultiDecision is the outcome of [AllowAll]: the most restrictive of the
// dimensions' decisions, and which dimension it came from.
type MultiDecision struct {
	// Decision is the denying dimension's Decision when the request was
	// denied (the longest RetryAfter if several deny), or else the admitting
	// Decision with the fewest Remaining.
	Decision
	// Index is the position in dims of the dimension Decision came from, or
	// -1 when there were no dimensions.
	Index int
}

// checkDims checks what fn (ratelimit.AllowAll, ratelimit.ReserveAll)
// needs of every dimension before it charges any: a limiter, and an N that
// is not negative. It returns the index of the first that fails, and its
// error.
func checkDims(fn string, dims []Dimension) (int, error) {
	for i, d := range dims {
		if typednil.Is(d.Limiter) {
			return i, errs.AtDimension(i, false, configError("%s dims[%d].Limiter (%q) must not be nil, got %T", fn, i, d.Name, d.Limiter))
		}
		if d.N < 0 {
			return i, errs.AtDimension(i, false, configError("%s dims[%d].N (%q) must not be negative, got %d", fn, i, d.Name, d.N))
		}
	}
	return 0, nil
}

// cost is the events d is charged when the call charges n.
func (d Dimension) cost(n int) int {
	if d.N != 0 {
		return d.N
	}
	return n
}

// mostRestrictive picks from decisions: the longest RetryAfter among the
// denied ones, or else the fewest Remaining.
func mostRestrictive(ds []Decision) int {
	best := 0
	for i, d := range ds {
		b := ds[best]
		switch {
		case b.Allowed && !d.Allowed:
			best = i
		case !b.Allowed && !d.Allowed && d.RetryAfter > b.RetryAfter:
			best = i
		case b.Allowed && d.Allowed && d.Remaining < b.Remaining:
			best = i
		}
	}
	return best
}

// bufFor returns n elements in buf, or on the heap when n exceeds it.
// (append(buf[:0], make(...)...) allocates under -race.)
func bufFor[T any](buf *[8]T, n int) []T {
	if n <= len(buf) {
		return buf[:n]
	}
	return make([]T, n)
}
