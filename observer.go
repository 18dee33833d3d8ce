package ratelimit

import (
	"context"
	"time"

	"github.com/rlkit/ratelimit/internal/observe"
)

// Observer is told of every decision a limiter makes, so that it can count
// them, time them or log them (package otellimit turns them into
// OpenTelemetry metrics). Give one to a limiter with [WithObserver]; the
// Redis limiters of package redislimit take one too.
//
// Each decision is reported once, by whoever takes it: a limiter you call
// yourself reports to its own Observer, under its own name ([WithName]);
// the limits a server serves (package httplimit's middleware, grpclimit's
// interceptors) are reported by the server's Observer, under the limit's
// name, with what only the server knows (shadow mode, exemptions,
// denylists). A limiter given to such a server with an Observer of its own
// beside the server's would have its decisions counted twice: the server
// refuses it.
//
// Observe is called synchronously, once per decision, after the decision is
// made and outside the limiter's locks, so it must be fast and safe for
// concurrent use; it must not call back into the same limiter's WaitN. The
// Event holds no key: keys are unbounded, often secret, and have no place in
// metrics.
type Observer interface {
	Observe(ctx context.Context, e Event)
}

// ObserverFunc adapts a function to the [Observer] interface.
type ObserverFunc func(ctx context.Context, e Event)

// Observe calls f(ctx, e).
func (f ObserverFunc) Observe(ctx context.Context, e Event) { f(ctx, e) }

// Event is one decision, as an [Observer] sees it.
type Event struct {
	// Name is the limiter's name, from WithName; "" when it has none. In
	// the Events of a server's Observer (packages httplimit, grpclimit),
	// it is the name of the server's limit, which its rate-limit fields
	// carry too. (Decision.Limit is the limiter's count.)
	Name string
	// Algorithm is the limiter's algorithm.
	Algorithm Algorithm
	// Home is where the limiter keeps its state.
	Home Home
	// Outcome classifies the decision.
	Outcome Outcome
	// N is the number of events asked for.
	N int
	// Decision is the Decision the caller received. For the end of a WaitN
	// (Wait set), which returns no Decision, it is Allowed when WaitN
	// returned nil, with the limiter's Limit, and RetryAfter [RetryNever]
	// otherwise.
	Decision Decision
	// Err is the error the caller received, if any. An in-memory AllowN
	// whose n can never be admitted returns no error; its Event has
	// Outcome [OutcomeError] and Err [ErrInvalidN] or [ErrExceedsLimit].
	Err error
	// Wait is set when the decision ends a WaitN call: Latency then
	// includes the time spent waiting for quota.
	Wait bool
	// Latency is how long the decision took, measured on the real clock.
	Latency time.Duration
}

// Home says where a limiter keeps its state.
type Home uint8

// The homes.
const (
	// HomeNone: no limiter decided, such as for a request package
	// httplimit let through as exempt, or the limiter is a KeyedLimiter of
	// the caller's own, whose home the server cannot tell.
	HomeNone Home = 0
	// HomeMemory is a single in-memory limiter, such as a *TokenBucket.
	HomeMemory Home = iota
	// HomeKeyed is the in-memory keyed limiter, *Keyed.
	HomeKeyed
	// HomeRedis is a Redis limiter of package redislimit.
	HomeRedis
)

// String returns "none", "memory", "keyed" or "redis".
func (h Home) String() string {
	switch h {
	case HomeNone:
		return "none"
	case HomeMemory:
		return "memory"
	case HomeKeyed:
		return "keyed"
	case HomeRedis:
		return "redis"
	}
	return "unknown"
}

// Outcome classifies a decision for an [Observer].
type Outcome uint8

// The outcomes.
const (
	// OutcomeAllowed: the events were admitted by the limit.
	OutcomeAllowed Outcome = iota + 1
	// OutcomeDenied: the limit refused the events.
	OutcomeDenied
	// OutcomeShadow: the limit refused the events, but it runs in shadow
	// mode, so the request was served anyway. Only the server running the
	// limit reports it (packages httplimit, grpclimit); the limiter itself
	// reports the denial it made, OutcomeDenied.
	OutcomeShadow
	// OutcomeError: the request was refused with an error before the limit
	// could decide, such as too many keys, a done context, an n that can
	// never be admitted, or a wait that would outlast its deadline.
	OutcomeError
	// OutcomeFallback: the limiter's store failed (Err says why) and its
	// failure policy decided instead: Decision.Allowed says which way.
	OutcomeFallback
	// OutcomeExempt: the request was let through without asking the
	// limit, because it is exempt from it (package httplimit's exempt keys
	// and networks). Decision.Allowed is true and nothing was charged.
	OutcomeExempt
	// OutcomeReleased is not a decision: a concurrency limiter's permits
	// were released (or dropped by Reset). N is how many; Decision.Limit
	// and Decision.Remaining say what is free after. With the admitted N
	// of the same limiter's decisions it tells what is in flight.
	OutcomeReleased
	// OutcomeShed: the request was refused to protect the service from
	// overload, not by a rate limit: an [Adaptive] limiter had no place
	// for its priority. Servers answer it 503 (gRPC: UNAVAILABLE). A
	// [Throttle] reports it too: a client's request refused locally,
	// since its server has been failing.
	OutcomeShed
)

// String returns "allowed", "denied", "shadow", "error", "fallback",
// "exempt", "released" or "shed".
func (o Outcome) String() string {
	switch o {
	case OutcomeAllowed:
		return "allowed"
	case OutcomeDenied:
		return "denied"
	case OutcomeShadow:
		return "shadow"
	case OutcomeError:
		return "error"
	case OutcomeFallback:
		return "fallback"
	case OutcomeExempt:
		return "exempt"
	case OutcomeReleased:
		return "released"
	case OutcomeShed:
		return "shed"
	}
	return "unknown"
}

// init tells the servers of package httplimit and grpclimit how to label
// the decisions of the keyed limiters of this package, and whether one of
// them reports to an Observer of its own (see [Observer]).
func init() {
	observe.Register(describe)
}

// describe is the observe.Info of a *Keyed, *Concurrency, *Tiered or
// *Adaptive limiter.
func describe(l any) (observe.Info, bool) {
	switch v := l.(type) {
	case *Adaptive:
		return observe.Info{Home: uint8(HomeMemory), Observed: v != nil && v.obs != nil}, v != nil
	case *Keyed:
		return observe.Info{Home: uint8(HomeKeyed), Observed: v.obs != nil}, v != nil
	case *Concurrency:
		return observe.Info{Home: uint8(HomeKeyed), Observed: v.obs != nil}, v != nil
	case *Tiered:
		if v == nil {
			return observe.Info{}, false
		}
		var info observe.Info // a tier's home is its own: none here
		for _, tier := range v.tiers {
			ti := observe.Describe(tier)
			info.Observed = info.Observed || ti.Observed
			info.Logs = info.Logs || ti.Logs
		}
		return info, true
	}
	return observe.Info{}, false
}

// observeGuard tells obs of one request an overload guard (an [Adaptive],
// a [Throttle]) let go or refused: e, with N 1 and Outcome
// [OutcomeAllowed] or [OutcomeShed] by e.Decision.Allowed.
func observeGuard(ctx context.Context, obs Observer, e Event) {
	if ctx == nil {
		ctx = context.Background()
	}
	e.N, e.Outcome = 1, OutcomeShed
	if e.Decision.Allowed {
		e.Outcome = OutcomeAllowed
	}
	obs.Observe(ctx, e)
}
