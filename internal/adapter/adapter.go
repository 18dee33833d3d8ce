// Package adapter holds what the adapters (httplimit, grpclimit) share
// beside the decision engine of internal/limitset: their sentinel errors,
// defined here once so that errors.Is matches them whichever package
// returned them, and the loop that applies their options.
package adapter

import (
	"errors"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/errs"
)

// The adapters' sentinel errors. httplimit and grpclimit export these very
// values (httplimit.ErrNoKey == grpclimit.ErrNoKey).
var (
	// ErrNoKey: a keyed client (transport or gRPC client) found no key for
	// a request, which is then not sent.
	ErrNoKey = errors.New("ratelimit: no key for the request")
	// ErrDenied: a denylist refused a request.
	ErrDenied = errors.New("ratelimit: request denied by a denylist")
	// ErrShed: a server's adaptive concurrency limiter shed a request.
	ErrShed = errors.New("ratelimit: request shed: the server is overloaded")
	// ErrPauseDeadline: a pause a server asked for outlasts the request's
	// context deadline.
	ErrPauseDeadline = errors.New("ratelimit: server-requested pause would exceed context deadline")
	// ErrThrottled: a client's ratelimit.Throttle refused a request
	// locally, since its server has been failing.
	ErrThrottled = errors.New("ratelimit: throttled: the server has been failing")
)

// ConfigError builds a configuration error of an adapter: it wraps
// [ratelimit.ErrInvalidConfig], and format names the package, the option
// or argument and the value, as in "httplimit.WithMaxPause must be
// positive, got %v".
func ConfigError(format string, args ...any) error {
	return errs.Config(ratelimit.ErrInvalidConfig, format, args...)
}

// Apply calls apply on each of opts in order, skipping nil ones (an
// option is an interface; any(o) == nil is a nil interface), and returns
// the first error.
func Apply[O comparable](opts []O, apply func(O) error) error {
	var none O
	for _, o := range opts {
		if o == none {
			continue
		}
		if err := apply(o); err != nil {
			return err
		}
	}
	return nil
}
