package ratelimit

import (
	"context"
	"hash/maphash"
	"strings"
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
// contend. Per-key state is compact (16 bytes for every algorithm but the
// sliding log, which stores up to limit timestamps) and holds no lock or
// clock of its own.
//
// Reclaiming memory never changes a decision: a key is forgotten only once
// its state is idle (a full bucket, or every window it counted fully
// passed), so a client whose key was reclaimed gets exactly what it would
// have had anyway. Reclaiming is incremental, with no sweeper goroutine and
// no pass over the whole table: each new key looks at the next few keys of
// its shard and drops the idle ones, under that shard's lock only. The
// number of keys is capped over all shards ([WithMaxKeys], default
// [DefaultMaxKeys]): when the limiter holds that many keys and none of those
// sampled (up to 20 in the new key's shard, then up to 16 in other non-empty
// shards, a bounded cost) is idle, a request for a new key is denied with
// [ErrTooManyKeys] while existing keys go on as before, so a flood of random
// keys cannot exhaust memory or evict real clients.
//
// With [WithObserver], every AllowN and WaitN reports one [Event] (Home
// [HomeKeyed]); the key is never in it.
//
// Create one with [NewKeyed]; the zero value is not usable. A Keyed is safe
// for concurrent use.
type Keyed struct {
	policy Policy
	id     uint64 // orders locks in AllowAll
	ts     timesrc.Source
	store  keyedStore
	obs    Observer // nil: no Events
	name   string
}

var _ KeyedLimiter = (*Keyed)(nil)

// DefaultMaxKeys is the number of keys a [Keyed] limiter holds at most
// unless [WithMaxKeys] says otherwise.
const DefaultMaxKeys = 1 << 20

// defaultShards is the number of shards of a Keyed limiter.
const defaultShards = 64

// WithMaxKeys caps the number of keys a [Keyed] limiter holds at exactly n,
// over all its shards: a new key that would be key n+1 is admitted only if
// an idle key can be reclaimed to make room, and is otherwise denied with
// [ErrTooManyKeys]. A non-positive n is an error: [NewKeyed] returns an
// error wrapping [ErrInvalidConfig]. It applies to NewKeyed only: the other
// constructors return a configuration error naming it.
func WithMaxKeys(n int) Option {
	return optionFunc(func(o *options) {
		o.given |= optMaxKeys
		if n <= 0 {
			o.setErr(configError("ratelimit.WithMaxKeys must be positive, got %d", n))
			return
		}
		o.maxKeys = n
	})
}

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
		o.maxKeys = DefaultMaxKeys
	}
	st, err := newKeyedStore(p, o.maxKeys)
	if err != nil {
		return nil, err
	}
	return &Keyed{
		policy: p,
		id:     keyedIDs.Add(1),
		ts:     timesrc.New(o.clock),
		store:  st,
		obs:    o.observer,
		name:   o.name,
	}, nil
}

// newKeyedStore validates p and returns an empty store running it, holding
// at most maxKeys keys.
func newKeyedStore(p Policy, maxKeys int) (keyedStore, error) {
	switch p.Algorithm {
	case TokenBucketAlgorithm:
		return storeOf[tbState, *tokenBucketAlg](maxKeys)(newTokenBucketAlg(p.Limit, p.Refill, p.Period, policyParams))
	case LeakyBucketAlgorithm:
		return storeOf[lbState, *leakyBucketAlg](maxKeys)(newLeakyBucketAlg(p.Limit, p.Period, policyParams))
	case FixedWindowAlgorithm:
		return storeOf[fwState, *fixedWindowAlg](maxKeys)(newFixedWindowAlg(p.Limit, p.Period, policyParams))
	case SlidingLogAlgorithm:
		return storeOf[slState, *slidingLogAlg](maxKeys)(newSlidingLogAlg(p.Limit, p.Period, policyParams))
	case SlidingCounterAlgorithm:
		return storeOf[scState, *slidingCounterAlg](maxKeys)(newSlidingCounterAlg(p.Limit, p.Period, policyParams))
	case QuotaAlgorithm:
		return storeOf[fwState, *quotaAlg](maxKeys)(newQuotaAlg(p.Limit, p.Calendar, policyParams))
	}
	return nil, p.Validate()
}

// storeOf returns a function that makes a store for an algorithm, or passes
// on the error of the algorithm's constructor.
func storeOf[S any, A algorithm[S]](maxKeys int) func(A, error) (keyedStore, error) {
	return func(alg A, err error) (keyedStore, error) {
		if err != nil {
			return nil, err
		}
		return newStore[S](alg, maxKeys), nil
	}
}

// Policy returns the policy k runs for every key.
func (k *Keyed) Policy() Policy { return k.policy }

// Len returns the number of keys k holds state for.
func (k *Keyed) Len() int { return k.store.len() }

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
	v, err := k.store.decide(k.ts.Now(), key, n, consume)
	return v.decision(int64(k.policy.Limit)), err
}

