package grpclimit

import (
	"github.com/rlkit/ratelimit/internal/limitset"
)

// FieldSet selects which rate-limit fields the [Interceptor] sends as
// response header metadata ([WithFields]), under the lower-case keys of
// httplimit's header fields, with the same values: x-ratelimit-limit,
// x-ratelimit-remaining, x-ratelimit-reset, ratelimit-policy and
// ratelimit; retry-after carries, on a denial that can be retried, the
// delay in whole seconds (the RetryInfo delay).
type FieldSet uint8

// The field sets. retry-after is always sent on a denial that can be
// retried, whatever the set.
const (
	// XRateLimitFields are x-ratelimit-limit, x-ratelimit-remaining and
	// x-ratelimit-reset.
	XRateLimitFields FieldSet = 1 << iota
	// IETFFields are ratelimit-policy and ratelimit.
	IETFFields
	// NoFields sends no rate-limit fields.
	NoFields FieldSet = 0
)

// allFields is both sets, the default.
const allFields = XRateLimitFields | IETFFields

// grpcNames are the metadata keys of the fields.
var grpcNames = limitset.GRPCNames
