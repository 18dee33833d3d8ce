package envoylimit

import (
	"fmt"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/adapter"
)

// Option configures a [Service].
type Option func(*options) error

type options struct {
	limiters func(name string, p ratelimit.Policy) (ratelimit.KeyedLimiter, error)
	clock    ratelimit.Clock
	observer ratelimit.Observer
	failure  FailurePolicy
	headers  Headers
	shadow   bool
	custom   bool // limiters is the caller's
}

func defaultOptions() options {
	return options{failure: FailToEnvoy}
}

// WithLimiters sets how the Service makes the limiter of each limit of its
// configuration: newLimiter gets the limit's name (its descriptor's path,
// such as "messaging.message_type_marketing.to_number", with "#2" for the
// second of several limits, and "~" and a hash when two descriptors' paths
// coincide, as key "a_b" and key "a" with value "b" do; the limits requests
// carry are "#override.5_per_minute" and so on) and its policy. Use it to keep the state in
// Redis, with package redislimit:
//
//	envoylimit.WithLimiters(func(name string, p ratelimit.Policy) (ratelimit.KeyedLimiter, error) {
//		return redislimit.New(client, p, redislimit.WithPrefix("rls:"+name+":"))
//	})
//
// Every limit needs its own keys: give each limiter a prefix of its name,
// as above. The default is an in-memory [ratelimit.NewKeyed] per limit,
// with [WithClock]'s clock. A reload ([Service.SetConfig]) keeps a
// limit's limiter while its name stays, changing its policy with its
// SetPolicy method (as [ratelimit.Keyed] and redislimit's Limiter have)
// when the policy changed, so the keys keep what they used; a limiter
// without that method is replaced by a new one, and its keys start
// afresh.
func WithLimiters(newLimiter func(name string, p ratelimit.Policy) (ratelimit.KeyedLimiter, error)) Option {
	return func(o *options) error {
		if newLimiter == nil {
			return configError("envoylimit.WithLimiters needs a function, got nil")
		}
		o.limiters, o.custom = newLimiter, true
		return nil
	}
}

// WithClock sets the clock of the default in-memory limiters, of the
// statuses' duration_until_reset and of [Service.Watch]; nil (the
// default) is the real clock. Tests pass a *clock.Mock from
// github.com/benbjohnson/clock.
func WithClock(c ratelimit.Clock) Option {
	return func(o *options) error {
		o.clock = c
		return nil
	}
}

// WithObserver reports every limit's decision to obs: one
// [ratelimit.Event] per limit of a request's descriptors, Name the
// limit's name (see [WithLimiters]; with detailed_metric or
// value_to_metric in the configuration, the request's values too, as
// envoyproxy/ratelimit names its stats), Outcome shadow for a shadow_mode
// limit's denial. Names come from the configuration, so they are bounded
// unless detailed_metric or value_to_metric is used, as there; otellimit's
// WithMaxLimits bounds them then.
func WithObserver(obs ratelimit.Observer) Option {
	return func(o *options) error {
		if obs == nil {
			return configError("envoylimit.WithObserver needs an observer, got nil")
		}
		o.observer = obs
		return nil
	}
}

// FailurePolicy says what ShouldRateLimit answers when a limiter fails
// (Redis is unreachable, say).
type FailurePolicy uint8

// The failure policies.
const (
	// FailToEnvoy answers the call with a gRPC UNAVAILABLE error, as
	// envoyproxy/ratelimit does: Envoy then lets the request through, or
	// denies it when its filter sets failure_mode_deny.
	FailToEnvoy FailurePolicy = iota + 1
	// FailAsLimiter answers with the Decision the limiter returned beside
	// its error: the limiter's own failure policy decides (redislimit's
	// WithFailurePolicy: fail open, fail closed, or a local fallback).
	FailAsLimiter
)

// String returns "to-envoy" or "as-limiter".
func (f FailurePolicy) String() string {
	switch f {
	case FailToEnvoy:
		return "to-envoy"
	case FailAsLimiter:
		return "as-limiter"
	}
	return fmt.Sprintf("FailurePolicy(%d)", uint8(f))
}

// WithFailurePolicy sets what a limiter's failure answers; FailToEnvoy by
// default. A shadow_mode limit's failure never fails a call.
func WithFailurePolicy(f FailurePolicy) Option {
	return func(o *options) error {
		if f != FailToEnvoy && f != FailAsLimiter {
			return configError("envoylimit.WithFailurePolicy must be FailToEnvoy or FailAsLimiter, got %v", f)
		}
		o.failure = f
		return nil
	}
}

// Headers selects the rate-limit fields a response asks Envoy to add to
// its reply (response_headers_to_add), for the descriptor closest to its
// limit (the one that denied, when one did).
type Headers uint8

// The header sets.
const (
	// NoHeaders adds none (the default, as envoyproxy/ratelimit's).
	NoHeaders Headers = iota
	// EnvoyHeaders are envoyproxy/ratelimit's: RateLimit-Limit,
	// RateLimit-Remaining and RateLimit-Reset (seconds, rounded up).
	EnvoyHeaders
	// IETFHeaders are the IETF draft's structured fields RateLimit-Policy
	// and RateLimit, with Retry-After on a denial that can be retried, as
	// package httplimit writes them.
	IETFHeaders
)

// String returns "none", "envoy" or "ietf".
func (h Headers) String() string {
	switch h {
	case NoHeaders:
		return "none"
	case EnvoyHeaders:
		return "envoy"
	case IETFHeaders:
		return "ietf"
	}
	return fmt.Sprintf("Headers(%d)", uint8(h))
}

// WithHeaders sets the fields responses carry; NoHeaders by default.
func WithHeaders(h Headers) Option {
	return func(o *options) error {
		if h > IETFHeaders {
			return configError("envoylimit.WithHeaders must be NoHeaders, EnvoyHeaders or IETFHeaders, got %v", h)
		}
		o.headers = h
		return nil
	}
}

// WithShadowMode answers OK to every call, whatever its statuses say
// (envoyproxy/ratelimit's global shadow mode, SHADOW_MODE): calls are
// decided and charged as if enforced (a call that would be denied charges
// nothing), denials reported with Outcome shadow, and nothing is refused.
// For a soft launch.
func WithShadowMode() Option {
	return func(o *options) error {
		o.shadow = true
		return nil
	}
}

func configError(format string, args ...any) error {
	return adapter.ConfigError(format, args...)
}
