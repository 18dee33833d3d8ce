package ratelimit

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlkit/ratelimit/internal/errs"
	"github.com/rlkit/ratelimit/internal/timesrc"
)

// algorithm is the arithmetic of one rate-limiting policy over its state S,
// with no lock and no clock: time comes in as Unix nanoseconds. The same
// algorithm value drives a single limiter and every key of a keyed limiter,
// which is what keeps their decisions identical.
type algorithm[S any] interface {
	// decide returns the verdict for n events at now (0 <= n <= limit) and,
	// if act is consume and they are admitted, records them in st. With
	// n == 0 it reports the current quota. Callers hold the lock that
	// guards st.
	decide(st *S, now int64, n int64, act action) verdict
	// limit is the capacity or the limit per window.
	limit() int64
	// idle reports whether st is indistinguishable from a fresh state at now,
	// so that forgetting it would not change any future decision.
	idle(st *S, now int64) bool
	// refund gives back n events admitted just before now, as if they had
	// not happened (never beyond a fresh state).
	refund(st *S, now, n int64)
}

// action says whether a decision records what it admits.
type action uint8

const (
	// inspect decides without recording anything: Peek.
	inspect action = iota
	// consume records the admitted events: AllowN.
	consume
)

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

// maxSettle bounds the difference a settlement applies, and a window's
// count, so that settlement arithmetic cannot overflow.
const maxSettle = math.MaxInt64 / 4

// settleDiff is the difference a reservation of n settled at actual makes,
// within maxSettle.
func settleDiff(actual, n int64) int64 { return max(min(actual-n, maxSettle), -maxSettle) }

// settler is implemented by the algorithms that can settle a
// [Reservation] exactly: every one but the sliding log, whose events are
// merged by time so that a reservation's own cannot be found again.
type settler[S any] interface {
	// settle applies to st, at now, the settlement of a reservation made
	// at `at`: d events more (d > 0, an overrun) or fewer (d < 0) than its
	// estimate. Callers hold the lock that guards st.
	settle(st *S, now, at, d int64)
}

type reserveResult uint8

const (
	reserved reserveResult = iota
	reserveTooLate
	reserveFull
)

// core is the body shared by the five exported limiters: one mutex, one
// algorithm, one state, one clock. Each exported limiter holds one in an
// unexported field and declares its own methods, which call these.
type core[S any, A algorithm[S]] struct {
	mu  sync.Mutex
	alg A // guarded by mu; replaced by SetLimit/SetRate
	st  S // guarded by mu
	// ticket is the place in line last handed out, guarded by mu: every
	// reservation and every reconfiguration takes the next one, so a waiter
	// that gives up can tell whether anyone queued behind it.
	ticket uint64
	ts     timesrc.Source

	// Set at creation, read-only after.
	obs  Observer // nil: no Events, and no time readings for them
	name string
	algo Algorithm
}

// singleOptions are the options a single limiter accepts.
const singleOptions = optClock | optObserver | optName

func (c *core[S, A]) init(ctor string, algo Algorithm, alg A, opts []Option) error {
	o, err := buildOptions(ctor, singleOptions, opts)
	if err != nil {
		return err
	}
	c.alg = alg
	c.ts = timesrc.New(o.clock)
	c.obs, c.name, c.algo = o.observer, o.name, algo
	return nil
}

// verdict is a Decision without its Limit, in int64 nanoseconds: what the
// algorithms return. It has four fields so that the compiler keeps it in
// registers; a five-field Decision is passed through memory, which costs on
// every layer it crosses (the figure is in benchmarks/README.md).
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

// decideN validates n and asks alg for a verdict. It owns the one case
// where n == 0 is valid: inspecting with n == 0 (Peek(0)) reports the
// current quota, whose ok is false only when the limiter is overdrawn.
// Otherwise an n <= 0 or above the limit is denied with RetryNever.
func decideN[S any, A algorithm[S]](alg A, st *S, now int64, n int, act action) verdict {
	if n <= 0 || int64(n) > alg.limit() {
		if n == 0 && act == inspect {
			return alg.decide(st, now, 0, inspect)
		}
		v := alg.decide(st, now, 0, inspect)
		v.ok = false
		v.retry = int64(RetryNever)
		return v
	}
	return alg.decide(st, now, int64(n), act)
}

