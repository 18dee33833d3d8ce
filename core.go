package ratelimit

import (
	"context"
	"math"
	"math/bits"
	"sync"
	"time"
)

// algorithm is the arithmetic of one rate-limiting policy over its state S,
// with no lock and no clock: time comes in as Unix nanoseconds. The same
// algorithm value drives a single limiter and every key of a keyed limiter,
// which is what keeps their decisions identical.
type algorithm[S any] interface {
	// decide returns the verdict for n events at now (0 <= n <= limit) and,
	// if commit is set and they are admitted, records them in st. With n == 0
	// it reports the current quota. Callers hold the lock that guards st.
	decide(st *S, now int64, n int64, commit bool) verdict
	// limit is the capacity or the limit per window.
	limit() int64
	// idle reports whether st is indistinguishable from a fresh state at now,
	// so that forgetting it would not change any future decision.
	idle(st *S, now int64) bool
	// refund gives back n events admitted just before now, as if they had
	// not happened (never beyond a fresh state).
	refund(st *S, now, n int64)
}

// reserver is implemented by the bucket algorithms, whose WaitN takes a
// place in line at once so that no later waiter overtakes an earlier one.
type reserver[S any] interface {
	// reserve commits n events to be released after the returned delay, or
	// commits nothing and reports why not: the delay would exceed maxDelay,
	// or there is no room (leaky bucket). Callers hold the lock.
	reserve(st *S, now, n, maxDelay int64) (delay int64, res reserveResult)
	// unreserve gives back n events reserved earlier. Callers hold the lock.
	unreserve(st *S, n int64)
}

type reserveResult uint8

const (
	reserved reserveResult = iota
	reserveTooLate
	reserveFull
)

// core is the body shared by the five exported limiters: one mutex, one
// algorithm, one state, one clock.
type core[S any, A algorithm[S]] struct {
	mu  sync.Mutex
	alg A      // guarded by mu; replaced by SetLimit/SetRate
	st  S      // guarded by mu
	seq uint64 // guarded by mu; counts reservations and reconfigurations
	ts  timeSource
}

func (c *core[S, A]) init(alg A, opts []Option) error {
	o, err := buildOptions(opts)
	if err != nil {
		return err
	}
	c.alg = alg
	c.ts = newTimeSource(o.clock)
	return nil
}

// verdict is a Decision without its Limit, in int64 nanoseconds: what the
// algorithms return. It has four fields so that the compiler keeps it in
// registers; a five-field Decision is passed through memory, and copying it
// through each layer measured as half the cost of Allow.
type verdict struct {
	ok           bool
	remaining    int64
	retry, reset int64 // ns
}

// decision returns v as a Decision with the given limit.
func (v verdict) decision(limit int64) Decision {
	return Decision{
		Allowed:    v.ok,
		Limit:      int(limit),
		Remaining:  int(v.remaining),
		RetryAfter: time.Duration(v.retry),
		ResetAfter: time.Duration(v.reset),
	}
}

// decideN validates n and asks alg for a verdict.
func decideN[S any, A algorithm[S]](alg A, st *S, now int64, n int, commit bool) verdict {
	if n <= 0 || int64(n) > alg.limit() {
		v := alg.decide(st, now, 0, false)
		v.ok = false
		v.retry = int64(RetryNever)
		return v
	}
	return alg.decide(st, now, int64(n), commit)
}

// decisionN is decideN returning a Decision.
func decisionN[S any, A algorithm[S]](alg A, st *S, now int64, n int, commit bool) Decision {
	return decideN(alg, st, now, n, commit).decision(alg.limit())
}

// Allow reports whether one event may happen now, and consumes it if so.
// It is shorthand for AllowN(1).Allowed.
func (c *core[S, A]) Allow() bool {
	now := c.ts.now()
	c.mu.Lock()
	ok := c.alg.decide(&c.st, now, 1, true).ok // 1 <= limit always
	c.mu.Unlock()
	return ok
}

// AllowN reports whether n events may happen now and consumes them if so:
// all n or nothing. It never blocks. A denied request consumes nothing.
// When n <= 0 or n exceeds the limit the Decision is denied with RetryAfter
// set to [RetryNever].
func (c *core[S, A]) AllowN(n int) Decision {
	now := c.ts.now()
	c.mu.Lock()
	v := decideN(c.alg, &c.st, now, n, true)
	limit := c.alg.limit()
	c.mu.Unlock()
	return v.decision(limit)
}

// Peek reports the Decision that AllowN(n) would return now, without
// consuming anything. Peek(0) reports the current quota: its Remaining is
// how many events would be admitted right now. Its Allowed is true unless
// the limiter is overdrawn: a limit lowered with SetLimit or SetRate is
// already exceeded, or (token bucket) callers queued in WaitN hold tokens
// the bucket has not refilled yet.
func (c *core[S, A]) Peek(n int) Decision {
	now := c.ts.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	if n == 0 {
		return c.alg.decide(&c.st, now, 0, false).decision(c.alg.limit())
	}
	return decisionN(c.alg, &c.st, now, n, false)
}

// Limit returns the current capacity or limit per window.
func (c *core[S, A]) Limit() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return int(c.alg.limit())
}

