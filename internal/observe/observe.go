// Package observe carries, through a request's context, what a limiter
// cannot see for itself when it reports a decision to its observer: that the
// HTTP middleware runs the limit in shadow mode.
package observe

import "context"

type shadowKey struct{}

// WithShadow returns ctx marked: the limit being consulted runs in shadow
// mode, so a denial will be let through.
func WithShadow(ctx context.Context) context.Context {
	return context.WithValue(ctx, shadowKey{}, true)
}

// IsShadow reports whether ctx was marked with WithShadow.
func IsShadow(ctx context.Context) bool {
	v, _ := ctx.Value(shadowKey{}).(bool)
	return v
}
