package httplimit

import (
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/limitset"
)

// Header field names written by the [Middleware] and read by the
// [Transport]. net/http canonicalizes names (X-RateLimit-Limit travels as
// X-Ratelimit-Limit); field names are case-insensitive, so both spellings
// work with http.Header's Get.
const (
	// HeaderXRateLimitLimit carries the quota of the most restrictive limit.
	HeaderXRateLimitLimit = "X-RateLimit-Limit"
	// HeaderXRateLimitRemaining carries how many requests that limit still
	// admits now.
	HeaderXRateLimitRemaining = "X-RateLimit-Remaining"
	// HeaderXRateLimitReset carries the Unix time, in whole seconds rounded
	// up, at which that limit's quota is full again.
	HeaderXRateLimitReset = "X-RateLimit-Reset"
	// HeaderRateLimitPolicy is the IETF quota policy field:
	// "name";q=<quota>;w=<window seconds>.
	HeaderRateLimitPolicy = "RateLimit-Policy"
	// HeaderRateLimit is the IETF service limit field:
	// "name";r=<remaining>;t=<seconds until the quota resets>, on every
	// response (see the package documentation).
	HeaderRateLimit = "RateLimit"
	// HeaderRetryAfter is the standard Retry-After field, in delay-seconds.
	HeaderRetryAfter = "Retry-After"
	// HeaderAPIKey is the header [KeyByAPIKey] reads.
	HeaderAPIKey = "X-API-Key"
)

// Map keys of the fields WriteDenied sets, canonical already.
const (
	keyCType   = "Content-Type"
	keyNoSniff = "X-Content-Type-Options"
)

// HeaderSet selects which rate-limit fields the [Middleware] writes.
type HeaderSet uint8

// The header sets. Retry-After is always sent on a denial that can be
// retried, whatever the set.
const (
	// XRateLimitHeaders are X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset.
	XRateLimitHeaders HeaderSet = 1 << iota
	// IETFHeaders are RateLimit-Policy and RateLimit.
	IETFHeaders
	// NoHeaders sends no rate-limit fields.
	NoHeaders HeaderSet = 0
	// AllHeaders sends both sets; it is the default.
	AllHeaders = XRateLimitHeaders | IETFHeaders
)

// RetryAfterSeconds returns the Retry-After value, in seconds, for a denied
// Decision: RetryAfter rounded up to a whole second, and at least 1, so
// that a client waiting that long never retries too early. It returns 0 for
// an admitted Decision and for one that can never succeed
// ([ratelimit.RetryNever]).
func RetryAfterSeconds(d ratelimit.Decision) int64 {
	return limitset.RetryAfterSeconds(d)
}

// HeaderSet's bits are those of limitset.FieldSet, so that the middleware
// converts one to the other: this fails to compile if they differ.
var _ = [1]struct{}{}[uint8(XRateLimitHeaders^HeaderSet(limitset.XRateLimitFields))|uint8(IETFHeaders^HeaderSet(limitset.IETFFields))]
