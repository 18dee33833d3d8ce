package ratelimit

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlkit/ratelimit/internal/timesrc"
)

// Keyed is an in-memory [KeyedLimiter]: one state per key under one
// [Policy], with the same decisions as the single limiter of that policy.
// Most callers want [Keyed.AllowN] or [Keyed.Wait].
//
// Keys live in shards, each with its own lock, so unrelated keys rarely
// contend. Per-key state is compact (16 bytes, 8 for the leaky bucket; the
// sliding log stores up to limit timestamps) and holds no lock or
// clock of its own.
//
// Reclaiming memory never changes a decision: a key is forgotten only once
// its state is idle (a full bucket, or every window it counted fully
// passed), so a client whose key was reclaimed gets exactly what it would
// have had anyway. Reclaiming is incremental, with no sweeper goroutine and
// no pass over the whole table: each new key looks at the next few keys of
// its shard and drops the idle ones, under that shard's lock only. The
// number of keys is capped over all shards ([WithMaxKeys], default
// 1<<20 keys): when the limiter holds that many keys and none of those
// sampled (up to 20 in the new key's shard, then up to 16 in other non-empty
// shards, a bounded cost) is idle, a request for a new key is denied with
// [ErrTooManyKeys] while existing keys go on as before, so a flood of random
// keys cannot exhaust memory or evict real clients.
//
// With [WithObserver], every AllowN and WaitN reports one [Event] (Home
// [HomeKeyed]); the key is never in it.
//
// The policy can change while the limiter runs ([Keyed.SetPolicy]), with an
// explicit [Inheritance] for the state keys have built up, converted per
// key the first time each is touched. Keyed is a [KeyAdmin]: support and
// abuse handling can [Keyed.Reset] a key, [Keyed.Block] it for a while, or
// [Keyed.Penalize] it.
//
// Create one with [NewKeyed]; the zero value is not usable. A Keyed is safe
// for concurrent use.
type Keyed struct {
	id      uint64 // orders locks in AllowAll
	ts      timesrc.Source
	obs     Observer // nil: no Events
	name    string
	maxKeys int

	// cur is the current generation: the policy every decision uses and the
	// store of the keys converted to it (see SetPolicy).
	cur atomic.Pointer[generation]
	// chained is set while older generations may hold state: decisions then
	// take the path that prunes them once they are idle.
	chained atomic.Bool
	// pruneAt is the earliest time an older generation can be pruned.
	pruneAt atomic.Int64
	// keys counts the keys held by every generation's store.
	keys atomic.Int64
	// blocks holds the keys Block blocked, beside the generations.
	blocks blockTable
	// resets holds when keys were Reset, for the reservations made before.
	resets resetLog

	// mu serializes SetPolicy and pruning; no shard lock is ever held while
	// waiting for it.
	mu sync.Mutex
}

var (
	_ KeyedLimiter = (*Keyed)(nil)
	_ KeyAdmin     = (*Keyed)(nil)
)

// defaultMaxKeys is the key cap of a Keyed without WithMaxKeys.
const defaultMaxKeys = 1 << 20

var keyedIDs atomic.Uint64

// keyedOptions are the options NewKeyed accepts.
const keyedOptions = optClock | optMaxKeys | optObserver | optName

// NewKeyed returns an in-memory keyed limiter running p for every key. It
// returns an error wrapping [ErrInvalidConfig] when p is invalid (the
// message names the Policy field) or when an option is invalid
// ([WithMaxKeys] not positive, [WithClock] given a typed nil) or does not
// apply to it (such as [WithDefaultTier]).
func NewKeyed(p Policy, opts ...Option) (*Keyed, error) {
	o, err := buildOptions("NewKeyed", keyedOptions, opts)
	if err != nil {
		return nil, err
	}
	if o.given&optMaxKeys == 0 {
		o.maxKeys = defaultMaxKeys
	}
	st, err := newKeyedStore(p, o.maxKeys)
	if err != nil {
		return nil, err
	}
	k := &Keyed{
		id:      keyedIDs.Add(1),
		ts:      timesrc.New(o.clock),
		obs:     o.observer,
		name:    o.name,
		maxKeys: o.maxKeys,
	}
	k.blocks.init(int64(o.maxKeys))
	k.pruneAt.Store(math.MaxInt64)
	k.cur.Store(k.newGeneration(p, st, 0, 0))
	return k, nil
}

