package ratelimit

import (
	"fmt"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"
)

// errBlockDuration reports a block longer than maxPeriod.
func errBlockDuration(d time.Duration) error {
	return fmt.Errorf("ratelimit: block duration %v must be at most %v", d, maxPeriod)
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
