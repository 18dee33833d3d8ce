package redislimit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/errs"
	"github.com/rlkit/ratelimit/internal/report"
	"github.com/rlkit/ratelimit/internal/timesrc"
	"github.com/rlkit/ratelimit/internal/typednil"
	"github.com/rlkit/ratelimit/redislimit/internal/exec"
)

// Limiter is a [ratelimit.KeyedLimiter] whose state lives in Redis: one
// policy, one state per key, shared by every process that uses the same
// Redis, prefix and policy. Most callers want [Limiter.AllowN].
//
// Create one with [New]; the zero value is not usable. A Limiter is safe
// for concurrent use and holds no goroutine while idle, so it needs no
// Close (with [WithLeases], call [Limiter.ReleaseLeases] at shutdown to
// give back the quota its leases hold).
type Limiter struct {
	cur         atomic.Pointer[generation] // the policy and what depends on it; SetPolicy swaps it
	setMu       sync.Mutex                 // serializes SetPolicy
	base        string                     // the prefix of every Redis key name (WithPrefix)
	timeout     time.Duration
	failure     FailurePolicy
	instances   int // WithLocalFallback only: the instances sharing the limit
	cacheKeys   int // the deny cache's size, 0: none
	clock       ratelimit.Clock
	ts          timesrc.Source // local time: deny cache, breaker, reports, WaitN, client time
	clientTime  bool           // pass the local time to the scripts instead of Redis's TIME
	plain       bool           // key names hold keys as given, not digests
	observer    ratelimit.Observer
	name        string
	epoch       time.Time       // real time at New: time.Since(epoch) reads only the monotonic clock, for Latency
	logger      report.Logger   // where error reports go
	reportEvery time.Duration   // at most one report per reportEvery
	reports     report.Throttle // paces the reports
	latest      atomic.Int64    // with client time: the latest decision time seen (local ns)
	wire        *exec.Wire      // runs the scripts: batcher, retries, breaker, WAIT
	leases      *LeaseConfig    // WithLeases, defaults filled in; nil: off
	// decideHook, set by tests only, is called with every Decision that
	// lease mode makes (not a failure's) and the interval, in Unix ns, in
	// which it was made: [t, t] for one from a lease (t the local time)
	// and for a grant, admitted or denied, and the callers sharing it (t
	// its script's time on Redis's clock); otherwise (one script per
	// decision, the deny cache) the local times around the call (with
	// Redis on this host, one clock: Redis decided in between).
	decideHook func(d ratelimit.Decision, from, to int64)
	// giveBackHook, set by tests only, is called with every give-back of
	// a lease's unused events, left, of the lease granted at granted on
	// Redis's clock, and the interval (Unix ns, as decideHook's) in which
	// it was made: [t, t] in the script of the next grant (t its time),
	// the local times around its refund script otherwise, with the
	// script's error.
	giveBackHook func(left int, granted, from, to int64, err error)
}

var _ ratelimit.KeyedLimiter = (*Limiter)(nil)

