package ratelimit

import (
	"hash/maphash"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

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

// minShardBits and maxShardBits bound the number of shards of a Keyed
// limiter's store: 64 at least, 4096 at most.
const minShardBits, maxShardBits = 6, 12

// shardBits returns log2 of the number of shards of a new store: 64, or 8
// per CPU the process may use (GOMAXPROCS) when that is more. A decision
// holds its shard's lock for about one cache miss (the key's slot, 100-150
// ns at a million keys), so with as many shards as cores a shard would be
// busy half the time at 64 cores; at 8 per core two cores rarely want the
// same one (benchmarks/README.md, "At 64 cores").
func shardBits() uint {
	bits := uint(minShardBits)
	for bits < maxShardBits && 1<<bits < 8*runtime.GOMAXPROCS(0) {
		bits++
	}
	return bits
}

// shardStore holds per-key state S for algorithm A in shards.
type shardStore[S any, A algorithm[S]] struct {
	alg     A
	seed    maphash.Seed
	shards  []shard[S]
	shift   uint // 64 - log2(len(shards)): the hash's top bits pick the shard
	maxKeys int64
	// keys counts the keys held over all shards of every generation of the
	// Keyed, plus for a moment the room reserved for one being inserted: it
	// changes only on insert, reclaim and delete, under the lock of the
	// shard concerned, never on the path of a key already held.
	keys *atomic.Int64
	// gen is the generation the store belongs to: its older generations
	// are where a key the store does not hold may have state to convert.
	gen *generation
	// sweep is where the next sweep of other shards starts, so that
	// successive full inserts look at different shards first.
	sweep atomic.Uint32
}

// shard is one lock and the keys it guards.
type shard[S any] struct {
	mu sync.Mutex
	// retired is set, under mu, when a newer generation replaces the
	// store: from then on nothing is decided or stored here, and the keys
	// left are only converted out, reset, reclaimed or dropped. So the
	// shard's key count only falls.
	retired bool
	// dead is set, under mu, when the shard is dropped: its keys are gone.
	dead bool
	// held mirrors t.len(), written under mu, so that a full limiter looking
	// for idle keys elsewhere can skip empty shards without their locks,
	// and so that a newer generation converting a key skips a retired
	// shard with no keys without its lock.
	held    atomic.Int32
	t       table[S] // guarded by mu
	scratch S        // guarded by mu; the fresh state of keys not held
	// The next shard's lock is at least a cache line past this shard's
	// fields, so that cores deciding in neighbouring shards do not pull one
	// line back and forth (false sharing). Not measurable on 2 CPUs; it
	// matters at tens of cores, as in sync.Pool's per-P data.
	_ [64]byte
}

// Budgets of the idle sweep: entries looked at on every new key, and when a
// full shard needs room.
const (
	sampleOnInsert = 4
	sampleWhenFull = 16
)

func newStore[S any, A algorithm[S]](alg A, maxKeys int) *shardStore[S, A] {
	bits := shardBits()
	s := &shardStore[S, A]{
		alg:     alg,
		seed:    maphash.MakeSeed(),
		shards:  make([]shard[S], 1<<bits),
		shift:   64 - bits,
		maxKeys: int64(maxKeys),
	}
	return s
}

// tooManyKeys is v refused for want of room.
func tooManyKeys(v verdict) verdict {
	v.ok = false
	v.retry = int64(time.Second)
	return v
}

// bind is called once, by newGeneration, before the store is used.
func (s *shardStore[S, A]) bind(g *generation, keys *atomic.Int64) {
	s.gen, s.keys = g, keys
}

// shardFor returns key's shard, the shard's index, and the 32 bits of the
// key's hash its table uses.
func (s *shardStore[S, A]) shardFor(key string) (*shard[S], int, uint32) {
	h := maphash.String(s.seed, key)
	i := int(h >> s.shift)
	return &s.shards[i], i, uint32(h)
}

func (s *shardStore[S, A]) lockFor(key string) (*sync.Mutex, int, *bool) {
	sh, i, _ := s.shardFor(key)
	return &sh.mu, i, &sh.retired
}

func (s *shardStore[S, A]) olderLock(key string) (*sync.Mutex, int, bool) {
	sh, i, _ := s.shardFor(key)
	return &sh.mu, i, sh.held.Load() > 0
}

func (s *shardStore[S, A]) decide(now int64, key string, n int, act action) (verdict, error) {
	sh, _, h := s.shardFor(key)
	sh.mu.Lock()
	v, err := s.decideIn(sh, now, key, h, n, act, false)
	sh.mu.Unlock()
	return v, err
}

func (s *shardStore[S, A]) decideLocked(now int64, key string, n int, act action) (verdict, error) {
	sh, _, h := s.shardFor(key)
	return s.decideIn(sh, now, key, h, n, act, true)
}

// decideIn decides for key, which lives in sh with hash h, at now. A key
// the store does not hold is decided by decideNew. Requires sh.mu held (and
// with olderLocked, key's shards in older generations).
func (s *shardStore[S, A]) decideIn(sh *shard[S], now int64, key string, h uint32, n int, act action, olderLocked bool) (verdict, error) {
	if sh.retired {
		return verdict{}, errSuperseded
	}
	if st := sh.t.get(key, h); st != nil {
		return decideN(s.alg, st, now, n, act), nil
	}
	return s.decideNew(sh, now, key, h, n, act, olderLocked)
}

// decideNew decides for a key sh does not hold. When an older generation
// holds it, its state is converted (see shardStore.inherited): with consume the
// converted state is stored and the old one deleted, with inspect nothing
// changes. Otherwise the key is decided on a fresh state and stored only
// if admitted and act is consume. A new key that the limiter has no room
// for (it holds maxKeys keys and none could be reclaimed) is denied with
// [ErrTooManyKeys] and a RetryAfter of one second, whatever act, so that
// Peek agrees with AllowN: when a key will next be idle is not known.
// Peek(0) of a new key reports a fresh quota and needs no room; a converted
// key brings its room along. Requires sh.mu held.
func (s *shardStore[S, A]) decideNew(sh *shard[S], now int64, key string, h uint32, n int, act action, olderLocked bool) (verdict, error) {
	used, found := s.inherited(now, key, act == consume, olderLocked)
	// On the scratch state, act changes nothing that outlives this call.
	fresh := s.fresh(sh)
	if used > 0 {
		s.alg.decide(fresh, now, used, consume)
	}
	v := decideN(s.alg, fresh, now, n, act)
	if act == inspect {
		if found || !v.ok || n == 0 {
			return v, nil
		}
		if !s.makeRoom(sh, now) {
			return tooManyKeys(v), ErrTooManyKeys
		}
		s.keys.Add(-1) // give back the room makeRoom reserved
		return v, nil
	}
	if found {
		// The old state is deleted and its room is ours: keep the key if it
		// has anything to remember.
		if used == 0 && (!v.ok || n == 0) {
			s.keys.Add(-1)
			return v, nil
		}
	} else {
		if !v.ok || n == 0 {
			return v, nil
		}
		if !s.makeRoom(sh, now) {
			return tooManyKeys(v), ErrTooManyKeys
		}
	}
	st := s.insert(sh, key, h)
	if used > 0 {
		s.alg.decide(st, now, used, consume)
	}
	return decideN(s.alg, st, now, n, consume), nil
}

// insert stores key, for which room is reserved, with a fresh state.
// Requires sh.mu held.
func (s *shardStore[S, A]) insert(sh *shard[S], key string, h uint32) *S {
	st := sh.t.insert(key, h)
	sh.held.Store(int32(sh.t.len()))
	return st
}

// inherited returns the events key has used, in units of s's limit, that
// it carries over from the older generations at now, and whether any of
// them holds it. The newest older generation that holds key is the only
// one that does: a conversion deletes the state it converts, and nothing is
// stored in a generation once it is superseded. Its used amount
// (Limit - Peek(0).Remaining there) then goes step by step through every
// later change to s's, each with its own mode and limit (see inherit).
// With remove, the old state is deleted and its room in the key count
// passes to the caller. Requires key's shard lock in s held (and with
// olderLocked, its shards in older generations that hold keys).
func (s *shardStore[S, A]) inherited(now int64, key string, remove, olderLocked bool) (int64, bool) {
	for o := s.gen.prev.Load(); o != nil; o = o.prev.Load() {
		if o.dropped.Load() {
			continue
		}
		used, found := o.store.take(now, key, remove, olderLocked)
		if !found {
			continue
		}
		for g := o; g != s.gen; {
			next := g.next.Load()
			used = inherit(used, next.mode, g.limit, next.limit)
			g = next
		}
		return used, true
	}
	return 0, false
}

func (s *shardStore[S, A]) take(now int64, key string, remove, locked bool) (int64, bool) {
	sh, _, h := s.shardFor(key)
	if sh.held.Load() == 0 { // retired: it will never hold key again
		return 0, false
	}
	if !locked {
		sh.mu.Lock()
		defer sh.mu.Unlock()
	}
	if sh.dead {
		return 0, false
	}
	i := sh.t.find(key, h)
	if i < 0 {
		return 0, false
	}
	used := s.alg.limit() - s.alg.decide(sh.t.state(i), now, 0, inspect).remaining
	if remove {
		s.removeAt(sh, i)
	}
	return max(used, 0), true
}

// held returns key's state in sh, converting it from an older generation
// when sh does not hold it, or nil when the key has nothing to remember
// (no state anywhere, or one that converts to a fresh state). Requires
// sh.mu held (and with olderLocked, key's shards in older generations).
func (s *shardStore[S, A]) held(sh *shard[S], now int64, key string, h uint32, olderLocked bool) *S {
	if st := sh.t.get(key, h); st != nil {
		return st
	}
	used, found := s.inherited(now, key, true, olderLocked)
	if !found {
		return nil
	}
	if used == 0 {
		s.keys.Add(-1) // the room of the deleted state
		return nil
	}
	st := s.insert(sh, key, h)
	s.alg.decide(st, now, used, consume)
	return st
}

// makeRoom reserves room for one new key in s, reclaiming idle keys as
// needed: a few of sh's on every insert, more of sh's when s is full, then
// a few in each of the next non-empty other shards (a full limiter's idle
// keys may all live elsewhere), and then in older generations' shards, at
// most sampleWhenFull entries in all beyond sh, starting where the
// previous sweep stopped. It reports false when s holds maxKeys keys and
// none of those looked at was idle. On true the caller inserts the key, or
// gives the room back with s.keys.Add(-1). The cost of a refusal is
// bounded: a flood of new keys at the cap cannot make each request scan
// the limiter. Requires sh.mu held.
func (s *shardStore[S, A]) makeRoom(sh *shard[S], now int64) bool {
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
	for o := s.gen.prev.Load(); o != nil && budget > 0; o = o.prev.Load() {
		if o.dropped.Load() {
			continue
		}
		budget = o.store.reclaimSome(now, budget)
		if s.reserve() {
			return true
		}
	}
	return false
}

func (s *shardStore[S, A]) reclaimSome(now int64, budget int) int {
	start := int(s.sweep.Add(1))
	for i := 0; i < len(s.shards) && budget > 0; i++ {
		o := &s.shards[(start+i)%len(s.shards)]
		if o.held.Load() == 0 || !o.mu.TryLock() {
			continue
		}
		if !o.dead {
			s.reclaim(o, now, sampleOnInsert)
			budget -= sampleOnInsert
		}
		o.mu.Unlock()
	}
	return budget
}

// reserve takes room for one key if s holds fewer than maxKeys.
func (s *shardStore[S, A]) reserve() bool {
	if s.keys.Add(1) <= s.maxKeys {
		return true
	}
	s.keys.Add(-1)
	return false
}

// fresh returns sh's scratch state, reset to a fresh one. Requires sh.mu
// held; the state is valid until it is released.
func (s *shardStore[S, A]) fresh(sh *shard[S]) *S {
	var zero S
	sh.scratch = zero
	return &sh.scratch
}

// reclaim looks at up to budget keys of sh, going round the table from
// where it last stopped, and deletes the idle ones: a sweep spread over
// inserts, with no pass over the whole table. Requires sh.mu held.
func (s *shardStore[S, A]) reclaim(sh *shard[S], now int64, budget int) {
	t := &sh.t
	// Empty slots cost a look too, but fewer than keys: the load is at
	// least 1/5 (1/minLoadDen) in any table larger than the smallest.
	for looks := budget * minLoadDen; budget > 0 && looks > 0 && t.len() > 0; looks-- {
		if t.cursor >= len(t.slots) {
			t.cursor = 0
		}
		if t.slots[t.cursor].meta == 0 {
			t.cursor++
			continue
		}
		budget--
		if s.alg.idle(t.state(t.cursor), now) {
			s.removeAt(sh, t.cursor) // a later slot may move here: look again
			s.keys.Add(-1)
		} else {
			t.cursor++
		}
	}
}

func (s *shardStore[S, A]) refund(now int64, key string, n int64) error {
	sh, _, h := s.shardFor(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.retired {
		return errSuperseded
	}
	s.refundIn(sh, now, key, h, n, false)
	return nil
}

func (s *shardStore[S, A]) refundLocked(now int64, key string, n int64) {
	sh, _, h := s.shardFor(key)
	s.refundIn(sh, now, key, h, n, true)
}

// refundIn requires sh.mu held.
func (s *shardStore[S, A]) refundIn(sh *shard[S], now int64, key string, h uint32, n int64, olderLocked bool) {
	if st := s.held(sh, now, key, h, olderLocked); st != nil {
		s.alg.refund(st, now, n)
	}
}

// errCannotSettle is returned by a store whose algorithm cannot settle a
// reservation (the sliding log).
var errCannotSettle = configError("the sliding window log cannot settle a reservation exactly (its events are merged by time); use the sliding window counter")

func (s *shardStore[S, A]) settle(now int64, key string, at, d int64) error {
	alg, ok := any(s.alg).(settler[S])
	if !ok {
		return errCannotSettle
	}
	return s.charge(now, key, d > 0, func(st *S) { alg.settle(st, now, at, d) })
}

func (s *shardStore[S, A]) penalize(now int64, key string, n int64) error {
	// A fresh state, made if need be: the penalty takes up to the whole limit.
	return s.charge(now, key, true, func(st *S) {
		if m := min(n, s.alg.decide(st, now, 0, inspect).remaining); m > 0 {
			s.alg.decide(st, now, m, consume)
		}
	})
}

// charge applies f to key's state at now under its shard's lock: a
// penalty, or a reservation's settlement. A key not held is made (room
// permitting: ErrTooManyKeys) when create is set, and left alone, a fresh
// state with nothing to give back, when not.
func (s *shardStore[S, A]) charge(now int64, key string, create bool, f func(st *S)) error {
	sh, _, h := s.shardFor(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.retired {
		return errSuperseded
	}
	st := s.held(sh, now, key, h, false)
	if st == nil {
		if !create {
			return nil
		}
		if !s.makeRoom(sh, now) {
			return ErrTooManyKeys
		}
		st = s.insert(sh, key, h)
	}
	f(st)
	return nil
}

func (s *shardStore[S, A]) reset(key string) error {
	sh, _, h := s.shardFor(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.retired {
		return errSuperseded
	}
	s.deleteIn(sh, key, h)
	// Under sh.mu, so that no conversion of key runs meanwhile.
	for o := s.gen.prev.Load(); o != nil; o = o.prev.Load() {
		if !o.dropped.Load() {
			o.store.forget(key)
		}
	}
	return nil
}

func (s *shardStore[S, A]) forget(key string) {
	sh, _, h := s.shardFor(key)
	if sh.held.Load() == 0 {
		return
	}
	sh.mu.Lock()
	if !sh.dead {
		s.deleteIn(sh, key, h)
	}
	sh.mu.Unlock()
}

// deleteIn deletes key from sh if it is there, giving back its room in
// the key count. Requires sh.mu held.
func (s *shardStore[S, A]) deleteIn(sh *shard[S], key string, h uint32) {
	if i := sh.t.find(key, h); i >= 0 {
		s.removeAt(sh, i)
		s.keys.Add(-1)
	}
}

// removeAt deletes the key in slot i of sh's table and keeps sh.held in
// step; the key count is the caller's to adjust. Requires sh.mu held.
func (s *shardStore[S, A]) removeAt(sh *shard[S], i int) {
	sh.t.delete(i)
	sh.held.Store(int32(sh.t.len()))
}

func (s *shardStore[S, A]) retire() {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.retired = true
		sh.mu.Unlock()
	}
}

func (s *shardStore[S, A]) drop() {
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		if !sh.dead {
			sh.dead = true
			s.keys.Add(-int64(sh.t.len()))
			sh.t = table[S]{}
			sh.scratch = *new(S)
			sh.held.Store(0)
		}
		sh.mu.Unlock()
	}
}

func (s *shardStore[S, A]) empty() bool {
	for i := range s.shards {
		if s.shards[i].held.Load() != 0 {
			return false
		}
	}
	return true
}

func (s *shardStore[S, A]) len() int {
	total := 0
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		total += sh.t.len()
		sh.mu.Unlock()
	}
	return total
}
