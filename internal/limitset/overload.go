package limitset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/observe"
)

// ShedName is the name a server gives its adaptive concurrency limiter:
// the Name of the Events its observer hears of it, and the Limit of the
// Denial of a request it shed.
const ShedName = "adaptive"

// Overload is a server's adaptive concurrency limiter beside its limits:
// once the limits admitted a request, Acquire asks the Adaptive for a
// place of the request's priority, and the server ends the Flight when
// the request has been served.
type Overload[R any] struct {
	a        *ratelimit.Adaptive
	priority func(R) ratelimit.Priority // nil: PriorityDefault
	obs      ratelimit.Observer
}

// NewOverload returns the Overload of a server of package pkg with a,
// priority and the server's observer obs. A nil a is an error (a
// protection wired to nothing would be a silent no-op), and so is an a
// that reports to an Observer of its own beside obs: each of its
// decisions would be counted twice.
func NewOverload[R any](pkg string, a *ratelimit.Adaptive, priority func(R) ratelimit.Priority, obs ratelimit.Observer) (*Overload[R], error) {
	if a == nil {
		return nil, configError("%s.WithAdaptive: the Adaptive is nil", pkg)
	}
	if obs != nil && observe.Describe(a).Observed {
		return nil, configError("%s.WithAdaptive: the Adaptive reports to an Observer of its own (ratelimit.WithObserver) beside %s.WithObserver's: each of its decisions would be counted twice; give the observer to %s.WithObserver alone, which reports them under the name %q", pkg, pkg, pkg, ShedName)
	}
	return &Overload[R]{a: a, priority: priority, obs: obs}, nil
}

// Acquire asks the Adaptive for a place for r, of the priority function's
// priority: a Flight to end once r is served when the Decision is
// allowed, else r is shed. The server's observer hears the decision: Name
// ShedName, Algorithm ratelimit.AdaptiveAlgorithm, Home
// ratelimit.HomeMemory, N 1 and Outcome ratelimit.OutcomeAllowed or
// ratelimit.OutcomeShed.
func (o *Overload[R]) Acquire(ctx context.Context, r R) (ratelimit.Flight, ratelimit.Decision) {
	p := ratelimit.PriorityDefault
	if o.priority != nil {
		p = o.priority(r)
	}
	f, d := o.a.Acquire(ctx, p)
	if o.obs != nil {
		e := ratelimit.Event{Name: ShedName, Algorithm: ratelimit.AdaptiveAlgorithm, Home: ratelimit.HomeMemory,
			Outcome: ratelimit.OutcomeShed, N: 1, Decision: d}
		if d.Allowed {
			e.Outcome = ratelimit.OutcomeAllowed
		}
		o.obs.Observe(ctx, e)
	}
	return f, d
}

// ShedRetryAfter is the delay a server announces for a request the
// Adaptive shed with d: d.RetryAfter rounded up to a whole second, at
// least one second.
func ShedRetryAfter(d ratelimit.Decision) time.Duration {
	return time.Duration(max(ceilSeconds(d.RetryAfter), 1)) * time.Second
}

// ShedMessage is the message of a shed request, the same in httplimit's
// 503 body and grpclimit's status: retrySecs is the announced wait.
func ShedMessage(retrySecs int64) string {
	return fmt.Sprintf("server overloaded, retry in %d s", retrySecs)
}

// FlightEnd is how a server ends a request's Flight: by what the request
// says of the service's capacity.
type FlightEnd uint8

// The ends of a Flight.
const (
	// EndSuccess: served (ratelimit.Flight.Success).
	EndSuccess FlightEnd = iota
	// EndDropped: failed from overload (ratelimit.Flight.Dropped).
	EndDropped
	// EndIgnored: says nothing of the capacity (ratelimit.Flight.Ignore).
	EndIgnored
)

// String returns "success", "dropped" or "ignored".
func (e FlightEnd) String() string {
	switch e {
	case EndSuccess:
		return "success"
	case EndDropped:
		return "dropped"
	}
	return "ignored"
}

// End ends f so.
func (e FlightEnd) End(f ratelimit.Flight) {
	switch e {
	case EndSuccess:
		f.Success()
	case EndDropped:
		f.Dropped()
	default:
		f.Ignore()
	}
}

// ContextEnd is the end of a request whose context ctx is done: dropped
// when its deadline passed, ignored when it was cancelled (its client
// went away); ok is false while ctx is not done.
func ContextEnd(ctx context.Context) (e FlightEnd, ok bool) {
	switch err := ctx.Err(); {
	case err == nil:
		return EndSuccess, false
	case errors.Is(err, context.DeadlineExceeded):
		return EndDropped, true
	}
	return EndIgnored, true
}

// Undo gives back what v admitted, of a request that the Decide which
// filled v admitted and that is refused after all (an Adaptive shed it):
// the permits are released, the reservations settled at 0 and the rate
// limits refunded, so that the request costs its client nothing. Nothing
// is reported to the observer but refund errors, as the limiters' errors
// are.
func (s *Set[R]) Undo(ctx context.Context, v *Verdict[R], attrs func() []slog.Attr) {
	s.rollback(ctx, v.cost, v.Charges(), v, attrs)
}
