package ratelimit

import (
	"context"
	"time"
)

// LeakyBucket is a leaky bucket: a queue of capacity events that drains one
// event every leakEvery. It has two faces. [LeakyBucket.AllowN] is the
// meter: it admits n events when the bucket's level plus n fits in its
// capacity, and the level drains at the fixed rate. [LeakyBucket.WaitN] is
// the shaper: callers are released one per leakEvery, first come first
// served, with no bursts, and a caller that finds the queue full is refused
// at once with [ErrQueueFull] instead of being left waiting.
//
// The two faces share one level but AllowN does not queue: it admits at
// once while the bucket has room, counting the events of callers queued in
// WaitN as occupying it, so an AllowN event can happen before earlier
// waiters are released. Its event takes the next place in the schedule:
// waiters already queued keep their release times, later ones queue behind
// it, and the long-run rate holds. When the output must be strictly shaped,
// let every caller use WaitN.
//
// Use it to smooth outbound traffic to a strict rate (Wait), or to police
// inbound traffic with a bounded backlog (Allow).
//
// The queue counts every caller still waiting plus the event last
// released, which stays in the bucket until it drains: a pool of N workers
// that each loop on Wait needs a capacity of at least N+1, or the extra
// workers get ErrQueueFull. When callers must never be refused, use a
// [TokenBucket] (capacity 1 for no bursts), whose Wait queues any number.
//
// Create one with [NewLeakyBucket]; the zero value is not usable. A
// LeakyBucket is safe for concurrent use.
type LeakyBucket struct {
	c core[lbState, *leakyBucketAlg]
}

var _ Limiter = (*LeakyBucket)(nil)

// NewLeakyBucket returns an empty leaky bucket that holds at most capacity
// events and drains one every leakEvery. It returns an error wrapping
// [ErrInvalidConfig] when an argument is not positive, or when capacity x
// leakEvery exceeds 2^61 ns (about 73 years), or when an option is invalid
// (such as [WithClock] given a typed nil).
func NewLeakyBucket(capacity int, leakEvery time.Duration, opts ...Option) (*LeakyBucket, error) {
	alg, err := newLeakyBucketAlg(capacity, leakEvery, argNames("ratelimit.NewLeakyBucket", "capacity", "", "leakEvery"))
	if err != nil {
		return nil, err
	}
	b := &LeakyBucket{}
	if err := b.c.init("NewLeakyBucket", LeakyBucketAlgorithm, alg, opts); err != nil {
		return nil, err
	}
	return b, nil
}

// Allow reports whether one event fits in the bucket now, adding it if so.
// It is shorthand for AllowN(1).Allowed.
func (b *LeakyBucket) Allow() bool { return b.c.allow() }

// AllowN reports whether n events fit in the bucket now, and adds them if
// so: all n or nothing. It is the meter: it never blocks or queues, and a
// denied request adds nothing. The Decision's RetryAfter is when enough
// will have drained for n if nothing else arrives. When n <= 0 or n
// exceeds the capacity the Decision is denied with RetryAfter set to
// [RetryNever].
func (b *LeakyBucket) AllowN(n int) Decision { return b.c.allowN(n) }

// ReserveN is AllowN for work whose cost is known only once it ran: it
// charges an estimated n events as AllowN would, and holds them as a
// [Reservation] whose Settle charges the actual cost instead within
// expiry (see [ReserveAll]; an overrun fills the bucket beyond its capacity, so that later requests wait until it drained). A denied Reservation holds nothing. An
// expiry that is not positive or exceeds 24 hours is an error wrapping
// [ErrInvalidConfig]. The Reservation is never nil.
func (b *LeakyBucket) ReserveN(n int, expiry time.Duration) (*Reservation, error) {
	return b.c.reserveN("ratelimit.LeakyBucket.ReserveN", n, expiry)
}

// Peek reports the Decision that AllowN(n) would return now, without
// adding anything. Peek(0) reports the current room: its Remaining is how
// many events would fit right now, and its Allowed is false only when
// [LeakyBucket.SetRate] lowered the capacity below the bucket's level.
func (b *LeakyBucket) Peek(n int) Decision { return b.c.peek(n) }

// Wait blocks until the caller's one event is released or ctx is done. It
// is shorthand for WaitN(ctx, 1).
func (b *LeakyBucket) Wait(ctx context.Context) error { return b.c.waitN(ctx, 1) }

