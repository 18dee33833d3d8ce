package grpclimit

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/adapter"
	"github.com/rlkit/ratelimit/internal/limitset"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"
)

// ErrDenied is the Err of the [Denial] of a call refused by a denylist (a
// key of [Limit.DeniedKeys]). Such a call is refused whatever its quota, so
// [DeniedError] answers it with codes.PermissionDenied rather than
// codes.ResourceExhausted. It is httplimit.ErrDenied too: errors.Is
// matches it whichever package returned it.
var ErrDenied = adapter.ErrDenied

// Denial describes a denied call (or stream message) to the handler of
// [WithDeniedHandler]. It has httplimit's Denial fields, of the same types,
// and two of its own: Method and Message.
type Denial struct {
	// Method is the call's full method name, "/pkg.Service/Method".
	Method string
	// Limit is the name of the limit that denied the call.
	Limit string
	// Decision is that limit's Decision.
	Decision ratelimit.Decision
	// RetryAfter is the delay announced in RetryInfo and retry-after: the
	// Decision's RetryAfter rounded up to a whole second, at least one
	// second; 0 when Never, and when a concurrency limit is full (not
	// blocked): then no RetryInfo is sent.
	RetryAfter time.Duration
	// Never reports that the call's cost exceeds the limit's capacity, so
	// that it can never succeed however long the client waits (or that a
	// denylist refused it).
	Never bool
	// Message reports that a message received on a stream was denied (by a
	// limit with [Limit.Messages]), not the call.
	Message bool
	// Err is the limiter's error, if the denial came with one (a Redis
	// limiter failing closed, a key cap reached, an unknown tier), or
	// [ErrDenied] for a call a denylist refused: Decision then holds only
	// RetryAfter [ratelimit.RetryNever] and Never is set; or [ErrShed] for
	// a call the interceptors' Adaptive shed ([WithAdaptive]). It is for
	// the server's own use: never send its text to the client.
	Err error

	concurrent bool // Limit is a concurrency limit ([Limit.Concurrency])
}

// ErrShed is the Err of the [Denial] of a call the interceptors' adaptive
// concurrency limiter shed ([WithAdaptive]): the server is overloaded, so
// [DeniedError] answers it with codes.Unavailable rather than
// codes.ResourceExhausted. It is httplimit.ErrShed too.
var ErrShed = adapter.ErrShed

// DeniedError is the default answer to a denied call: a [status.Status]
// error that standard gRPC clients decode.
//
// A call over quota gets codes.ResourceExhausted with a message such as
//
//	rate limit "api" exceeded, retry in 17 s
//
// and two details: an [errdetails.RetryInfo] whose RetryDelay is
// d.RetryAfter (17 s: the limiter's delay rounded up to a whole second,
// never 0, as HTTP's Retry-After), and an [errdetails.QuotaFailure] with
// one violation naming the limit (Subject "limit:api", QuotaId "api",
// QuotaValue the quota). A call that can never succeed (d.Never: its cost
// exceeds the quota) gets the QuotaFailure and no RetryInfo, so that
// clients do not retry it. A denial that came with a limiter error (a
// limiter failing closed; no quota was measured) gets the RetryInfo and
// no QuotaFailure; the error's text is never sent. A full concurrency
// limit ([Limit.Concurrency]) gets the QuotaFailure and no RetryInfo
// (nobody knows when a call in flight will end) unless its key is blocked. A call a denylist
// refused (d.Err is [ErrDenied]) gets codes.PermissionDenied, the message
// "request denied" and no details, which do not say which rule refused
// it. A call shed to protect the server from overload (d.Err is
// [ErrShed], see [WithAdaptive]) gets codes.Unavailable, a message such as
// "server overloaded, retry in 1 s" and a RetryInfo of d.RetryAfter. The
// call's key is never part of the status.
func DeniedError(d Denial) error {
	if errors.Is(d.Err, ErrDenied) {
		return errPermissionDenied
	}
	if errors.Is(d.Err, ErrShed) {
		st := status.New(codes.Unavailable, limitset.ShedMessage(int64(d.RetryAfter/time.Second)))
		if withDetails, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)}); err == nil {
			st = withDetails
		}
		return st.Err()
	}
	msg := limitset.DenialMessage(d.Limit, d.concurrent, d.Never, d.Decision.Limit, int64(d.RetryAfter/time.Second))
	st := status.New(codes.ResourceExhausted, msg)
	details := make([]protoadapt.MessageV1, 0, 2)
	if !d.Never && d.RetryAfter > 0 {
		details = append(details, &errdetails.RetryInfo{RetryDelay: durationpb.New(d.RetryAfter)})
	}
	if d.Err == nil {
		v := &errdetails.QuotaFailure_Violation{
			Subject:     "limit:" + d.Limit,
			Description: quotaDescription(d),
			QuotaId:     d.Limit,
			QuotaValue:  int64(d.Decision.Limit),
		}
		details = append(details, &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{v}})
	}
	if len(details) > 0 {
		if withDetails, err := st.WithDetails(details...); err == nil {
			st = withDetails
		}
	}
	return st.Err()
}

// quotaDescription says what the violated quota is, without the key.
func quotaDescription(d Denial) string {
	what := "call"
	if d.Message {
		what = "stream message"
	}
	switch {
	case d.Never && d.concurrent:
		return fmt.Sprintf("the %s's cost exceeds the quota of %d in flight", what, d.Decision.Limit)
	case d.Never:
		return fmt.Sprintf("the %s's cost exceeds the quota of %d", what, d.Decision.Limit)
	case d.concurrent:
		return fmt.Sprintf("quota of %d in flight exhausted (%s denied)", d.Decision.Limit, what)
	}
	return fmt.Sprintf("quota of %d exhausted (%s denied)", d.Decision.Limit, what)
}

// errPermissionDenied is DeniedError's answer to a denylist refusal.
var errPermissionDenied = status.Error(codes.PermissionDenied, "request denied")

// deniedError is [DeniedError] as a denied handler, the default.
func deniedError(_ context.Context, d Denial) error { return DeniedError(d) }
