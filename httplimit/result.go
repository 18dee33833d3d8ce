package httplimit

import (
	"context"
	"net/http"

	"github.com/rlkit/ratelimit"
)

// Result is the middleware's decision on a request, as the next handler
// sees it through [ResultFrom] (with [WithDecisionInContext]).
//
// When several limits apply, Result holds the one the rate-limit fields
// report (whether or not they are sent): the most restrictive enforced
// limit, the one with the fewest Remaining. A shadow limit takes its place
// when none of the enforced limits applies to the request, or, with
// [WithShadowHeaders], when it is more restrictive; Shadow then says so.
// A limit whose limiter answered with an error gives way to one that
// answered without.
type Result struct {
	// Limit is the name of the limit whose Decision this is.
	Limit string
	// Decision is that limit's Decision. The handler sees only admitted
	// requests, so Allowed is false only for a shadow limit that would
	// have denied the request.
	Decision ratelimit.Decision
	// Shadow reports that Limit is in shadow mode (its Limit.Shadow, or an
	// [Override] with Shadow): it was consulted, not enforced.
	Shadow bool
}

// resultKey is the context key of a Result.
type resultKey struct{}

// resultCtx carries a Result: one allocation, where context.WithValue
// would take two (the context and the boxed Result).
type resultCtx struct {
	context.Context
	res Result
}

// Value returns c itself for resultKey and defers every other key to the
// parent context.
func (c *resultCtx) Value(key any) any {
	if key == (resultKey{}) {
		return c
	}
	return c.Context.Value(key)
}

// withResult returns r with res in its context.
func withResult(r *http.Request, res Result) *http.Request {
	return r.WithContext(&resultCtx{Context: r.Context(), res: res})
}

// ResultFrom returns the [Result] the middleware stored in ctx for the
// handler it wraps, and whether there is one. There is one only when the
// middleware was created [WithDecisionInContext] and at least one limit
// applied to the request (none does for an exempt request, a request of
// cost <= 0, or one no Limit's KeyFunc applies to).
func ResultFrom(ctx context.Context) (Result, bool) {
	if c, ok := ctx.Value(resultKey{}).(*resultCtx); ok {
		return c.res, true
	}
	return Result{}, false
}