// Policy returns the policy k runs for every key: the one given to
// [NewKeyed], or to the latest [Keyed.SetPolicy].
func (k *Keyed) Policy() Policy { return k.cur.Load().policy }

// Len returns the number of keys k holds state for, counting the keys not
// yet converted since a [Keyed.SetPolicy].
func (k *Keyed) Len() int {
	total := 0
	for g := k.cur.Load(); g != nil; g = g.prev.Load() {
		total += g.store.len()
	}
	return total
}

// Allow is shorthand for AllowN(ctx, key, 1) that reports only whether the
// event was admitted.
func (k *Keyed) Allow(ctx context.Context, key string) bool {
	d, _ := k.AllowN(ctx, key, 1)
	return d.Allowed
}

// AllowN reports whether n events may happen now for key and consumes them
// if so: all n or nothing. A denied request stores nothing. When n <= 0 or
// n exceeds the limit the Decision is denied with RetryAfter [RetryNever].
// The error is nil except for [ErrTooManyKeys]. Nothing here waits, so ctx
// is only passed on to the [Observer].
func (k *Keyed) AllowN(ctx context.Context, key string, n int) (Decision, error) {
	if k.obs != nil {
		return k.allowNObserved(ctx, key, n)
	}
	// decide's fast path, written out here: calling decide instead costs
	// 13-15% on the hot-key benchmark (BenchmarkKeyed/*/hotkey/serial).
	now := k.ts.Now()
	if k.blocks.count.Load() == 0 && !k.chained.Load() {
		g := k.cur.Load()
		v, err := g.store.decide(now, key, n, consume)
		if err != errSuperseded {
			return v.decision(g.limit), err
		}
	}
	return k.decideSlow(now, key, n, consume)
}

// decide decides n events for key at now, under any block and across any
// change of policy.
func (k *Keyed) decide(now int64, key string, n int, act action) (Decision, error) {
	if k.blocks.count.Load() == 0 && !k.chained.Load() {
		g := k.cur.Load()
		v, err := g.store.decide(now, key, n, act)
		if err != errSuperseded {
			return v.decision(g.limit), err
		}
	}
	return k.decideSlow(now, key, n, act)
}

// decideSlow is decide when a key may be blocked, an older generation may
// be due for pruning, or the current generation was just superseded.
func (k *Keyed) decideSlow(now int64, key string, n int, act action) (Decision, error) {
	left, blocked := k.blocks.left(key, now)
	for g := k.cur.Load(); ; g = g.next.Load() {
		var v verdict
		var err error
		if blocked && blockApplies(n, g.limit, act) {
			v, err = g.store.decide(now, key, 0, inspect)
			v = blockedVerdict(v, left)
		} else {
			v, err = g.store.decide(now, key, n, act)
		}
		if err != errSuperseded {
			k.maybePrune(now)
			return v.decision(g.limit), err
		}
	}
}

// allowNObserved is AllowN with an Observer.
func (k *Keyed) allowNObserved(ctx context.Context, key string, n int) (Decision, error) {
	now, mark := k.ts.NowTimed()
	d, err := k.decide(now, key, n, consume)
	k.report(ctx, n, d, err, k.ts.Since(now, mark))
	return d, err
}

// report tells k's Observer of the AllowN decision d (and err) for n
// events, which took latency. Requires k.obs set.
func (k *Keyed) report(ctx context.Context, n int, d Decision, err error, latency time.Duration) {
	if ctx == nil {
		ctx = context.Background()
	}
	e := Event{Name: k.name, Algorithm: k.cur.Load().policy.Algorithm, Home: HomeKeyed, N: n, Decision: d, Latency: latency}
	e.Outcome, e.Err = outcome(n, d, err)
	k.obs.Observe(ctx, e)
}

