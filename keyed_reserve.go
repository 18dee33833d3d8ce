package ratelimit

import (
	"context"
	"sync/atomic"
	"time"
)

// ReserveN charges an estimated n events to key as [Keyed.AllowN] would
// (reporting the decision to the [Observer] as AllowN does), and holds
// them as a [Reservation] to settle within expiry: see [ReserveAll], of
// which this is the one-dimension case. Under the sliding log it reserves
// nothing and returns an error wrapping [ErrInvalidConfig]: the log cannot
// settle exactly. An expiry that is not positive or exceeds 100 years is
// an error wrapping ErrInvalidConfig too. The Reservation is never nil.
func (k *Keyed) ReserveN(ctx context.Context, key string, n int, expiry time.Duration) (*Reservation, error) {
	invalid := MultiDecision{Decision: Decision{RetryAfter: RetryNever}}
	if ctx == nil {
		return deniedReservation(invalid), errNilContext
	}
	if err := checkExpiry("ratelimit.Keyed.ReserveN", expiry); err != nil {
		return deniedReservation(invalid), err
	}
	if k.cur.Load().policy.Algorithm == SlidingLogAlgorithm {
		return deniedReservation(invalid), errCannotSettle
	}
	now, mark := k.ts.NowTimed()
	d, err := k.decide(now, key, n, consume)
	if k.obs != nil {
		k.report(ctx, n, d, err, k.ts.Since(now, mark))
	}
	if !d.Allowed {
		return deniedReservation(MultiDecision{Decision: d}), err
	}
	kr := &keyedReservation{hold: keyedHold{k: k, key: key, at: now, n: int64(n), until: now + int64(expiry)}}
	kr.Reservation = Reservation{MultiDecision: MultiDecision{Decision: d}, first: part{h: &kr.hold, n: int64(n)}, nparts: 1}
	return &kr.Reservation, err
}

// keyedReservation is a Reservation and its hold in one allocation.
type keyedReservation struct {
	Reservation
	hold keyedHold
}

// keyedHold is a reservation held in a Keyed: n events charged to key at
// `at`, to be settled before until.
type keyedHold struct {
	k       *Keyed
	key     string
	at, n   int64
	until   int64 // Unix ns at which it expires, settled at its estimate
	settled atomic.Bool
}

// Settle implements settle.Holder.
func (h *keyedHold) Settle(_ context.Context, actual int64) error {
	if h.settled.Swap(true) {
		return ErrReservationSettled
	}
	now := h.k.ts.Now()
	d := settleDiff(actual, h.n)
	if now >= h.until || d == 0 {
		return settledBy(now >= h.until)
	}
	for g := h.k.cur.Load(); ; g = g.next.Load() {
		if err := g.store.settle(now, h.key, h.at, d); err != errSuperseded {
			return err
		}
	}
}
