package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rlkit/ratelimit/internal/errs"
	"github.com/rlkit/ratelimit/internal/settle"
	"github.com/rlkit/ratelimit/internal/typednil"
)

// ErrReservationSettled is returned by [Reservation.Settle] when there is
// nothing left to settle: the reservation was denied, was settled already,
// or has expired (and so was settled at its estimate).
var ErrReservationSettled = errors.New("ratelimit: reservation already settled")

// maxExpiry bounds a reservation's expiry, as Block bounds a block.
const maxExpiry = 100 * 365 * 24 * time.Hour

func init() {
	settle.Done = ErrReservationSettled
	settle.Make = func(h settle.Holder, n int, d any) any {
		return &Reservation{MultiDecision: MultiDecision{Decision: d.(Decision)}, first: part{h: h, n: int64(n)}, held: 1}
	}
}

// Reservation is an estimated cost held for work whose real cost is known
// only once it ran: an LLM completion's tokens, the rows a query scanned,
// whether a login attempt failed. [ReserveAll] (or a [Reserver]'s
// ReserveN) charges the estimate at once, as AllowN would; when the work
// is done, [Reservation.Settle] charges the actual cost instead: less
// gives the difference back, more charges the overrun.
//
// A reservation not settled within its expiry is settled at its estimate:
// the estimate stays charged, and a later Settle changes nothing.
//
// A Reservation is safe for concurrent use; whichever call settles it
// first settles it, once.
type Reservation struct {
	// MultiDecision is what the reservation decided: Allowed reports
	// whether the estimate was charged and is held. A denied reservation
	// holds nothing; its RetryAfter says when the estimate would fit.
	MultiDecision

	mu    sync.Mutex
	held  int    // parts held: 0 when denied, or once settled
	first part   // the first dimension's part
	more  []part // the others', for several dimensions
}

// part is what a reservation holds in one dimension: n events through h.
// fixed is set for a dimension charged its own Dimension.N, which is
// known in advance and settles unchanged.
type part struct {
	h     settle.Holder
	n     int64
	fixed bool
}

// deniedReservation returns a Reservation that holds nothing, with d.
func deniedReservation(d MultiDecision) *Reservation {
	return &Reservation{MultiDecision: d}
}

// Settle charges the actual cost of the work in place of the estimate, in
// every dimension charged the estimate (a dimension with its own
// [Dimension.N] keeps it): actual below the estimate gives the difference
// back, actual above it charges the overrun. How each algorithm takes
// either is in docs/reservations.md: a bucket goes into debt, so that
// later requests wait the overrun out; a window gives back only while the
// reservation's window still counts, and charges an overrun to the window
// in force.
//
// Settle is not a decision: it reports nothing to an [Observer], and it
// does not depend on ctx being live (a caller that went away still pays
// an overrun); ctx passes its values on. It returns an error wrapping
// [ErrReservationSettled] when the reservation was denied, settled
// already, or has expired in every dimension, and one wrapping
// [ErrInvalidN] when actual is negative; either way it changes nothing.
func (r *Reservation) Settle(ctx context.Context, actual int) error {
	if actual < 0 {
		return fmt.Errorf("%w: Reservation.Settle actual must be >= 0, got %d", ErrInvalidN, actual)
	}
	if ctx == nil {
		return errNilContext
	}
	r.mu.Lock()
	held := r.held
	r.held = 0
	r.mu.Unlock()
	if held == 0 {
		return ErrReservationSettled
	}
	ctx = context.WithoutCancel(ctx)
	parts := append(make([]part, 0, 1+len(r.more)), r.first)
	parts = append(parts, r.more...)
	var joined error
	done := 0
	for i, p := range parts {
		a := int64(actual)
		if p.fixed {
			a = p.n
		}
		err := p.h.Settle(ctx, a)
		if errors.Is(err, ErrReservationSettled) {
			done++
			continue
		}
		if len(parts) > 1 {
			err = errs.AtDimension(i, true, err)
		}
		joined = errors.Join(joined, err)
	}
	if done == len(parts) {
		return ErrReservationSettled
	}
	return joined
}

// ReserveAll reserves an estimated n events in every dimension, all or
// nothing, as [AllowAll] charges them: for instance 1 request of a
// requests-per-minute limit and 2,000 estimated tokens of a
// tokens-per-minute limit for one API key (give the request dimension its
// own N of 1). If any dimension denies, nothing is held and the
// Reservation's MultiDecision says which denied and when to retry. If all
// admit, the estimate is held until [Reservation.Settle], or until expiry
// (positive, at most 100 years) has passed, when it is settled at its
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
	for i, d := range dims {
		if typednil.Is(d.Limiter) {
			invalid.Index = i
			return deniedReservation(invalid), errs.AtDimension(i, false, configError("ratelimit.ReserveAll dims[%d].Limiter (%q) must not be nil, got %T", i, d.Name, d.Limiter))
		}
		if d.N < 0 {
			invalid.Index = i
			return deniedReservation(invalid), errs.AtDimension(i, false, configError("ratelimit.ReserveAll dims[%d].N (%q) must not be negative, got %d", i, d.Name, d.N))
		}
	}
	if len(dims) == 0 {
		return deniedReservation(MultiDecision{Decision: Decision{Allowed: true}, Index: -1}), nil
	}
	var buf [8]Dimension
	dims, err := resolveAll(ctx, dims, &buf)
	if err != nil {
		invalid.Index = len(dims)
		return deniedReservation(invalid), errs.AtDimension(len(dims), false, err)
	}
	rs := make([]Reserver, len(dims))
	for i, d := range dims {
		r, ok := d.Limiter.(Reserver)
		if !ok {
			invalid.Index = i
			return deniedReservation(invalid), errs.AtDimension(i, false, configError("ratelimit.ReserveAll dims[%d].Limiter (%q) is a %T, which cannot reserve (it is not a ratelimit.Reserver)", i, d.Name, d.Limiter))
		}
		rs[i] = r
	}
	if len(dims) == 1 {
		r, err := rs[0].ReserveN(ctx, dims[0].Key, dims[0].cost(n), expiry)
		if r.held == 1 {
			r.first.fixed = dims[0].N != 0
		}
		return r, err
	}
	return reserveEach(ctx, n, expiry, dims, rs)
}

// cost is the events d is charged when the call charges n.
func (d Dimension) cost(n int) int {
	if d.N != 0 {
		return d.N
	}
	return n
}

// reserveEach is ReserveAll over several dimensions: reserve in order until
// one denies, then learn the decisions of the rest with Peek, and settle
// at 0 everything reserved.
func reserveEach(ctx context.Context, n int, expiry time.Duration, dims []Dimension, rs []Reserver) (*Reservation, error) {
	ds := make([]Decision, len(dims))
	held := make([]*Reservation, len(dims))
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
		r, err := rs[i].ReserveN(ctx, d.Key, c, expiry)
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
	out := &Reservation{MultiDecision: md}
	for i, r := range held {
		for _, p := range r.parts() {
			p.fixed = dims[i].N != 0
			if out.held == 0 {
				out.first = p
			} else {
				out.more = append(out.more, p)
			}
			out.held++
		}
	}
	return out, joined
}

// parts returns what r holds, for ReserveAll to take over.
func (r *Reservation) parts() []part {
	if r.held == 0 {
		return nil
	}
	return append([]part{r.first}, r.more...)
}

// checkExpiry validates a reservation's expiry for the function named fn.
func checkExpiry(fn string, expiry time.Duration) error {
	if expiry <= 0 || expiry > maxExpiry {
		return configError("%s expiry must be positive and at most 100 years, got %v", fn, expiry)
	}
	return nil
}
