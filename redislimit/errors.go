package redislimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/errs"
)

var (
	// ErrUnavailable is wrapped by every error a [Limiter] returns because
	// Redis could not decide: a network error, a timeout, an error reply.
	// The error also wraps the cause.
	ErrUnavailable = errors.New("ratelimit: redis unavailable")
	// ErrBreakerOpen is wrapped (with [ErrUnavailable]) by the errors of
	// calls that a [Limiter] answered without trying Redis because a
	// recent call found Redis unreachable (see [WithBreaker]).
	ErrBreakerOpen = errors.New("ratelimit: breaker open")
	// ErrNotReplicated is wrapped (with [ErrUnavailable]) by the error of
	// a call that Redis admitted but whose write fewer replicas than
	// [WithReplicaAck] asks for acknowledged in time: the failure policy
	// decided instead.
	ErrNotReplicated = errors.New("ratelimit: redis write not acknowledged by replicas")
	// errNilContext is returned, with a denial, to a call given a nil
	// context.
	errNilContext = errors.New("ratelimit: nil context")
	// errOverloaded is the cause when too many calls are queued.
	errOverloaded = errors.New("too many calls waiting for redis")
)

// nError reports a WaitN or RefundN call with an n that can never be
// admitted (or refunded), in the core's words.
func nError(n, limit int) error {
	return errs.N(ratelimit.ErrInvalidN, ratelimit.ErrExceedsLimit, n, int64(limit))
}

// unavailableError wraps ErrUnavailable and the cause. It names the key by
// a digest only: keys may be API keys.
type unavailableError struct {
	op, digest string
	err        error
}

func (e *unavailableError) Error() string {
	return fmt.Sprintf("%v: %s (key %s): %v", ErrUnavailable, e.op, e.digest, e.err)
}
func (e *unavailableError) Unwrap() []error { return []error{ErrUnavailable, e.err} }

// The causes below are wrapped in an unavailableError, which says
// "ratelimit:" first: their own messages do not repeat it.

// breakerError is the cause of a call answered while the breaker is open.
type breakerError struct{ last error }

func (e *breakerError) Error() string {
	if e.last == nil {
		return "breaker open"
	}
	return fmt.Sprintf("breaker open after: %v", e.last)
}
func (e *breakerError) Unwrap() error { return ErrBreakerOpen }

// timeoutError is the cause when Redis did not answer within the
// limiter's timeout. It matches context.DeadlineExceeded.
type timeoutError struct{ d time.Duration }

func (e *timeoutError) Error() string { return fmt.Sprintf("no reply within %v", e.d) }
func (e *timeoutError) Unwrap() error { return context.DeadlineExceeded }

// connectError is the cause when the call ran out of time while go-redis
// was failing to connect (it retries a failed dial with backoff, so a
// refused connection shows up as a timeout): it names the dial's error.
type connectError struct {
	d    time.Duration
	dial error
}

func (e *connectError) Error() string {
	return fmt.Sprintf("cannot connect to redis (gave up after %v): %v", e.d, e.dial)
}
func (e *connectError) Unwrap() []error { return []error{e.dial, context.DeadlineExceeded} }

// scriptError is the cause when a script's reply is not what it returns.
type scriptError struct{ values int }

func (e *scriptError) Error() string {
	return fmt.Sprintf("script returned %d values, want 4", e.values)
}

// notReplicatedError is the cause when a decision's write was acknowledged
// by fewer replicas than WithReplicaAck asks for (acks -1: WAIT failed).
type notReplicatedError struct {
	acks, want int
	timeout    time.Duration
}

func (e *notReplicatedError) Error() string {
	if e.acks < 0 {
		return fmt.Sprintf("write not acknowledged: WAIT %d failed", e.want)
	}
	return fmt.Sprintf("write acknowledged by %d of %d replicas within %v", e.acks, e.want, e.timeout)
}
func (e *notReplicatedError) Unwrap() error { return ErrNotReplicated }
