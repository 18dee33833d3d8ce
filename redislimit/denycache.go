package redislimit

import (
	"hash/maphash"
	"sync"
	"time"

	"github.com/rlkit/ratelimit"
)

// denyCache remembers, per key, that a request for n events is denied
// until a known time, so that a client hammering a denied key costs a map
// lookup instead of a round trip. It is bounded: when a shard is full, a
// few entries are sampled and expired ones dropped, and if none has expired
// an arbitrary entry is dropped (forgetting only costs a round trip).
//
// An entry is written from a denial's RetryAfter, measured from the local
// time read before the request was sent: the server decided later than
// that, so the cache never denies past the moment the server would admit
// (with no other traffic; refunds made by other instances can make the
// server admit sooner, which the cache does not see). Times are local
// monotonic nanoseconds.
type denyCache struct {
	seed        maphash.Seed
	maxPerShard int
	shards      [denyShards]denyShard
}

const denyShards = 16

type denyShard struct {
	mu  sync.Mutex
	m   map[string]denyEntry // guarded by mu
	gen uint64               // guarded by mu; counts drops, see put
	_   [32]byte
}

type denyEntry struct {
	n         int   // the denied request's n; only requests for exactly n hit
	until     int64 // local ns at which the request may be admitted
	resetAt   int64 // local ns at which the key's quota is full (lower bound)
	remaining int   // Remaining of the denial
}

func newDenyCache(maxKeys int) *denyCache {
	c := &denyCache{seed: maphash.MakeSeed(), maxPerShard: max((maxKeys+denyShards-1)/denyShards, 1)}
	return c
}

func (c *denyCache) shard(key string) *denyShard {
	return &c.shards[maphash.String(c.seed, key)%denyShards]
}

// get returns the cached denial of n events for key at now, if any, and
// otherwise the generation to pass to put after asking Redis.
func (c *denyCache) get(key string, n int, now int64, limit int) (ratelimit.Decision, uint64, bool) {
	sh := c.shard(key)
	sh.mu.Lock()
	e, ok := sh.m[key]
	if ok && now >= e.until {
		delete(sh.m, key)
		ok = false
	}
	gen := sh.gen
	sh.mu.Unlock()
	if !ok || e.n != n {
		return ratelimit.Decision{}, gen, false
	}
	return ratelimit.Decision{
		Limit:      limit,
		Remaining:  e.remaining,
		RetryAfter: time.Duration(e.until - now),
		ResetAfter: time.Duration(max(e.resetAt-now, 0)),
	}, gen, true
}

// put records that n events for key were denied with d, decided no
// earlier than the local time sent. gen is what get returned before the
// request was sent: if a refund dropped a key of the shard since, the
// denial may predate the refund, and is not recorded.
func (c *denyCache) put(key string, n int, sent int64, gen uint64, d ratelimit.Decision) {
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if sh.gen != gen {
		return
	}
	if sh.m == nil {
		sh.m = make(map[string]denyEntry)
	}
	if _, ok := sh.m[key]; !ok && len(sh.m) >= c.maxPerShard {
		budget := 8
		for k, e := range sh.m {
			if e.until <= sent {
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
		n:         n,
		until:     sent + int64(d.RetryAfter),
		resetAt:   sent + int64(d.ResetAfter),
		remaining: d.Remaining,
	}
}

// drop forgets key, after a refund.
func (c *denyCache) drop(key string) {
	sh := c.shard(key)
	sh.mu.Lock()
	delete(sh.m, key)
	sh.gen++
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
