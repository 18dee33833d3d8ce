package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rlkit/ratelimit/internal/errs"
)

// ErrReservationSettled is returned by [Reservation.Settle] when there is
// nothing left to settle: the reservation was denied, was settled already,
// or has expired (and so was settled at its estimate).
var ErrReservationSettled = errors.New("ratelimit: reservation already settled")

// maxReserveDims is the most dimensions one Reservation holds.
const maxReserveDims = 64

// maxExpiry bounds a reservation's expiry: work that runs longer is not
// what a reservation is for, and a home remembers a Reset that long.
const maxExpiry = 24 * time.Hour

// Reserver is implemented by the keyed limiters that can hold an estimated
// cost and settle the actual one later ([*Keyed], [*Tiered] and package
// redislimit's Limiter): see [Reservation]. [ReserveAll] reserves in
// several at once, all or nothing.
type Reserver interface {
	KeyedLimiter
	// ReserveN charges an estimated n events to key as AllowN would, and
	// holds them as a [Reservation] to settle with the actual cost within
	// expiry. The Reservation is never nil; its Allowed reports whether
	// the estimate was charged.
	ReserveN(ctx context.Context, key string, n int, expiry time.Duration) (*Reservation, error)
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
// first settles it, once. A nil *Reservation holds nothing.
type Reservation struct {
	// MultiDecision is what the reservation decided: Allowed reports
	// whether the estimate was charged and is held. A denied reservation
	// holds nothing; its RetryAfter says when the estimate would fit.
	MultiDecision

	mu      sync.Mutex
	settled bool   // guarded by mu: every part settled
	done    uint64 // guarded by mu: the parts settled, by index
	nparts  int    // parts held, from creation on: 0 when denied
	first   part   // the first dimension's part
	more    []part // the others', for several dimensions
}

// part is what a reservation holds in one dimension: n events through h.
// fixed is set for a dimension charged its own Dimension.N, which is
// known in advance and settles unchanged.
type part struct {
	h     holder
	n     int64
	fixed bool
}

// holder is what stands behind a part: settle.Holder, the record of the
// estimate in one home. Its Settle does not depend on ctx being live.
type holder interface {
	Settle(ctx context.Context, actual int64) error
}

// holdOne makes r, new, the reservation that d admitted, holding n events
// through h: what every home hands out.
func (r *Reservation) holdOne(d Decision, h holder, n int) {
	r.Decision = d
	r.first, r.nparts = part{h: h, n: int64(n)}, 1
}

// partAt returns r's part i (0 <= i < r.nparts).
func (r *Reservation) partAt(i int) *part {
	if i == 0 {
		return &r.first
	}
	return &r.more[i-1]
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
// [ErrReservationSettled] when there is nothing left to settle: the
// reservation was denied, settled already, or has expired in every
// dimension. A negative actual is an error wrapping [ErrInvalidN] that
// changes nothing. A dimension that fails to settle (its store
// unreachable; [ErrTooManyKeys] when the overrun needs a key the key cap
// has no room for) is reported by its error and stays held: Settle may be
// called again, and settles only the dimensions still held. A dimension
// whose policy changed to the sliding log since cannot settle: it stands
// at its estimate, and Settle returns an error wrapping [ErrInvalidConfig].
func (r *Reservation) Settle(ctx context.Context, actual int) error {
	if actual < 0 {
		return fmt.Errorf("%w: Reservation.Settle actual must be >= 0, got %d", ErrInvalidN, actual)
	}
	if ctx == nil {
		return errNilContext
	}
	if r == nil {
		return ErrReservationSettled
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.settled || !r.Allowed {
		return ErrReservationSettled
	}
	var joined error
	settledNow := r.nparts == 0 // admitted holding nothing: no dimensions
	for i := range r.nparts {
		if r.done&(1<<i) != 0 {
			continue
		}
		p := r.partAt(i)
		a := int64(actual)
		if p.fixed {
			a = p.n
		}
		switch err := p.h.Settle(ctx, a); {
		case err == nil:
			settledNow = true
			r.done |= 1 << i
		case errors.Is(err, ErrReservationSettled):
			r.done |= 1 << i
		default:
			if errors.Is(err, ErrInvalidConfig) {
				// It can never settle (its key's policy is now the
				// sliding log): it stands at its estimate.
				r.done |= 1 << i
			}
			if r.nparts > 1 {
				err = errs.AtDimension(i, true, err)
			}
			joined = errors.Join(joined, err)
		}
	}
	if r.done != 1<<r.nparts-1 {
		return joined // some still held: Settle may be called again
	}
	r.settled = true
	if joined != nil {
		return joined
	}
	if !settledNow {
		return ErrReservationSettled
	}
	return nil
}

// settledBy returns ErrReservationSettled for a hold that expired, else
// nil: what a hold's Settle returns once it has nothing to change.
func settledBy(expired bool) error {
	if expired {
		return ErrReservationSettled
	}
	return nil
}

// checkExpiry validates a reservation's expiry for the function named fn.
func checkExpiry(fn string, expiry time.Duration) error {
	if expiry <= 0 || expiry > maxExpiry {
		return configError("%s expiry must be positive and at most 24 hours, got %v", fn, expiry)
	}
	return nil
}