// invalidN returns the sentinel of an n that no wait can admit under limit,
// or nil: what AllowN reports to an Observer, as it returns no error.
func invalidN(n int, limit int64) error {
	switch {
	case n <= 0:
		return ErrInvalidN
	case int64(n) > limit:
		return ErrExceedsLimit
	}
	return nil
}

// allow is Allow: AllowN(1).Allowed, with no Decision to build.
func (c *core[S, A]) allow() bool {
	if c.obs != nil {
		return c.allowNObserved(1).Allowed
	}
	now := c.ts.Now()
	c.mu.Lock()
	ok := c.alg.decide(&c.st, now, 1, consume).ok // 1 <= limit always
	c.mu.Unlock()
	return ok
}

// allowN is AllowN.
func (c *core[S, A]) allowN(n int) Decision {
	if c.obs != nil {
		return c.allowNObserved(n)
	}
	return c.decideNow(n, consume)
}

// decideNow decides n at the current time, reporting nothing.
func (c *core[S, A]) decideNow(n int, act action) Decision {
	return c.decideAt(c.ts.Now(), n, act)
}

// decideAt decides n at now, reporting nothing.
func (c *core[S, A]) decideAt(now int64, n int, act action) Decision {
	c.mu.Lock()
	v := decideN(c.alg, &c.st, now, n, act)
	limit := c.alg.limit()
	c.mu.Unlock()
	return v.decision(limit)
}

// allowNObserved is AllowN with an Observer: it times the decision on the
// real clock and reports it. AllowN has no context, so the Observer gets
// context.Background().
func (c *core[S, A]) allowNObserved(n int) Decision {
	now, mark := c.ts.NowTimed()
	d := c.decideAt(now, n, consume)
	c.report(n, d, now, mark)
	return d
}

// report tells c's Observer of the AllowN decision d for n events, decided
// at now, whose timing started at mark. Requires c.obs set.
func (c *core[S, A]) report(n int, d Decision, now int64, mark time.Time) {
	e := Event{Name: c.name, Algorithm: c.algo, Home: HomeMemory, N: n, Decision: d}
	e.Outcome, e.Err = outcome(n, d, nil)
	e.Latency = c.ts.Since(now, mark)
	c.obs.Observe(context.Background(), e)
}

// reserveN is a single limiter's ReserveN, which fn names: AllowN, with
// what it admits held as a Reservation to settle within expiry.
func (c *core[S, A]) reserveN(fn string, n int, expiry time.Duration) (*Reservation, error) {
	if err := checkExpiry(fn, expiry); err != nil {
		return deniedReservation(MultiDecision{Decision: Decision{RetryAfter: RetryNever}}), err
	}
	now, mark := c.ts.NowTimed()
	d := c.decideAt(now, n, consume)
	if c.obs != nil {
		c.report(n, d, now, mark)
	}
	if !d.Allowed {
		return deniedReservation(MultiDecision{Decision: d}), nil
	}
	cr := &coreReservation[S, A]{hold: coreHold[S, A]{c: c, at: now, n: int64(n), until: addSat(now, int64(expiry))}}
	cr.holdOne(d, &cr.hold, n)
	return &cr.Reservation, nil
}

// coreReservation is a Reservation and its hold in one allocation.
type coreReservation[S any, A algorithm[S]] struct {
	Reservation
	hold coreHold[S, A]
}

// coreHold is a reservation held in a single limiter: n events charged at
// `at`, to be settled before until.
type coreHold[S any, A algorithm[S]] struct {
	c       *core[S, A]
	at, n   int64
	until   int64 // Unix ns at which it expires, settled at its estimate
	settled atomic.Bool
}