// New returns a Limiter running p for every key, with state in Redis
// through client: a *redis.Client, *redis.ClusterClient, *redis.Ring or a
// failover client (all are [redis.UniversalClient]s; the limiter needs
// their pipelines, which the narrower redis.Scripter lacks).
//
// It returns an error wrapping [ratelimit.ErrInvalidConfig] when client is
// nil, when p is invalid (see [ratelimit.Policy.Validate]), when p.Period
// is not a whole number of microseconds, when p's arithmetic would not be
// exact in Redis's 53-bit integers, or when an option is invalid; the
// error names the option or the bound. New does not contact Redis.
//
// New adds one go-redis hook to client (once per client, however many
// limiters share it; on a Cluster or Ring client, to each node's client as
// it is made). The hook only watches dials, so that an error can say
// "connection refused" rather than "no reply": it changes no command.
func New(client redis.UniversalClient, p ratelimit.Policy, opts ...Option) (*Limiter, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if cfg.gave("WithPermitExpiry") {
		return nil, invalid("New: WithPermitExpiry applies only to NewConcurrency")
	}
	if typednil.Is(client) {
		return nil, invalid("New: client is nil (%T)", client)
	}
	l := &Limiter{
		base:        cfg.prefix,
		timeout:     cfg.timeout,
		failure:     cfg.failure,
		instances:   cfg.instances,
		cacheKeys:   cfg.cacheKeys,
		clock:       cfg.clock,
		ts:          timesrc.New(cfg.clock),
		clientTime:  cfg.clientTime,
		plain:       cfg.plain,
		observer:    cfg.observer,
		name:        cfg.name,
		epoch:       time.Now(),
		logger:      cfg.logger,
		reportEvery: cfg.reportEvery,
		leases:      cfg.leases,
	}
	if l.wire, err = exec.New(exec.Config{
		Client:      client,
		Timeout:     cfg.timeout,
		Breaker:     cfg.breaker,
		Now:         l.ts.Now,
		AckReplicas: cfg.ackReplicas,
		AckTimeout:  cfg.ackTimeout,
	}); err != nil {
		return nil, invalid("%v", err)
	}
	// Oldest first, as the options give them, each named after those before
	// it as SetPolicy would have named it; newest first in the chain.
	var prev []link
	var fs []forgotten
	for i, pp := range cfg.previous {
		if err := checkMode("WithPrevious", pp.mode); err != nil {
			return nil, err
		}
		sc, err := l.scriptsFor(pp.policy, "WithPrevious")
		if err != nil {
			return nil, err
		}
		next := p
		if i+1 < len(cfg.previous) {
			next = cfg.previous[i+1].policy
		}
		if pp.mode != ratelimit.StartFresh && samePolicy(pp.policy, next, l.ts.Now()) {
			continue // SetPolicy(next, pp.mode) changed nothing
		}
		pg := &generation{policy: pp.policy, scripts: sc, natural: l.naturalPrefix(sc.code, pp.policy)}
		pg.salt, pg.prefix = salted(pg.natural, prev, fs)
		lk, err := pg.linkTo(pp.mode, 0, "WithPrevious")
		if err != nil {
			return nil, err
		}
		prev, fs = keep(append([]link{lk}, prev...), fs)
	}
	g, err := l.newGeneration(p, "New", prev, fs)
	if err != nil {
		return nil, err
	}
	l.cur.Store(g)
	return l, nil
}

// Policy returns the policy l runs for every key.
func (l *Limiter) Policy() ratelimit.Policy { return l.cur.Load().policy }

// nowArg is the script's time argument: "" for the server's clock, the
// local time in Unix microseconds with [WithClock].
func (l *Limiter) nowArg() any {
	if !l.clientTime {
		return ""
	}
	return l.ts.Now() / 1000
}

// times returns the script's time argument and, when the deny cache needs
// it, the local time (ns) the decision is made at. With [WithClock]
// both come from one reading, truncated to the microsecond as the script
// sees it, so that the cache does not deny past the moment the script
// would admit.
func (l *Limiter) times(g *generation) (arg any, local int64) {
	if !l.clientTime {
		if g.cache == nil {
			return "", 0
		}
		return "", l.ts.Now()
	}
	now := l.ts.Now()
	return now / 1000, now - now%1000
}

// Allow is shorthand for AllowN(ctx, key, 1) that reports only whether the
// event was admitted (by Redis, or by the failure policy).
func (l *Limiter) Allow(ctx context.Context, key string) bool {
	d, _ := l.AllowN(ctx, key, 1)
	return d.Allowed
}

// AllowN reports whether n events may happen now for key, and consumes
// them if so: all n or nothing. A denied request stores nothing. When
// n <= 0 or n exceeds the limit the Decision is denied with RetryAfter
// [ratelimit.RetryNever].
//
// When Redis cannot decide within the timeout, AllowN returns the failure
// policy's Decision and an error wrapping [ErrUnavailable] and the cause;
// act on the Decision either way (see the package documentation, "Failures"). When
// ctx is done first, AllowN returns a denial with RetryAfter
// [FailClosedRetryAfter] and ctx.Err(), never the failure policy's Decision
// (a nil ctx gets the same denial and an error). With [WithObserver], every
// call is reported as one Event.
func (l *Limiter) AllowN(ctx context.Context, key string, n int) (ratelimit.Decision, error) {
	if l.observer == nil {
		return l.allowN(ctx, key, n)
	}
	start := time.Since(l.epoch)
	d, err := l.allowN(ctx, key, n)
	l.observe(ctx, n, d, err, false, start)
	return d, err
}

