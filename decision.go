package ratelimit

import (
	"math"
	"time"
)

// RetryNever is the RetryAfter of a [Decision] for a request that can never
// be admitted: n is greater than the limiter's capacity or limit, or n <= 0.
// Callers should treat it as "do not retry" rather than as a duration. It
// also comes, with an error, from a limiter that cannot decide because of
// its own configuration ([ErrUnknownTier], [ErrInvalidConfig]): that is no
// fault of the request, so check the error first (the servers of packages
// httplimit and grpclimit answer it as their own failure, 500 or
// Internal, never as "do not retry").
const RetryNever = time.Duration(math.MaxInt64)

// Decision is the outcome of one AllowN call (or, from Peek, of one that
// would be made now).
type Decision struct {
	// Allowed reports whether the n events were admitted (and consumed).
	Allowed bool
	// Limit is the capacity (token and leaky bucket) or the number of events
	// allowed per window (window algorithms).
	Limit int
	// Remaining is how many more single events would be admitted right now,
	// after this decision. It is never negative.
	Remaining int
	// RetryAfter is 0 when Allowed. When denied, it is how long to wait
	// before the same request can succeed if no other traffic arrives:
	// exact for every algorithm but SlidingCounter, where it is an estimate
	// that is never 0. It is RetryNever when the request can never succeed.
	RetryAfter time.Duration
	// ResetAfter is how long until the limiter is back to its full quota
	// (Remaining == Limit) if no other traffic arrives; 0 when it is full.
	ResetAfter time.Duration
}
