package httplimit

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// policyLimiter admits everything and tells the policy it is given, which
// a test may change while it serves, as a limiter's live reconfiguration
// does.
type policyLimiter struct {
	fixedLimiter
	p atomic.Pointer[ratelimit.Policy]
}

func newPolicyLimiter(p ratelimit.Policy) *policyLimiter {
	l := &policyLimiter{}
	l.p.Store(&p)
	return l
}

func (l *policyLimiter) Policy() ratelimit.Policy { return *l.p.Load() }

// newYork loads America/New_York or skips the test.
func newYork(t *testing.T) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Skipf("no time zone data: %v", err)
	}
	return loc
}

// policyField returns the RateLimit-Policy field the middleware sends for
// one request to h at the mock clock's time.
func policyField(t *testing.T, mw *Middleware) string {
	t.Helper()
	return do(mw.Handler(okHandler), "GET", "/").Header().Get("RateLimit-Policy")
}

// TestPolicyWindowFollowsTheLimitersPolicy: w is read from the limiter's
// policy on each request, not once at New, so that it follows a policy
// changed on a running limiter; an explicit Limit.Window still wins.
func TestPolicyWindowFollowsTheLimitersPolicy(t *testing.T) {
	t.Parallel()
	lim := newPolicyLimiter(ratelimit.FixedWindowPolicy(100, time.Minute))
	mw := newMW(t, []Limit{{Name: "api", Key: KeyByIP(), Limiter: lim}})
	assert.Equal(t, `"api";q=100;w=60`, policyField(t, mw))
	p := ratelimit.SlidingLogPolicy(100, time.Hour)
	lim.p.Store(&p)
	assert.Equal(t, `"api";q=100;w=3600`, policyField(t, mw), "after the policy changed")

	fixed := newMW(t, []Limit{{Name: "api", Key: KeyByIP(), Limiter: lim, Window: 10 * time.Second}})
	assert.Equal(t, `"api";q=100;w=10`, policyField(t, fixed), "Limit.Window")
}

// TestQuotaPolicyWindowIsThePeriodsLength: for a calendar
// quota, RateLimit-Policy's w is the length of the period the request
// falls in, on the middleware's clock: 23 hours on the day New York
// springs forward, 25 on the day it falls back, a month's real length.
func TestQuotaPolicyWindowIsThePeriodsLength(t *testing.T) {
	t.Parallel()
	ny := newYork(t)
	daily := ratelimit.QuotaPolicy(100, ratelimit.Calendar{Unit: ratelimit.Daily, Location: ny})
	monthly := ratelimit.QuotaPolicy(100, ratelimit.Calendar{Unit: ratelimit.Monthly, Location: ny})
	for _, c := range []struct {
		p    ratelimit.Policy
		at   time.Time
		want time.Duration
	}{
		{daily, time.Date(2026, 3, 7, 12, 0, 0, 0, ny), 24 * time.Hour},
		{daily, time.Date(2026, 3, 8, 12, 0, 0, 0, ny), 23 * time.Hour},
		{daily, time.Date(2026, 3, 9, 0, 0, 0, 0, ny), 24 * time.Hour},
		{daily, time.Date(2026, 11, 1, 23, 59, 0, 0, ny), 25 * time.Hour},
		{monthly, time.Date(2026, 2, 14, 0, 0, 0, 0, ny), 28 * 24 * time.Hour},
		{monthly, time.Date(2026, 3, 31, 0, 0, 0, 0, ny), 31*24*time.Hour - time.Hour},
		{monthly, time.Date(2028, 2, 29, 0, 0, 0, 0, ny), 29 * 24 * time.Hour},
	} {
		mock := fakeclock.New(c.at)
		mw := newMW(t, []Limit{{Name: "quota", Key: KeyByIP(), Limiter: newPolicyLimiter(c.p)}}, WithClock(mock))
		want := `"quota";q=100;w=` + strconv.FormatInt(int64(c.want/time.Second), 10)
		assert.Equalf(t, want, policyField(t, mw), "%v at %v", c.p.Calendar.Unit, c.at)
	}
}

// TestLoopbackKeyedQuota: a ratelimit.Keyed of a daily
// quota behind the middleware on a real server, on the day New York
// springs forward: w is 23 hours, t and Retry-After point at the next
// local midnight.
func TestLoopbackKeyedQuota(t *testing.T) {
	t.Parallel()
	ny := newYork(t)
	at := time.Date(2026, 3, 8, 20, 0, 0, 0, ny) // 4 hours before midnight
	mock := fakeclock.New(at)
	lim, err := ratelimit.NewKeyed(ratelimit.QuotaPolicy(3, ratelimit.Calendar{Unit: ratelimit.Daily, Location: ny}), ratelimit.WithClock(mock))
	require.NoError(t, err)
	srv := loopback(t, newMW(t, []Limit{{Name: "daily", Key: KeyByIP(), Limiter: lim}}, WithClock(mock)).Handler(okHandler))
	midnight := time.Date(2026, 3, 9, 0, 0, 0, 0, ny)
	reset := strconv.FormatInt(midnight.Unix(), 10)
	for i, rem := range []string{"2", "1", "0"} {
		a := get(t, srv)
		require.Equalf(t, 200, a.code, "request %d", i+1)
		assert.Equal(t, `"daily";q=3;w=82800`, a.header.Get("RateLimit-Policy"))
		assert.Equal(t, `"daily";r=`+rem+`;t=14400`, a.header.Get("RateLimit"))
		assert.Equal(t, reset, a.header.Get("X-RateLimit-Reset"))
	}
	a := get(t, srv)
	require.Equal(t, 429, a.code)
	assert.Equal(t, "14400", a.header.Get("Retry-After"))
	mock.Set(midnight)
	a = get(t, srv)
	assert.Equal(t, 200, a.code, "the next day")
	assert.Equal(t, `"daily";q=3;w=86400`, a.header.Get("RateLimit-Policy"), "the next day")
}

// TestQuotaWindowAllocs: once a period's window is cached, a request to a
// quota limiter allocates no more than one to any other limiter (the two
// that hold the header values, as TestMiddlewareAllocs pins).
func TestQuotaWindowAllocs(t *testing.T) {
	p := ratelimit.QuotaPolicy(100, ratelimit.Calendar{Unit: ratelimit.Daily})
	h := newMW(t, []Limit{{Name: "quota", Key: KeyByIP(), Limiter: newPolicyLimiter(p)}}, WithLogger(nil)).Handler(bare)
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "203.0.113.7:4711"
	w := &discardWriter{h: make(http.Header)}
	h.ServeHTTP(w, r) // fills the cache
	got := testing.AllocsPerRun(200, func() {
		clear(w.h)
		h.ServeHTTP(w, r)
	})
	assert.LessOrEqual(t, got, 2.0, "allocations per request")
}
