package otellimit_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/httplimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// TestMiddlewareLimitsAreNamedOnce: limits served by the middleware, with
// the observer given to the middleware, are counted under the Limit's
// name, the one in the RateLimit header, whatever their limiters are
// named (a tier named "api-free", another with no name), with shadow
// denials as "shadow" and each decision once. Before, the metrics came
// from each limiter, as "api-free" and "", and the header said "api".
func TestMiddlewareLimitsAreNamedOnce(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t)
	clk := fakeclock.NewInstant(clockStart)
	free, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(1, time.Minute), ratelimit.WithClock(clk), ratelimit.WithName("api-free"))
	require.NoError(t, err)
	pro, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(100, time.Minute), ratelimit.WithClock(clk))
	require.NoError(t, err)
	tiers, err := ratelimit.NewTiered(func(_ context.Context, key string) string {
		tier, _, _ := strings.Cut(key, "-")
		return tier
	}, map[string]ratelimit.KeyedLimiter{"free": free, "pro": pro})
	require.NoError(t, err)
	next, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(1, time.Minute), ratelimit.WithClock(clk))
	require.NoError(t, err)
	mw, err := httplimit.New([]httplimit.Limit{
		{Name: "api", Key: httplimit.KeyByHeader("X-API-Key"), Limiter: tiers},
		{Name: "next", Key: httplimit.KeyByHeader("X-API-Key"), Limiter: next, Shadow: true},
	}, httplimit.WithObserver(obs), httplimit.WithClock(clk))
	require.NoError(t, err)
	srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))
	t.Cleanup(srv.Close)
	for _, c := range []struct {
		key  string
		code int
	}{{"free-a", 200}, {"free-a", 429}, {"pro-b", 200}, {"pro-b", 200}} {
		req, err := http.NewRequest("GET", srv.URL, nil)
		require.NoError(t, err)
		req.Header.Set("X-API-Key", c.key)
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		require.Equal(t, c.code, resp.StatusCode, c.key)
		assert.True(t, strings.HasPrefix(resp.Header.Get("RateLimit"), `"api";`), resp.Header.Get("RateLimit"))
	}
	fw, home := ratelimit.FixedWindowAlgorithm, ratelimit.HomeKeyed
	assert.Equal(t, map[string]int64{
		series("api", fw, home, ratelimit.OutcomeAllowed):  3,
		series("api", fw, home, ratelimit.OutcomeDenied):   1,
		series("next", fw, home, ratelimit.OutcomeAllowed): 2, // free-a once (then refused by "api"), pro-b
		series("next", fw, home, ratelimit.OutcomeShadow):  1, // pro-b again, served
	}, collect(t, reader).sums(t, "ratelimit.decisions"), "ratelimit.decisions")
}

// TestMiddlewareShedsAreTheirOwnOutcome: the decisions of the Adaptive a
// middleware runs (httplimit.WithAdaptive) are counted under the limit
// "adaptive", algorithm "adaptive", home "memory", and a shed request as
// its own outcome, "shed", neither a denial nor a fallback; an Adaptive's
// place is not a concurrency limit's permit (no in-flight series).
func TestMiddlewareShedsAreTheirOwnOutcome(t *testing.T) {
	t.Parallel()
	obs, reader := newObserver(t)
	clk := fakeclock.NewInstant(clockStart)
	lim, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(100, time.Minute), ratelimit.WithClock(clk))
	require.NoError(t, err)
	ad, err := ratelimit.NewAdaptive(ratelimit.AdaptiveConfig{Initial: 1, Min: 1, Max: 1})
	require.NoError(t, err)
	mw, err := httplimit.New([]httplimit.Limit{{Name: "api", Key: httplimit.KeyByIP(), Limiter: lim}},
		httplimit.WithObserver(obs), httplimit.WithClock(clk), httplimit.WithAdaptive(ad, nil))
	require.NoError(t, err)
	entered, release := make(chan struct{}), make(chan struct{})
	srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Hold") != "" {
			entered <- struct{}{}
			<-release
		}
	})))
	t.Cleanup(srv.Close)
	get := func(hold bool) int {
		req, err := http.NewRequest("GET", srv.URL, nil)
		require.NoError(t, err)
		if hold {
			req.Header.Set("X-Hold", "1")
		}
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp.StatusCode
	}
	held := make(chan int, 1)
	go func() { held <- get(true) }()
	<-entered
	require.Equal(t, http.StatusServiceUnavailable, get(false), "shed while the only place is held")
	require.Equal(t, http.StatusServiceUnavailable, get(false))
	close(release)
	require.Equal(t, http.StatusOK, <-held)
	require.Equal(t, http.StatusOK, get(false))

	got := collect(t, reader)
	a, mem := ratelimit.AdaptiveAlgorithm, ratelimit.HomeMemory
	fw, keyed := ratelimit.FixedWindowAlgorithm, ratelimit.HomeKeyed
	assert.Equal(t, map[string]int64{
		series("api", fw, keyed, ratelimit.OutcomeAllowed):   4,
		series("adaptive", a, mem, ratelimit.OutcomeAllowed): 2,
		series("adaptive", a, mem, ratelimit.OutcomeShed):    2,
	}, got.sums(t, "ratelimit.decisions"), "ratelimit.decisions")
	assert.Equal(t, "ratelimit.algorithm=adaptive,ratelimit.home=memory,ratelimit.limit=adaptive,ratelimit.outcome=shed",
		series("adaptive", a, mem, ratelimit.OutcomeShed))
	assert.Empty(t, got.sums(t, "ratelimit.fallbacks"))
	assert.Empty(t, got.upDownSums(t, "ratelimit.concurrency.in_flight"))
}
