package httplimit

import (
	"github.com/rlkit/ratelimit/internal/limitset"
)

// Map keys of the fields WriteDenied sets, canonical already.
const (
	keyCType   = "Content-Type"
	keyNoSniff = "X-Content-Type-Options"
	// keyRetryAfter is the key of Retry-After, which the middleware sets
	// on a shed request ([WithAdaptive]).
	keyRetryAfter = "Retry-After"
)

// HeaderSet selects which rate-limit fields the [Middleware] writes: the
// X-RateLimit-Limit, X-RateLimit-Remaining and X-RateLimit-Reset fields
// (the quota of the most restrictive limit, how many requests it still
// admits now, the Unix time in whole seconds rounded up at which it is
// full again), and the IETF RateLimit-Policy ("name";q=<quota>;w=<window
// seconds>) and RateLimit ("name";r=<remaining>;t=<seconds until the quota
// resets>) fields. net/http canonicalizes names (X-RateLimit-Limit travels
// as X-Ratelimit-Limit); http.Header's Get finds both spellings.
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
)

// allHeaders is both sets, the default.
const allHeaders = XRateLimitHeaders | IETFHeaders

// HeaderSet's bits are those of limitset.FieldSet, so that the middleware
// converts one to the other: this fails to compile if they differ.
var _ = [1]struct{}{}[uint8(XRateLimitHeaders^HeaderSet(limitset.XRateLimitFields))|uint8(IETFHeaders^HeaderSet(limitset.IETFFields))]