// WaitN is the shaper: it queues n events and blocks until they are
// released, one per leakEvery after those queued before them, first come
// first served. A cancelled waiter gives its place back when nobody has
// queued behind it.
//
// It returns an error without waiting when n <= 0 ([ErrInvalidN]), when n
// exceeds the capacity ([ErrExceedsLimit]), when the queue has no room for
// n more events ([ErrQueueFull]: the caller is refused, never left
// waiting), or when the wait would outlast ctx's deadline ([ErrDeadline],
// which also matches context.DeadlineExceeded). If ctx is done while
// waiting it returns ctx.Err().
func (b *LeakyBucket) WaitN(ctx context.Context, n int) error { return b.c.waitN(ctx, n) }

// SetRate changes the capacity and the drain interval. The events in the
// bucket stay in it and drain at the new rate (a fractional event rounds
// up). Waiters already in line keep the release times they were given.
func (b *LeakyBucket) SetRate(capacity int, leakEvery time.Duration) error {
	alg, err := newLeakyBucketAlg(capacity, leakEvery, argNames("ratelimit.LeakyBucket.SetRate", "capacity", "", "leakEvery"))
	if err != nil {
		return err
	}
	b.c.reconfigure(alg, func(st *lbState, now int64) {
		if level := st.empty - now; level > 0 {
			st.empty = now + mulDivCeil(level, alg.every, b.c.alg.every)
		}
	})
	return nil
}

// leakyBucketAlg is the leaky bucket's arithmetic: the level is kept as the
// time at which the bucket would be empty, so one event is every ns of
// level and the bucket holds span = capacity*every ns of level at most.
type leakyBucketAlg struct {
	capacity int64
	every    int64 // ns per event
	span     int64 // capacity * every
}

// lbState is one leaky bucket's state. The zero value is an empty bucket.
type lbState struct {
	empty int64 // Unix ns at which the bucket is empty
}

// newLeakyBucketAlg validates the parameters, which names tells how the
// caller calls, and returns the arithmetic of a bucket of capacity events
// that drains one every leakEvery.
func newLeakyBucketAlg(capacity int, leakEvery time.Duration, names paramNames) (*leakyBucketAlg, error) {
	if err := checkCount(names.count, capacity); err != nil {
		return nil, err
	}
	if err := checkPeriod(names.period, leakEvery); err != nil {
		return nil, err
	}
	if int64(capacity) > maxDebt/int64(leakEvery) {
		return nil, configError("%s x %s must be at most 2^61ns, got %d x %v", names.count, names.period, capacity, leakEvery)
	}
	every := int64(leakEvery)
	return &leakyBucketAlg{capacity: int64(capacity), every: every, span: int64(capacity) * every}, nil
}

func (a *leakyBucketAlg) limit() int64 { return a.capacity }

func (a *leakyBucketAlg) decide(st *lbState, now, n int64, act action) verdict {
	level := max(st.empty-now, 0)
	need := n * a.every
	if level+need <= a.span {
		if act == consume {
			st.empty = now + level + need
		}
		return verdict{
			ok:        true,
			remaining: (a.span - level - need) / a.every,
			reset:     level + need,
		}
	}
	return verdict{
		remaining: max(a.span-level, 0) / a.every,
		retry:     level + need - a.span,
		reset:     level,
	}
}

func (a *leakyBucketAlg) idle(st *lbState, now int64) bool {
	return st.empty <= now
}

// reserve queues n events behind those already in the bucket. The caller is
// released when the events ahead of it have drained.
func (a *leakyBucketAlg) reserve(st *lbState, now, n, maxDelay int64) (int64, reserveResult) {
	level := max(st.empty-now, 0)
	need := n * a.every
	if level+need > a.span {
		return 0, reserveFull
	}
	if level > maxDelay {
		return level, reserveTooLate
	}
	st.empty = now + level + need
	return level, reserved
}

func (a *leakyBucketAlg) unreserve(st *lbState, n int64) {
	st.empty -= n * a.every
}

// settle drains or adds the difference; an overrun fills the bucket beyond
// its capacity, so that later requests wait until it has drained, up to
// one capacity beyond: a garbage actual cannot lock the bucket for long.
func (a *leakyBucketAlg) settle(st *lbState, now, _, d int64) {
	if d < 0 {
		a.unreserve(st, min(-d, a.span/a.every))
		return
	}
	// At most one capacity beyond full (more only if waiters hold it).
	level := max(st.empty-now, 0)
	st.empty = now + max(level, min(level+min(d, 2*a.span/a.every)*a.every, 2*a.span))
}

func (a *leakyBucketAlg) refund(st *lbState, _, n int64) {
	a.unreserve(st, n)
}
