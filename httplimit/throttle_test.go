package httplimit

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

func newThrottle(t *testing.T, cfg ratelimit.ThrottleConfig) (*ratelimit.Throttle, *fakeclock.Mock) {
	t.Helper()
	clk := fakeclock.New(time.Unix(1_700_000_040, 0)) // a minute's start
	th, err := ratelimit.NewThrottle(cfg, ratelimit.WithClock(clk))
	require.NoError(t, err)
	return th, clk
}

// The transport asks its throttle before each request, on a loopback
// server: 5xx are not accepts, a throttled request never reaches the
// server and fails with ErrThrottled.
func TestTransportThrottle(t *testing.T) {
	t.Parallel()
	th, clk := newThrottle(t, ratelimit.ThrottleConfig{})
	s, srv := startScripted(t, answer(http.StatusOK), answer(http.StatusInternalServerError), answer(http.StatusBadGateway),
		answer(http.StatusNotFound))
	tr, err := NewTransport(nil, nil, WithThrottle(th))
	require.NoError(t, err)
	for i, want := range []int{http.StatusOK, http.StatusInternalServerError, http.StatusBadGateway} {
		resp, err := tr.RoundTrip(mustGet(t, srv.URL))
		require.NoError(t, err, "request %d", i)
		_ = resp.Body.Close()
		require.Equal(t, want, resp.StatusCode, "request %d", i)
	}
	// 3 attempts, 1 accept: 3 < 2·1 + 1 fails.
	_, err = tr.RoundTrip(mustGet(t, srv.URL))
	require.ErrorIs(t, err, ErrThrottled)
	assert.Equal(t, int64(3), s.hits.Load(), "the throttled request was not sent")
	// A second later, a probe goes: a 404 is an accept.
	clk.Add(time.Second)
	resp, err := tr.RoundTrip(mustGet(t, srv.URL))
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)
	resp, err = tr.RoundTrip(mustGet(t, srv.URL))
	require.NoError(t, err, "the accept forgave the failures")
	_ = resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode)
}

type failingRT struct{ calls int }

func (f *failingRT) RoundTrip(*http.Request) (*http.Response, error) {
	f.calls++
	return nil, errors.New("connection refused")
}

// A transport error is not an accept; a request its caller cancelled is
// not counted at all.
func TestTransportThrottleTransportErrors(t *testing.T) {
	t.Parallel()
	th, _ := newThrottle(t, ratelimit.ThrottleConfig{})
	base := &failingRT{}
	tr, err := NewTransport(base, nil, WithThrottle(th))
	require.NoError(t, err)
	_, err = tr.RoundTrip(mustGet(t, "http://127.0.0.1:1/"))
	require.Error(t, err)
	_, err = tr.RoundTrip(mustGet(t, "http://127.0.0.1:1/"))
	require.ErrorIs(t, err, ErrThrottled, "one transport error, no accept")
	assert.Equal(t, 1, base.calls)

	th2, _ := newThrottle(t, ratelimit.ThrottleConfig{})
	ctx, cancel := context.WithCancel(context.Background())
	cancelling := roundTripperFunc(func(r *http.Request) (*http.Response, error) {
		cancel()
		return nil, context.Canceled
	})
	tr2, err := NewTransport(cancelling, nil, WithThrottle(th2))
	require.NoError(t, err)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://127.0.0.1:1/", nil)
	require.NoError(t, err)
	_, err = tr2.RoundTrip(req)
	require.ErrorIs(t, err, context.Canceled)
	assert.True(t, th2.Attempt(context.Background(), "").Allowed, "nothing recorded (a failure would throttle the key until the probe, a second later)")
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// Retries (WithRetries) go only within the retry budget: 20 requests
// accepted, then 503s: retries < 0.1·21 + 1 = 3.1 lets 4 retries go.
func TestTransportThrottleRetryBudget(t *testing.T) {
	t.Parallel()
	th, _ := newThrottle(t, ratelimit.ThrottleConfig{})
	script := make([]func(http.ResponseWriter), 0, 30)
	for range 20 {
		script = append(script, answer(http.StatusOK))
	}
	for range 10 {
		script = append(script, answer(http.StatusServiceUnavailable))
	}
	s, srv := startScripted(t, script...)
	tr, err := NewTransport(nil, nil, WithThrottle(th), WithRetries(8), WithBackoff(time.Microsecond, time.Microsecond))
	require.NoError(t, err)
	for i := range 21 {
		resp, err := tr.RoundTrip(mustGet(t, srv.URL))
		require.NoError(t, err, "request %d", i)
		_ = resp.Body.Close()
	}
	assert.Equal(t, int64(20+1+4), s.hits.Load(), "the 21st request and its 4 retries")
}
