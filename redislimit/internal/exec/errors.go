package exec

import (
	"context"
	"errors"
	"fmt"
	"time"
)

var (
	// ErrBreakerOpen is wrapped by the error of a call answered without
	// trying Redis because a recent call found Redis unreachable.
	// Package redislimit exports it.
	ErrBreakerOpen = errors.New("ratelimit: breaker open")
	// ErrNotReplicated is wrapped by the error of a call whose writes
	// fewer replicas than asked acknowledged in time. Package redislimit
	// exports it.
	ErrNotReplicated = errors.New("ratelimit: redis write not acknowledged by replicas")
	// errOverloaded is the cause when too many calls are queued.
	errOverloaded = errors.New("too many calls waiting for redis")
)

// The causes below are wrapped by redislimit in an error that says
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

// NotReplicatedError is the cause when a call's writes were acknowledged
// by fewer replicas than asked for (Acks -1: WAIT failed). Run returns it
// after the reply was read, so that the caller can let a denial, which
// wrote nothing, stand.
type NotReplicatedError struct {
	Acks, Want int
	Timeout    time.Duration
}

func (e *NotReplicatedError) Error() string {
	if e.Acks < 0 {
		return fmt.Sprintf("write not acknowledged: WAIT %d failed", e.Want)
	}
	return fmt.Sprintf("write acknowledged by %d of %d replicas within %v", e.Acks, e.Want, e.Timeout)
}
func (e *NotReplicatedError) Unwrap() error { return ErrNotReplicated }
