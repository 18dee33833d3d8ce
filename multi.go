package ratelimit

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/rlkit/ratelimit/internal/errs"
	"github.com/rlkit/ratelimit/internal/typednil"
)

// Dimension is one limit that a request must pass: a keyed limiter and the
// key to charge in it, such as the per-API-key limit for "key-123" or the
// login limit for "203.0.113.7".
type Dimension struct {
	// Name identifies the limit in reports and headers, such as "per-key".
	Name string
	// Limiter is the keyed limiter that holds the limit.
	Limiter KeyedLimiter
	// Key is the key to charge.
	Key string
}

// MultiDecision is the outcome of [AllowAll]: the most restrictive of the
// dimensions' decisions, and which dimension it came from.
type MultiDecision struct {
	// Decision is the denying dimension's Decision when the request was
	// denied (the longest RetryAfter if several deny), or else the admitting
	// Decision with the fewest Remaining.
	Decision
	// Index is the position in dims of the dimension Decision came from, or
	// -1 when there were no dimensions.
	Index int
}

// AllowAll charges n events to every dimension, all or nothing: if any
// dimension denies, none is charged. It returns the most restrictive
// Decision and which dimension it came from; MultiDecision.Allowed reports
// whether the request was admitted. Every dimension is consulted, so a
// denied request reports the longest RetryAfter of all the dimensions that
// deny it: waiting that long (with no other traffic) lets it through.
//
// When every dimension's limiter is a [*Keyed], or a [*Tiered] whose tier
// for the key is a *Keyed, AllowAll is exact and atomic: it locks the shards
// involved (in a fixed order, so concurrent calls cannot deadlock), checks
// every dimension, and charges them only if all admit. With other limiters
// (such as Redis ones) it charges the dimensions in order; once one denies,
// it asks each later dimension what it would decide with Peek, and then
// refunds with RefundN every dimension it charged. A concurrent request
// may then briefly see the refunded quota as used. Refunds do not depend on
// ctx: a caller that goes away does not leave a denied request charged.
//
// A dimension with a nil Limiter is a configuration error: AllowAll denies
// the request with an error wrapping [ErrInvalidConfig] that names it, and
// charges nothing. An error from a limiter is returned with its Decision
// (the limiter's own failure policy decides); a dimension that is not
// admitted stops the request either way. With no dimensions the request is
// admitted.
func AllowAll(ctx context.Context, n int, dims ...Dimension) (MultiDecision, error) {
	if len(dims) == 0 {
		return MultiDecision{Decision: Decision{Allowed: true}, Index: -1}, nil
	}
	if ctx == nil {
		return MultiDecision{Decision: Decision{RetryAfter: RetryNever}, Index: 0}, errNilContext
	}
	for i, d := range dims {
		if nilLimiter(d.Limiter) {
			return MultiDecision{Decision: Decision{RetryAfter: RetryNever}, Index: i},
				errs.AtDimension(i, false, configError("ratelimit.AllowAll dims[%d].Limiter (%q) must not be nil, got %v", i, d.Name, d.Limiter))
		}
	}
	if allKeyed(dims) {
		return allowAllKeyed(ctx, n, dims)
	}
	var buf [8]Dimension
	resolved, ok, err := resolveKeyed(ctx, dims, &buf)
	if err != nil {
		return MultiDecision{Decision: Decision{RetryAfter: RetryNever}, Index: len(resolved)}, errs.AtDimension(len(resolved), false, err)
	}
	if ok {
		return allowAllKeyed(ctx, n, resolved)
	}
	// Resolved, each Tiered dimension is charged and refunded in the tier
	// it was resolved to, with one call of its tier function.
	return allowAllRefund(ctx, n, resolved)
}

// nilLimiter reports whether l is nil or a typed nil, without reflection
// for the in-memory limiters.
func nilLimiter(l KeyedLimiter) bool {
	switch v := l.(type) {
	case *Keyed:
		return v == nil
	case *Tiered:
		return v == nil
	}
	return typednil.Is(l)
}

