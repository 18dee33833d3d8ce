package ratelimit

import (
	"context"
	"fmt"
	"reflect"
	"time"

	"github.com/rlkit/ratelimit/internal/errs"
	"github.com/rlkit/ratelimit/internal/typednil"
)

// Tiered is a [KeyedLimiter] that charges each key in the limiter of its
// tier, such as "free" (100 a minute) or "pro" (10,000 a minute). A
// function supplied by the caller names each key's tier on every request;
// it gets the request's context, so it can read the customer's plan that
// authentication stored there. A key's tier can change at run time: the key
// then starts being charged in its new tier's limiter, with whatever state
// it has there (a full quota if it was never seen there), while its usage
// in the old tier stays where it is until idle, so moving a key back and
// forth resets neither tier. To carry its usage along instead (a customer
// who upgrades keeps what they used), call [MoveKey] after the change. With [WithDefaultTier], a key whose tier has no
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

var (
	_ KeyedLimiter = (*Tiered)(nil)
	_ KeyAdmin     = (*Tiered)(nil)
)

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
	l, err = resolve(ctx, key, l)
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

// ReserveN reserves in key's tier's limiter, which must be a [Reserver]:
// see [ReserveAll]. A key whose tier is unknown, with no default tier,
// gets an error wrapping [ErrUnknownTier]; a tier whose limiter cannot
// reserve, an error wrapping [ErrInvalidConfig] naming its type.
func (t *Tiered) ReserveN(ctx context.Context, key string, n int, expiry time.Duration) (*Reservation, error) {
	return ReserveAll(ctx, n, expiry, Dimension{Limiter: t, Key: key})
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

// tierer is the optional interface of a [KeyedLimiter] that charges each
// key in another limiter, picked per key: its tier, as [*Tiered] does.
// Tier returns the limiter that holds key's state (never itself a tierer).
// [AllowAll] and [MoveKey] resolve a tierer once per call, through
// resolve, so that a request is charged and refunded in one tier with one
// call of the tier function.
//
// tiered returns the *Tiered whose tiers Tier picks from. A limiter is a
// tierer only when that is the limiter itself: a user's type that embeds a
// *Tiered has both methods too, promoted, but decides through its own
// AllowN (it may meter or rewrite keys), so it is charged as it is.
type tierer interface {
	Tier(ctx context.Context, key string) (string, KeyedLimiter, error)
	tiered() *Tiered
}

// tiered returns t (see tierer).
func (t *Tiered) tiered() *Tiered { return t }

// asTierer returns l as a tierer when it is one (see tierer).
func asTierer(l KeyedLimiter) (tierer, bool) {
	t, ok := l.(tierer)
	if !ok || KeyedLimiter(t.tiered()) != l {
		return nil, false
	}
	return t, true
}

// resolve returns the limiter that holds key's state for l: its tier's
// limiter when l is a tierer, else l. It is the one place tiers are
// resolved: Tiered.Tier follows nested tiers through it too.
func resolve(ctx context.Context, key string, l KeyedLimiter) (KeyedLimiter, error) {
	t, ok := asTierer(l)
	if !ok {
		return l, nil
	}
	_, l, err := t.Tier(ctx, key)
	return l, err
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

// MoveKey carries key's usage from one keyed limiter to another, for a key
// whose tier (plan, policy) changed: the events it used in from (its Limit
// minus Peek(ctx, key, 0).Remaining there) are converted by mode to to's
// limit (the Limit of Peek on to) as [Keyed.SetPolicy] converts them, and
// charged to key in to with Penalize, on top of what to already shows used
// (only the difference, if positive); then key is Reset in from. Both
// limiters must implement [KeyAdmin]. A [*Tiered] stands for the key's
// tier in it: after a customer's upgrade from "free" to "pro" is recorded,
// MoveKey(ctx, key, tiers["free"], tiered, mode) carries what the key used
// in the old tier into the new one, as mode converts it (KeepUsed: 60 of
// 100 a minute used stays 60 used of 10,000; ScaleUsed: it becomes 6,000).
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
	if typednil.Is(from) || typednil.Is(to) {
		return configError("ratelimit.MoveKey from and to must not be nil, got %T and %T", from, to)
	}
	// A Tiered (or any tierer) stands for the key's tier in it.
	from, err := resolve(ctx, key, from)
	if err != nil {
		return err
	}
	to, err = resolve(ctx, key, to)
	if err != nil {
		return err
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

// adminOf returns l as a KeyAdmin, or an error naming its type.
func adminOf(l KeyedLimiter) (KeyAdmin, error) {
	if a, ok := l.(KeyAdmin); ok {
		return a, nil
	}
	return nil, fmt.Errorf("ratelimit: %T does not implement ratelimit.KeyAdmin", l)
}
