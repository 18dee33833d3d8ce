// Package errs builds the errors of every package in this repository, so
// that one mistake reads the same way wherever it is made: each message
// starts with "ratelimit: " and names the offending argument, and each error
// matches its sentinels with errors.Is.
package errs

import (
	"context"
	"fmt"
	"time"
)

// Error is an error with its own message that matches several sentinel
// errors with errors.Is.
type Error struct {
	msg  string
	errs []error
}

func (e *Error) Error() string   { return e.msg }
func (e *Error) Unwrap() []error { return e.errs }

// New returns an error whose message is msg and which matches every one of
// sentinels.
func New(msg string, sentinels ...error) error {
	return &Error{msg: msg, errs: sentinels}
}

// Config reports a bad constructor argument: the message is the sentinel's
// ("ratelimit: invalid configuration"), a colon, and the formatted detail,
// which should name the argument or option and the value it got.
func Config(sentinel error, format string, args ...any) error {
	return &Error{msg: sentinel.Error() + ": " + fmt.Sprintf(format, args...), errs: []error{sentinel}}
}

// Deadline reports a wait of d that would outlast the context's deadline;
// it matches sentinel and context.DeadlineExceeded.
func Deadline(sentinel error, d time.Duration) error {
	return &Error{
		msg:  fmt.Sprintf("%s (needs %v)", sentinel.Error(), d),
		errs: []error{sentinel, context.DeadlineExceeded},
	}
}

// N reports an n that no wait can admit under limit: not positive (it
// matches invalid), or above the limit (it matches exceeds).
func N(invalid, exceeds error, n int, limit int64) error {
	if n <= 0 {
		return &Error{msg: fmt.Sprintf("%s, got n=%d", invalid.Error(), n), errs: []error{invalid}}
	}
	return &Error{msg: fmt.Sprintf("ratelimit: n=%d exceeds the limit %d", n, limit), errs: []error{exceeds}}
}

// GCD returns the greatest common divisor of two positive integers.
func GCD(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// Dimension is an error of one dimension of ratelimit.AllowAll: Index is
// the dimension's position in its arguments, Allowed whether its own
// Decision admitted the request, Err the error its limiter returned. Its
// message is Err's, and it unwraps to Err, so that callers see the
// limiter's error as it was; the limit sets of the servers use Index to
// name the limit that failed.
type Dimension struct {
	Index   int
	Allowed bool
	Err     error
}

func (e *Dimension) Error() string { return e.Err.Error() }
func (e *Dimension) Unwrap() error { return e.Err }

// AtDimension returns err as the error of dimension i, whose Decision
// admitted the request or not; nil stays nil.
func AtDimension(i int, allowed bool, err error) error {
	if err == nil {
		return nil
	}
	return &Dimension{Index: i, Allowed: allowed, Err: err}
}

// EachDimension calls f with every Dimension in err's tree (as
// errors.Join builds it), in order, and reports whether it found one.
func EachDimension(err error, f func(d *Dimension)) bool {
	switch e := err.(type) {
	case nil:
		return false
	case *Dimension:
		f(e)
		return true
	case interface{ Unwrap() []error }:
		found := false
		for _, inner := range e.Unwrap() {
			found = EachDimension(inner, f) || found
		}
		return found
	case interface{ Unwrap() error }:
		return EachDimension(e.Unwrap(), f)
	}
	return false
}