// Peek reports the Decision and error AllowN(ctx, key, n) would return now
// without consuming anything or storing the key: a new key that the key cap
// would refuse is reported denied with AllowN's RetryAfter of one second and
// [ErrTooManyKeys]. Peek may reclaim idle keys, which changes no decision.
// Peek(ctx, key, 0) reports the key's current quota. Peek is not a
// decision: it reports nothing to the [Observer].
func (k *Keyed) Peek(ctx context.Context, key string, n int) (Decision, error) {
	return k.decide(k.ts.Now(), key, n, inspect)
}

// RefundN gives back n events admitted for key just before, as if they had
// not happened; it never raises a key above a fresh state. For the sliding
// log the newest n events of the key are removed, which under concurrent
// traffic on the same key may be another request's events a moment
// younger. A key that is no longer held needs no refund.
func (k *Keyed) RefundN(ctx context.Context, key string, n int) error {
	if n <= 0 {
		return nError(n, 0)
	}
	now := k.ts.Now()
	for g := k.cur.Load(); g.store.refund(now, key, int64(n)) == errSuperseded; g = g.next.Load() {
	}
	return nil
}

// Wait blocks until one event is admitted for key or ctx is done. It is
// shorthand for WaitN(ctx, key, 1).
func (k *Keyed) Wait(ctx context.Context, key string) error {
	return k.WaitN(ctx, key, 1)
}

// WaitN blocks until n events are admitted for key or ctx is done. It
// returns at once with [ErrInvalidN] or [ErrExceedsLimit] when n can never
// be admitted, with [ErrDeadline] when the next retry would outlast ctx's
// deadline, and with [ErrTooManyKeys] when the key cannot be held. Waiters
// on a key retry after each Decision's RetryAfter; unlike the single bucket
// limiters they are not served in arrival order. With an [Observer], WaitN
// reports one Event when it returns, not one per retry.
func (k *Keyed) WaitN(ctx context.Context, key string, n int) error {
	if k.obs == nil {
		return k.wait(ctx, key, n)
	}
	start := time.Now()
	err := k.wait(ctx, key, n)
	g := k.cur.Load()
	reportWait(k.obs, ctx, Event{Name: k.name, Algorithm: g.policy.Algorithm, Home: HomeKeyed, N: n}, g.limit, err, start)
	return err
}

// atomicKeyed offers k to AllowAll, to be decided with others of its kind
// all at once (see atomicAllower and allowAllAtomic).
func (k *Keyed) atomicKeyed() *Keyed { return k }

// wait is WaitN with nothing reported.
func (k *Keyed) wait(ctx context.Context, key string, n int) error {
	if ctx == nil {
		return errNilContext
	}
	return waitLoop(ctx, k.ts.Clock(), func() (Decision, error) {
		return k.decide(k.ts.Now(), key, n, consume)
	}, n)
}

// Reset forgets key's state, under the current policy and any earlier one
// not yet converted (see [Keyed.SetPolicy]), and lifts any block on it: the
// key starts over with a full quota. It returns an error only for a nil
// ctx.
func (k *Keyed) Reset(ctx context.Context, key string) error {
	if ctx == nil {
		return errNilContext
	}
	for g := k.cur.Load(); g.store.reset(key) == errSuperseded; g = g.next.Load() {
	}
	k.blocks.remove(key)
	k.resets.add(key, k.ts.Now())
	return nil
}

// Block denies every request for key for d from now, whatever the policy
// would decide: AllowN and Peek with 0 <= n <= the limit (AllowN: 1 <= n)
// report Decision{Allowed: false, Remaining: 0} with RetryAfter the rest of
// the block and ResetAfter the later of the block's end and the key's own,
// and charge nothing; WaitN waits for the block to end, or returns
// [ErrDeadline] at once when that would outlast ctx's deadline; AllowAll
// denies a request with a blocked dimension. The Observer sees blocked
// decisions as denied. The key's state is kept and applies again when the
// block ends; a change of policy keeps the block.
//
// A new Block replaces the one in force, d <= 0 lifts it, and Reset lifts
// it too. Blocks live beside the keys' states, at most as many as
// [WithMaxKeys] allows keys: Block returns [ErrTooManyKeys] when that many
// are in force. Ended blocks are forgotten when their key is next decided,
// a few on every Block, and all at once when the table is full or every
// block has ended. A d above 100 years, or a nil ctx, is an error.
func (k *Keyed) Block(ctx context.Context, key string, d time.Duration) error {
	if ctx == nil {
		return errNilContext
	}
	if d > maxPeriod {
		return errBlockDuration(d)
	}
	if d <= 0 {
		k.blocks.remove(key)
		return nil
	}
	now := k.ts.Now()
	return k.blocks.set(key, now+int64(d), now)
}

