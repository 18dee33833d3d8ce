package ratelimit

import (
	"github.com/rlkit/ratelimit/internal/typednil"
)

// Option configures a limiter. Options are applied in order after the
// required arguments; validation happens after all options are applied. An
// option given to a constructor it does not apply to (such as [WithMaxKeys]
// given to [NewTokenBucket]) is a configuration error naming it.
type Option interface {
	apply(*options)
}

// optionSet is a set of options, one bit each.
type optionSet uint8

const (
	optClock optionSet = 1 << iota
	optMaxKeys
	optObserver
	optName
	optDefaultTier
)

// optionNames names the options of optionSet, bit by bit.
var optionNames = [...]string{"WithClock", "WithMaxKeys", "WithObserver", "WithName", "WithDefaultTier"}

// options holds every optional setting, with its default.
type options struct {
	clock       Clock    // nil means the real clock (fast path)
	maxKeys     int      // Keyed only; meaningful when given has optMaxKeys
	observer    Observer // nil: no reports
	name        string   // the limiter's name in Events
	defaultTier string   // Tiered only; meaningful when given has optDefaultTier
	given       optionSet
	err         error // the first invalid option
}

type optionFunc func(*options)

func (f optionFunc) apply(o *options) { f(o) }

// WithClock makes the limiter read time from c instead of the real clock.
// Pass a fake clock of your own, or a *clock.Mock from
// github.com/benbjohnson/clock, for deterministic tests. A nil c selects the
// real clock; a typed nil (such as a nil *clock.Mock) is an error: the
// constructor returns an error wrapping [ErrInvalidConfig]. It applies to
// the single limiters, [NewKeyed], [NewConcurrency], [NewAdaptive] and
// [NewThrottle]. For a [Concurrency] limiter it times [Concurrency.Block];
// for an [Adaptive] one, the latencies it measures.
func WithClock(c Clock) Option {
	return optionFunc(func(o *options) {
		o.given |= optClock
		if c != nil && typednil.Is(c) {
			o.setErr(configError("ratelimit.WithClock clock must not be a typed nil, got a nil %T", c))
			return
		}
		o.clock = c
	})
}

// setErr records the first invalid option.
func (o *options) setErr(err error) {
	if o.err == nil {
		o.err = err
	}
}

// buildOptions applies opts in order for the constructor ctor (such as
// "NewKeyed"), which accepts the options in accepted. Its error is that of
// the first invalid option, or else names the first option given that ctor
// does not accept.
func buildOptions(ctor string, accepted optionSet, opts []Option) (options, error) {
	var o options
	for _, opt := range opts {
		if !typednil.Is(opt) {
			opt.apply(&o)
		}
	}
	if o.err != nil {
		return o, o.err
	}
	if extra := o.given &^ accepted; extra != 0 {
		for i, name := range optionNames {
			if extra&(1<<i) != 0 {
				return o, configError("ratelimit.%s does not apply to ratelimit.%s", name, ctor)
			}
		}
	}
	return o, nil
}

// WithMaxKeys caps the number of keys a [Keyed] limiter holds at exactly n
// (without it: 1<<20, 1,048,576),
// over all its shards: a new key that would be key n+1 is admitted only if
// an idle key can be reclaimed to make room, and is otherwise denied with
// [ErrTooManyKeys]. For a [Concurrency] limiter it caps the keys with
// permits in flight or waiters, for a [Throttle] the keys it counts
// (without it: 65,536). A non-positive n is an error: the constructor
// returns an error wrapping [ErrInvalidConfig]. It applies to [NewKeyed],
// [NewConcurrency] and [NewThrottle] only: the other constructors return
// a configuration error naming it.
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

// WithObserver makes the limiter report every decision to o: one Event per
// AllowN (Allow included) and one per WaitN (Wait included), when it
// returns. A nil o reports nothing (the default), and then no time is read
// for Latency; a typed nil is an error. A [Concurrency] limiter reports
// each TryAcquire and Acquire, and each Release as [OutcomeReleased]; an
// [Adaptive] one each Acquire, a [Throttle] each Attempt and Retry. It
// applies to the single limiters, [NewKeyed], [NewConcurrency],
// [NewAdaptive] and [NewThrottle]; a
// [Tiered] has no Observer of its own (its tiers report).
func WithObserver(o Observer) Option {
	return optionFunc(func(opts *options) {
		opts.given |= optObserver
		if o != nil && typednil.Is(o) {
			opts.setErr(configError("ratelimit.WithObserver observer must not be a typed nil, got a nil %T", o))
			return
		}
		opts.observer = o
	})
}

// WithName names the limiter in the Events its [Observer] receives, such as
// "per-key" or "login". The name should come from a small, fixed set: it
// becomes a metric attribute. It applies where [WithObserver] does.
func WithName(name string) Option {
	return optionFunc(func(opts *options) {
		opts.given |= optName
		opts.name = name
	})
}

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
