package ratelimit

import (
	"context"
	"errors"

	"github.com/rlkit/ratelimit/internal/errs"
)

// AllowAll charges n events (or a dimension's own [Dimension.N]) to every
// dimension, all or nothing: if any
// dimension denies, none is charged. It returns the most restrictive
// Decision and which dimension it came from; MultiDecision.Allowed reports
// whether the request was admitted. Every dimension is consulted, so a
// denied request reports the longest RetryAfter of all the dimensions that
// deny it: waiting that long (with no other traffic) lets it through.
//
// A dimension whose limiter picks another limiter per key, as a [*Tiered]
// does ([Tiered.Tier]), is resolved once, to the limiter of the key's tier:
// the request is charged, and refunded, there, with one call of the tier
// function.
//
// When every (resolved) dimension's limiter is a [*Keyed], AllowAll is
// exact and atomic: it locks the shards involved (in a fixed order, so
// concurrent calls cannot deadlock), checks every dimension, and charges
// them only if all admit. With other limiters (such as Redis ones) it
// charges the dimensions in order; once one denies, it asks each later
// dimension what it would decide with Peek, and then refunds with RefundN
// every dimension it charged. A concurrent request may then briefly see the
// refunded quota as used. Refunds do not depend on ctx: a caller that goes
// away does not leave a denied request charged.
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
	if i, err := checkDims("ratelimit.AllowAll", dims); err != nil {
		return MultiDecision{Decision: Decision{RetryAfter: RetryNever}, Index: i}, err
	}
	var buf [8]Dimension
	dims, err := resolveAll(ctx, dims, &buf)
	if err != nil {
		return MultiDecision{Decision: Decision{RetryAfter: RetryNever}, Index: len(dims)}, errs.AtDimension(len(dims), false, err)
	}
	if allAtomic(dims) {
		return allowAllAtomic(ctx, n, dims)
	}
	return allowAllRefund(ctx, n, dims)
}

// atomicAllower is the optional interface through which a home offers
// AllowAll its atomic path, allowAllAtomic: when every dimension's limiter
// offers it, AllowAll decides them all at once, under one lock order. The
// in-memory [*Keyed] offers it (keyed_allowall.go). The path is called
// directly, not through the interface: a slice passed to an interface
// method escapes to the heap, and AllowAll allocates nothing.
//
// atomicKeyed returns the *Keyed the path decides in. A limiter offers the
// path only when that is the limiter itself: a user's type that embeds a
// *Keyed has the method too, promoted, but decides through its own AllowN
// (it may rewrite keys), so AllowAll goes through that.
type atomicAllower interface {
	KeyedLimiter
	atomicKeyed() *Keyed
}

// allAtomic reports whether every dimension's limiter offers the atomic
// path (see atomicAllower).
func allAtomic(dims []Dimension) bool {
	for _, d := range dims {
		a, ok := d.Limiter.(atomicAllower)
		if !ok || KeyedLimiter(a.atomicKeyed()) != d.Limiter {
			return false
		}
	}
	return true
}

// resolveAll resolves every dimension's limiter that is a tierer to its
// tier's limiter for the key (see resolve), in buf when it is large
// enough; without a tierer among them it returns dims as they are. On an
// unknown tier it returns the dimensions resolved before the failing one,
// and the error.
func resolveAll(ctx context.Context, dims []Dimension, buf *[8]Dimension) ([]Dimension, error) {
	first := -1
	for i, d := range dims {
		if _, ok := asTierer(d.Limiter); ok {
			first = i
			break
		}
	}
	if first < 0 {
		return dims, nil
	}
	out := append(bufFor(buf, len(dims))[:0], dims[:first]...)
	for _, d := range dims[first:] {
		l, err := resolve(ctx, d.Key, d.Limiter)
		if err != nil {
			return out, err
		}
		d.Limiter = l
		out = append(out, d)
	}
	return out, nil
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
			dec, err = d.Limiter.Peek(ctx, d.Key, d.cost(n))
		} else {
			dec, err = d.Limiter.AllowN(ctx, d.Key, d.cost(n))
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
				joined = errors.Join(joined, errs.AtDimension(j, true, dims[j].Limiter.RefundN(rctx, dims[j].Key, dims[j].cost(n))))
			}
		}
	}
	best := mostRestrictive(ds)
	return MultiDecision{Decision: ds[best], Index: best}, joined
}
