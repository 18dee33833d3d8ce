package grpclimit

import (
	"context"
	"errors"
	"strings"

	"github.com/rlkit/ratelimit/internal/adapter"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// ErrPauseDeadline is returned by the interceptors of a [Client], without
// waiting, when a server has asked for a pause that outlasts the call's
// context deadline (a call refused already, whose retry would wait that
// long, gets the server's answer instead). The error also matches
// context.DeadlineExceeded with errors.Is, and its gRPC code is
// codes.DeadlineExceeded. It is httplimit.ErrPauseDeadline too: errors.Is
// matches it whichever package returned it.
var ErrPauseDeadline = adapter.ErrPauseDeadline

// ErrNoKey is returned by the interceptors of a [Client] from
// [NewKeyedClient], without sending the call, when the client's [KeyFunc]
// reports that it has no key for the call. Its gRPC code is
// codes.InvalidArgument. It is httplimit.ErrNoKey too.
var ErrNoKey = adapter.ErrNoKey

// ErrThrottled is returned by the interceptors of a [Client], without
// sending the call, when the client's throttle ([WithThrottle]) refuses
// it: the call's server has been failing. Its gRPC code is
// codes.Unavailable. It is httplimit.ErrThrottled too.
var ErrThrottled = adapter.ErrThrottled

// callError is an error of the client interceptors for a call they did not
// send: a gRPC status (GRPCStatus, so status.Code and status.FromError
// read its code) that unwraps to its cause (so errors.Is matches
// ratelimit's sentinels and the context errors).
type callError struct {
	code codes.Code
	msg  string
	err  error
}

func (e *callError) Error() string { return e.msg }
func (e *callError) Unwrap() error { return e.err }

// GRPCStatus returns the status the error stands for.
func (e *callError) GRPCStatus() *status.Status { return status.New(e.code, e.msg) }

// notSent turns the reason a call was not sent into a status error: ctx's
// errors and every error matching them keep their gRPC codes (Canceled,
// DeadlineExceeded, including the refusals of waits that would outlast the
// deadline), ErrNoKey is InvalidArgument, ErrThrottled Unavailable, and
// every other refusal of the
// limiter (ratelimit.ErrExceedsLimit, ratelimit.ErrQueueFull,
// ratelimit.ErrTooManyKeys, a backend's error) is ResourceExhausted.
func notSent(err error) error {
	code := codes.ResourceExhausted
	switch {
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case errors.Is(err, context.DeadlineExceeded):
		code = codes.DeadlineExceeded
	case errors.Is(err, ErrNoKey):
		code = codes.InvalidArgument
	case errors.Is(err, ErrThrottled):
		code = codes.Unavailable
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "ratelimit: ") {
		msg = "ratelimit: call not sent: " + msg
	}
	return &callError{code: code, msg: msg, err: err}
}
