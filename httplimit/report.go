package httplimit

import (
	"log/slog"
	"net/http"
)

// report logs err, from the limit of cs[at] (any other at: unknown), at
// most once per limit per m.reportEvery. The report names the limit, the
// method and the route pattern, never the key or the client's address.
func (m *Middleware) report(r *http.Request, cs []charge, at int, err error) {
	lg := m.logger.Get()
	if lg == nil {
		return
	}
	rep, name := &m.anyReporter, ""
	if at >= 0 && at < len(cs) {
		rep, name = cs[at].l.rep, cs[at].l.Name
	}
	suppressed, ok := rep.Admit(m.ts.Now(), m.reportEvery)
	if !ok {
		return
	}
	attrs := make([]slog.Attr, 0, 5)
	attrs = append(attrs,
		slog.String("limit", name),
		slog.Any("error", err),
		slog.Int64("suppressed", suppressed),
		slog.String("method", r.Method))
	if p := routePattern(r); p != "" {
		attrs = append(attrs, slog.String("route", p))
	}
	lg.LogAttrs(r.Context(), slog.LevelError, "ratelimit: limiter error", attrs...)
}