// Wait blocks until one event is admitted or ctx is done. It is shorthand
// for WaitN(ctx, 1).
func (c *core[S, A]) Wait(ctx context.Context) error {
	return c.WaitN(ctx, 1)
}

// WaitN blocks until n events are admitted, and returns nil once they are.
// It returns an error without waiting when n <= 0 ([ErrInvalidN]), when n
// exceeds the limit ([ErrExceedsLimit]), when the wait would outlast ctx's
// deadline ([ErrDeadline], which also matches context.DeadlineExceeded) or,
// for a [LeakyBucket], when its queue is full ([ErrQueueFull]). If ctx is
// done while waiting it returns ctx.Err().
//
// The bucket algorithms take a place in line when WaitN is called, so a
// later waiter never overtakes an earlier one; a cancelled waiter gives its
// place back when nobody has queued behind it. The window algorithms retry
// after each Decision's RetryAfter.
func (c *core[S, A]) WaitN(ctx context.Context, n int) error {
	c.mu.Lock()
	limit := c.alg.limit()
	_, isReserver := any(c.alg).(reserver[S])
	c.mu.Unlock()
	if n <= 0 || int64(n) > limit {
		return nError(n, "the limit", limit)
	}
	if ctx == nil {
		return errNilContext
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if isReserver {
		return c.waitReserve(ctx, n)
	}
	return waitLoop(ctx, &c.ts, func() (Decision, error) { return c.AllowN(n), nil }, n)
}

// waitLoop retries allow after each denial's RetryAfter until it admits,
// ctx is done, or the wait cannot succeed (RetryNever: n exceeds a limit
// lowered meanwhile; a wait beyond ctx's deadline).
func waitLoop(ctx context.Context, ts *timeSource, allow func() (Decision, error), n int) error {
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		d, err := allow()
		if err != nil {
			return err
		}
		if d.Allowed {
			return nil
		}
		if d.RetryAfter == RetryNever {
			return nError(n, "the limit", int64(d.Limit))
		}
		if err := checkDeadline(ctx, d.RetryAfter); err != nil {
			return err
		}
		if err := ts.sleep(ctx, d.RetryAfter); err != nil {
			return err
		}
	}
}

// waitReserve is WaitN for the bucket algorithms.
func (c *core[S, A]) waitReserve(ctx context.Context, n int) error {
	maxDelay := int64(math.MaxInt64)
	if dl, ok := ctx.Deadline(); ok {
		maxDelay = max(int64(time.Until(dl)), 0)
	}
	now := c.ts.now()
	c.mu.Lock()
	r := any(c.alg).(reserver[S]) // read again: SetRate may have replaced it
	if int64(n) > c.alg.limit() {
		limit := c.alg.limit()
		c.mu.Unlock()
		return nError(n, "the limit", limit)
	}
	delay, res := r.reserve(&c.st, now, int64(n), maxDelay)
	if res != reserved {
		c.mu.Unlock()
		if res == reserveFull {
			return ErrQueueFull
		}
		return deadlineError(time.Duration(delay))
	}
	c.seq++
	mine := c.seq
	c.mu.Unlock()
	if delay == 0 {
		return nil
	}
	err := c.ts.sleep(ctx, time.Duration(delay))
	if err != nil {
		c.mu.Lock()
		if c.seq == mine { // nobody queued behind us: give the place back
			r.unreserve(&c.st, int64(n))
		}
		c.mu.Unlock()
	}
	return err
}

// reconfigure replaces the algorithm, letting convert carry the state over
// at the current time. Requires c.mu not held.
func (c *core[S, A]) reconfigure(alg A, convert func(st *S, now int64)) {
	now := c.ts.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	convert(&c.st, now)
	c.alg = alg
	c.seq++ // reservations made under the old algorithm are not given back
}

// ceilDiv returns ceil(a/b) for a >= 0, b > 0 without overflow.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}

// floorDiv returns floor(a/b) for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// mulDiv returns floor(a*b/c) for a, b >= 0 and c > 0, computed in 128 bits
// and saturated at math.MaxInt64.
func mulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// mulDivCeil returns ceil(a*b/c) for a, b >= 0 and c > 0, computed in 128
// bits and saturated at math.MaxInt64.
func mulDivCeil(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, r := bits.Div64(hi, lo, uint64(c))
	if r != 0 {
		q++
	}
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// maxPeriod bounds windows and refill periods so that window arithmetic on
// Unix nanoseconds cannot overflow.
const maxPeriod = 100 * 365 * 24 * time.Hour

// maxCount bounds every capacity and limit, so that sums of counts cannot
// overflow and counts stay exact in the doubles of Redis's Lua.
const maxCount = 1 << 53

// checkCount validates a positive count argument.
func checkCount(name string, v int) error {
	if v <= 0 {
		return configError("%s must be positive, got %d", name, v)
	}
	if v > maxCount {
		return configError("%s must be at most 2^53, got %d", name, v)
	}
	return nil
}

// checkPeriod validates a positive duration argument.
func checkPeriod(name string, d time.Duration) error {
	if d <= 0 {
		return configError("%s must be positive, got %v", name, d)
	}
	if d > maxPeriod {
		return configError("%s must be at most %v, got %v", name, maxPeriod, d)
	}
	return nil
}

// current returns the current algorithm. Requires c.mu not held.
func (c *core[S, A]) current() A {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.alg
}
