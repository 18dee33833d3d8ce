package grpclimit

import (
	"github.com/rlkit/ratelimit/internal/limitset"
)

// Response metadata keys of the rate-limit fields the [Interceptor] sends,
// in the lower case gRPC metadata uses. They carry the values httplimit's
// middleware sends in the HTTP header fields of the same names.
const (
	// MetadataXRateLimitLimit carries the quota of the most restrictive
	// limit.
	MetadataXRateLimitLimit = "x-ratelimit-limit"
	// MetadataXRateLimitRemaining carries how many calls that limit still
	// admits now.
	MetadataXRateLimitRemaining = "x-ratelimit-remaining"
	// MetadataXRateLimitReset carries the Unix time, in whole seconds
	// rounded up, at which that limit's quota is full again.
	MetadataXRateLimitReset = "x-ratelimit-reset"
	// MetadataRateLimitPolicy is the IETF quota policy field:
	// "name";q=<quota>;w=<window seconds>.
	MetadataRateLimitPolicy = "ratelimit-policy"
	// MetadataRateLimit is the IETF service limit field:
	// "name";r=<remaining>;t=<seconds until the quota resets>, on admitted
	// and denied calls alike (see the package documentation).
	MetadataRateLimit = "ratelimit"
	// MetadataRetryAfter carries, on a denial that can be retried, the
	// delay in whole seconds (the RetryInfo delay).
	MetadataRetryAfter = "retry-after"
)

// FieldSet selects which rate-limit fields the [Interceptor] sends as
// response header metadata ([WithFields]).
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
	// AllFields sends both sets; it is the default.
	AllFields = XRateLimitFields | IETFFields
)

// grpcNames are the metadata keys of the fields.
var grpcNames = limitset.GRPCNames
