package redislimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rlkit/ratelimit"
)

var (
	// ErrUnavailable is wrapped by every error a [Limiter] returns because
	// Redis could not decide: a network error, a timeout, an error reply.
	// The error also wraps the cause.
	ErrUnavailable = errors.New("redislimit: redis unavailable")
	// errOverloaded is the cause when too many calls are queued.
	errOverloaded = errors.New("redislimit: too many calls waiting for redis")
)

// deadlineError reports a wait that would outlast ctx's deadline; it
// matches ratelimit.ErrDeadline and context.DeadlineExceeded.
type deadlineError struct{ wait time.Duration }

func (e *deadlineError) Error() string {
	return fmt.Sprintf("%v (needs %v)", ratelimit.ErrDeadline, e.wait)
}
func (e *deadlineError) Unwrap() []error {
	return []error{ratelimit.ErrDeadline, context.DeadlineExceeded}
}

// ErrBreakerOpen is wrapped (with [ErrUnavailable]) by the errors of calls
// that a [Limiter] answered without trying Redis (see [WithBreaker]),
// because a recent call found Redis unreachable.
var ErrBreakerOpen = errors.New("redislimit: breaker open")

// breakerError is the cause of a call answered while the breaker is open.
type breakerError struct{ last error }

func (e *breakerError) Error() string {
	return fmt.Sprintf("%v after: %v", ErrBreakerOpen, e.last)
}
func (e *breakerError) Unwrap() error { return ErrBreakerOpen }

// timeoutError is the cause when Redis did not answer within the
// limiter's timeout. It matches context.DeadlineExceeded.
type timeoutError struct{ d time.Duration }

func (e *timeoutError) Error() string { return fmt.Sprintf("redislimit: no reply within %v", e.d) }
func (e *timeoutError) Unwrap() error { return context.DeadlineExceeded }

// connectError is the cause when the call ran out of time while go-redis
// was failing to connect (it retries a failed dial with backoff, so a
// refused connection shows up as a timeout): it names the dial's error.
type connectError struct {
	d    time.Duration
	dial error
}

func (e *connectError) Error() string {
	return fmt.Sprintf("redislimit: cannot connect to redis (gave up after %v): %v", e.d, e.dial)
}
func (e *connectError) Unwrap() []error { return []error{e.dial, context.DeadlineExceeded} }

// unavailableError wraps ErrUnavailable and the cause. It names the key by
// a digest only: keys may be API keys.
type unavailableError struct {
	op, digest string
	err        error
}

func (e *unavailableError) Error() string {
	return fmt.Sprintf("redislimit: redis unavailable: %s (key %s): %v", e.op, e.digest, e.err)
}
func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.err} }

// reportedError is what the error handler gets when earlier failures were
// not reported to it (see [WithErrorHandler]).
type reportedError struct {
	err        error
	suppressed int64
}

func (e *reportedError) Error() string {
	return fmt.Sprintf("%v (and %d more failed calls since the last report)", e.err, e.suppressed)
}
func (e *reportedError) Unwrap() error { return e.err }

// Suppressed returns how many failed calls a [Limiter] answered without
// calling its error handler since the handler's previous call, when err is
// an error the handler received; 0 otherwise. Each call of the handler thus
// stands for 1 + Suppressed(err) failed calls.
func Suppressed(err error) int64 {
	var r *reportedError
	if errors.As(err, &r) {
		return r.suppressed
	}
	return 0
}