// allowN is AllowN without the observer.
func (l *Limiter) allowN(ctx context.Context, key string, n int) (ratelimit.Decision, error) {
	g := l.acquire()
	defer g.release()
	if ctx == nil {
		return ratelimit.Decision{Limit: g.policy.Limit, RetryAfter: FailClosedRetryAfter}, errNilContext
	}
	if ctx.Err() != nil {
		return l.canceled(ctx)
	}
	if n <= 0 || n > g.policy.Limit {
		return l.allowNever(ctx, g, key, n)
	}
	if g.leases != nil {
		return l.allowLeased(ctx, g, key, n)
	}
	now, local := l.times(g)
	if g.cache != nil {
		return l.allowCached(ctx, g, key, n, now, local)
	}
	d, err := l.decide(ctx, g, key, now, n, commit)
	if err != nil {
		return l.failed(ctx, g, key, n, err)
	}
	return d, nil
}

// allowNever answers AllowN for an n that can never be admitted: a denial
// with RetryAfter RetryNever and the key's quota, which Redis reports
// charging nothing (like any AllowN it converts the key's state under an
// earlier policy, see SetPolicy).
func (l *Limiter) allowNever(ctx context.Context, g *generation, key string, n int) (ratelimit.Decision, error) {
	d, err := l.decide(ctx, g, key, l.nowArg(), 0, allowNever)
	if err != nil {
		return l.failed(ctx, g, key, n, err)
	}
	d.Allowed, d.RetryAfter = false, ratelimit.RetryNever
	return d, nil
}

// allowCached is allowN with the deny cache: a denial remembered for key
// and n answers without a round trip; Redis's answer updates the cache.
// local is the local time now stands for.
func (l *Limiter) allowCached(ctx context.Context, g *generation, key string, n int, now any, local int64) (ratelimit.Decision, error) {
	h := g.cache.hash(key)
	d, gen, ok := g.cache.get(h, key, n, local, g.policy.Limit)
	if ok {
		return d, nil
	}
	d, cacheable, err := l.decideCacheable(ctx, g, key, now, n, commit)
	if err != nil {
		return l.failed(ctx, g, key, n, err)
	}
	inOrder := l.ordered(local)
	if d.Allowed {
		// What was cached for key predates this admission: a denial of a
		// larger n now has a longer wait.
		g.cache.invalidate(h, key)
	} else if inOrder && cacheable && d.Remaining == 0 {
		// Only a denial that leaves nothing is remembered: while nothing
		// remains, no instance can admit anything on key, so the copy stays
		// exactly what Redis would answer until the span ends. A denial
		// with some left may be followed by another instance's admission
		// that this one never sees (a cached Remaining of 1 after Redis
		// said 0 elsewhere).
		g.cache.put(h, key, n, local, g.cacheSpan(n, d), gen, d)
	}
	return d, nil
}

// failed answers a decision that Redis did not make: the caller's own
// cancellation, or else the failure policy.
func (l *Limiter) failed(ctx context.Context, g *generation, key string, n int, err error) (ratelimit.Decision, error) {
	if ctx.Err() != nil {
		return l.canceled(ctx)
	}
	return l.fail(ctx, g, "allow", key, n, err)
}

// ordered reports whether mono is not earlier than any time a decision
// was made at. Only with client time can it be earlier (a clock that runs
// backwards, or callers racing): the script then decides at its stored
// state's later time and counts RetryAfter from there, which a cache entry
// counting from mono would get wrong, so such a denial is not cached.
func (l *Limiter) ordered(mono int64) bool {
	if !l.clientTime {
		return true
	}
	for {
		last := l.latest.Load()
		if mono < last {
			return false
		}
		if mono == last || l.latest.CompareAndSwap(last, mono) {
			return true
		}
	}
}

// canceled is the answer to a caller whose ctx is done: a denial and
// ctx.Err(), never the failure policy (which is for Redis failures), and
// nothing reported: the caller gave up, Redis did not fail.
func (l *Limiter) canceled(ctx context.Context) (ratelimit.Decision, error) {
	return ratelimit.Decision{Limit: l.cur.Load().policy.Limit, RetryAfter: FailClosedRetryAfter}, ctx.Err()
}

