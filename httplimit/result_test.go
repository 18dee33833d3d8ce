package httplimit

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// resultSpy is a handler recording what ResultFrom gives it.
type resultSpy struct {
	res Result
	ok  bool
}

func (s *resultSpy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.res, s.ok = ResultFrom(r.Context())
}

// TestDecisionFrom: with WithDecisionInContext the handler finds the
// Decision of the most restrictive enforced limit, with its name.
func TestDecisionFrom(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	perKey := newKeyed(t, ratelimit.FixedWindowPolicy(100, time.Minute), mock)
	perIP := newKeyed(t, ratelimit.FixedWindowPolicy(3, time.Minute), mock)
	spy := &resultSpy{}
	h := newMW(t, []Limit{
		{Name: "key", Key: KeyByHeader("X-API-Key"), Limiter: perKey},
		{Name: "ip", Key: KeyByIP(), Limiter: perIP},
	}, WithClock(mock), WithDecisionInContext(true)).Handler(spy)

	do(h, "GET", "/", "X-API-Key", "k")
	require.True(t, spy.ok, "no Result in the context")
	assert.Equal(t, Result{Limit: "ip", Decision: ratelimit.Decision{Allowed: true, Limit: 3, Remaining: 2, ResetAfter: time.Minute}}, spy.res)

	// Only the per-IP limit applies without an API key.
	*spy = resultSpy{}
	do(h, "GET", "/")
	assert.True(t, spy.ok)
	assert.Equal(t, "ip", spy.res.Limit)
	assert.Equal(t, 1, spy.res.Decision.Remaining)

	// An exempt request has no Result.
	*spy = resultSpy{}
	w := do(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(w, r.WithContext(WithOverride(r.Context(), Override{Exempt: true})))
	}), "GET", "/")
	assert.Equal(t, 200, w.Code)
	assert.False(t, spy.ok, "Result for an exempt request")
}

// TestDecisionFromOffByDefault: without WithDecisionInContext the handler
// gets the request unchanged and ResultFrom reports false.
func TestDecisionFromOffByDefault(t *testing.T) {
	t.Parallel()
	spy := &resultSpy{}
	h := newMW(t, []Limit{{Name: "ip", Key: KeyByIP(), Limiter: fixedLimiter{}}}).Handler(spy)
	do(h, "GET", "/")
	assert.False(t, spy.ok)
}

// TestDecisionFromShadow: when only a shadow limit applies, the handler
// sees its Decision marked Shadow, Allowed false once it would deny.
func TestDecisionFromShadow(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	trial := newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Minute), mock)
	spy := &resultSpy{}
	h := newMW(t, []Limit{{Name: "trial", Key: KeyByIP(), Limiter: trial, Shadow: true}},
		WithClock(mock), WithDecisionInContext(true)).Handler(spy)
	do(h, "GET", "/")
	require.True(t, spy.ok)
	assert.Equal(t, Result{Limit: "trial", Decision: ratelimit.Decision{Allowed: true, Limit: 1, Remaining: 0, ResetAfter: time.Minute}, Shadow: true}, spy.res)
	w := do(h, "GET", "/")
	assert.Equal(t, 200, w.Code, "a shadow limit refused")
	assert.Empty(t, w.Header().Get("RateLimit"), "shadow fields without WithShadowHeaders")
	require.True(t, spy.ok)
	assert.True(t, spy.res.Shadow)
	assert.False(t, spy.res.Decision.Allowed, "the shadow limit would have denied")
	assert.Equal(t, time.Minute, spy.res.Decision.RetryAfter)
}
