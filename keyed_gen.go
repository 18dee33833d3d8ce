package ratelimit

import (
	"errors"
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
	case TokenBucketAlgorithm, LeakyBucketAlgorithm:
		// To refill from empty, or drain when full, from one capacity
		// beyond: the most a reservation's overrun leaves (see settle).
		d = 2 * p.window()
	default:
		// A fixed or sliding window; a token bucket's time to refill from
		// empty; a leaky bucket's time to drain when full.
		d = p.window()
	}
	if d <= 0 || t > math.MaxInt64-int64(d) {
		return math.MaxInt64
	}
	return t + int64(d)
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
func (droppedStore) settle(int64, string, int64, int64) error     { return errSuperseded }
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

// keyedStore is the algorithm-independent face of shardStore[S, A]: the state of
// every key under one generation's policy (see generation). It returns
// verdicts, not Decisions: see verdict for why. Every method that takes the
// key's shard lock returns errSuperseded, having done nothing, when a newer
// generation has replaced the store: the caller retries on that one.
type keyedStore interface {
	// decide decides n events for key at now, taking the key's shard lock.
	decide(now int64, key string, n int, act action) (verdict, error)
	refund(now int64, key string, n int64) error
	// settle settles at now a reservation of key made at `at`: d events
	// more or fewer than its estimate (see settler). It returns
	// errCannotSettle under an algorithm that cannot.
	settle(now int64, key string, at, d int64) error
	// penalize charges min(n, what key has left) at now.
	penalize(now int64, key string, n int64) error
	// reset forgets key's state here and in every older generation.
	reset(key string) error
	len() int
	// lockFor returns the lock of key's shard, the shard's index, and its
	// retired flag, which may be read with the lock held: true once a newer
	// generation has replaced the store.
	lockFor(key string) (*sync.Mutex, int, *bool)
	// decideLocked is decide with the shard's lock, and the locks of key's
	// shards in older generations that hold any key, already held.
	decideLocked(now int64, key string, n int, act action) (verdict, error)
	refundLocked(now int64, key string, n int64)

	// bind makes the store generation g's, counting its keys in keys.
	bind(g *generation, keys *atomic.Int64)
	// take is a newer generation's conversion of key (see
	// shardStore.inherited): it reports the events key has used here at now
	// (Limit minus Peek(0)'s Remaining), and whether the store holds key.
	// With remove, the key is deleted, and its room in the key count passes
	// to the caller. With locked, the caller holds key's shard lock.
	take(now int64, key string, remove, locked bool) (used int64, found bool)
	// olderLock returns the lock and shard index of key's shard when that
	// shard holds any key, for AllowAll to take in its lock order.
	olderLock(key string) (*sync.Mutex, int, bool)
	// forget deletes key, taking its shard's lock.
	forget(key string)
	// reclaimSome deletes idle keys in shards whose lock is free, looking
	// at up to budget entries; it returns the budget left.
	reclaimSome(now int64, budget int) int
	// retire marks every shard superseded: nothing is decided here again.
	retire()
	// drop forgets every key: each is idle (see Keyed.prune).
	drop()
	// empty reports whether no shard holds a key.
	empty() bool
}

// errSuperseded is returned inside the package, never to callers, by a
// store that a newer generation replaced.
var errSuperseded = errors.New("ratelimit: superseded generation")

// samePolicy reports whether a change from the policy in force, from, to
// to changes nothing (see [reconf.Unchanged]), at now in Unix ns.
func samePolicy(from, to Policy, now int64) bool {
	zf, zt := from.Calendar.Location, to.Calendar.Location
	from.Calendar.Location, to.Calendar.Location = nil, nil
	return from == to && reconf.Unchanged(zf, zt, time.Unix(0, now))
}
