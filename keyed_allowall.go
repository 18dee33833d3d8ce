package ratelimit

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/rlkit/ratelimit/internal/errs"
)

type lockRef struct {
	mu    *sync.Mutex
	id    uint64 // the Keyed's
	seq   uint64 // the generation's: newer first
	shard int
}

// allowAllAtomic is AllowAll over in-memory limiters only (every
// dimension's limiter a *Keyed: see atomicAllower). It decides
// without calling Keyed.AllowN, so it reports to each dimension's Observer
// itself, once the locks are released: one Event per dimension, with that
// dimension's own Decision (a dimension that would admit reports Allowed
// even when another one denies the request).
func allowAllAtomic(ctx context.Context, n int, dims []Dimension) (MultiDecision, error) {
	var start time.Time
	observed := false
	for _, d := range dims {
		if d.Limiter.(*Keyed).obs != nil {
			observed = true
			start = time.Now()
			break
		}
	}
	var dsBuf [8]Decision
	var errsBuf [8]error
	ds, derrs := bufFor(&dsBuf, len(dims)), bufFor(&errsBuf, len(dims))
	md, err := allowAllKeyedLocked(n, dims, ds, derrs)
	for _, d := range dims {
		if k := d.Limiter.(*Keyed); k.chained.Load() {
			k.maybePrune(k.ts.Now())
		}
	}
	if observed {
		latency := time.Since(start)
		for i, d := range dims {
			if k := d.Limiter.(*Keyed); k.obs != nil {
				k.report(ctx, d.cost(n), ds[i], derrs[i], latency)
			}
		}
	}
	return md, err
}

// allowAllKeyedLocked decides under the locks of every dimension's shard
// (and of the key's shards in older generations of its policy, see
// generation), leaving each dimension's own Decision and error in ds and
// derrs. When a dimension's policy changes before its locks are taken, it
// lets go of every lock and starts again on the new policy.
func allowAllKeyedLocked(n int, dims []Dimension, ds []Decision, derrs []error) (MultiDecision, error) {
	var gensBuf [8]*generation
	var retiredBuf [8]*bool
	gens, retired := bufFor(&gensBuf, len(dims)), bufFor(&retiredBuf, len(dims))
	var buf [8]lockRef
	for {
		locks := buf[:0]
		for i, d := range dims {
			k := d.Limiter.(*Keyed)
			g := k.cur.Load()
			gens[i] = g
			mu, shard, r := g.store.lockFor(d.Key)
			retired[i] = r
			locks = append(locks, lockRef{mu, k.id, g.seq, shard})
			for o := g.prev.Load(); o != nil; o = o.prev.Load() {
				if o.dropped.Load() {
					continue
				}
				if mu, shard, ok := o.store.olderLock(d.Key); ok {
					locks = append(locks, lockRef{mu, k.id, o.seq, shard})
				}
			}
		}
		slices.SortFunc(locks, func(a, b lockRef) int {
			return cmp.Or(cmp.Compare(a.id, b.id), cmp.Compare(b.seq, a.seq), cmp.Compare(a.shard, b.shard))
		})
		locks = slices.CompactFunc(locks, func(a, b lockRef) bool { return a.mu == b.mu })
		for _, l := range locks {
			l.mu.Lock()
		}
		current := true
		for _, r := range retired {
			if *r {
				current = false
				break
			}
		}
		var md MultiDecision
		var err error
		if current {
			md, err = decideAllLocked(n, dims, gens, ds, derrs)
		}
		for _, l := range locks {
			l.mu.Unlock()
		}
		if current {
			return md, err
		}
	}
}

// decideAllLocked is allowAllKeyedLocked once every lock is held, with
// gens[i] the current generation of dims[i].
func decideAllLocked(n int, dims []Dimension, gens []*generation, ds []Decision, derrs []error) (MultiDecision, error) {
	var nowsBuf [8]int64
	nows := bufFor(&nowsBuf, len(dims))
	denied := false
	var first error // ErrTooManyKeys from a full limiter
	for i, d := range dims {
		k, g := d.Limiter.(*Keyed), gens[i]
		nows[i] = k.ts.Now()
		var v verdict
		var err error
		if left, blocked := k.blocks.left(d.Key, nows[i]); blocked && blockApplies(d.cost(n), g.limit, consume) {
			v, err = g.store.decideLocked(nows[i], d.Key, 0, inspect)
			v = blockedVerdict(v, left)
		} else {
			v, err = g.store.decideLocked(nows[i], d.Key, d.cost(n), inspect)
		}
		ds[i], derrs[i] = v.decision(g.limit), err
		if !ds[i].Allowed {
			denied = true
			if err != nil && first == nil {
				first = errs.AtDimension(i, false, err)
			}
		}
	}
	if denied {
		// Every dimension was consulted: report the longest RetryAfter.
		best := mostRestrictive(ds)
		return MultiDecision{Decision: ds[best], Index: best}, first
	}
	// Every dimension admits: charge them all. A charge can still fail when
	// the same key appears twice, or two new keys compete for the last room
	// under a key cap; then undo the others.
	for i, d := range dims {
		g := gens[i]
		v, err := g.store.decideLocked(nows[i], d.Key, d.cost(n), consume)
		ds[i], derrs[i] = v.decision(g.limit), err
		if !ds[i].Allowed {
			for j := i - 1; j >= 0; j-- {
				gens[j].store.refundLocked(nows[j], dims[j].Key, int64(dims[j].cost(n)))
			}
			return MultiDecision{Decision: ds[i], Index: i}, errs.AtDimension(i, false, err)
		}
	}
	best := mostRestrictive(ds)
	return MultiDecision{Decision: ds[best], Index: best}, nil
}