func allKeyed(dims []Dimension) bool {
	for _, d := range dims {
		if _, ok := d.Limiter.(*Keyed); !ok {
			return false
		}
	}
	return true
}

// resolveKeyed replaces every [*Tiered] dimension by its tier's limiter for
// the key, in buf when it is large enough. ok reports whether every
// resulting limiter is a *Keyed. On an unknown tier (or a tier that is a
// nil limiter) it returns the dimensions resolved before the failing one,
// and the error.
func resolveKeyed(ctx context.Context, dims []Dimension, buf *[8]Dimension) (resolved []Dimension, ok bool, err error) {
	out := bufFor(buf, len(dims))[:0]
	ok = true
	for _, d := range dims {
		if t, isTiered := d.Limiter.(*Tiered); isTiered {
			_, l, err := t.Tier(ctx, d.Key)
			if err != nil {
				return out, false, err
			}
			d.Limiter = l
		}
		if _, isKeyed := d.Limiter.(*Keyed); !isKeyed {
			ok = false
		}
		out = append(out, d)
	}
	return out, ok, nil
}

// mostRestrictive picks from decisions: the longest RetryAfter among the
// denied ones, or else the fewest Remaining.
func mostRestrictive(ds []Decision) int {
	best := 0
	for i, d := range ds {
		b := ds[best]
		switch {
		case b.Allowed && !d.Allowed:
			best = i
		case !b.Allowed && !d.Allowed && d.RetryAfter > b.RetryAfter:
			best = i
		case b.Allowed && d.Allowed && d.Remaining < b.Remaining:
			best = i
		}
	}
	return best
}

type lockRef struct {
	mu    *sync.Mutex
	id    uint64 // the Keyed's
	seq   uint64 // the generation's: newer first
	shard int
}

// allowAllKeyed is AllowAll over in-memory limiters only. It decides
// without calling Keyed.AllowN, so it reports to each dimension's Observer
// itself, once the locks are released: one Event per dimension, with that
// dimension's own Decision (a dimension that would admit reports Allowed
// even when another one denies the request).
func allowAllKeyed(ctx context.Context, n int, dims []Dimension) (MultiDecision, error) {
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
				k.report(ctx, n, ds[i], derrs[i], latency)
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
		if left, blocked := k.blocks.left(d.Key, nows[i]); blocked && blockApplies(n, g.limit, consume) {
			v, err = g.store.decideLocked(nows[i], d.Key, 0, inspect)
			v = blockedVerdict(v, left)
		} else {
			v, err = g.store.decideLocked(nows[i], d.Key, n, inspect)
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
		v, err := g.store.decideLocked(nows[i], d.Key, n, consume)
		ds[i], derrs[i] = v.decision(g.limit), err
		if !ds[i].Allowed {
			for j := i - 1; j >= 0; j-- {
				gens[j].store.refundLocked(nows[j], dims[j].Key, int64(n))
			}
			return MultiDecision{Decision: ds[i], Index: i}, errs.AtDimension(i, false, err)
		}
	}
	best := mostRestrictive(ds)
	return MultiDecision{Decision: ds[best], Index: best}, nil
}

// bufFor returns n elements in buf, or on the heap when n exceeds it.
// (append(buf[:0], make(...)...) allocates under -race.)
func bufFor[T any](buf *[8]T, n int) []T {
	if n <= len(buf) {
		return buf[:n]
	}
	return make([]T, n)
}

