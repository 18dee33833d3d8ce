package redislimit

import (
	"errors"
	"fmt"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/errs"
	"github.com/rlkit/ratelimit/redislimit/internal/exec"
)

var (
	// ErrUnavailable is wrapped by every error a [Limiter] returns because
	// Redis could not decide: a network error, a timeout, an error reply.
	// The error also wraps the cause.
	ErrUnavailable = errors.New("ratelimit: redis unavailable")
	// ErrBreakerOpen is wrapped (with [ErrUnavailable]) by the errors of
	// calls that a [Limiter] answered without trying Redis because a
	// recent call found Redis unreachable (see [WithBreaker]).
	ErrBreakerOpen = exec.ErrBreakerOpen
	// ErrNotReplicated is wrapped (with [ErrUnavailable]) by the error of
	// a call that Redis admitted but whose write fewer replicas than
	// [WithReplicaAck] asks for acknowledged in time: the failure policy
	// decided instead.
	ErrNotReplicated = exec.ErrNotReplicated
	// errNilContext is returned, with a denial, to a call given a nil
	// context.
	errNilContext = errors.New("ratelimit: nil context")
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

// scriptError is the cause when a script's reply is not what it returns.
type scriptError struct{ values int }

func (e *scriptError) Error() string {
	return fmt.Sprintf("script returned %d values, want 4", e.values)
}