// Penalize charges key up to n events without a decision, such as a
// penalty for a failed login: it charges min(n, r) as an admitted AllowN
// would, where r is the Remaining Peek(ctx, key, 0) would report now if the
// key were not blocked. So a penalty never overdraws a key: a larger one
// empties it. A key k does not hold is created (with [ErrTooManyKeys] when
// there is no room for it). It reports nothing to the [Observer]. It
// returns an error wrapping [ErrInvalidN] when n <= 0, and an error for a
// nil ctx.
func (k *Keyed) Penalize(ctx context.Context, key string, n int) error {
	if ctx == nil {
		return errNilContext
	}
	if n <= 0 {
		return nError(n, 0)
	}
	now := k.ts.Now()
	for g := k.cur.Load(); ; g = g.next.Load() {
		if err := g.store.penalize(now, key, int64(n)); err != errSuperseded {
			k.maybePrune(now)
			return err
		}
	}
}

// newGeneration returns the generation of p with the store st, made by
// SetPolicy with mode (0 for NewKeyed's), and binds st to it.
func (k *Keyed) newGeneration(p Policy, st keyedStore, seq uint64, mode Inheritance) *generation {
	g := &generation{policy: p, limit: int64(p.Limit), store: st, seq: seq, mode: mode}
	g.idleAt.Store(math.MaxInt64)
	st.bind(g, &k.keys)
	return g
}