// allowAllRefund is AllowAll over any limiters: charge in order until one
// denies, then learn the decisions of the rest with Peek, and refund
// everything charged.
func allowAllRefund(ctx context.Context, n int, dims []Dimension) (MultiDecision, error) {
	var dsBuf [8]Decision
	var chargedBuf [8]bool
	ds, charged := bufFor(&dsBuf, len(dims)), bufFor(&chargedBuf, len(dims))
	var joined error // from dimensions admitted by a failure policy
	denied := false
	for i, d := range dims {
		var (
			dec Decision
			err error
		)
		if denied {
			dec, err = d.Limiter.Peek(ctx, d.Key, n)
		} else {
			dec, err = d.Limiter.AllowN(ctx, d.Key, n)
			charged[i] = dec.Allowed
		}
		ds[i] = dec
		joined = errors.Join(joined, errs.AtDimension(i, dec.Allowed, err))
		if !dec.Allowed {
			denied = true
		}
	}
	if denied {
		// Refunds are compensation owed whatever becomes of the caller.
		rctx := context.WithoutCancel(ctx)
		for j := len(dims) - 1; j >= 0; j-- {
			if charged[j] {
				joined = errors.Join(joined, errs.AtDimension(j, true, dims[j].Limiter.RefundN(rctx, dims[j].Key, n)))
			}
		}
	}
	best := mostRestrictive(ds)
	return MultiDecision{Decision: ds[best], Index: best}, joined
}

// Tiered is a [KeyedLimiter] that charges each key in the limiter of its
// tier, such as "free" (100 a minute) or "pro" (10,000 a minute). A
// function supplied by the caller names each key's tier on every request;
// it gets the request's context, so it can read the customer's plan that
// authentication stored there. A key's tier can change at run time: the key
// then starts being charged in its new tier's limiter, with whatever state
// it has there (a full quota if it was never seen there), while its usage
// in the old tier stays where it is until idle, so moving a key back and
// forth resets neither tier. To carry its usage along instead (a customer
// who upgrades keeps what they used), call [Tiered.Move] after the change. With [WithDefaultTier], a key whose tier has no
// limiter is charged in the default tier instead of being refused.
//
// The tier limiters can be in memory ([*Keyed]) or on Redis, and may differ
// in algorithm. Each reports its own decisions to its own [Observer];
// Tiered reports nothing itself. Tiered is a [KeyAdmin] whose methods act
// on the key in its tier's limiter. A Tiered is safe for concurrent use if
// tierOf is.
type Tiered struct {
	tierOf func(ctx context.Context, key string) string
	tiers  map[string]KeyedLimiter
	// fallback is the default tier's name and limiter; nil without
	// WithDefaultTier.
	fallbackName string
	fallback     KeyedLimiter
}

var _ KeyedLimiter = (*Tiered)(nil)

// WithDefaultTier makes a [Tiered] limiter charge a key whose tier function
// names a tier it has no limiter for in the tier called name, instead of
// refusing it with [ErrUnknownTier]. name must be one of the tiers given
// to [NewTiered], or NewTiered returns a configuration error. It applies to
// NewTiered only: the other constructors return a configuration error
// naming it.
func WithDefaultTier(name string) Option {
	return optionFunc(func(o *options) {
		o.given |= optDefaultTier
		o.defaultTier = name
	})
}

// NewTiered returns a limiter that charges key in tiers[tierOf(ctx, key)].
// The map is copied. It returns an error wrapping [ErrInvalidConfig] when
// tierOf is nil, tiers is empty or holds a nil limiter, [WithDefaultTier]
// names no tier in tiers, or an option does not apply to it (only
// WithDefaultTier does).
func NewTiered(tierOf func(ctx context.Context, key string) string, tiers map[string]KeyedLimiter, opts ...Option) (*Tiered, error) {
	o, err := buildOptions("NewTiered", optDefaultTier, opts)
	if err != nil {
		return nil, err
	}
	if tierOf == nil {
		return nil, configError("ratelimit.NewTiered tierOf must not be nil")
	}
	if len(tiers) == 0 {
		return nil, configError("ratelimit.NewTiered tiers must not be empty")
	}
	t := &Tiered{tierOf: tierOf, tiers: make(map[string]KeyedLimiter, len(tiers))}
	for name, l := range tiers {
		if typednil.Is(l) {
			return nil, configError("ratelimit.NewTiered tiers[%q] must not be nil, got a nil %T", name, l)
		}
		t.tiers[name] = l
	}
	if o.given&optDefaultTier != 0 {
		l, ok := t.tiers[o.defaultTier]
		if !ok {
			return nil, configError("ratelimit.WithDefaultTier must name one of the tiers, got %q", o.defaultTier)
		}
		t.fallbackName, t.fallback = o.defaultTier, l
	}
	return t, nil
}