// Peek reports the Decision AllowN(ctx, key, n) would return now, without
// consuming anything. Peek(ctx, key, 0) reports the key's current quota.
// It always asks Redis; on failure it returns the error and a zero
// Decision, and when ctx is done first a denial and ctx.Err(), as AllowN.
func (l *Limiter) Peek(ctx context.Context, key string, n int) (ratelimit.Decision, error) {
	g := l.acquire()
	defer g.release()
	if ctx == nil {
		return ratelimit.Decision{Limit: g.policy.Limit, RetryAfter: FailClosedRetryAfter}, errNilContext
	}
	if ctx.Err() != nil {
		return l.canceled(ctx)
	}
	valid := n >= 0 && n <= g.policy.Limit
	m, mode := n, peekOnly
	if !valid {
		m, mode = 0, peekNever
	}
	d, err := l.decide(ctx, g, key, l.nowArg(), m, mode)
	if err != nil {
		if ctx.Err() != nil {
			return l.canceled(ctx)
		}
		err = l.unavailable(ctx, "peek", key, err)
		return ratelimit.Decision{}, err
	}
	if !valid {
		d.Allowed, d.RetryAfter = false, ratelimit.RetryNever
	}
	return d, nil
}

// commitMode says whether a decision script consumes what it admits: the
// script's commit argument.
type commitMode string

const (
	commit     commitMode = "1" // AllowN: consume the events if admitted
	peekOnly   commitMode = "0" // Peek: decide, change nothing
	peekNever  commitMode = "n" // Peek for an n never admitted: a block does not change that denial
	allowNever commitMode = "x" // AllowN for an n never admitted: the same, but it converts state under an earlier policy
	penalize   commitMode = "p" // Penalize: charge min(n, remaining), no decision
	refund     commitMode = "r" // the refund scripts' mode argument
)

// The modes as script arguments, boxed once: a string converted to an
// interface on every call would cost an allocation.
var (
	commitArg     any = string(commit)
	peekOnlyArg   any = string(peekOnly)
	peekNeverArg  any = string(peekNever)
	allowNeverArg any = string(allowNever)
	penalizeArg   any = string(penalize)
	refundArg     any = string(refund)
)

// arg returns m as a script argument, without allocating.
func (m commitMode) arg() any {
	switch m {
	case commit:
		return commitArg
	case peekOnly:
		return peekOnlyArg
	case peekNever:
		return peekNeverArg
	case allowNever:
		return allowNeverArg
	case penalize:
		return penalizeArg
	case refund:
		return refundArg
	}
	return string(m)
}

// decide runs the decision script.
func (l *Limiter) decide(ctx context.Context, g *generation, key string, now any, n int, mode commitMode) (ratelimit.Decision, error) {
	d, _, err := l.decideCacheable(ctx, g, key, now, n, mode)
	return d, err
}

// decideCacheable runs the decision script, and reports whether a denial
// may be remembered by the deny cache: not one of a blocked key whose
// ResetAfter comes from state converted from an earlier policy without
// storing it, which does not shrink as time passes.
func (l *Limiter) decideCacheable(ctx context.Context, g *generation, key string, now any, n int, mode commitMode) (ratelimit.Decision, bool, error) {
	args := g.args(l, now, n, mode)
	var v []int64
	ack := mode == commit && l.wire.Acks()
	err := l.runCall(ctx, g, g.decideScript, g.keys(l, key), args, ack, func(cmd *redis.Cmd) (err error) {
		v, err = cmd.Int64Slice()
		return err
	})
	if err != nil {
		var nr *notReplicatedError
		if !errors.As(err, &nr) || len(v) != 4 || v[0] == 1 {
			return ratelimit.Decision{}, false, err
		}
		// A denial wrote nothing: it stands, replicated or not.
	}
	if len(v) != 4 {
		return ratelimit.Decision{}, false, &scriptError{values: len(v)}
	}
	return ratelimit.Decision{
		Allowed:    v[0] == 1,
		Limit:      g.policy.Limit,
		Remaining:  int(v[1]),
		RetryAfter: time.Duration(v[2]) * time.Microsecond,
		ResetAfter: time.Duration(v[3]) * time.Microsecond,
	}, v[0] == 0, nil
}

