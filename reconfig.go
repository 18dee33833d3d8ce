package ratelimit

import (
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlkit/ratelimit/internal/reconf"
)

// keptPolicies is the number of previous policies whose states a Keyed
// converts (see reconf.Kept).
const keptPolicies = reconf.Kept

// generation is one policy of a [Keyed] limiter and the store of the keys
// decided under it. SetPolicy makes a new generation current; the one it
// replaces keeps its states, read-only, until each key is converted the
// first time it is touched, and until every state left is idle, when it is
// pruned.
//
// Locks are taken newest generation first: a decision holds its key's
// shard in the current generation while it takes the key's shard in each
// older one in turn. AllowAll takes every lock it needs at once, ordered by
// (Keyed id, generation newest first, shard index).
type generation struct {
	policy Policy
	limit  int64
	store  keyedStore
	seq    uint64      // 0 for NewKeyed's, then 1, 2, ...: the lock order
	mode   Inheritance // how states of the previous generation convert to this one
	// prev is the generation this one replaced, nil once no older one can
	// hold state; next is the one that replaced this one, nil while this
	// one is current. Once set, next only changes to a copy of the same
	// generation without its store (see Keyed.lighten).
	prev, next atomic.Pointer[generation]
	// idleAt is when every state of this generation is idle, set once it
	// is superseded; math.MaxInt64 before.
	idleAt atomic.Int64
	// dropped is set, under Keyed.mu, when the store is pruned: it holds
	// no key, and conversions skip it.
	dropped atomic.Bool
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

// samePolicy reports whether a change from the policy in force, from, to
// to changes nothing (see [reconf.Unchanged]), at now in Unix ns.
func samePolicy(from, to Policy, now int64) bool {
	zf, zt := from.Calendar.Location, to.Calendar.Location
	from.Calendar.Location, to.Calendar.Location = nil, nil
	return from == to && reconf.Unchanged(zf, zt, time.Unix(0, now))
}

// inherit converts used, the events a key used under a policy of limit
// from, into the terms of the next policy, of limit to, by mode.
func inherit(used int64, mode Inheritance, from, to int64) int64 {
	switch mode {
	case KeepUsed:
		return min(used, to)
	case ScaleUsed:
		return min(mulDivCeil(used, to, from), to)
	}
	return 0
}

// idleBy returns a time by which every state of p last changed at or
// before t is idle: the longest time a state of p takes to become
// indistinguishable from a fresh one.
func idleBy(p Policy, t int64) int64 {
	var d time.Duration
	switch p.Algorithm {
	case SlidingCounterAlgorithm:
		// The current window, then one more in which it is the previous.
		d = 2 * p.Period
	case QuotaAlgorithm:
		// The end of the period containing t.
		d = p.WindowAt(time.Unix(0, t))
	default:
		// A fixed or sliding window; a token bucket's time to refill from
		// empty; a leaky bucket's time to drain when full.
		d = p.Window()
	}
	if d <= 0 || t > math.MaxInt64-int64(d) {
		return math.MaxInt64
	}
	return t + int64(d)
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

// droppedStore is the store of a generation that Keyed.lighten copied
// without its own: it holds no key, and nothing is decided in it.
type droppedStore struct{}

var (
	droppedMu      sync.Mutex // lockFor's, never contended: nothing is decided here
	droppedRetired = true
)

func (droppedStore) decide(int64, string, int, action) (verdict, error) {
	return verdict{}, errSuperseded
}
func (droppedStore) refund(int64, string, int64) error            { return errSuperseded }
func (droppedStore) penalize(int64, string, int64) error          { return errSuperseded }
func (droppedStore) reset(string) error                           { return errSuperseded }
func (droppedStore) len() int                                     { return 0 }
func (droppedStore) bind(*generation, *atomic.Int64)              {}
func (droppedStore) refundLocked(int64, string, int64)            {}
func (droppedStore) forget(string)                                {}
func (droppedStore) reclaimSome(_ int64, budget int) int          { return budget }
func (droppedStore) retire()                                      {}
func (droppedStore) drop()                                        {}
func (droppedStore) empty() bool                                  { return true }
func (droppedStore) olderLock(string) (*sync.Mutex, int, bool)    { return nil, 0, false }
func (droppedStore) take(int64, string, bool, bool) (int64, bool) { return 0, false }
func (droppedStore) lockFor(string) (*sync.Mutex, int, *bool) {
	return &droppedMu, 0, &droppedRetired
}
func (droppedStore) decideLocked(int64, string, int, action) (verdict, error) {
	return verdict{}, errSuperseded
}
