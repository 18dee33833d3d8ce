package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestListen starts the listening mode on 127.0.0.1:0 and checks what
// curl -i would show: three 200s counting down, then a 429 with
// Retry-After, the X-RateLimit-* fields, RateLimit-Policy, RateLimit and
// the JSON body.
func TestListen(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	addrs := make(chan net.Addr, 1)
	served := make(chan error, 1)
	go func() { served <- listen(ctx, "127.0.0.1:0", func(a net.Addr) { addrs <- a }) }()
	t.Cleanup(func() {
		cancel()
		assert.NoError(t, <-served)
	})
	var base string
	select {
	case a := <-addrs:
		base = "http://" + a.String() + "/"
	case err := <-served:
		t.Fatalf("listen: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("not listening after 10s")
	}

	get := func() (*http.Response, string) {
		t.Helper()
		resp, err := http.Get(base)
		require.NoError(t, err)
		body, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, resp.Body.Close())
		return resp, string(body)
	}
	for i := 0; i < 3; i++ {
		resp, body := get()
		left := strconv.Itoa(2 - i)
		require.Equal(t, http.StatusOK, resp.StatusCode, "request %d", i+1)
		assert.Equal(t, "hello, "+left+" of 3 requests left\n", body)
		assert.Equal(t, "3", resp.Header.Get("X-RateLimit-Limit"))
		assert.Equal(t, left, resp.Header.Get("X-RateLimit-Remaining"))
		assert.NotEmpty(t, resp.Header.Get("X-RateLimit-Reset"))
		assert.Equal(t, `"per-ip";q=3;w=60`, resp.Header.Get("RateLimit-Policy"))
		assert.True(t, strings.HasPrefix(resp.Header.Get("RateLimit"), `"per-ip";r=`+left+";t="), resp.Header.Get("RateLimit"))
		assert.Empty(t, resp.Header.Get("Retry-After"))
	}

	resp, body := get()
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode)
	retry, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err, "Retry-After %q", resp.Header.Get("Retry-After"))
	assert.True(t, retry >= 1 && retry <= 60, "Retry-After %d", retry)
	assert.Equal(t, "3", resp.Header.Get("X-RateLimit-Limit"))
	assert.Equal(t, "0", resp.Header.Get("X-RateLimit-Remaining"))
	assert.NotEmpty(t, resp.Header.Get("X-RateLimit-Reset"))
	assert.Equal(t, `"per-ip";q=3;w=60`, resp.Header.Get("RateLimit-Policy"))
	assert.Equal(t, `"per-ip";r=0;t=`+strconv.Itoa(retry), resp.Header.Get("RateLimit"))
	assert.Equal(t, "application/json; charset=utf-8", resp.Header.Get("Content-Type"))
	var msg struct {
		Error      string `json:"error"`
		Message    string `json:"message"`
		RetryAfter int    `json:"retryAfter"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &msg), body)
	assert.Equal(t, "Too Many Requests", msg.Error)
	assert.Equal(t, retry, msg.RetryAfter)
}

// TestDemo runs the default mode, which must terminate on its own.
func TestDemo(t *testing.T) {
	var out strings.Builder
	require.NoError(t, demo(context.Background(), &out))
	got := out.String()
	assert.Equal(t, 3, strings.Count(got, "HTTP/1.1 200 OK"), got)
	assert.Equal(t, 1, strings.Count(got, "HTTP/1.1 429 Too Many Requests"), got)
	assert.Contains(t, got, "Retry-After: ")
}