// Settle implements settle.Holder.
func (h *coreHold[S, A]) Settle(_ context.Context, actual int64) error {
	if h.settled.Swap(true) {
		return ErrReservationSettled
	}
	c := h.c
	now := c.ts.Now()
	d := settleDiff(actual, h.n)
	if now >= h.until || d == 0 {
		return settledBy(now >= h.until)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := any(c.alg).(settler[S]); ok {
		s.settle(&c.st, now, h.at, d)
	}
	return nil
}

// outcome classifies the AllowN decision d (with AllowN's error err) of n
// events for an Observer, and returns the error the Event carries: err, or
// for an n that can never be admitted (AllowN's RetryNever denial, which
// returns no error) the sentinel WaitN would return.
func outcome(n int, d Decision, err error) (Outcome, error) {
	switch {
	case d.Allowed:
		return OutcomeAllowed, err
	case err != nil:
		return OutcomeError, err
	case d.RetryAfter == RetryNever:
		return OutcomeError, invalidN(n, int64(d.Limit))
	}
	return OutcomeDenied, nil
}

// peek is Peek.
func (c *core[S, A]) peek(n int) Decision {
	return c.decideNow(n, inspect)
}

// waitN is WaitN: see the limiters' own docs for what it means for each.
// With an Observer it reports one Event when it returns.
func (c *core[S, A]) waitN(ctx context.Context, n int) error {
	if c.obs == nil {
		return c.wait(ctx, n)
	}
	start := time.Now()
	err := c.wait(ctx, n)
	c.mu.Lock()
	limit := c.alg.limit()
	c.mu.Unlock()
	reportWait(c.obs, ctx, Event{Name: c.name, Algorithm: c.algo, Home: HomeMemory, N: n}, limit, err, start)
	return err
}

// reportWait reports the end of a WaitN that started at start: e carries
// the limiter's fields, and gets the outcome, a Decision saying whether the
// wait admitted n (with the limit), the error and the latency.
func reportWait(obs Observer, ctx context.Context, e Event, limit int64, err error, start time.Time) {
	e.Wait = true
	e.Decision = Decision{Allowed: err == nil, Limit: int(limit)}
	if err == nil {
		e.Outcome = OutcomeAllowed
	} else {
		e.Outcome, e.Err = OutcomeError, err
		e.Decision.RetryAfter = RetryNever
	}
	if ctx == nil {
		ctx = context.Background()
	}
	e.Latency = time.Since(start)
	obs.Observe(ctx, e)
}

// wait is WaitN with nothing reported.
func (c *core[S, A]) wait(ctx context.Context, n int) error {
	c.mu.Lock()
	limit := c.alg.limit()
	_, isReserver := any(c.alg).(reserver[S])
	c.mu.Unlock()
	if n <= 0 || int64(n) > limit {
		return nError(n, limit)
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
	return waitLoop(ctx, c.ts.Clock(), func() (Decision, error) { return c.decideNow(n, consume), nil }, n)
}

// waitLoop retries allow after each denial's RetryAfter until it admits,
// ctx is done, or the wait cannot succeed (RetryNever: n exceeds a limit
// lowered meanwhile; a wait beyond ctx's deadline). clock is the limiter's
// (nil: the real clock).
func waitLoop(ctx context.Context, clock timesrc.Clock, allow func() (Decision, error), n int) error {
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
			return nError(n, int64(d.Limit))
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if timesrc.Outlasts(ctx, d.RetryAfter) {
			return errs.Deadline(ErrDeadline, d.RetryAfter)
		}
		if err := timesrc.Sleep(ctx, clock, d.RetryAfter); err != nil {
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
	now := c.ts.Now()
	c.mu.Lock()
	r := any(c.alg).(reserver[S]) // read again: SetRate may have replaced it
	if int64(n) > c.alg.limit() {
		limit := c.alg.limit()
		c.mu.Unlock()
		return nError(n, limit)
	}
	delay, res := r.reserve(&c.st, now, int64(n), maxDelay)
	if res != reserved {
		c.mu.Unlock()
		if res == reserveFull {
			return ErrQueueFull
		}
		return errs.Deadline(ErrDeadline, time.Duration(delay))
	}
	c.ticket++
	mine := c.ticket
	c.mu.Unlock()
	if delay == 0 {
		return nil
	}
	err := c.ts.Sleep(ctx, time.Duration(delay))
	if err != nil {
		c.mu.Lock()
		if c.ticket == mine { // nobody queued behind us: give the place back
			r.unreserve(&c.st, int64(n))
		}
		c.mu.Unlock()
	}
	return err
}

// reconfigure replaces the algorithm, letting convert carry the state over
// at the current time. Requires c.mu not held.
func (c *core[S, A]) reconfigure(alg A, convert func(st *S, now int64)) {
	now := c.ts.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	convert(&c.st, now)
	c.alg = alg
	c.ticket++ // reservations made under the old algorithm are not given back
}

// current returns the current algorithm. Requires c.mu not held.
func (c *core[S, A]) current() A {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.alg
}