// SetPolicy makes every decision of k from now on use p, and says with
// mode what becomes of the state keys built up under the policy in force
// before: [KeepUsed] keeps the events used (up to p's limit), [ScaleUsed]
// scales them by p's limit over the old one (rounded up), [StartFresh]
// forgets them. Use it when a customer upgrades (a loosened limit with
// KeepUsed carries over what they used), or to tighten a limit during an
// incident.
//
// Conversion is lazy and per key: the first time a key is touched after
// the change (AllowN, Peek, WaitN, RefundN, Penalize, AllowAll) its state
// under the old policy is converted at that moment: used = old Limit minus
// the Remaining a Peek(0) of it reports then (any block ignored); the mode
// turns used into the new policy's terms, and the key's new state is a
// fresh state of p charged used at once. A key untouched across several
// changes goes through each in turn, with each change's mode and limit,
// across the last four changes: a key whose state is older than that, and
// not idle yet, starts fresh (this keeps every decision's work bounded
// however often the policy changes, here as on Redis, where a decision
// probes at most four previous policies). Peek computes the same
// conversion without storing anything. A key with no state under the old
// policy starts fresh.
//
// Why this rule: a change never hands a key more than the mode defines
// (used never shrinks below what the mode says; the one exception is the
// key left more than four changes behind, above), it never locks a key out
// (used is at most p's limit, so the key recovers within one window of p),
// and the same lazy rule works on Redis, where many processes share the
// state and no process can rewrite every key at once.
//
// Per algorithm: the token and leaky buckets keep the used amount exactly
// (as tokens taken, or as the level); the fixed window, sliding counter and
// calendar quota count it in the current window or period; the sliding log
// re-times it to the moment of conversion, so the key may recover up to one
// window later than the old timestamps would have let it. Changing the
// algorithm (a token bucket to a sliding log, say) follows the same rule.
//
// Blocks ([Keyed.Block]) are kept. The old policy's states take memory (and
// count against [WithMaxKeys]) until converted, reclaimed when idle, or
// forgotten with the whole old policy once every state of it is idle: a
// window of it (two for the sliding counter, the rest of the period for a
// calendar quota, the time to refill or drain for the buckets) after the
// change, or four changes later. A change costs the memory of the keys
// its policy's states hold, and about 200 bytes once it holds none.
//
// Setting the policy in force again with KeepUsed or ScaleUsed changes
// nothing (a configuration reload may re-apply it as often as it likes);
// with StartFresh it starts every key fresh.
//
// It returns an error wrapping [ErrInvalidConfig], and changes nothing,
// when p is invalid or mode is not one of the three. SetPolicy is safe to
// call concurrently with decisions.
func (k *Keyed) SetPolicy(p Policy, mode Inheritance) error {
	if mode < KeepUsed || mode > StartFresh {
		return configError("ratelimit.Keyed.SetPolicy mode must be KeepUsed, ScaleUsed or StartFresh, got %v", mode)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	old := k.cur.Load()
	if mode != StartFresh && samePolicy(old.policy, p, k.ts.Now()) {
		return nil // p is old's, valid: no store to build
	}
	st, err := newKeyedStore(p, k.maxKeys)
	if err != nil {
		return err
	}
	g := k.newGeneration(p, st, old.seq+1, mode)
	g.prev.Store(old)
	// next first: a decision that finds old's shard retired moves on to g.
	old.next.Store(g)
	k.chained.Store(true)
	// Retire every shard before g is published: no key can be converted to
	// g while a decision could still store it in old.
	old.store.retire()
	k.cur.Store(g)
	// Read after retiring: every decision made in old read its time before.
	now := k.ts.Now()
	old.idleAt.Store(idleBy(old.policy, now))
	k.prune(now)
	return nil
}

// maybePrune prunes k's older generations if one is due, unless another
// goroutine is changing the policy or pruning.
func (k *Keyed) maybePrune(now int64) {
	if now < k.pruneAt.Load() || !k.mu.TryLock() {
		return
	}
	k.prune(now)
	k.mu.Unlock()
}

// prune drops the store of every older generation whose states are all
// idle at now, or that holds no key (a superseded store never gains one):
// forgetting them changes no decision. It also drops those more than
// keptPolicies changes back, whose keys start fresh (as on Redis, where
// a decision probes that many previous policies at most). Generations with
// no store are kept while an older one has one, as conversions from it go
// through their steps, but each in a copy that holds only its policy and
// mode: the dropped store, whose shards take kilobytes, goes with the
// original once no decision holds it. Requires k.mu held and no shard
// lock.
func (k *Keyed) prune(now int64) {
	cur := k.cur.Load()
	last := cur // the oldest generation that still holds a store
	next := int64(math.MaxInt64)
	newer, depth := cur, 0
	for o := cur.prev.Load(); o != nil; newer, o = o, o.prev.Load() {
		depth++
		if !o.dropped.Load() && (depth > keptPolicies || now >= o.idleAt.Load() || o.store.empty()) {
			o.dropped.Store(true)
			o.store.drop()
		}
		if !o.dropped.Load() {
			last = o
			next = min(next, o.idleAt.Load())
		} else if _, light := o.store.(droppedStore); !light {
			o = k.lighten(newer, o)
		}
	}
	last.prev.Store(nil)
	k.pruneAt.Store(next)
	k.chained.Store(cur.prev.Load() != nil)
}

// lighten replaces the dropped generation o, whose next newer one is
// newer, with a copy that holds no store, and returns the copy. Nothing
// of o changes: a decision that still holds o finds its store retired and
// moves on to o.next, and a conversion walking the chain through o or
// through the copy applies the same step. Requires k.mu held.
func (k *Keyed) lighten(newer, o *generation) *generation {
	c := &generation{policy: o.policy, limit: o.limit, store: droppedStore{}, seq: o.seq, mode: o.mode}
	c.idleAt.Store(o.idleAt.Load())
	c.dropped.Store(true)
	older := o.prev.Load()
	c.prev.Store(older)
	c.next.Store(o.next.Load())
	newer.prev.Store(c)
	if older != nil {
		older.next.Store(c)
	}
	return c
}
