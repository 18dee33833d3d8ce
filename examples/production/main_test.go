package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/rlkit/ratelimit/internal/testkit/redistest"
)

// recipe builds the README's recipe on a redis-server of its own and serves
// it on loopback; do sends one request (with an API key unless "") and
// returns the response, decisions reads what the metrics counted.
func recipe(t *testing.T) (srv *redistest.Server, do func(method, path, apiKey string) *http.Response, counted func() map[string]int64) {
	srv = redistest.Start(t)
	// No retries: a request to a Redis that is gone fails at once.
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	reader := sdkmetric.NewManualReader()
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = meters.Shutdown(context.Background()) })
	limits, err := newLimits(rdb, meters, "test:")
	require.NoError(t, err)
	api := httptest.NewServer(newHandler(limits))
	t.Cleanup(api.Close)
	do = func(method, path, apiKey string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, api.URL+path, nil)
		require.NoError(t, err)
		if apiKey != "" {
			req.Header.Set("X-API-Key", apiKey)
		}
		res, err := api.Client().Do(req)
		require.NoError(t, err)
		_ = res.Body.Close()
		return res
	}
	counted = func() map[string]int64 {
		t.Helper()
		got, err := decisions(context.Background(), reader)
		require.NoError(t, err)
		return got
	}
	return srv, do, counted
}

// TestRecipe runs the README's recipe over real HTTP on loopback: each plan
// gets its quota, the login limit refuses the sixth attempt and applies to
// POST /login only, and the metrics count every decision once, under the
// limit's name.
func TestRecipe(t *testing.T) {
	_, do, counted := recipe(t)
	for i := range 100 {
		require.Equal(t, http.StatusOK, do("GET", "/items", "key-free").StatusCode, "free request %d", i+1)
	}
	res := do("GET", "/items", "key-free")
	require.Equal(t, http.StatusTooManyRequests, res.StatusCode, "free request 101")
	assert.Contains(t, res.Header.Get("RateLimit"), `"api";r=0`, "the denial names the api limit")
	for i := range 101 {
		require.Equal(t, http.StatusOK, do("GET", "/items", "key-pro").StatusCode, "pro request %d", i+1)
	}
	for i := range 5 {
		require.Equal(t, http.StatusOK, do("POST", "/login", "").StatusCode, "login %d", i+1)
	}
	res = do("POST", "/login", "")
	require.Equal(t, http.StatusTooManyRequests, res.StatusCode, "login 6")
	assert.Contains(t, res.Header.Get("RateLimit"), `"login";r=0`)
	// GET /items is not a login route: the login limit does not apply.
	require.Equal(t, http.StatusOK, do("GET", "/items", "").StatusCode, "GET /items by address")

	assert.Equal(t, map[string]int64{
		// 100 free + 101 pro + 5 logins (charged by address, no API key)
		// + 1 GET by address
		"api/allowed":   207,
		"api/denied":    1, // the 101st free request
		"login/allowed": 5,
		// the 6th login: refused by the login limit, charged nowhere
		"login/denied": 1,
	}, counted())
}

// TestRecipeWhenRedisIsDown kills the recipe's Redis: the api limit admits
// (FailOpen), the login limit refuses (FailClosed) with a Retry-After, and
// the metrics count both as the failure policy's decisions.
func TestRecipeWhenRedisIsDown(t *testing.T) {
	srv, do, counted := recipe(t)
	srv.Kill()
	assert.Equal(t, http.StatusOK, do("GET", "/items", "key-free").StatusCode, "api: FailOpen admits")
	res := do("POST", "/login", "key-free")
	assert.Equal(t, http.StatusTooManyRequests, res.StatusCode, "login: FailClosed refuses")
	assert.NotEmpty(t, res.Header.Get("Retry-After"), "a FailClosed refusal says when to retry")
	assert.Equal(t, map[string]int64{
		// GET /items, and POST /login's api charge (admitted by FailOpen,
		// then refunded as the login limit refused)
		"api/fallback":   2,
		"login/fallback": 1,
	}, counted())
}

// TestRun runs the program's demonstration against a redis-server of its
// own and checks what it prints.
func TestRun(t *testing.T) {
	srv := redistest.Start(t)
	var out strings.Builder
	require.NoError(t, run(context.Background(), &out, srv.Addr(), "test-run:"))
	for _, want := range []string{
		"101 x GET /items as key-free: 100 x 200, 1 x 429\n",
		"101 x GET /items as key-pro: 101 x 200\n",
		"6 x POST /login (no API key): 5 x 200, 1 x 429\n",
		"  api/allowed: 206\n",
		"  api/denied: 1\n",
		"  login/allowed: 5\n",
		"  login/denied: 1\n",
	} {
		assert.Contains(t, out.String(), want)
	}
}

// TestREADMEShowsTheRecipe checks that the README's production recipe is
// newLimits as this program compiles and TestRecipe runs it.
func TestREADMEShowsTheRecipe(t *testing.T) {
	src, err := os.ReadFile("main.go")
	require.NoError(t, err)
	readme, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	recipe := between(t, string(src), "// recipe:begin\n", "// recipe:end\n")
	shown := between(t, string(readme), "<!-- recipe:begin -->\n```go\n", "```\n<!-- recipe:end -->")
	assert.Equal(t, strings.TrimSpace(recipe), strings.TrimSpace(shown),
		"README.md's recipe differs from examples/production/main.go's newLimits: copy it over")
}

// between returns the text of s between the markers begin and end.
func between(t *testing.T, s, begin, end string) string {
	t.Helper()
	_, rest, ok := strings.Cut(s, begin)
	require.True(t, ok, "no %q", begin)
	body, _, ok := strings.Cut(rest, end)
	require.True(t, ok, "no %q", end)
	return body
}
