package redislimit

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/errs"
	"github.com/rlkit/ratelimit/internal/settle"
)

// Reservations on Redis (issue 27). A reservation is two scripts:
//
//   - reserve (lua/reserve.lua inside the algorithm's decision script)
//     decides n events as AllowN does and, when it admits, writes the
//     reservation's record "<at> <n> <until>" in the same run: the decision
//     time on the script's time base (Redis's TIME, or the caller's clock
//     with WithClock), the estimate, and at + expiry; the record's TTL is
//     the expiry (plus the client-time slack). Its key holds the client's
//     hash tag, so it lives in the slot of the client's state (Cluster).
//   - settle (lua/settle.lua, then the algorithm's settle.lua) reads and
//     deletes the record and applies the algorithm's settle arithmetic to
//     d = actual - n at now, with at from the record; under the policy in
//     force, converting the client's state under an earlier one as a
//     refund does (the newest generation, as in memory). No record, or one
//     whose until has come: nothing changes, ErrReservationSettled.
//
// Neither script is ever sent twice when its reply may have been lost
// (internal/exec retries only errors that prove a script did not run): a
// reserve whose reply is lost is a failure (the failure policy decides;
// the estimate, if it was charged, stays charged until the record expires,
// settled at its estimate), and a settle whose reply is lost returns the
// error (it ran, or the record expires: settled at its estimate). Were a
// settle sent again, it would find no record: the record is what makes it
// happen once.

var _ ratelimit.Reserver = (*Limiter)(nil)

// errCannotSettle is the error of a reservation under the sliding log, as
// package ratelimit words it.
var errCannotSettle = errs.Config(ratelimit.ErrInvalidConfig, "the sliding window log cannot settle a reservation exactly (its events are merged by time); use the sliding window counter")

// maxExpiry bounds a reservation's expiry, as package ratelimit does.
const maxExpiry = 24 * time.Hour

// recordInfix names the reservation records: base + recordInfix + tag +
// "}:" + id.
const recordInfix = "rsv:{"

// reservationIDs make the ids of the records: a random prefix per process
// and a counter.
var reservationIDs struct {
	prefix string
	n      atomic.Uint64
}

func init() {
	var b [12]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	reservationIDs.prefix = base64.RawURLEncoding.EncodeToString(b[:])
}

// ReserveN charges an estimated n events to key as [Limiter.AllowN] would
// (reporting the decision to the observer as AllowN does), and holds them
// as a [ratelimit.Reservation] to settle with the actual cost within
// expiry; see [ratelimit.ReserveAll], which reserves in several limiters
// at once. The decision and the reservation's record are one script run;
// settling is another, which reads and deletes the record, so that a
// reservation settles once, under the policy in force then. A reservation
// not settled within expiry is settled at its estimate: its record
// expires with it (a TTL of expiry, plus a minute with WithClock), and
// Settle then returns an error wrapping [ratelimit.ErrReservationSettled].
// How each algorithm settles is as in memory (see [ratelimit.Reservation]
// and the Reservations section of docs/redis.md); a bucket's debt, or a
// window's count, beyond the limit is kept up to 2^52 units.
//
// Under the sliding log it reserves nothing and returns an error wrapping
// [ratelimit.ErrInvalidConfig]: the log cannot settle exactly; so does an
// expiry that is not positive or exceeds 100 years. An n out of range is
// denied as AllowN denies it. A reservation always asks Redis: a local
// lease (WithLeases) neither serves nor sees it, and the deny cache is
// not consulted (both forget the key after a settle).
//
// When Redis cannot decide, the error wraps [ErrUnavailable] and the
// failure policy decides: FailOpen admits with a Reservation that holds
// nothing on Redis (its Settle does nothing and returns nil), FailClosed
// denies, WithLocalFallback reserves in the local fallback. A Settle that
// cannot reach Redis returns an error wrapping ErrUnavailable; the record
// then expires, settled at its estimate (unless the lost reply hid a
// settle that ran). The Reservation is never nil.
func (l *Limiter) ReserveN(ctx context.Context, key string, n int, expiry time.Duration) (*ratelimit.Reservation, error) {
	invalidD := ratelimit.Decision{RetryAfter: ratelimit.RetryNever}
	if ctx == nil {
		return deniedReservation(invalidD), errNilContext
	}
	if expiry <= 0 || expiry > maxExpiry {
		return deniedReservation(invalidD), invalid("Limiter.ReserveN: expiry must be positive and at most 24 hours, got %v", expiry)
	}
	if l.cur.Load().policy.Algorithm == ratelimit.SlidingLogAlgorithm {
		return deniedReservation(invalidD), errCannotSettle
	}
	if l.observer == nil {
		r, _, err := l.reserveN(ctx, key, n, expiry)
		return r, err
	}
	start := time.Since(l.epoch)
	r, d, err := l.reserveN(ctx, key, n, expiry)
	l.observe(ctx, n, d, err, false, start)
	return r, err
}

// deniedReservation returns a Reservation that holds nothing, with d.
func deniedReservation(d ratelimit.Decision) *ratelimit.Reservation {
	return &ratelimit.Reservation{MultiDecision: ratelimit.MultiDecision{Decision: d}}
}