// Tier returns the name of key's tier and its limiter: the tier tierOf
// names, or the default tier ([WithDefaultTier]) when tierOf names a tier
// t has no limiter for. Without a default, an unknown tier is an error
// wrapping [ErrUnknownTier] (with the name tierOf returned). When the tier's
// limiter is itself a *Tiered, Tier follows it (and any below it) to the
// limiter that holds the key's state, and reports the name of t's own tier.
// Callers that decide several times per request, such as package
// httplimit, call Tier once and use the limiter it returns.
func (t *Tiered) Tier(ctx context.Context, key string) (string, KeyedLimiter, error) {
	name, l, err := t.tier(ctx, key)
	if err != nil {
		return name, nil, err
	}
	l, err = followTiers(ctx, key, l)
	return name, l, err
}

// tier is Tier for t's own tiers, without following nested Tiered ones.
func (t *Tiered) tier(ctx context.Context, key string) (string, KeyedLimiter, error) {
	name := t.tierOf(ctx, key)
	l, ok := t.tiers[name]
	if !ok {
		if t.fallback != nil {
			return t.fallbackName, t.fallback, nil
		}
		// The key stays out of the message: it may be an API key.
		return name, nil, errs.New(fmt.Sprintf("%v %q", ErrUnknownTier, name), ErrUnknownTier)
	}
	return name, l, nil
}

// Allow is shorthand for AllowN(ctx, key, 1) that reports only whether the
// event was admitted.
func (t *Tiered) Allow(ctx context.Context, key string) bool {
	d, _ := t.AllowN(ctx, key, 1)
	return d.Allowed
}

// AllowN charges key in its tier's limiter (see [Tiered.Tier]). A key whose
// tier is unknown, with no default tier, is denied with RetryAfter
// [RetryNever] and an error wrapping [ErrUnknownTier]: the configuration's
// fault, not the request's (see RetryNever).
func (t *Tiered) AllowN(ctx context.Context, key string, n int) (Decision, error) {
	_, l, err := t.Tier(ctx, key)
	if err != nil {
		return Decision{RetryAfter: RetryNever}, err
	}
	return l.AllowN(ctx, key, n)
}

// Wait is shorthand for WaitN(ctx, key, 1).
func (t *Tiered) Wait(ctx context.Context, key string) error {
	return t.WaitN(ctx, key, 1)
}

// WaitN waits in key's tier's limiter, with that limiter's WaitN
// semantics. A key whose tier is unknown, with no default tier, gets an
// error wrapping [ErrUnknownTier] at once.
func (t *Tiered) WaitN(ctx context.Context, key string, n int) error {
	_, l, err := t.Tier(ctx, key)
	if err != nil {
		return err
	}
	return l.WaitN(ctx, key, n)
}

// Peek reports what AllowN would decide for key in its tier's limiter,
// without consuming anything. A key whose tier is unknown, with no default
// tier, is reported denied, with an error wrapping [ErrUnknownTier].
func (t *Tiered) Peek(ctx context.Context, key string, n int) (Decision, error) {
	_, l, err := t.Tier(ctx, key)
	if err != nil {
		return Decision{RetryAfter: RetryNever}, err
	}
	return l.Peek(ctx, key, n)
}

// RefundN refunds key in its current tier's limiter.
func (t *Tiered) RefundN(ctx context.Context, key string, n int) error {
	_, l, err := t.Tier(ctx, key)
	if err != nil {
		return err
	}
	return l.RefundN(ctx, key, n)
}
