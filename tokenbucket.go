package ratelimit

import (
	"math"
	"time"
)

// TokenBucket is a token bucket: it starts full with capacity tokens, gains
// tokens at a steady rate (rate.Events every rate.Per, continuously), never
// above capacity, and admits n events by taking n tokens. It allows bursts
// up to capacity and a long-run rate of rate. Most callers want [TokenBucket.Allow] or
// [TokenBucket.Wait].
//
// The arithmetic is exact: tokens are counted in integer fractions of a
// token, so with refill 10 per second exactly one more event is admitted
// after exactly 100ms, with no drift over any length of time.
//
// Create one with [NewTokenBucket]; the zero value is not usable. A
// TokenBucket is safe for concurrent use.
type TokenBucket struct {
	core[tbState, *tokenBucketAlg]
}

// NewTokenBucket returns a full token bucket that refills at rate and holds
// at most capacity tokens, such as NewTokenBucket(PerSecond(10), 100): the
// argument order of golang.org/x/time/rate's NewLimiter(r, burst), with a
// [Rate] that cannot be mistaken for the capacity.
//
// It returns an error wrapping [ErrInvalidConfig] when an argument is not
// positive, when rate.Per is longer than 100 years, or when exact
// arithmetic would overflow: capacity x rate.Per, with the rate reduced to
// lowest terms, must stay below 2^60 token-ns (so capacity 1 allows
// rate.Per up to about 36 years whatever rate.Events, and 1,000,000 tokens
// per second is fine), or when an option is invalid (such as [WithClock]
// given a typed nil).
func NewTokenBucket(rate Rate, capacity int, opts ...Option) (*TokenBucket, error) {
	alg, err := newTokenBucketAlg(capacity, rate.Events, rate.Per)
	if err != nil {
		return nil, err
	}
	b := &TokenBucket{}
	if err := b.init(alg, opts); err != nil {
		return nil, err
	}
	return b, nil
}

// SetRate changes the capacity and the refill rate, keeping the tokens the
// bucket holds now (capped at the new capacity). Waiters already in line
// keep the release times they were given.
func (b *TokenBucket) SetRate(rate Rate, capacity int) error {
	alg, err := newTokenBucketAlg(capacity, rate.Events, rate.Per)
	if err != nil {
		return err
	}
	b.reconfigure(alg, func(st *tbState, now int64) {
		old := b.alg
		old.advance(st, now)
		// Tokens held, in the new scale, rounded down (a deficit rounds up),
		// so that a change of rate never mints a fraction of a token.
		var avail int64
		if held := old.full - st.debt; held >= 0 {
			avail = mulDiv(held, alg.p, old.p)
		} else {
			avail = -mulDivCeil(-held, alg.p, old.p)
		}
		st.debt = max(alg.full-avail, 0)
	})
	return nil
}

// tokenBucketAlg is the token bucket's arithmetic. Token amounts are scaled
// by p and time by r, where r/p = refill/per reduced to lowest terms: one
// token is p units, and one nanosecond refills r units. All integers.
type tokenBucketAlg struct {
	capacity int64
	r, p     int64 // refill/per in lowest terms (tokens per nanosecond = r/p)
	full     int64 // capacity * p: a full bucket in units
}

// tbState is one token bucket's state. The zero value is a full bucket.
type tbState struct {
	last int64 // Unix ns of the last update
	debt int64 // units missing from a full bucket; above full while waiters hold reservations
}

// maxDebt bounds a bucket's debt so that debt arithmetic cannot overflow.
const maxDebt = math.MaxInt64 / 4

func newTokenBucketAlg(capacity, refill int, per time.Duration) (*tokenBucketAlg, error) {
	if err := checkCount("capacity", capacity); err != nil {
		return nil, err
	}
	if err := checkCount("refill", refill); err != nil {
		return nil, err
	}
	if err := checkPeriod("per", per); err != nil {
		return nil, err
	}
	g := gcd(int64(refill), int64(per))
	r, p := int64(refill)/g, int64(per)/g
	if int64(capacity) > maxDebt/2/p {
		return nil, configError("capacity %d with refill %d per %v overflows exact arithmetic; use a smaller capacity or a coarser rate", capacity, refill, per)
	}
	return &tokenBucketAlg{capacity: int64(capacity), r: r, p: p, full: int64(capacity) * p}, nil
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func (a *tokenBucketAlg) limit() int64 { return a.capacity }

// advance refills st up to now. Time that runs backwards refills nothing.
func (a *tokenBucketAlg) advance(st *tbState, now int64) {
	e := now - st.last
	if e <= 0 {
		return
	}
	st.last = now
	if st.debt == 0 {
		return
	}
	if e >= ceilDiv(st.debt, a.r) {
		st.debt = 0
	} else {
		st.debt -= e * a.r // e*r < debt + r: no overflow
	}
}

func (a *tokenBucketAlg) decide(st *tbState, now, n int64, commit bool) verdict {
	a.advance(st, now)
	need := n * a.p
	avail := a.full - st.debt
	if avail >= need {
		debt := st.debt + need
		if commit {
			st.debt = debt
		}
		return verdict{
			ok:        true,
			remaining: (avail - need) / a.p,
			reset:     ceilDiv(debt, a.r),
		}
	}
	return verdict{
		remaining: max(avail, 0) / a.p,
		retry:     ceilDiv(need-avail, a.r),
		reset:     ceilDiv(st.debt, a.r),
	}
}

func (a *tokenBucketAlg) idle(st *tbState, now int64) bool {
	return st.debt == 0 || now-st.last >= ceilDiv(st.debt, a.r)
}

func (a *tokenBucketAlg) refund(st *tbState, now, n int64) {
	a.advance(st, now)
	a.unreserve(st, n)
}

func (a *tokenBucketAlg) reserve(st *tbState, now, n, maxDelay int64) (int64, reserveResult) {
	a.advance(st, now)
	need := n * a.p
	if st.debt > maxDebt-need {
		return math.MaxInt64, reserveTooLate
	}
	debt := st.debt + need
	var delay int64
	if debt > a.full {
		delay = ceilDiv(debt-a.full, a.r)
	}
	if delay > maxDelay {
		return delay, reserveTooLate
	}
	st.debt = debt
	return delay, reserved
}

func (a *tokenBucketAlg) unreserve(st *tbState, n int64) {
	st.debt = max(st.debt-n*a.p, 0)
}
