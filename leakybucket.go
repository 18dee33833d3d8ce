package ratelimit

import (
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
	core[lbState, *leakyBucketAlg]
}

// NewLeakyBucket returns an empty leaky bucket that holds at most capacity
// events and drains one every leakEvery. It returns an error wrapping
// [ErrInvalidConfig] when an argument is not positive, or when capacity x
// leakEvery exceeds 2^61 ns (about 73 years), or when an option is invalid
// (such as [WithClock] given a typed nil).
func NewLeakyBucket(capacity int, leakEvery time.Duration, opts ...Option) (*LeakyBucket, error) {
	alg, err := newLeakyBucketAlg(capacity, leakEvery)
	if err != nil {
		return nil, err
	}
	b := &LeakyBucket{}
	if err := b.init(alg, opts); err != nil {
		return nil, err
	}
	return b, nil
}

// SetRate changes the capacity and the drain interval. The events in the
// bucket stay in it and drain at the new rate (a fractional event rounds
// up). Waiters already in line keep the release times they were given.
func (b *LeakyBucket) SetRate(capacity int, leakEvery time.Duration) error {
	alg, err := newLeakyBucketAlg(capacity, leakEvery)
	if err != nil {
		return err
	}
	b.reconfigure(alg, func(st *lbState, now int64) {
		if level := st.empty - now; level > 0 {
			st.empty = now + mulDivCeil(level, alg.every, b.alg.every)
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

func newLeakyBucketAlg(capacity int, leakEvery time.Duration) (*leakyBucketAlg, error) {
	if err := checkCount("capacity", capacity); err != nil {
		return nil, err
	}
	if err := checkPeriod("leakEvery", leakEvery); err != nil {
		return nil, err
	}
	if int64(capacity) > maxDebt/int64(leakEvery) {
		return nil, configError("capacity %d x leakEvery %v overflows", capacity, leakEvery)
	}
	every := int64(leakEvery)
	return &leakyBucketAlg{capacity: int64(capacity), every: every, span: int64(capacity) * every}, nil
}

func (a *leakyBucketAlg) limit() int64 { return a.capacity }

func (a *leakyBucketAlg) decide(st *lbState, now, n int64, commit bool) verdict {
	level := max(st.empty-now, 0)
	need := n * a.every
	if level+need <= a.span {
		if commit {
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

func (a *leakyBucketAlg) refund(st *lbState, _, n int64) {
	a.unreserve(st, n)
}