// RefundN gives back n events that AllowN admitted for key just before, as
// if they had not happened, never raising the key above a fresh state:
// tokens go back to the bucket (capped at capacity), the leaky bucket's
// level drops, the window that holds them is decremented, or the sliding
// log's newest n events are removed (under concurrent traffic on the same
// key these may be another request's, a moment younger). A key with no
// state needs no refund.
//
// The refund does not depend on ctx: it is made even when ctx is done or
// ends meanwhile (a client that went away must not leave its charge in
// place), bounded by the limiter's timeout only; ctx's values are kept.
//
// With [WithLocalFallback], a refund that Redis cannot make is made in the
// local fallback, which most likely admitted the events. The error wraps
// [ErrUnavailable] then, or [ratelimit.ErrInvalidN] when n <= 0.
func (l *Limiter) RefundN(ctx context.Context, key string, n int) error {
	g := l.acquire()
	defer g.release()
	if n <= 0 {
		return nError(n, g.policy.Limit)
	}
	n = min(n, g.policy.Limit) // refunding more than the limit empties the state
	if ctx == nil {
		ctx = context.Background() // a refund does not depend on ctx
	}
	// A refund gives back what was charged: it must not depend on the
	// caller still waiting (a client that went away would leave the charge
	// in place). It runs bounded by the limiter's timeout only.
	ctx = context.WithoutCancel(ctx)
	var h uint64
	if g.cache != nil {
		h = g.cache.hash(key)
		g.cache.invalidate(h, key)
	}
	args := g.args(l, l.nowArg(), n, refund)
	err := l.run(ctx, g, g.refundScript, g.keys(l, key), args, (*redis.Cmd).Err)
	if g.cache != nil {
		// Again: a denial decided before the refund landed may have been
		// cached meanwhile.
		g.cache.invalidate(h, key)
	}
	if err != nil {
		err = l.unavailable(ctx, "refund", key, err)
		if g.fallback != nil {
			_ = g.fallback.RefundN(ctx, key, n)
		}
		return err
	}
	return nil
}

// Wait is shorthand for WaitN(ctx, key, 1).
func (l *Limiter) Wait(ctx context.Context, key string) error {
	return l.WaitN(ctx, key, 1)
}

// WaitN blocks until n events are admitted for key or ctx is done,
// retrying after each denial's RetryAfter (so waiters on one key are not
// served in arrival order). It returns at once with an error wrapping
// [ratelimit.ErrInvalidN] or [ratelimit.ErrExceedsLimit] when n can never
// be admitted, and with one wrapping [ratelimit.ErrDeadline] (and
// context.DeadlineExceeded) when the wait would outlast ctx's deadline.
//
// When Redis is unavailable WaitN follows the failure policy: it returns
// nil when the policy admits (FailOpen, or the local fallback), waits as
// the local fallback says, and with FailClosed returns the error. When ctx
// is done it returns ctx.Err(), whatever the failure policy. With
// [WithObserver], the call is reported as one Event when it returns (Wait
// set; its tries are not reported one by one).
func (l *Limiter) WaitN(ctx context.Context, key string, n int) error {
	if l.observer == nil {
		_, err := l.waitN(ctx, key, n)
		return err
	}
	start := time.Since(l.epoch)
	d, err := l.waitN(ctx, key, n)
	l.observe(ctx, n, d, err, true, start)
	return err
}

// waitN is WaitN without the observer; it returns the last Decision.
func (l *Limiter) waitN(ctx context.Context, key string, n int) (ratelimit.Decision, error) {
	if limit := l.cur.Load().policy.Limit; n <= 0 || n > limit {
		return ratelimit.Decision{Limit: limit, RetryAfter: ratelimit.RetryNever}, nError(n, limit)
	}
	for {
		d, err := l.allowN(ctx, key, n)
		if ctx == nil {
			return d, err // errNilContext
		}
		if err != nil && ctx.Err() != nil {
			return l.canceled(ctx) // the caller gave up, whatever the failure policy says
		}
		if d.Allowed {
			return d, nil
		}
		if err != nil && l.failure != failLocal {
			return d, err
		}
		if d.RetryAfter == ratelimit.RetryNever {
			return d, nError(n, d.Limit)
		}
		if timesrc.Outlasts(ctx, d.RetryAfter) {
			return d, errs.Deadline(ratelimit.ErrDeadline, d.RetryAfter)
		}
		if err := l.ts.Sleep(ctx, d.RetryAfter); err != nil {
			return l.canceled(ctx)
		}
	}
}
