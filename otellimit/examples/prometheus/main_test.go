package main

import (
	"bytes"
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestMetricsShowTheDecisionsByOutcome(t *testing.T) {
	handler, shutdown, err := newServer()
	require.NoError(t, err)
	t.Cleanup(func() { _ = shutdown(context.Background()) })
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)

	var codes []int
	for range 5 {
		res, err := srv.Client().Get(srv.URL + "/")
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, res.Body)
		require.NoError(t, res.Body.Close())
		codes = append(codes, res.StatusCode)
	}
	assert.Equal(t, []int{200, 200, 200, 429, 429}, codes, "status codes of GET /")

	lines, err := metricLines(srv.URL + "/metrics")
	require.NoError(t, err)
	const series = `ratelimit_decisions_total{ratelimit_algorithm="tokenbucket",ratelimit_home="keyed",ratelimit_limit="per-ip",ratelimit_outcome=`
	assert.Equal(t, []string{
		"# HELP ratelimit_decisions_total Rate-limit decisions, by outcome.",
		"# TYPE ratelimit_decisions_total counter",
		series + `"allowed"} 3`,
		series + `"denied"} 2`,
	}, lines, "the ratelimit lines of /metrics")
}

func TestDemoRequestsAndPrintsTheMetrics(t *testing.T) {
	handler, shutdown, err := newServer()
	require.NoError(t, err)
	t.Cleanup(func() { _ = shutdown(context.Background()) })
	var out bytes.Buffer
	require.NoError(t, demo(&out, handler))
	want := strings.Join([]string{
		"GET / #1: 200 OK",
		"GET / #2: 200 OK",
		"GET / #3: 200 OK",
		"GET / #4: 429 Too Many Requests",
		"GET / #5: 429 Too Many Requests",
		"GET /metrics (the ratelimit lines):",
	}, "\n") + "\n"
	assert.Truef(t, strings.HasPrefix(out.String(), want), "demo output:\n%s\nwant it to start with:\n%s", out.String(), want)
}
