package httplimit

import (
	"log/slog"
	"net/http"
	"sync"
	"time"
)

// reporter paces the error reports of one limit.
type reporter struct {
	mu         sync.Mutex
	reported   bool  // guarded by mu; a report was made
	last       int64 // guarded by mu; Unix nanoseconds of the last report
	suppressed int64 // guarded by mu; errors left out since
}

// admit reports whether an error at now may be reported, at most one per
// every, and if so how many errors were left out since the last report.
func (rep *reporter) admit(now int64, every time.Duration) (suppressed int64, ok bool) {
	rep.mu.Lock()
	defer rep.mu.Unlock()
	if every > 0 && rep.reported && now-rep.last < int64(every) {
		rep.suppressed++
		return 0, false
	}
	suppressed = rep.suppressed
	rep.reported, rep.last, rep.suppressed = true, now, 0
	return suppressed, true
}

// report logs err, from the limit of cs[at] (any other at: unknown), at
// most once per limit per m.reportEvery. The report names the limit, the
// method and the route pattern, never the key or the client's address.
func (m *Middleware) report(r *http.Request, cs []charge, at int, err error) {
	lg := m.logger
	if !m.loggerSet {
		lg = slog.Default()
	}
	if lg == nil {
		return
	}
	rep, name := &m.anyReporter, ""
	if at >= 0 && at < len(cs) {
		rep, name = cs[at].l.rep, cs[at].l.Name
	}
	suppressed, ok := rep.admit(m.ts.Now(), m.reportEvery)
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
