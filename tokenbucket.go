package ratelimit

import (
	"context"
	"math"
	"time"

	"github.com/rlkit/ratelimit/internal/errs"
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
	c core[tbState, *tokenBucketAlg]
}

var _ Limiter = (*TokenBucket)(nil)

// NewTokenBucket returns a full token bucket that refills at rate and holds
// at most capacity tokens, such as NewTokenBucket(Per(10, time.Second), 100): the
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
	alg, err := newTokenBucketAlg(capacity, rate.Events, rate.Per, newTokenBucketArgs)
	if err != nil {
		return nil, err
	}
	b := &TokenBucket{}
	if err := b.c.init("NewTokenBucket", TokenBucketAlgorithm, alg, opts); err != nil {
		return nil, err
	}
	return b, nil
}

// Allow reports whether one event may happen now, taking its token if so.
// It is shorthand for AllowN(1).Allowed.
func (b *TokenBucket) Allow() bool { return b.c.allow() }

// AllowN reports whether n events may happen now, and takes n tokens if
// so: all n or nothing. It never blocks, and a denied request takes
// nothing. The Decision's RetryAfter is when the bucket will hold n tokens
// if nothing else takes any. When n <= 0 or n exceeds the capacity the
// Decision is denied with RetryAfter set to [RetryNever].
func (b *TokenBucket) AllowN(n int) Decision { return b.c.allowN(n) }

// ReserveN is AllowN for work whose cost is known only once it ran: it
// charges an estimated n events as AllowN would, and holds them as a
// [Reservation] whose Settle charges the actual cost instead within
// expiry (see [ReserveAll]; a bucket goes into debt beyond empty on an overrun, so that later requests wait it out). A denied Reservation holds nothing. An
// expiry that is not positive or exceeds 24 hours is an error wrapping
// [ErrInvalidConfig]. The Reservation is never nil.
func (b *TokenBucket) ReserveN(n int, expiry time.Duration) (*Reservation, error) {
	return b.c.reserveN("ratelimit.TokenBucket.ReserveN", n, expiry)
}

// Peek reports the Decision that AllowN(n) would return now, without
// taking any token. Peek(0) reports the current quota: its Remaining is
// the number of whole tokens in the bucket, and its Allowed is false only
// when the bucket is overdrawn, because [TokenBucket.SetRate] lowered the
// capacity below the tokens taken or callers queued in WaitN hold tokens
// the bucket has not refilled yet.
func (b *TokenBucket) Peek(n int) Decision { return b.c.peek(n) }

// Wait blocks until one token is taken or ctx is done. It is shorthand for
// WaitN(ctx, 1).
func (b *TokenBucket) Wait(ctx context.Context) error { return b.c.waitN(ctx, 1) }

// WaitN blocks until n tokens are taken, and returns nil once they are.
// Waiters are served in arrival order: WaitN takes its place in line at
// once (the bucket may go into debt for it), so a later waiter never
// overtakes an earlier one, and a cancelled waiter gives its tokens back
// when nobody has queued behind it.
//
// It returns an error without waiting when n <= 0 ([ErrInvalidN]), when n
// exceeds the capacity ([ErrExceedsLimit]), or when the wait would outlast
// ctx's deadline ([ErrDeadline], which also matches
// context.DeadlineExceeded). If ctx is done while waiting it returns
// ctx.Err().
func (b *TokenBucket) WaitN(ctx context.Context, n int) error { return b.c.waitN(ctx, n) }

// SetRate changes the capacity and the refill rate, keeping the tokens the
// bucket holds now (capped at the new capacity). Waiters already in line
// keep the release times they were given.
func (b *TokenBucket) SetRate(rate Rate, capacity int) error {
	alg, err := newTokenBucketAlg(capacity, rate.Events, rate.Per, setRateArgs)
	if err != nil {
		return err
	}
	b.c.reconfigure(alg, func(st *tbState, now int64) {
		old := b.c.alg // guarded: convert runs under b.c.mu
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

var (
	newTokenBucketArgs = argNames("ratelimit.NewTokenBucket", "capacity", "rate.Events", "rate.Per")
	setRateArgs        = argNames("ratelimit.TokenBucket.SetRate", "capacity", "rate.Events", "rate.Per")
)

// newTokenBucketAlg validates the parameters, which names tells how the
// caller calls, and returns the arithmetic of a bucket of capacity tokens
// gaining refill tokens every per.
func newTokenBucketAlg(capacity, refill int, per time.Duration, names paramNames) (*tokenBucketAlg, error) {
	if err := checkCount(names.count, capacity); err != nil {
		return nil, err
	}
	if err := checkCount(names.events, refill); err != nil {
		return nil, err
	}
	if err := checkPeriod(names.period, per); err != nil {
		return nil, err
	}
	g := errs.GCD(int64(refill), int64(per))
	r, p := int64(refill)/g, int64(per)/g
	if int64(capacity) > maxDebt/2/p {
		return nil, configError("%s x %s (with the rate in lowest terms) must stay below 2^60 token-ns, got %d and %d/%v; use a smaller capacity or a coarser rate",
			names.count, names.period, capacity, refill, per)
	}
	return &tokenBucketAlg{capacity: int64(capacity), r: r, p: p, full: int64(capacity) * p}, nil
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

func (a *tokenBucketAlg) decide(st *tbState, now, n int64, act action) verdict {
	a.advance(st, now)
	need := n * a.p
	avail := a.full - st.debt
	if avail >= need {
		debt := st.debt + need
		if act == consume {
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

// settle gives back or charges the difference; an overrun goes into debt
// beyond an empty bucket, so that later requests wait it out, down to one
// capacity below empty: a garbage actual cannot lock the bucket for long.
func (a *tokenBucketAlg) settle(st *tbState, now, _, d int64) {
	a.advance(st, now)
	if d < 0 {
		a.unreserve(st, min(-d, a.capacity))
		return
	}
	// At most one capacity in debt (more only if waiters hold it already).
	st.debt = max(st.debt, min(st.debt+min(d, 2*a.capacity)*a.p, 2*a.full))
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
