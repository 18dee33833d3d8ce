package ratelimit

import (
	"context"
	"errors"

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

// AllowAll charges n events to every dimension, all or nothing: if any
// dimension denies, none is charged. It returns the most restrictive
// Decision and which dimension it came from; MultiDecision.Allowed reports
// whether the request was admitted. Every dimension is consulted, so a
// denied request reports the longest RetryAfter of all the dimensions that
// deny it: waiting that long (with no other traffic) lets it through.
//
// When every dimension's limiter is a [*Keyed], or a [*Tiered] whose tier
// for the key is a *Keyed, AllowAll is exact and atomic: it locks the shards
// involved (in a fixed order, so concurrent calls cannot deadlock), checks
// every dimension, and charges them only if all admit. With other limiters
// (such as Redis ones) it charges the dimensions in order; once one denies,
// it asks each later dimension what it would decide with Peek, and then
// refunds with RefundN every dimension it charged. A concurrent request
// may then briefly see the refunded quota as used. Refunds do not depend on
// ctx: a caller that goes away does not leave a denied request charged.
//
// A dimension with a nil Limiter is a configuration error: AllowAll denies
// the request with an error wrapping [ErrInvalidConfig] that names it, and
// charges nothing. An error from a limiter is returned with its Decision
// (the limiter's own failure policy decides); a dimension that is not
// admitted stops the request either way. With no dimensions the request is
// admitted.
func AllowAll(ctx context.Context, n int, dims ...Dimension) (MultiDecision, error) {
	if len(dims) == 0 {
		return MultiDecision{Decision: Decision{Allowed: true}, Index: -1}, nil
	}
	if ctx == nil {
		return MultiDecision{Decision: Decision{RetryAfter: RetryNever}, Index: 0}, errNilContext
	}
	for i, d := range dims {
		if nilLimiter(d.Limiter) {
			return MultiDecision{Decision: Decision{RetryAfter: RetryNever}, Index: i},
				errs.AtDimension(i, false, configError("ratelimit.AllowAll dims[%d].Limiter (%q) must not be nil, got %v", i, d.Name, d.Limiter))
		}
	}
	if allKeyed(dims) {
		return allowAllKeyed(ctx, n, dims)
	}
	var buf [8]Dimension
	resolved, ok, err := resolveKeyed(ctx, dims, &buf)
	if err != nil {
		return MultiDecision{Decision: Decision{RetryAfter: RetryNever}, Index: len(resolved)}, errs.AtDimension(len(resolved), false, err)
	}
	if ok {
		return allowAllKeyed(ctx, n, resolved)
	}
	// Resolved, each Tiered dimension is charged and refunded in the tier
	// it was resolved to, with one call of its tier function.
	return allowAllRefund(ctx, n, resolved)
}

// nilLimiter reports whether l is nil or a typed nil, without reflection
// for the in-memory limiters.
func nilLimiter(l KeyedLimiter) bool {
	switch v := l.(type) {
	case *Keyed:
		return v == nil
	case *Tiered:
		return v == nil
	}
	return typednil.Is(l)
}

func allKeyed(dims []Dimension) bool {
	for _, d := range dims {
		if _, ok := d.Limiter.(*Keyed); !ok {
			return false
		}
	}
	return true
}

// resolveKeyed replaces every [*Tiered] dimension by its tier's limiter for
// the key, in buf when it is large enough. ok reports whether every
// resulting limiter is a *Keyed. On an unknown tier (or a tier that is a
// nil limiter) it returns the dimensions resolved before the failing one,
// and the error.
func resolveKeyed(ctx context.Context, dims []Dimension, buf *[8]Dimension) (resolved []Dimension, ok bool, err error) {
	out := bufFor(buf, len(dims))[:0]
	ok = true
	for _, d := range dims {
		if t, isTiered := d.Limiter.(*Tiered); isTiered {
			_, l, err := t.Tier(ctx, d.Key)
			if err != nil {
				return out, false, err
			}
			d.Limiter = l
		}
		if _, isKeyed := d.Limiter.(*Keyed); !isKeyed {
			ok = false
		}
		out = append(out, d)
	}
	return out, ok, nil
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

// allowAllRefund is AllowAll over any limiters: charge in order until one
// denies, then learn the decisions of the rest with Peek, and refund
// everything charged.
func allowAllRefund(ctx context.Context, n int, dims []Dimension) (MultiDecision, error) {
	var dsBuf [8]Decision
	var chargedBuf [8]bool
	ds, charged := bufFor(&dsBuf, len(dims)), bufFor(&chargedBuf, len(dims))
	var joined error // from dimensions admitted by a failure policy
	denied := false
	for i, d := range dims {
		var (
			dec Decision
			err error
		)
		if denied {
			dec, err = d.Limiter.Peek(ctx, d.Key, n)
		} else {
			dec, err = d.Limiter.AllowN(ctx, d.Key, n)
			charged[i] = dec.Allowed
		}
		ds[i] = dec
		joined = errors.Join(joined, errs.AtDimension(i, dec.Allowed, err))
		if !dec.Allowed {
			denied = true
		}
	}
	if denied {
		// Refunds are compensation owed whatever becomes of the caller.
		rctx := context.WithoutCancel(ctx)
		for j := len(dims) - 1; j >= 0; j-- {
			if charged[j] {
				joined = errors.Join(joined, errs.AtDimension(j, true, dims[j].Limiter.RefundN(rctx, dims[j].Key, n)))
			}
		}
	}
	best := mostRestrictive(ds)
	return MultiDecision{Decision: ds[best], Index: best}, joined
}