// reserveN is ReserveN without the observer; it returns the Decision to
// report too.
func (l *Limiter) reserveN(ctx context.Context, key string, n int, expiry time.Duration) (*ratelimit.Reservation, ratelimit.Decision, error) {
	g := l.acquire()
	defer g.release()
	if g.reserveScript == nil { // a SetPolicy to the sliding log since ReserveN looked
		d := ratelimit.Decision{RetryAfter: ratelimit.RetryNever}
		return deniedReservation(d), d, errCannotSettle
	}
	if ctx.Err() != nil {
		d, err := l.canceled(ctx)
		return deniedReservation(d), d, err
	}
	if n <= 0 || n > g.policy.Limit {
		d, err := l.allowNever(ctx, g, key, n)
		return deniedReservation(d), d, err
	}
	now, _ := l.times(g)
	args := append(g.args(l, now, n, commit), int64((expiry+time.Microsecond-1)/time.Microsecond))
	id := reservationIDs.prefix + strconv.FormatUint(reservationIDs.n.Add(1), 36)
	keys := g.keys(l, key)
	record := l.recordKey(key, id)
	keys = append(keys, record)
	var v []int64
	err := l.runCall(ctx, g, g.reserveScript, keys, args, l.wire.Acks(), func(cmd *redis.Cmd) (err error) {
		v, err = cmd.Int64Slice()
		return err
	})
	if err == nil && len(v) != 4 {
		err = &scriptError{values: len(v)}
	}
	if err != nil {
		var nr *notReplicatedError
		if !errors.As(err, &nr) || len(v) != 4 || v[0] == 1 {
			return l.reserveFailed(ctx, g, key, n, expiry, err)
		}
	}
	d := ratelimit.Decision{
		Allowed:    v[0] == 1,
		Limit:      g.policy.Limit,
		Remaining:  int(v[1]),
		RetryAfter: time.Duration(v[2]) * time.Microsecond,
		ResetAfter: time.Duration(v[3]) * time.Microsecond,
	}
	if !d.Allowed {
		return deniedReservation(d), d, nil
	}
	if g.cache != nil {
		g.cache.invalidate(g.cache.hash(key), key)
	}
	h := &redisHold{l: l, g: g, key: key, record: record}
	return settle.Make(h, n, d).(*ratelimit.Reservation), d, nil
}

// resetMarker returns the key in which Reset leaves the time of key's
// last Reset, for a day (the longest a reservation is held), so that a
// reservation made before it gives nothing back (settle.lua). Its hash tag
// is key's, so the same Cluster slot.
func (l *Limiter) resetMarker(key string) string {
	var buf [keyDigestLen]byte
	return l.base + resetInfix + l.tag(key, &buf) + "}"
}

// resetInfix names the reset markers, as recordInfix the records.
const resetInfix = "rst:{"

// recordKey returns the key of the record id for key: the hash tag of
// key's state (see keys), so the same Cluster slot.
func (l *Limiter) recordKey(key, id string) string {
	var buf [keyDigestLen]byte
	return l.base + recordInfix + l.tag(key, &buf) + "}:" + id
}

// reserveFailed is the failure policy's answer to a reservation Redis
// could not decide (cause).
func (l *Limiter) reserveFailed(ctx context.Context, g *generation, key string, n int, expiry time.Duration, cause error) (*ratelimit.Reservation, ratelimit.Decision, error) {
	if ctx.Err() != nil {
		d, err := l.canceled(ctx)
		return deniedReservation(d), d, err
	}
	err := l.unavailable(ctx, "reserve", key, cause)
	limit := g.policy.Limit
	switch l.failure {
	case FailClosed:
		d := ratelimit.Decision{Limit: limit, RetryAfter: FailClosedRetryAfter}
		return deniedReservation(d), d, err
	case failLocal:
		r, _ := g.fallback.ReserveN(ctx, key, n, expiry)
		return r, r.Decision, err
	}
	d := ratelimit.Decision{Allowed: true, Limit: limit, Remaining: limit - n}
	return settle.Make(heldNowhere{}, n, d).(*ratelimit.Reservation), d, err
}

// heldNowhere stands behind a reservation that FailOpen admitted while
// Redis could not decide: nothing was charged, so nothing is settled.
type heldNowhere struct{}

// Settle implements settle.Holder.
func (heldNowhere) Settle(context.Context, int64) error { return nil }

// redisHold is a reservation held on Redis: its record, for key.
type redisHold struct {
	l      *Limiter
	g      *generation // the policy it was made under
	key    string
	record string
}

// Settle implements settle.Holder: the settle script, under the policy in
// force.
//
// A reservation made under another policy than the one in force, or
// before a Reset of its key (the marker Reset leaves, resetMarker), gives
// nothing back: what it was charged went with that state. The settle
// script is told the first by an actual written with a trailing "+"
// (settle.lua), and reads the second itself.
func (h *redisHold) Settle(ctx context.Context, actual int64) error {
	ctx = context.WithoutCancel(ctx) // a caller gone still settles
	l := h.l
	g := l.acquire()
	defer g.release()
	if g.settleScript == nil { // the sliding log since the reservation
		return errCannotSettle // it stands at its estimate
	}
	keys := append(g.keys(l, h.key), h.record, l.resetMarker(h.key))
	args := g.args(l, l.nowArg(), int(min(actual, maxState)), refund)
	if g != h.g {
		args[1] = strconv.FormatInt(min(actual, maxState), 10) + "+"
	}
	var v int64
	err := l.run(ctx, g, g.settleScript, keys, args, func(cmd *redis.Cmd) (err error) {
		v, err = cmd.Int64()
		return err
	})
	if g.cache != nil {
		g.cache.invalidate(g.cache.hash(h.key), h.key)
	}
	if err != nil {
		return l.unavailable(ctx, "settle", h.key, err)
	}
	if v < 0 {
		return ratelimit.ErrReservationSettled
	}
	return nil
}
