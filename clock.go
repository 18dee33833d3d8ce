package ratelimit

import (
	"time"

	"github.com/rlkit/ratelimit/internal/typednil"
)

// Clock is the source of time for a limiter: the two things limiters ask
// of time, in the shape of the time package, so that any fake can
// implement it in a few lines. *clock.Mock from
// github.com/benbjohnson/clock satisfies it as it is, and so does the
// value clock.New returns.
//
// Without WithClock a limiter uses the time package directly, which also
// makes it run on the fake time of a testing/synctest bubble.
type Clock interface {
	// Now returns the current time. Limiters measure durations as
	// differences of Now values, so a clock whose times carry a monotonic
	// reading (as time.Now's do) is immune to wall-clock steps.
	Now() time.Time
	// After returns a channel that receives the time once d has passed on
	// this clock, as time.After does. A waiter that gives up early stops
	// listening, so the clock must not block sending on the channel: give
	// it a buffer of one, as time.After does.
	After(d time.Duration) <-chan time.Time
}

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
// the single limiters and to [NewKeyed].
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
