package ratelimit

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// ReserveN charges an estimated n events to key as [Keyed.AllowN] would
// (reporting the decision to the [Observer] as AllowN does), and holds
// them as a [Reservation] to settle within expiry: see [ReserveAll], of
// which this is the one-dimension case. Under the sliding log it reserves
// nothing and returns an error wrapping [ErrInvalidConfig]: the log cannot
// settle exactly. An expiry that is not positive or exceeds 24 hours is
// an error wrapping ErrInvalidConfig too. The Reservation is never nil.
//
// A type that embeds a *Keyed has this method promoted: it reserves in the
// Keyed directly, past any AllowN of the type's own (one that rewrites
// keys, say). Give such a type a ReserveN of its own.
func (k *Keyed) ReserveN(ctx context.Context, key string, n int, expiry time.Duration) (*Reservation, error) {
	invalid := MultiDecision{Decision: Decision{RetryAfter: RetryNever}}
	if ctx == nil {
		return deniedReservation(invalid), errNilContext
	}
	if err := checkExpiry("ratelimit.Keyed.ReserveN", expiry); err != nil {
		return deniedReservation(invalid), err
	}
	if _, err := k.canSettle(); err != nil {
		return deniedReservation(invalid), err
	}
	seq := k.cur.Load().seq
	now, mark := k.ts.NowTimed()
	d, err := k.decide(now, key, n, consume)
	if k.obs != nil {
		k.report(ctx, n, d, err, k.ts.Since(now, mark))
	}
	if !d.Allowed {
		return deniedReservation(MultiDecision{Decision: d}), err
	}
	kr := &keyedReservation{hold: keyedHold{k: k, key: key, at: now, n: int64(n), seq: seq, until: addSat(now, int64(expiry))}}
	kr.holdOne(d, &kr.hold, n)
	return &kr.Reservation, err
}

// canSettle offers ReserveAll the check of settleChecker: k cannot settle
// under the sliding log.
func (k *Keyed) canSettle() (KeyedLimiter, error) {
	if k.cur.Load().policy.Algorithm == SlidingLogAlgorithm {
		return k, errCannotSettle
	}
	return k, nil
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
	seq     uint64 // the generation (policy) it was made under
	until   int64  // Unix ns at which it expires, settled at its estimate
	settled atomic.Bool
}

// Settle implements settle.Holder.
func (h *keyedHold) Settle(_ context.Context, actual int64) error {
	if h.settled.Swap(true) {
		return ErrReservationSettled
	}
	if _, err := h.k.canSettle(); err != nil {
		return err // the sliding log since: it stands at its estimate
	}
	now := h.k.ts.Now()
	d := settleDiff(actual, h.n)
	if d < 0 && (h.k.cur.Load().seq != h.seq || h.k.resets.since(h.key, h.at)) {
		// What it was charged is gone with the policy, or the Reset,
		// that held it: there is nothing to give back.
		d = 0
	}
	if now >= h.until || d == 0 {
		return settledBy(now >= h.until)
	}
	for g := h.k.cur.Load(); ; g = g.next.Load() {
		if err := g.store.settle(now, h.key, h.at, d); err != errSuperseded {
			if err != nil && err != errCannotSettle {
				h.settled.Store(false) // still held: Settle may try again
			}
			return err
		}
	}
}

// resetLog remembers, for a day (the longest a reservation is held), when
// each key was Reset: a reservation made before its key's Reset gives
// nothing back, since what it was charged went with the Reset.
type resetLog struct {
	n  atomic.Int32 // len(at), read without mu: 0 is the common case
	mu sync.Mutex
	at map[string]int64 // guarded by mu: key -> Unix ns of its last Reset
}

// add records that key was Reset at now, and forgets Resets no
// reservation can predate any more.
func (l *resetLog) add(key string, now int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.at == nil {
		l.at = map[string]int64{}
	}
	for k, t := range l.at {
		if now-t > int64(maxExpiry) {
			delete(l.at, k)
		}
	}
	l.at[key] = now
	l.n.Store(int32(len(l.at)))
}

// since reports whether key was Reset after at.
func (l *resetLog) since(key string, at int64) bool {
	if l.n.Load() == 0 {
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	t, ok := l.at[key]
	return ok && t >= at
}
