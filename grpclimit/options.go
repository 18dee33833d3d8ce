package grpclimit

import (
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/errs"
)

// Option configures what one of the package's constructors builds: server
// interceptors ([New]), client interceptors ([NewClient],
// [NewKeyedClient]) or an [IPResolver] ([NewIPResolver]). Each option's
// documentation says which constructors it applies to; an option given to
// any other constructor makes that constructor return an error wrapping
// [ratelimit.ErrInvalidConfig] that names it. Options are applied in
// order; a nil Option is ignored.
type Option interface {
	apply(c *config) error
}

// target is the set of constructors an option applies to.
type target uint8

const (
	forServer target = 1 << iota
	forClient
	forResolver
)

// String names the constructors of t, as error messages show them.
func (t target) String() string {
	switch t {
	case forServer:
		return "New"
	case forClient:
		return "NewClient and NewKeyedClient"
	case forResolver:
		return "NewIPResolver"
	case forServer | forClient:
		return "New, NewClient and NewKeyedClient"
	}
	return "no constructor"
}

// config is what options write to: exactly one of s, c and r is set, the
// value the constructor is building.
type config struct {
	to target
	s  *Interceptor
	c  *Client
	r  *IPResolver
}

// option is the one implementation of Option.
type option struct {
	name    string // such as "WithRetries", for error messages
	targets target
	set     func(c *config) error
}

func (o option) apply(c *config) error {
	if o.targets&c.to == 0 {
		return errs.Config(ratelimit.ErrInvalidConfig, "grpclimit.%s applies to %v, not %v", o.name, o.targets, c.to)
	}
	return o.set(c)
}

// applyOptions applies opts in order to c and returns the first error.
func applyOptions(c *config, opts []Option) error {
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o.apply(c); err != nil {
			return err
		}
	}
	return nil
}

// configError builds a configuration error of this package; format names
// the option or argument, as in "grpclimit.WithMaxPause must be positive,
// got %v".
func configError(format string, args ...any) error {
	return errs.Config(ratelimit.ErrInvalidConfig, format, args...)
}
