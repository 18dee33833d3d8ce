package grpclimit

import (
	"context"
	"log/slog"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/report"
	"github.com/rlkit/ratelimit/internal/typednil"
)

// WithCost sets each call's cost, default 1: for the server interceptors
// the n charged in every limit that applies to the call, for a client the
// n it waits for in its limiter. method is the call's full method name;
// req is a unary call's request (on a server as decoded, on a client as
// about to be sent), so that a batch can cost its size, and nil for the
// creation of a stream ([WithMessageCost] prices a stream's messages). A
// cost <= 0 exempts the call from the limiters (a server still refuses
// the keys of [Limit.DeniedKeys]; a client still honours the pauses
// servers ask for). A cost above a limit's capacity can never succeed:
// the server denies it without RetryInfo. A nil cost restores the
// default. For [New], [NewClient] and [NewKeyedClient].
func WithCost(cost func(ctx context.Context, method string, req any) int) CommonOption {
	return commonOption(func(cfg *common) error {
		cfg.cost = cost
		return nil
	})
}

// WithClock makes the interceptors read time from c instead of the real
// clock, such as a fake clock in tests: the server interceptors compute
// x-ratelimit-reset and pace their error reports on it, a client times the
// pauses servers ask for. Limiters have their own clocks
// ([ratelimit.WithClock]). A nil c selects the real clock; a typed nil is
// an error. For [New], [NewClient] and [NewKeyedClient].
func WithClock(c ratelimit.Clock) CommonOption {
	return commonOption(func(cfg *common) error {
		if c != nil && typednil.Is(c) {
			return configError("grpclimit.WithClock: clock is a nil %T", c)
		}
		cfg.clock = c
		return nil
	})
}

// WithMessageCost sets the cost of each message a stream's handler
// receives, charged in the limits with [Limit.Messages] (default 1), such
// as the number of items a message carries. msg is the received message.
// A cost <= 0 exempts the message. A nil cost restores the default. For
// [New].
func WithMessageCost(cost func(ctx context.Context, method string, msg any) int) Option {
	return serverOption(func(i *Interceptor) error {
		i.msgCost = cost
		return nil
	})
}

// WithFields chooses which rate-limit fields the server interceptors send
// as response header metadata (default both: XRateLimitFields|IETFFields); retry-after is sent on
// every denial that can be retried, whatever the set. For [New].
func WithFields(set FieldSet) Option {
	return serverOption(func(i *Interceptor) error {
		if set&^allFields != 0 {
			return configError("grpclimit.WithFields: unknown field set, got %#x", uint8(set))
		}
		i.fields = set
		return nil
	})
}

// WithShadowFields lets limits in shadow mode take part in the rate-limit
// fields (when one of them is the most restrictive), so that clients see
// them before they are enforced. Off by default: a shadow limit changes
// nothing a client can see. For [New].
func WithShadowFields(on bool) Option {
	return serverOption(func(i *Interceptor) error {
		i.shadowFields = on
		return nil
	})
}

// WithDeniedHandler replaces [DeniedError] as the server interceptors'
// answer to a denied call or stream message: the error the call (or
// RecvMsg) returns, such as a status in the service's own format. A
// handler returning nil gets DeniedError's answer: a denied call is never
// served. A nil h restores DeniedError. Never put [Denial.Err]'s text in
// the answer: it is the limiter's. For [New].
func WithDeniedHandler(h func(ctx context.Context, d Denial) error) Option {
	return serverOption(func(i *Interceptor) error {
		i.denied = h
		return nil
	})
}

// WithLogger sends the server interceptors' error reports to l instead of
// [slog.Default] (read when a report is made); a nil l turns them off.
//
// A report is made when a limiter answers with an error (a Redis backend
// down, a key cap reached, an unknown tier): the call is then treated as
// the limiter's Decision says, since limiters carry their own failure
// policy. The interceptors report at most once per limit per
// [WithErrorReportInterval], at level Error, with the message "ratelimit:
// limiter error" and these attributes: "limit" (the limit whose limiter
// answered the error), "error", "suppressed" (how many errors of the limit
// went unreported since the previous report), "method" (the full method
// name) and, for a stream message, "message" (true). Reports never hold
// the key or the peer's address. A call whose own context ended is not
// reported. One failure is one line: a limiter that logs its errors
// itself (a Redis limiter given redislimit.WithLogger) is left to do so.
// For [New].
func WithLogger(l *slog.Logger) Option {
	return serverOption(func(i *Interceptor) error {
		i.logger = report.To(l)
		return nil
	})
}

// WithErrorReportInterval sets how often, at most, the server interceptors
// report errors of one limit to their logger ([WithLogger]); default 10 s. d <= 0 reports every error. For [New].
func WithErrorReportInterval(d time.Duration) Option {
	return serverOption(func(i *Interceptor) error {
		i.reportEvery = max(d, 0)
		return nil
	})
}