// allowNObserved is AllowN with an Observer.
func (k *Keyed) allowNObserved(ctx context.Context, key string, n int) (Decision, error) {
	now, mark := k.ts.NowTimed()
	v, err := k.store.decide(now, key, n, consume)
	d := v.decision(int64(k.policy.Limit))
	k.report(ctx, n, d, err, k.ts.Since(now, mark))
	return d, err
}

// report tells k's Observer of the AllowN decision d (and err) for n
// events, which took latency. Requires k.obs set.
func (k *Keyed) report(ctx context.Context, n int, d Decision, err error, latency time.Duration) {
	if ctx == nil {
		ctx = context.Background()
	}
	e := Event{Limit: k.name, Algorithm: k.policy.Algorithm, Home: HomeKeyed, N: n, Decision: d, Latency: latency}
	e.Outcome, e.Err = outcome(ctx, n, d, err)
	k.obs.Observe(ctx, e)
}

// Peek reports the Decision and error AllowN(ctx, key, n) would return now
// without consuming anything or storing the key: a new key that the key cap
// would refuse is reported denied with AllowN's RetryAfter of one second and
// [ErrTooManyKeys]. Peek may reclaim idle keys, which changes no decision.
// Peek(ctx, key, 0) reports the key's current quota. Peek is not a
// decision: it reports nothing to the [Observer].
func (k *Keyed) Peek(ctx context.Context, key string, n int) (Decision, error) {
	v, err := k.store.decide(k.ts.Now(), key, n, inspect)
	return v.decision(int64(k.policy.Limit)), err
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
	k.store.refund(k.ts.Now(), key, int64(n))
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
	reportWait(k.obs, ctx, Event{Limit: k.name, Algorithm: k.policy.Algorithm, Home: HomeKeyed, N: n}, int64(k.policy.Limit), err, start)
	return err
}

// wait is WaitN with nothing reported.
func (k *Keyed) wait(ctx context.Context, key string, n int) error {
	if ctx == nil {
		return errNilContext
	}
	limit := int64(k.policy.Limit)
	return waitLoop(ctx, k.ts.Clock(), func() (Decision, error) {
		v, err := k.store.decide(k.ts.Now(), key, n, consume)
		return v.decision(limit), err
	}, n)
}

// keyedStore is the algorithm-independent face of store[S, A]. It returns
// verdicts, not Decisions: see verdict for why.
type keyedStore interface {
	// decide decides n events for key at now, taking the key's shard lock.
	decide(now int64, key string, n int, act action) (verdict, error)
	refund(now int64, key string, n int64)
	len() int
	// lockFor returns the lock of key's shard and the shard's index.
	lockFor(key string) (*sync.Mutex, int)
	// decideLocked is decide with the shard's lock already held.
	decideLocked(now int64, key string, n int, act action) (verdict, error)
	refundLocked(now int64, key string, n int64)
}

// store holds per-key state S for algorithm A in shards.
type store[S any, A algorithm[S]] struct {
	alg     A
	seed    maphash.Seed
	shards  []shard[S]
	shift   uint // 64 - log2(len(shards)): the hash's top bits pick the shard
	maxKeys int64
	hash32  func(key string) uint32 // the low bits, for the shard's table
	// keys counts the keys held over all shards, plus for a moment the
	// room reserved for one being inserted: it changes only on insert and
	// reclaim, under the lock of the shard concerned, never on the path of
	// a key already held.
	keys atomic.Int64
	// sweep is where the next sweep of other shards starts, so that
	// successive full inserts look at different shards first.
	sweep atomic.Uint32
}

// shard is one lock and the keys it guards.
type shard[S any] struct {
	mu sync.Mutex
	// held mirrors t.len(), written under mu, so that a full limiter looking
	// for idle keys elsewhere can skip empty shards without their locks.
	held    atomic.Int32
	t       table[S] // guarded by mu
	scratch S        // guarded by mu; the fresh state of keys not held
}

// Budgets of the idle sweep: entries looked at on every new key, and when a
// full shard needs room.
const (
	sampleOnInsert = 4
	sampleWhenFull = 16
)

func newStore[S any, A algorithm[S]](alg A, maxKeys int) *store[S, A] {
	s := &store[S, A]{
		alg:     alg,
		seed:    maphash.MakeSeed(),
		shards:  make([]shard[S], defaultShards),
		shift:   64 - 6, // defaultShards = 1<<6
		maxKeys: int64(maxKeys),
	}
	s.hash32 = func(key string) uint32 { return uint32(maphash.String(s.seed, key)) }
	return s
}

// shardFor returns key's shard, the shard's index, and the 32 bits of the
// key's hash its table uses.
func (s *store[S, A]) shardFor(key string) (*shard[S], int, uint32) {
	h := maphash.String(s.seed, key)
	i := int(h >> s.shift)
	return &s.shards[i], i, uint32(h)
}

func (s *store[S, A]) lockFor(key string) (*sync.Mutex, int) {
	sh, i, _ := s.shardFor(key)
	return &sh.mu, i
}

func (s *store[S, A]) decide(now int64, key string, n int, act action) (verdict, error) {
	sh, _, h := s.shardFor(key)
	sh.mu.Lock()
	v, err := s.decideIn(sh, now, key, h, n, act)
	sh.mu.Unlock()
	return v, err
}

