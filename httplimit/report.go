package httplimit

import (
	"log/slog"
	"net/http"
)

// reportAttrs returns the attributes an error report adds for r, after
// the limit, the error and the suppressed count: the method and, when
// the mux has matched one, the route pattern; never the key or the
// client's address.
func reportAttrs(r *http.Request) []slog.Attr {
	if p := routePattern(r); p != "" {
		return []slog.Attr{slog.String("method", r.Method), slog.String("route", p)}
	}
	return []slog.Attr{slog.String("method", r.Method)}
}
