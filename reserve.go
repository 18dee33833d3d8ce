package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rlkit/ratelimit/internal/errs"
	"github.com/rlkit/ratelimit/internal/settle"
)

// init lets the homes outside this package (redislimit) hand out
// Reservations, and tells them the error of a reservation settled.
func init() {
	settle.Done = ErrReservationSettled
	settle.Make = func(h settle.Holder, n int, d any) any {
		r := &Reservation{}
		r.holdOne(d.(Decision), h, n)
		return r
	}
}

// ReserveAll reserves an estimated n events in every dimension, all or
// nothing, as [AllowAll] charges them: for instance 1 request of a
// requests-per-minute limit and 2,000 estimated tokens of a
// tokens-per-minute limit for one API key (give the request dimension its
// own N of 1). If any dimension denies, nothing is held and the
// Reservation's MultiDecision says which denied and when to retry. If all
// admit, the estimate is held until [Reservation.Settle], or until expiry
// (positive, at most 24 hours) has passed, when it is settled at its
// estimate.
//
// Every (resolved) dimension's limiter must be a [Reserver]: a [*Keyed]
// (under any policy but the sliding log), a [*Tiered] whose tiers are, or
// package redislimit's Limiter. Dimensions are reserved in order; once one
// denies, the later ones are asked with Peek what they would decide, and
// those already reserved are settled at 0, which gives back exactly what
// they were charged. A concurrent request may briefly see that quota as
// used.
//
// Errors are as for AllowAll; a dimension whose limiter cannot reserve, an
// expiry out of range, or a negative [Dimension.N] is an error wrapping
// [ErrInvalidConfig] that names it, and nothing is charged. The returned
// Reservation is never nil.
func ReserveAll(ctx context.Context, n int, expiry time.Duration, dims ...Dimension) (*Reservation, error) {
	invalid := MultiDecision{Decision: Decision{RetryAfter: RetryNever}}
	if ctx == nil {
		return deniedReservation(invalid), errNilContext
	}
	if err := checkExpiry("ratelimit.ReserveAll", expiry); err != nil {
		return deniedReservation(invalid), err
	}
	if i, err := checkDims("ratelimit.ReserveAll", dims); err != nil {
		invalid.Index = i
		return deniedReservation(invalid), err
	}
	if len(dims) == 0 {
		return deniedReservation(MultiDecision{Decision: Decision{Allowed: true}, Index: -1}), nil
	}
	if len(dims) > maxReserveDims {
		return deniedReservation(invalid), configError("ratelimit.ReserveAll takes at most %d dimensions, got %d", maxReserveDims, len(dims))
	}
	var buf [8]Dimension
	dims, err := resolveAll(ctx, dims, &buf)
	if err != nil {
		invalid.Index = len(dims)
		return deniedReservation(invalid), errs.AtDimension(len(dims), false, err)
	}
	for i, d := range dims {
		if err := canReserve(d.Limiter); err != nil {
			invalid.Index = i
			return deniedReservation(invalid), errs.AtDimension(i, false, configError("ratelimit.ReserveAll dims[%d].Limiter (%q): %v", i, d.Name, err))
		}
	}
	if len(dims) == 1 {
		r, err := reserveIn(ctx, dims[0], n, expiry)
		if r.Allowed {
			r.markFixed(dims[0].N != 0)
		}
		return r, err
	}
	return reserveEach(ctx, n, expiry, dims)
}

// reserveEach is ReserveAll over several dimensions: reserve in order until
// one denies, then learn the decisions of the rest with Peek, and settle
// at 0 everything reserved.
func reserveEach(ctx context.Context, n int, expiry time.Duration, dims []Dimension) (*Reservation, error) {
	var dsBuf [8]Decision
	var heldBuf [8]*Reservation
	ds, held := bufFor(&dsBuf, len(dims)), bufFor(&heldBuf, len(dims))
	var joined error
	denied := false
	for i, d := range dims {
		c := d.cost(n)
		if denied {
			dec, err := d.Limiter.Peek(ctx, d.Key, c)
			ds[i] = dec
			joined = errors.Join(joined, errs.AtDimension(i, dec.Allowed, err))
			continue
		}
		r, err := reserveIn(ctx, d, n, expiry)
		ds[i] = r.Decision
		joined = errors.Join(joined, errs.AtDimension(i, r.Allowed, err))
		if !r.Allowed {
			denied = true
			continue
		}
		held[i] = r
	}
	best := mostRestrictive(ds)
	md := MultiDecision{Decision: ds[best], Index: best}
	if denied {
		for j := len(held) - 1; j >= 0; j-- {
			if held[j] != nil {
				if err := held[j].Settle(ctx, 0); err != nil && !errors.Is(err, ErrReservationSettled) {
					joined = errors.Join(joined, errs.AtDimension(j, true, err))
				}
			}
		}
		return deniedReservation(md), joined
	}
	// Take over what each dimension holds: one part each, or none for a
	// home that admitted holding nothing.
	out := &Reservation{MultiDecision: md, more: make([]part, 0, len(held)-1)}
	for i, r := range held {
		if r.nparts == 0 {
			continue
		}
		r.markFixed(dims[i].N != 0)
		for j := range r.nparts {
			p := *r.partAt(j)
			if out.nparts == 0 {
				out.first = p
			} else {
				out.more = append(out.more, p)
			}
			out.nparts++
		}
	}
	return out, joined
}

// reserveIn reserves d's cost (n, or its own N) in d's limiter, a
// Reserver (see canReserve). A Reserver that returns no Reservation is
// taken to have denied the request.
func reserveIn(ctx context.Context, d Dimension, n int, expiry time.Duration) (*Reservation, error) {
	r, err := d.Limiter.(Reserver).ReserveN(ctx, d.Key, d.cost(n), expiry)
	if r == nil {
		if err == nil {
			err = fmt.Errorf("ratelimit: %T.ReserveN returned no Reservation", d.Limiter)
		}
		r = deniedReservation(MultiDecision{Decision: Decision{RetryAfter: RetryNever}})
	}
	return r, err
}

// markFixed marks every part of r as of a dimension with its own N, which
// settles unchanged, when fixed is set.
func (r *Reservation) markFixed(fixed bool) {
	for i := range r.nparts {
		r.partAt(i).fixed = r.partAt(i).fixed || fixed
	}
}

// settleChecker is the optional interface through which a home says, before
// anything is reserved, that it cannot reserve (the in-memory Keyed under
// the sliding log), so that ReserveAll charges nothing for a request it
// must refuse. It returns the home it stands for, as atomicAllower does.
type settleChecker interface {
	canSettle() (KeyedLimiter, error)
}

// canReserve reports why l cannot reserve, or nil. The home's own check
// (settleChecker) is asked only when it stands for l itself: a user's type
// that embeds a *Keyed reserves through its own ReserveN, or the promoted
// one (see Keyed.ReserveN).
func canReserve(l KeyedLimiter) error {
	if _, ok := l.(Reserver); !ok {
		return fmt.Errorf("a %T cannot reserve (it is not a ratelimit.Reserver)", l)
	}
	if c, ok := l.(settleChecker); ok {
		if home, err := c.canSettle(); home == l {
			return err
		}
	}
	return nil
}