func (s *store[S, A]) decideLocked(now int64, key string, n int, act action) (verdict, error) {
	sh, _, h := s.shardFor(key)
	return s.decideIn(sh, now, key, h, n, act)
}

// decideIn decides for key, which lives in sh with hash h, at now. A new
// key is decided on a fresh state and stored only if admitted and act is
// consume. A new key that the limiter has no room for (it holds maxKeys
// keys and none could be reclaimed) is denied with [ErrTooManyKeys] and a
// RetryAfter of one second, whatever act, so that Peek agrees with AllowN:
// when a key will next be idle is not known. Peek(0) of a new key reports a
// fresh quota and needs no room. Requires sh.mu held.
func (s *store[S, A]) decideIn(sh *shard[S], now int64, key string, h uint32, n int, act action) (verdict, error) {
	if st := sh.t.get(key, h); st != nil {
		return decideN(s.alg, st, now, n, act), nil
	}
	// On the scratch state, act changes nothing that outlives this call.
	v := decideN(s.alg, s.fresh(sh), now, n, act)
	if !v.ok || n == 0 {
		return v, nil
	}
	if !s.makeRoom(sh, now) {
		v.ok = false
		v.retry = int64(time.Second)
		return v, ErrTooManyKeys
	}
	if act == inspect {
		s.keys.Add(-1) // give back the room makeRoom reserved
		return v, nil
	}
	st := sh.t.insert(strings.Clone(key), h)
	sh.held.Store(int32(sh.t.len()))
	return decideN(s.alg, st, now, n, consume), nil
}

// makeRoom reserves room for one new key in s, reclaiming idle keys as
// needed: a few of sh's on every insert, more of sh's when s is full, and
// then a few in each of the next non-empty other shards (a full limiter's
// idle keys may all live elsewhere), at most sampleWhenFull entries in all,
// starting where the previous sweep stopped. It reports false when s holds
// maxKeys keys and none of those looked at was idle. On true the caller
// inserts the key, or gives the room back with s.keys.Add(-1). The cost of
// a refusal is bounded: a flood of new keys at the cap cannot make each
// request scan the limiter. Requires sh.mu held.
func (s *store[S, A]) makeRoom(sh *shard[S], now int64) bool {
	s.reclaim(sh, now, sampleOnInsert)
	if s.reserve() {
		return true
	}
	s.reclaim(sh, now, sampleWhenFull)
	if s.reserve() {
		return true
	}
	// Other shards: TryLock only, as sh.mu is held and the lock order is
	// not known; a busy shard is skipped this time.
	budget := sampleWhenFull
	start := int(s.sweep.Add(1))
	for i := 0; i < len(s.shards) && budget > 0; i++ {
		o := &s.shards[(start+i)%len(s.shards)]
		if o == sh || o.held.Load() == 0 || !o.mu.TryLock() {
			continue
		}
		s.reclaim(o, now, sampleOnInsert)
		o.mu.Unlock()
		budget -= sampleOnInsert
		s.sweep.Store(uint32(start + i)) // the next sweep starts here
		if s.reserve() {
			return true
		}
	}
	return false
}

// reserve takes room for one key if s holds fewer than maxKeys.
func (s *store[S, A]) reserve() bool {
	if s.keys.Add(1) <= s.maxKeys {
		return true
	}
	s.keys.Add(-1)
	return false
}

// fresh returns sh's scratch state, reset to a fresh one. Requires sh.mu
// held; the state is valid until it is released.
func (s *store[S, A]) fresh(sh *shard[S]) *S {
	var zero S
	sh.scratch = zero
	return &sh.scratch
}

// reclaim looks at up to budget entries of sh, going round the table from
// where it last stopped, and deletes the idle ones: a sweep spread over
// inserts, with no pass over the whole table. Requires sh.mu held.
func (s *store[S, A]) reclaim(sh *shard[S], now int64, budget int) {
	t := &sh.t
	for ; budget > 0 && t.len() > 0; budget-- {
		if t.cursor >= t.len() {
			t.cursor = 0
		}
		if s.alg.idle(&t.entries[t.cursor].st, now) {
			t.deleteEntry(t.cursor, s.hash32) // the last entry moves here: look again
			s.keys.Add(-1)
			sh.held.Store(int32(t.len()))
		} else {
			t.cursor++
		}
	}
}

func (s *store[S, A]) refund(now int64, key string, n int64) {
	sh, _, h := s.shardFor(key)
	sh.mu.Lock()
	s.refundIn(sh, now, key, h, n)
	sh.mu.Unlock()
}

func (s *store[S, A]) refundLocked(now int64, key string, n int64) {
	sh, _, h := s.shardFor(key)
	s.refundIn(sh, now, key, h, n)
}

// refundIn requires sh.mu held.
func (s *store[S, A]) refundIn(sh *shard[S], now int64, key string, h uint32, n int64) {
	if st := sh.t.get(key, h); st != nil {
		s.alg.refund(st, now, n)
	}
}

func (s *store[S, A]) len() int {
	total := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		total += sh.t.len()
		sh.mu.Unlock()
	}
	return total
}
