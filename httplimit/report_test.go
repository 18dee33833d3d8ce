package httplimit

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// logRecorder is a slog.Handler keeping every record's message and
// attributes.
type logRecorder struct {
	mu   sync.Mutex
	recs []map[string]any
}

func newLogRecorder() (*logRecorder, *slog.Logger) {
	l := &logRecorder{}
	return l, slog.New(l)
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecorder) WithGroup(string) slog.Handler            { return l }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	m := map[string]any{"msg": r.Message, "level": r.Level}
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.Any()
		return true
	})
	l.mu.Lock()
	l.recs = append(l.recs, m)
	l.mu.Unlock()
	return nil
}

func (l *logRecorder) records() []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]map[string]any(nil), l.recs...)
}

// TestErrorReportStructured: a limiter error is logged once, at level
// Error, with the limit's name, the error, the suppressed count, the
// method and the route pattern, and neither the key nor the client's
// address.
func TestErrorReportStructured(t *testing.T) {
	t.Parallel()
	rec, logger := newLogRecorder()
	mw := newMW(t, []Limit{{Name: "redis", Key: KeyByHeader("X-API-Key"), Limiter: failing{open: true}}}, WithLogger(logger))
	mux := http.NewServeMux()
	mux.Handle("GET /items/{id}", mw.Handler(okHandler))
	r := httptest.NewRequest("GET", "/items/7", nil)
	r.RemoteAddr = "198.51.100.23:4711"
	r.Header.Set("X-API-Key", "secret-api-key")
	w := httptest.NewRecorder()
	mux.ServeHTTP(w, r)
	require.Equal(t, 200, w.Code, "fail open admits")

	recs := rec.records()
	require.Len(t, recs, 1)
	got := recs[0]
	assert.Equal(t, slog.LevelError, got["level"])
	assert.Equal(t, "ratelimit: limiter error", got["msg"])
	assert.Equal(t, "redis", got["limit"])
	assert.ErrorIs(t, got["error"].(error), errBackend)
	assert.Equal(t, int64(0), got["suppressed"])
	assert.Equal(t, "GET", got["method"])
	if requestHasPattern {
		assert.Equal(t, "GET /items/{id}", got["route"])
	} else {
		assert.NotContains(t, got, "route", "before Go 1.23 no pattern is known")
	}

	// Rendered by a real handler, the report holds neither the key nor
	// the client's address.
	var buf bytes.Buffer
	mw = newMW(t, []Limit{{Name: "redis", Key: KeyByHeader("X-API-Key"), Limiter: failing{open: true}}},
		WithLogger(slog.New(slog.NewTextHandler(&buf, nil))))
	mw.Handler(okHandler).ServeHTTP(httptest.NewRecorder(), r)
	out := buf.String()
	assert.Contains(t, out, "limit=redis")
	assert.NotContains(t, out, "secret-api-key")
	assert.NotContains(t, out, "198.51.100.23")
}

// TestErrorReportLoggerNilSilences: WithLogger(nil) turns reports off,
// and without WithLogger they go to slog.Default.
func TestErrorReportLoggerNilSilences(t *testing.T) {
	// Not parallel: it replaces slog.Default.
	rec, logger := newLogRecorder()
	old := slog.Default()
	slog.SetDefault(logger)
	t.Cleanup(func() { slog.SetDefault(old) })

	limits := []Limit{{Name: "redis", Key: KeyByIP(), Limiter: failing{open: true}}}
	do(newMW(t, limits, WithLogger(nil)).Handler(okHandler), "GET", "/")
	assert.Empty(t, rec.records(), "WithLogger(nil) reported")
	do(newMW(t, limits).Handler(okHandler), "GET", "/")
	assert.Len(t, rec.records(), 1, "the default logger got no report")
}

// TestUnknownTierReported: an unknown tier is answered 500 (the server's
// misconfiguration, not the client's fault) and reported with the limit's
// name and ratelimit.ErrUnknownTier.
func TestUnknownTierReported(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	free := newKeyed(t, ratelimit.FixedWindowPolicy(2, time.Minute), mock)
	tiered, err := ratelimit.NewTiered(func(context.Context, string) string { return "gold" },
		map[string]ratelimit.KeyedLimiter{"free": free})
	require.NoError(t, err)
	rec, logger := newLogRecorder()
	w := do(newMW(t, []Limit{{Name: "plan", Key: KeyByIP(), Limiter: tiered}}, WithLogger(logger)).Handler(okHandler), "GET", "/")
	assert.Equal(t, 500, w.Code)
	assert.False(t, strings.Contains(w.Body.String(), `retry`), w.Body.String())
	recs := rec.records()
	require.Len(t, recs, 1)
	assert.Equal(t, "plan", recs[0]["limit"])
	assert.ErrorIs(t, recs[0]["error"].(error), ratelimit.ErrUnknownTier)
}
