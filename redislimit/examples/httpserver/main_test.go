package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit/internal/testkit/redistest"
	"github.com/stretchr/testify/require"
)

// TestServes200sThen429 runs the API on a redis-server of its own: five
// requests with one API key are served, the sixth is refused with 429 and
// a Retry-After, and another key still gets its own quota.
func TestServes200sThen429(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = client.Close() })
	handler, err := newHandler(client, fmt.Sprintf("test:%d:", time.Now().UnixNano()))
	require.NoError(t, err)
	api := httptest.NewServer(handler)
	t.Cleanup(api.Close)

	get := func(key string) *http.Response {
		t.Helper()
		req, err := http.NewRequest("GET", api.URL+"/items", nil)
		require.NoError(t, err)
		req.Header.Set("X-API-Key", key)
		resp, err := api.Client().Do(req)
		require.NoError(t, err)
		_ = resp.Body.Close()
		return resp
	}
	for i := range 5 {
		resp := get("alice")
		require.Equal(t, http.StatusOK, resp.StatusCode, "request %d", i+1)
	}
	resp := get("alice")
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "request 6")
	require.NotEmpty(t, resp.Header.Get("Retry-After"), "Retry-After")
	require.Equal(t, http.StatusOK, get("bob").StatusCode, "another key")
}
