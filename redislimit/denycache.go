package redislimit

import (
	"hash/maphash"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlkit/ratelimit"
)

// denyCache remembers, per key, that a request for n events is denied
// until a known time, so that a client hammering a denied key costs a map
// lookup instead of a round trip. It is bounded: when a shard is full, a
// few entries are sampled and expired ones dropped, and if none has expired
// an arbitrary entry is dropped (forgetting only costs a round trip).
//
// Only denials with Remaining 0 are remembered. While nothing remains no
// instance of the limiter can admit anything on the key, so nothing another
// instance does (refunds and admin calls aside) can make the cached answer
// stale before its span ends; a denial with some left (n larger than what
// remains) could be followed by another instance's admission this cache
// never sees, and is asked of Redis every time.
//
// An entry is written from a denial's RetryAfter, measured from the local
// time read before the request was sent: the server decided later than
// that, so the cache never denies past the moment the server would admit
// (with no other traffic; refunds made by other instances can make the
// server admit sooner, which the cache does not see). Times are local
// monotonic nanoseconds.
//
// Any admission or refund on a key invalidates what was cached for it: a
// denial of n=4 followed by an admission of n=2 means the next n=4 waits
// longer than the cached RetryAfter. A denial decided before such an
// admission but answered after it must not be cached either: each key maps
// to one of denyGens generation counters, bumped by every admission and
// refund on the keys that map to it, and put records nothing if the counter
// moved since get.
type denyCache struct {
	seed        maphash.Seed
	maxPerShard int
	shards      [denyShards]denyShard
	gens        [denyGens]atomic.Uint64
}

const (
	denyShards = 16
	denyGens   = 1024
)

type denyShard struct {
	mu   sync.Mutex
	m    map[string]denyEntry // guarded by mu
	size atomic.Int64         // len(m), readable without mu
	_    [32]byte
}

type denyEntry struct {
	n       int   // the denied request's n; only requests for exactly n hit
	sent    int64 // local ns at which the denial was decided (at the earliest)
	until   int64 // local ns at which the request may be admitted
	holds   int64 // local ns until which nothing remains (<= until)
	resetAt int64 // local ns at which the key's quota is full (lower bound)
	// No Remaining: only denials with Remaining 0 are cached.
}

func newDenyCache(maxKeys int) *denyCache {
	c := &denyCache{seed: maphash.MakeSeed(), maxPerShard: max((maxKeys+denyShards-1)/denyShards, 1)}
	return c
}

// hash returns the hash of key that the other methods take.
func (c *denyCache) hash(key string) uint64 { return maphash.String(c.seed, key) }

func (c *denyCache) shard(h uint64) *denyShard { return &c.shards[h%denyShards] }

func (c *denyCache) gen(h uint64) *atomic.Uint64 { return &c.gens[(h/denyShards)%denyGens] }

// get returns the cached denial of n events for key (whose hash is h) at
// now, if any, and otherwise the generation to pass to put after asking
// Redis.
func (c *denyCache) get(h uint64, key string, n int, now int64, limit int) (ratelimit.Decision, uint64, bool) {
	gen := c.gen(h).Load()
	sh := c.shard(h)
	if sh.size.Load() == 0 {
		return ratelimit.Decision{}, gen, false
	}
	sh.mu.Lock()
	e, ok := sh.m[key]
	if ok && now >= e.holds {
		delete(sh.m, key)
		sh.size.Store(int64(len(sh.m)))
		ok = false
	}
	if ok && now < e.sent {
		// The local clock ran backwards (a fake clock, or client
		// time): the entry's arithmetic no longer holds.
		ok = false
	}
	sh.mu.Unlock()
	if !ok || e.n != n {
		return ratelimit.Decision{}, gen, false
	}
	return ratelimit.Decision{
		Limit:      limit,
		RetryAfter: time.Duration(e.until - now),
		ResetAfter: time.Duration(max(e.resetAt-now, 0)),
	}, gen, true
}

// put records that n events for key were denied with d (its Remaining 0:
// the caller caches no other denial), decided no
// earlier than the local time sent. gen is what get returned before the
// request was sent: if an admission or a refund on key (or on a key
// sharing its counter) happened since, the denial may predate it, and is
// not recorded.
//
// span is how long after sent the denial's Remaining stays true (it may
// grow before the request of n fits: a token arrives, an old event leaves
// the log); the entry answers only until then.
func (c *denyCache) put(h uint64, key string, n int, sent, span int64, gen uint64, d ratelimit.Decision) {
	if span <= 0 {
		return
	}
	sh := c.shard(h)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if c.gen(h).Load() != gen {
		return
	}
	defer func() {
		sh.size.Store(int64(len(sh.m)))
		// An invalidate that bumped the counter after the check above
		// may have seen size 0 and skipped the lock: look again, now that
		// size is published.
		if c.gen(h).Load() != gen {
			delete(sh.m, key)
			sh.size.Store(int64(len(sh.m)))
		}
	}()
	if sh.m == nil {
		sh.m = make(map[string]denyEntry)
	}
	if _, ok := sh.m[key]; !ok && len(sh.m) >= c.maxPerShard {
		budget := 8
		for k, e := range sh.m {
			if e.holds <= sent {
				delete(sh.m, k)
			}
			if budget--; budget == 0 {
				break
			}
		}
		if len(sh.m) >= c.maxPerShard {
			for k := range sh.m { // Go starts map iteration at random
				delete(sh.m, k)
				break
			}
		}
	}
	sh.m[key] = denyEntry{
		n:       n,
		sent:    sent,
		until:   sent + int64(d.RetryAfter),
		holds:   sent + min(span, int64(d.RetryAfter)),
		resetAt: sent + int64(d.ResetAfter),
	}
}

// invalidate forgets what was cached for key (whose hash is h), after an
// admission or a refund, and makes the denials in flight uncacheable.
func (c *denyCache) invalidate(h uint64, key string) {
	c.gen(h).Add(1)
	sh := c.shard(h)
	if sh.size.Load() == 0 {
		return
	}
	sh.mu.Lock()
	delete(sh.m, key)
	sh.size.Store(int64(len(sh.m)))
	sh.mu.Unlock()
}

// len returns the number of cached keys.
func (c *denyCache) len() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// cacheSpan returns how long the denial d of n events keeps its Remaining
// (at least; 0 when that is not known), so that a cached copy says exactly
// what Redis would. Remaining r < n grows by one when a token arrives or
// the bucket leaks one (every Period/Refill or Period), and n-r-1 such
// steps come before n fit at RetryAfter; a fixed window's Remaining holds
// until the window ends (its RetryAfter); a sliding log's grows whenever
// its oldest event leaves, which only RetryAfter says when r = n-1.
// RetryAfter was rounded up to the microsecond, hence the microsecond off.
func (g *generation) cacheSpan(n int, d ratelimit.Decision) int64 {
	k := int64(n - d.Remaining - 1)
	if k <= 0 || g.policy.Algorithm == ratelimit.FixedWindowAlgorithm || g.policy.Algorithm == ratelimit.QuotaAlgorithm {
		return int64(d.RetryAfter)
	}
	per := int64(g.policy.Period)
	if k > math.MaxInt64/per {
		return 0
	}
	var steps int64
	switch g.policy.Algorithm {
	case ratelimit.TokenBucketAlgorithm:
		r := int64(g.policy.Refill)
		steps = (k*per + r - 1) / r
	case ratelimit.LeakyBucketAlgorithm:
		steps = k * per
	default:
		return 0
	}
	return max(int64(d.RetryAfter)-steps-int64(time.Microsecond), 0)
}