// WithObserver makes the server interceptors report to o every decision
// they take for their limits, each once, with Limit the [Limit]'s Name
// (the name its rate-limit fields carry; the limiter's own name,
// [ratelimit.WithName], plays no part) and N the cost of the call (or
// stream message). A decision a limiter took has the limiter's (or its
// tier's) Home and Algorithm, as the limiter would report them, and
// Latency the time the limiters took to decide (with several limits, all
// of them):
//
//   - a call the enforced limits admit: one Event per enforced Limit that
//     applied, Outcome [ratelimit.OutcomeAllowed], or
//     [ratelimit.OutcomeFallback] when the limiter's failure policy
//     decided (its store failed; Err says why);
//   - a call they refuse: one Event for the Limit that refused it
//     ([ratelimit.OutcomeDenied], OutcomeFallback, or
//     [ratelimit.OutcomeError] for a cost above the quota or a key cap),
//     and one for each other Limit whose limiter answered an error;
//   - a Limit whose tier has no limiter (the server's misconfiguration):
//     Outcome [ratelimit.OutcomeError], Err the error;
//   - each shadow Limit consulted: one Event, Outcome
//     [ratelimit.OutcomeShadow] for its denial.
//
// Stream messages are reported as calls are, in the [Limit.Messages]
// limits. The Decision of an Event is the Limit's own when the
// interceptors know it (one enforced Limit, the one the fields report,
// shadow Limits), else only its Allowed. The interceptors' own decisions,
// with Home [ratelimit.HomeNone] and Latency 0:
//
//   - a call of cost <= 0, or to the health or reflection services
//     ([ChargeHealthAndReflection]): one Event per Limit of the set it was
//     exempt from, with Outcome [ratelimit.OutcomeExempt];
//   - a call whose key a Limit exempts ([Limit.ExemptKeys]): one such
//     Event, for that Limit;
//   - a call refused by a denylist ([Limit.DeniedKeys]): Outcome
//     [ratelimit.OutcomeDenied] and Err [ErrDenied];
//   - a key in the DeniedKeys of a limit in shadow mode: the same Event
//     with Outcome [ratelimit.OutcomeShadow], when the enforced limits
//     admit the call.
//
// A limiter given to the interceptors with an Observer of its own would
// have each decision counted twice: [New] refuses it. A nil o reports
// nothing (the default); a typed nil is an error. For [New].
func WithObserver(o ratelimit.Observer) Option {
	return serverOption(func(i *Interceptor) error {
		if o != nil && typednil.Is(o) {
			return configError("grpclimit.WithObserver: observer is a nil %T", o)
		}
		i.observer = o
		return nil
	})
}

// WithAdaptive makes the server interceptors protect the service from
// overload with a, an adaptive concurrency limiter
// ([ratelimit.NewAdaptive]), one for the service. The limits decide
// first: a call they refuse never takes a place in a. A call (or a
// stream's creation) they admit, or let through exempt or unlimited,
// asks a for a place of priority(ctx, method) (nil priority: every call
// [ratelimit.PriorityDefault]) just before its handler, and holds it
// until the unary handler returns, or for the stream's life (until its
// handler returns). The place is then given back with what the call
// says of the service's capacity, by the code of the handler's error:
// [ratelimit.Flight.Dropped] for codes.Unavailable and
// codes.DeadlineExceeded, or a call context whose deadline passed;
// [ratelimit.Flight.Ignore] for codes.Canceled, a client that went away
// (the call's context cancelled), or a handler that panicked (a bug, not
// a sign of overload; the panic goes on up once the place is free); else
// [ratelimit.Flight.Success], but for a stream, whose life is as long as
// its client keeps it, not a latency of the service: its success is
// [ratelimit.Flight.Ignore].
//
// A call a sheds is not served: the limits that admitted it are refunded
// (it costs its client nothing), the trailer grpc-retry-pushback-ms (gRFC
// A6) is set to the delay in milliseconds, and the denied handler
// ([WithDeniedHandler]) answers it with a [Denial] whose Err is
// [ErrShed], Limit "adaptive", Decision a's and RetryAfter its
// RetryAfter rounded up to a whole second, at least one; [DeniedError]
// answers codes.Unavailable, the message "server overloaded, retry in 1
// s" and an [errdetails.RetryInfo] of RetryAfter.
//
// The interceptors' observer ([WithObserver]) hears each of a's
// decisions under the name "adaptive" (Algorithm
// [ratelimit.AdaptiveAlgorithm], Home [ratelimit.HomeMemory], N 1):
// [ratelimit.OutcomeAllowed], or [ratelimit.OutcomeShed] for a shed
// call; a with an Observer of its own beside it would count them twice:
// [New] refuses it, and a nil a. For [New].
func WithAdaptive(a *ratelimit.Adaptive, priority func(ctx context.Context, method string) ratelimit.Priority) Option {
	return serverOption(func(i *Interceptor) error {
		i.adaptive, i.priority, i.adaptiveSet = a, priority, true
		return nil
	})
}

// ChargeHealthAndReflection makes the server interceptors charge the calls
// of gRPC's health-checking service (grpc.health.v1) and server reflection
// (grpc.reflection.v1 and v1alpha) like any other call, and their stream
// messages in the limits with [Limit.Messages]. Off by default: they are
// served uncharged, as calls of cost <= 0 are ([WithCost] is not asked
// about them), so that health checkers and tools such as grpcurl, which
// sends the caller's metadata on its reflection stream too, spend nobody's
// quota; the observer ([WithObserver]) sees them as exempt, and the keys
// of [Limit.DeniedKeys] are still refused. Turn it on for a server whose
// untrusted clients could flood those services. For [New].
func ChargeHealthAndReflection(on bool) Option {
	return serverOption(func(i *Interceptor) error {
		i.chargeInfra = on
		return nil
	})
}
