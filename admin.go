package ratelimit

import (
	"context"
	"fmt"
	"hash/maphash"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlkit/ratelimit/internal/errs"
)

var (
	_ KeyAdmin = (*Keyed)(nil)
	_ KeyAdmin = (*Tiered)(nil)
)

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

// errBlockDuration reports a block longer than maxPeriod.
func errBlockDuration(d time.Duration) error {
	return fmt.Errorf("ratelimit: block duration %v must be at most %v", d, maxPeriod)
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

// blockApplies reports whether a block denies a decision of n events by
// act under limit: every one but those denied as invalid anyway (n < 0,
// n > limit, and n == 0 for AllowN).
func blockApplies(n int, limit int64, act action) bool {
	return n >= 0 && int64(n) <= limit && (n > 0 || act == inspect)
}

// blockedVerdict is the denial of a blocked key with left ns of its block
// to run, whose state's Peek(0) is v.
func blockedVerdict(v verdict, left int64) verdict {
	return verdict{retry: left, reset: max(left, v.reset)}
}

// blockShards is the number of shards of a blockTable.
const blockShards = 16

// blockTable holds the blocks of one Keyed limiter: key -> end of the
// block, in Unix ns. Decisions look here only while count is not zero.
type blockTable struct {
	// count is the number of blocks held, including ended ones not yet
	// forgotten.
	count atomic.Int64
	// latest is the latest end of any block ever set: once now passes it,
	// every block has ended.
	latest   atomic.Int64
	sweeping atomic.Bool
	max      int64
	seed     maphash.Seed
	shards   [blockShards]blockShard
}

type blockShard struct {
	mu sync.Mutex
	m  map[string]int64 // guarded by mu
}

// blockSweep is how many blocks each Block looks at to forget ended ones.
const blockSweep = 8

func (b *blockTable) init(max int64) {
	b.max = max
	b.seed = maphash.MakeSeed()
}

func (b *blockTable) shardFor(key string) *blockShard {
	return &b.shards[maphash.String(b.seed, key)%blockShards]
}

// left returns how long key's block has to run at now, and whether it is
// blocked.
func (b *blockTable) left(key string, now int64) (int64, bool) {
	if b.count.Load() == 0 {
		return 0, false
	}
	if now >= b.latest.Load() {
		// Every block has ended: forget them all, once, so that decisions
		// go back to their fast path.
		if b.sweeping.CompareAndSwap(false, true) {
			b.sweep(now)
			b.sweeping.Store(false)
		}
		return 0, false
	}
	sh := b.shardFor(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	until, ok := sh.m[key]
	if !ok {
		return 0, false
	}
	if until <= now {
		delete(sh.m, key)
		b.count.Add(-1)
		return 0, false
	}
	return until - now, true
}

// set blocks key until until, replacing any block in force.
func (b *blockTable) set(key string, until, now int64) error {
	// latest first: a decision that sees the block also sees its end.
	for l := b.latest.Load(); until > l && !b.latest.CompareAndSwap(l, until); l = b.latest.Load() {
	}
	if b.trySet(key, until, now) {
		return nil
	}
	b.sweep(now)
	if b.trySet(key, until, now) {
		return nil
	}
	return ErrTooManyKeys
}

// trySet blocks key unless the table is full of blocks in force.
func (b *blockTable) trySet(key string, until, now int64) bool {
	sh := b.shardFor(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.m[key]; ok {
		sh.m[key] = until
		return true
	}
	b.forgetEnded(sh, now, blockSweep)
	if b.count.Add(1) > b.max {
		b.count.Add(-1)
		return false
	}
	if sh.m == nil {
		sh.m = make(map[string]int64)
	}
	sh.m[key] = until
	return true
}

// forgetEnded looks at up to budget blocks of sh (in the map's random
// order) and deletes those that have ended at now. Requires sh.mu held.
func (b *blockTable) forgetEnded(sh *blockShard, now int64, budget int) {
	for key, until := range sh.m {
		if budget == 0 {
			return
		}
		budget--
		if until <= now {
			delete(sh.m, key)
			b.count.Add(-1)
		}
	}
}

// sweep forgets every block that has ended at now.
func (b *blockTable) sweep(now int64) {
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.Lock()
		b.forgetEnded(sh, now, len(sh.m))
		if len(sh.m) == 0 {
			sh.m = nil // let a map that held many blocks go
		}
		sh.mu.Unlock()
	}
}

// remove lifts key's block.
func (b *blockTable) remove(key string) {
	if b.count.Load() == 0 {
		return
	}
	sh := b.shardFor(key)
	sh.mu.Lock()
	if _, ok := sh.m[key]; ok {
		delete(sh.m, key)
		b.count.Add(-1)
	}
	sh.mu.Unlock()
}

// adminOf returns l as a KeyAdmin, or an error naming its type.
func adminOf(l KeyedLimiter) (KeyAdmin, error) {
	if a, ok := l.(KeyAdmin); ok {
		return a, nil
	}
	return nil, fmt.Errorf("ratelimit: %T does not implement ratelimit.KeyAdmin", l)
}

// MoveKey carries key's usage from one keyed limiter to another, for a key
// whose tier (plan, policy) changed: the events it used in from (its Limit
// minus Peek(ctx, key, 0).Remaining there) are converted by mode to to's
// limit (the Limit of Peek on to) as [Keyed.SetPolicy] converts them, and
// charged to key in to with Penalize, on top of what to already shows used
// (only the difference, if positive); then key is Reset in from. Both
// limiters must implement [KeyAdmin]. [Tiered.Move] does this for a
// Tiered limiter's tiers.
//
// MoveKey is not atomic across the two limiters: requests for key between
// its steps are decided by whichever limiter they reach. Move the key's
// tier first, so that new traffic goes to to, then call MoveKey. A key in
// from and to being the same limiter is left as it is.
//
// It returns an error wrapping [ErrInvalidConfig] for a mode that is not
// one of the three or a nil limiter, an error naming the type of a limiter
// that does not implement KeyAdmin, an error for a nil ctx, and otherwise
// the first error of the limiters' calls.
func MoveKey(ctx context.Context, key string, from, to KeyedLimiter, mode Inheritance) error {
	if ctx == nil {
		return errNilContext
	}
	if mode < KeepUsed || mode > StartFresh {
		return configError("ratelimit.MoveKey mode must be KeepUsed, ScaleUsed or StartFresh, got %v", mode)
	}
	if nilLimiter(from) || nilLimiter(to) {
		return configError("ratelimit.MoveKey from and to must not be nil, got %T and %T", from, to)
	}
	fromAdmin, err := adminOf(from)
	if err != nil {
		return err
	}
	toAdmin, err := adminOf(to)
	if err != nil {
		return err
	}
	if sameLimiter(from, to) {
		return nil
	}
	df, err := from.Peek(ctx, key, 0)
	if err != nil {
		return err
	}
	dt, err := to.Peek(ctx, key, 0)
	if err != nil {
		return err
	}
	used := inherit(int64(df.Limit-df.Remaining), mode, int64(df.Limit), int64(dt.Limit))
	if extra := used - int64(dt.Limit-dt.Remaining); extra > 0 {
		if err := toAdmin.Penalize(ctx, key, int(extra)); err != nil {
			return err
		}
	}
	return fromAdmin.Reset(ctx, key)
}

// sameLimiter reports whether a and b are the same limiter, without
// comparing values of a type that cannot be compared.
func sameLimiter(a, b KeyedLimiter) bool {
	ta := reflect.TypeOf(a)
	return ta == reflect.TypeOf(b) && ta.Comparable() && a == b
}

// Move carries key's usage from the tier fromTier to its tier now (see
// [Tiered.Tier]), by [MoveKey]: call it after the key's tier changed, such
// as once a customer's upgrade from "free" to "pro" is recorded, so that
// the new tier starts from what the key used in the old one as mode
// converts it (KeepUsed: 60 of 100 a minute used stays 60 used of 10,000;
// ScaleUsed: it becomes 6,000). A fromTier with no limiter is the default
// tier's ([WithDefaultTier]), or an error wrapping [ErrUnknownTier]. When
// both tiers are the same limiter nothing changes. Both tiers' limiters
// must implement [KeyAdmin]. Like MoveKey it is not atomic.
func (t *Tiered) Move(ctx context.Context, key, fromTier string, mode Inheritance) error {
	if ctx == nil {
		return errNilContext
	}
	from, err := t.named(fromTier)
	if err != nil {
		return err
	}
	from, err = followTiers(ctx, key, from)
	if err != nil {
		return err
	}
	_, to, err := t.Tier(ctx, key)
	if err != nil {
		return err
	}
	return MoveKey(ctx, key, from, to, mode)
}

// named returns the limiter of the tier called name, or the default tier's.
func (t *Tiered) named(name string) (KeyedLimiter, error) {
	if l, ok := t.tiers[name]; ok {
		return l, nil
	}
	if t.fallback != nil {
		return t.fallback, nil
	}
	return nil, errs.New(fmt.Sprintf("%v %q", ErrUnknownTier, name), ErrUnknownTier)
}

// followTiers follows l, while it is a *Tiered, to the limiter holding
// key's state. A Tiered's tiers exist before it does, so nesting ends.
func followTiers(ctx context.Context, key string, l KeyedLimiter) (KeyedLimiter, error) {
	for {
		inner, ok := l.(*Tiered)
		if !ok {
			return l, nil
		}
		var err error
		if _, l, err = inner.tier(ctx, key); err != nil {
			return nil, err
		}
	}
}

// admin returns the KeyAdmin of key's tier.
func (t *Tiered) admin(ctx context.Context, key string) (KeyAdmin, error) {
	if ctx == nil {
		return nil, errNilContext
	}
	_, l, err := t.Tier(ctx, key)
	if err != nil {
		return nil, err
	}
	return adminOf(l)
}

// Reset forgets key's state in its tier's limiter (see [Tiered.Tier]) and
// lifts any block on it there, as that limiter's Reset does. A key whose
// tier is unknown, with no default tier, gets an error wrapping
// [ErrUnknownTier]; a tier whose limiter does not implement [KeyAdmin], an
// error naming its type.
func (t *Tiered) Reset(ctx context.Context, key string) error {
	a, err := t.admin(ctx, key)
	if err != nil {
		return err
	}
	return a.Reset(ctx, key)
}

// Block blocks key for d in its tier's limiter, as that limiter's Block
// does: every request for key is denied there until the block ends. A key
// that moves to another tier leaves the block behind. Errors are those of
// [Tiered.Reset] and of the limiter's Block.
func (t *Tiered) Block(ctx context.Context, key string, d time.Duration) error {
	a, err := t.admin(ctx, key)
	if err != nil {
		return err
	}
	return a.Block(ctx, key, d)
}

// Penalize charges key up to n events in its tier's limiter, as that
// limiter's Penalize does. Errors are those of [Tiered.Reset] and of the
// limiter's Penalize.
func (t *Tiered) Penalize(ctx context.Context, key string, n int) error {
	a, err := t.admin(ctx, key)
	if err != nil {
		return err
	}
	return a.Penalize(ctx, key, n)
}
