package httplimit

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/hints"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// scripted is a loopback server answering from a script of responses.
type scripted struct {
	mu     sync.Mutex
	script []func(w http.ResponseWriter)
	hits   atomic.Int64
	bodies []string
}

func (s *scripted) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	s.bodies = append(s.bodies, string(b))
	var f func(http.ResponseWriter)
	if len(s.script) > 0 {
		f, s.script = s.script[0], s.script[1:]
	}
	s.mu.Unlock()
	s.hits.Add(1)
	if f == nil {
		_, _ = io.WriteString(w, "ok")
		return
	}
	f(w)
}

func answer(status int, hdr ...string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		for i := 0; i+1 < len(hdr); i += 2 {
			w.Header().Set(hdr[i], hdr[i+1])
		}
		w.WriteHeader(status)
		_, _ = io.WriteString(w, http.StatusText(status))
	}
}

func startScripted(t *testing.T, script ...func(http.ResponseWriter)) (*scripted, *httptest.Server) {
	s := &scripted{script: script}
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv
}

type result struct {
	resp *http.Response
	err  error
}

func roundTrip(tr http.RoundTripper, req *http.Request) chan result {
	ch := make(chan result, 1)
	go func() {
		resp, err := tr.RoundTrip(req)
		if err == nil {
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			resp.Body = io.NopCloser(bytes.NewReader(b))
		}
		ch <- result{resp, err}
	}()
	return ch
}

// waitHits waits until the server has seen n requests.
func waitHits(t *testing.T, s *scripted, n int64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for s.hits.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("server saw %d requests, want %d", s.hits.Load(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestTransportPausesExactly: a 429 with Retry-After: 7 pauses the
// transport exactly 7 s on the mock clock, then the request is retried.
func TestTransportPausesExactly(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		hdr  []string
		want time.Duration
	}{
		{"delay-seconds", []string{"Retry-After", "7"}, 7 * time.Second},
		{"http-date", []string{"Retry-After", epoch.Add(9 * time.Second).UTC().Format(http.TimeFormat)}, 9 * time.Second},
		{"ratelimit t", []string{"RateLimit", `"api";r=0;t=5`}, 5 * time.Second},
		{"retry-after over ratelimit", []string{"Retry-After", "3", "RateLimit", `"a";r=0;t=4, "b";r=0;t=6`}, 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, srv := startScripted(t, answer(429, tc.hdr...))
			clk := fakeclock.NewAnnouncing(epoch)
			tr, err := NewTransport(nil, nil, WithRetries(2), WithClock(clk))
			if err != nil {
				t.Fatal(err)
			}
			req, _ := http.NewRequest("GET", srv.URL, nil)
			done := roundTrip(tr, req)
			if d := clk.Next(t); d != tc.want {
				t.Fatalf("paused %v, want %v", d, tc.want)
			}
			if got := tr.PausedFor(); got != tc.want {
				t.Errorf("PausedFor = %v, want %v", got, tc.want)
			}
			clk.Add(tc.want - time.Millisecond)
			time.Sleep(20 * time.Millisecond)
			if h := s.hits.Load(); h != 1 {
				t.Fatalf("retried before the pause ended: %d hits", h)
			}
			clk.Add(time.Millisecond)
			r := <-done
			if r.err != nil || r.resp.StatusCode != 200 || s.hits.Load() != 2 {
				t.Fatalf("after pause: %v %v, %d hits", r.resp, r.err, s.hits.Load())
			}
		})
	}
}

// TestTransportPausesAll: while paused, other requests through the same
// transport wait too.
func TestTransportPausesAll(t *testing.T) {
	t.Parallel()
	s, srv := startScripted(t, answer(503, "Retry-After", "10"))
	clk := fakeclock.NewAnnouncing(epoch)
	tr, _ := NewTransport(nil, nil, WithClock(clk))
	req, _ := http.NewRequest("GET", srv.URL, nil)
	r := <-roundTrip(tr, req) // no retries: the 503 comes back
	if r.err != nil || r.resp.StatusCode != 503 {
		t.Fatalf("first: %v %v", r.resp, r.err)
	}
	req2, _ := http.NewRequest("GET", srv.URL+"/other", nil)
	done := roundTrip(tr, req2)
	if d := clk.Next(t); d != 10*time.Second {
		t.Fatalf("second request paused %v, want 10s", d)
	}
	time.Sleep(20 * time.Millisecond)
	if s.hits.Load() != 1 {
		t.Fatal("second request sent during the pause")
	}
	clk.Add(10 * time.Second)
	if r := <-done; r.err != nil || r.resp.StatusCode != 200 {
		t.Fatalf("second: %v %v", r.resp, r.err)
	}
}

type onlyReader struct{ io.Reader }

// TestTransportRetriesOnlyReplayable: bodies with GetBody are replayed
// intact; a body that cannot be replayed is never retried.
func TestTransportRetriesOnlyReplayable(t *testing.T) {
	t.Parallel()
	s, srv := startScripted(t, answer(429, "Retry-After", "1"), answer(429, "Retry-After", "1"))
	clk := fakeclock.NewAnnouncing(epoch)
	tr, _ := NewTransport(nil, nil, WithRetries(3), WithClock(clk))

	// A POST with a streaming body: not replayable, so the 429 comes back.
	req, _ := http.NewRequestWithContext(MarkRetrySafe(context.Background()), "POST", srv.URL, onlyReader{strings.NewReader("stream")})
	if r := <-roundTrip(tr, req); r.err != nil || r.resp.StatusCode != 429 || s.hits.Load() != 1 {
		t.Fatalf("streaming body: %v %v, %d hits", r.resp, r.err, s.hits.Load())
	}
	// A POST with an in-memory body (GetBody set), marked safe to retry:
	// replayed after the pause.
	req, _ = http.NewRequestWithContext(MarkRetrySafe(context.Background()), "POST", srv.URL, strings.NewReader("payload"))
	done := roundTrip(tr, req)
	clk.Next(t) // the pause left by the first 429
	clk.Add(time.Second)
	waitHits(t, s, 2)
	clk.Next(t) // the second 429's pause
	clk.Add(time.Second)
	r := <-done
	if r.err != nil || r.resp.StatusCode != 200 || s.hits.Load() != 3 {
		t.Fatalf("replayable body: %v %v, %d hits", r.resp, r.err, s.hits.Load())
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bodies[1] != "payload" || s.bodies[2] != "payload" {
		t.Errorf("bodies sent %q, want the payload twice", s.bodies)
	}
}

// TestTransportRetryBound: at most WithRetries retries, then the 429 is
// returned; a pause longer than WithMaxRetryWait is not waited for.
func TestTransportRetryBound(t *testing.T) {
	t.Parallel()
	s, srv := startScripted(t, answer(429, "Retry-After", "1"), answer(429, "Retry-After", "1"), answer(429, "Retry-After", "3600"))
	clk := fakeclock.NewAnnouncing(epoch)
	tr, _ := NewTransport(nil, nil, WithRetries(1), WithClock(clk))
	req, _ := http.NewRequest("GET", srv.URL, nil)
	done := roundTrip(tr, req)
	clk.Next(t)
	clk.Add(time.Second)
	if r := <-done; r.err != nil || r.resp.StatusCode != 429 || s.hits.Load() != 2 {
		t.Fatalf("bound: %v %v, %d hits", r.resp, r.err, s.hits.Load())
	}
	clk.Add(time.Second)
	req, _ = http.NewRequest("GET", srv.URL, nil)
	if r := <-roundTrip(tr, req); r.err != nil || r.resp.StatusCode != 429 || s.hits.Load() != 3 {
		t.Fatalf("long pause: %v %v, %d hits", r.resp, r.err, s.hits.Load())
	}
	if tr.PausedFor() != time.Hour {
		t.Errorf("PausedFor = %v, want 1h", tr.PausedFor())
	}
	if got := tr.PausedFor("any key"); got != time.Hour {
		t.Errorf("PausedFor(\"any key\") of a transport with one key = %v, want 1h", got)
	}
	// A pause longer than WithMaxPause is capped.
	capped, _ := NewTransport(nil, nil, WithClock(clk), WithMaxPause(10*time.Minute))
	_, srv2 := startScripted(t, answer(429, "Retry-After", "86400"))
	req, _ = http.NewRequest("GET", srv2.URL, nil)
	if r := <-roundTrip(capped, req); r.err != nil || capped.PausedFor() != 10*time.Minute {
		t.Errorf("capped pause: %v, PausedFor %v, want 10m", r.err, capped.PausedFor())
	}
	if _, err := NewTransport(nil, nil, WithMaxPause(0)); err == nil {
		t.Error("WithMaxPause(0) accepted")
	}
	// A request whose deadline is shorter than the pause fails at once.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req, _ = http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	if _, err := tr.RoundTrip(req); !errors.Is(err, ErrPauseDeadline) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("deadline: err %v", err)
	}
	// Cancellation ends the wait.
	ctx, cancel = context.WithCancel(context.Background())
	req, _ = http.NewRequestWithContext(ctx, "GET", srv.URL, nil)
	done = roundTrip(tr, req)
	clk.Next(t)
	cancel()
	if r := <-done; !errors.Is(r.err, context.Canceled) {
		t.Errorf("cancel: err %v", r.err)
	}
	if s.hits.Load() != 3 {
		t.Errorf("%d hits, want 3", s.hits.Load())
	}
}

// TestTransportLimiter: requests wait for the client-side limiter.
func TestTransportLimiter(t *testing.T) {
	t.Parallel()
	s, srv := startScripted(t)
	clk := fakeclock.NewAnnouncing(epoch)
	lim, err := ratelimit.NewTokenBucket(ratelimit.Per(1, time.Second), 2, ratelimit.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	tr, _ := NewTransport(nil, lim, WithClock(clk))
	for range 2 {
		req, _ := http.NewRequest("GET", srv.URL, nil)
		if r := <-roundTrip(tr, req); r.err != nil {
			t.Fatal(r.err)
		}
	}
	req, _ := http.NewRequest("GET", srv.URL, nil)
	done := roundTrip(tr, req)
	if d := clk.Next(t); d != time.Second {
		t.Fatalf("limiter wait %v, want 1s", d)
	}
	time.Sleep(10 * time.Millisecond)
	if s.hits.Load() != 2 {
		t.Fatal("sent before the limiter admitted it")
	}
	clk.Add(time.Second)
	if r := <-done; r.err != nil || s.hits.Load() != 3 {
		t.Fatalf("third: %v, %d hits", r.err, s.hits.Load())
	}

	// Keyed: each host its own quota.
	kl := newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Minute), clk)
	ktr, err := NewKeyedTransport(nil, kl, func(r *http.Request) (string, bool) { return r.URL.Path, true }, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/a", "/b"} {
		req, _ := http.NewRequest("GET", srv.URL+p, nil)
		if r := <-roundTrip(ktr, req); r.err != nil {
			t.Fatal(r.err)
		}
	}
	// A cost above the capacity fails at once.
	big, _ := NewTransport(nil, lim, WithCost(func(*http.Request) int { return 3 }))
	req, _ = http.NewRequest("GET", srv.URL, nil)
	if _, err := big.RoundTrip(req); !errors.Is(err, ratelimit.ErrExceedsLimit) {
		t.Errorf("cost 3 of 2: %v", err)
	}
}

func TestParseRetryAfter(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"120", 120 * time.Second, true},
		{" 0 ", 0, true},
		{epoch.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{"Thursday, 01-Jan-26 00:01:30 GMT", 90 * time.Second, true}, // RFC 850
		{"Thu Jan  1 00:01:30 2026", 90 * time.Second, true},         // asctime
		{epoch.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{"99999999999999999999999", hints.MaxSeconds * time.Second, true},
		{"", 0, false}, {"-5", 0, false}, {"1.5", 0, false}, {"soon", 0, false},
	}
	for _, c := range cases {
		got, ok := parseRetryAfter(c.in, epoch)
		if got != c.want || ok != c.ok {
			t.Errorf("parseRetryAfter(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
	rl := []struct {
		in   []string
		want time.Duration
		ok   bool
	}{
		{[]string{`"a";r=0;t=17`}, 17 * time.Second, true},
		{[]string{`"a;t=99";r=0;t=2`}, 2 * time.Second, true},
		{[]string{`"a";r=1;t=9`, `"b";r=0;t=4`}, 4 * time.Second, true},
		{[]string{`"a";r=1`, `"b";t=4`}, 0, false}, // no r: not known to be exhausted
		{[]string{`"a";r=1`}, 0, false},
		{[]string{`"a";t=-1`}, 0, false},
	}
	for _, c := range rl {
		got, ok := parseRateLimitReset(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("parseRateLimitReset(%q) = %v, %v; want %v, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

// TestTransportPauseOnlyFromExhausted: Retry-After, when present, is the
// pause; otherwise only exhausted RateLimit items (r=0) set it, so a
// roomy daily quota's t does not stop the client for hours (issue 9,
// item 11a).
func TestTransportPauseOnlyFromExhausted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		hdr  []string
		want time.Duration
	}{
		{"retry-after wins", []string{"Retry-After", "1", "RateLimit", `"burst";r=0;t=1, "daily";r=4000;t=80000`}, time.Second},
		{"retry-after wins over longer exhausted", []string{"Retry-After", "2", "RateLimit", `"burst";r=0;t=9`}, 2 * time.Second},
		{"exhausted items only", []string{"RateLimit", `"burst";r=0;t=5, "daily";r=4000;t=80000`}, 5 * time.Second},
		{"longest exhausted", []string{"RateLimit", `"a";r=0;t=5, "b";r=0;t=7, "c";r=3;t=900`}, 7 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, srv := startScripted(t, answer(429, tc.hdr...))
			clk := fakeclock.NewAnnouncing(epoch)
			tr, err := NewTransport(nil, nil, WithClock(clk))
			require.NoError(t, err)
			req, _ := http.NewRequest("GET", srv.URL, nil)
			r := <-roundTrip(tr, req)
			require.NoError(t, r.err)
			assert.Equal(t, 429, r.resp.StatusCode)
			assert.Equal(t, tc.want, tr.PausedFor())
		})
	}
}

// TestKeyedTransportPausePerKey: with NewKeyedTransport a server's pause
// holds only requests of its key: host A's 429 does not stall host B
// (issue 9, item 11b).
func TestKeyedTransportPausePerKey(t *testing.T) {
	t.Parallel()
	sa, srvA := startScripted(t, answer(429, "Retry-After", "60"))
	sb, srvB := startScripted(t)
	clk := fakeclock.NewAnnouncing(epoch)
	kl := newKeyed(t, ratelimit.FixedWindowPolicy(100, time.Minute), clk)
	tr, err := NewKeyedTransport(nil, kl, func(r *http.Request) (string, bool) { return r.URL.Host, true }, WithClock(clk))
	require.NoError(t, err)
	req, _ := http.NewRequest("GET", srvA.URL, nil)
	r := <-roundTrip(tr, req)
	require.NoError(t, r.err)
	require.Equal(t, 429, r.resp.StatusCode)
	hostA := strings.TrimPrefix(srvA.URL, "http://")
	hostB := strings.TrimPrefix(srvB.URL, "http://")
	assert.Equal(t, time.Minute, tr.PausedFor(hostA))
	assert.Equal(t, time.Duration(0), tr.PausedFor(hostB))
	assert.Equal(t, time.Minute, tr.PausedFor(hostB, hostA), "the longest of the keys")
	assert.Equal(t, time.Minute, tr.PausedFor(), "the longest of any key")

	req, _ = http.NewRequest("GET", srvB.URL, nil)
	select {
	case r := <-roundTrip(tr, req):
		require.NoError(t, r.err)
		assert.Equal(t, 200, r.resp.StatusCode)
	case d := <-clk.Timers:
		t.Fatalf("host B paused %v by host A's 429", d)
	case <-time.After(5 * time.Second):
		t.Fatal("host B's request did not complete")
	}
	assert.Equal(t, int64(1), sb.hits.Load())

	// Host A is still paused.
	req, _ = http.NewRequest("GET", srvA.URL, nil)
	done := roundTrip(tr, req)
	assert.Equal(t, time.Minute, clk.Next(t))
	clk.Add(time.Minute)
	r = <-done
	require.NoError(t, r.err)
	assert.Equal(t, 200, r.resp.StatusCode)
	assert.Equal(t, int64(2), sa.hits.Load())
}

// TestTransportRetriesOnlyIdempotent: WithRetries re-sends only
// idempotent methods (RFC 9110 9.2.2), requests marked with
// [MarkRetrySafe] and requests carrying an Idempotency-Key: a POST answered
// 503 is handed back, not charged twice (issue 9, item 11c).
func TestTransportRetriesOnlyIdempotent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		method string
		safe   bool
		idem   string
		retry  bool
	}{
		{"GET", false, "", true}, {"HEAD", false, "", true}, {"OPTIONS", false, "", true}, {"TRACE", false, "", true},
		{"PUT", false, "", true}, {"DELETE", false, "", true},
		{"POST", false, "", false}, {"PATCH", false, "", false}, {"CHARGE", false, "", false},
		{"POST", true, "", true}, {"PATCH", true, "", true},
		{"POST", false, "Idempotency-Key", true}, {"POST", false, "X-Idempotency-Key", true},
	} {
		t.Run(fmt.Sprintf("%s/safe=%v/%s", tc.method, tc.safe, tc.idem), func(t *testing.T) {
			t.Parallel()
			s, srv := startScripted(t, answer(503, "Retry-After", "1"))
			clk := fakeclock.NewAnnouncing(epoch)
			tr, err := NewTransport(nil, nil, WithRetries(3), WithClock(clk))
			require.NoError(t, err)
			ctx := context.Background()
			if tc.safe {
				ctx = MarkRetrySafe(ctx)
			}
			req, _ := http.NewRequestWithContext(ctx, tc.method, srv.URL, strings.NewReader("charge $10"))
			if tc.idem != "" {
				req.Header.Set(tc.idem, "k1")
			}
			done := roundTrip(tr, req)
			if tc.retry {
				clk.Next(t)
				clk.Add(time.Second)
			}
			r := <-done
			require.NoError(t, r.err)
			if tc.retry {
				assert.Equal(t, 200, r.resp.StatusCode)
				assert.Equal(t, int64(2), s.hits.Load())
			} else {
				assert.Equal(t, 503, r.resp.StatusCode)
				assert.Equal(t, int64(1), s.hits.Load(), "a non-idempotent request was sent again")
			}
		})
	}
}

// doneWaiter is a limiter that admits whatever the context, as a limiter
// failing open on a done context would.
type doneWaiter struct{ fixedLimiter }

// TestTransportDoneContextNotSent: a request whose context is done is
// never sent, even when the limiter lets it through (issue 9, item 1).
func TestTransportDoneContextNotSent(t *testing.T) {
	t.Parallel()
	s, srv := startScripted(t)
	for _, tr := range []*Transport{
		must(NewTransport(nil, nil)),
		must(NewKeyedTransport(nil, doneWaiter{}, func(*http.Request) (string, bool) { return "k", true })),
	} {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		req, _ := http.NewRequestWithContext(ctx, "POST", srv.URL, strings.NewReader("x"))
		resp, err := tr.RoundTrip(req)
		assert.Nil(t, resp)
		assert.ErrorIs(t, err, context.Canceled)
	}
	assert.Equal(t, int64(0), s.hits.Load())
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// closeTracker records whether its body was closed.
type closeTracker struct {
	io.Reader
	closed atomic.Bool
}

func (c *closeTracker) Close() error { c.closed.Store(true); return nil }

// TestKeyedTransportNoKey: a request the key function has no key for is
// not sent; RoundTrip returns ErrNoKey and closes the body.
func TestKeyedTransportNoKey(t *testing.T) {
	t.Parallel()
	s, srv := startScripted(t)
	kl := newKeyed(t, ratelimit.FixedWindowPolicy(100, time.Minute), fakeclock.New(time.Unix(0, 0)))
	tr, err := NewKeyedTransport(nil, kl, KeyByHeader("X-Tenant"))
	require.NoError(t, err)
	body := &closeTracker{Reader: strings.NewReader("x")}
	req, _ := http.NewRequest("POST", srv.URL, body)
	resp, err := tr.RoundTrip(req)
	assert.Nil(t, resp)
	assert.ErrorIs(t, err, ErrNoKey)
	assert.True(t, body.closed.Load(), "body not closed")
	assert.Equal(t, int64(0), s.hits.Load(), "a request with no key was sent")

	// With a key it goes out.
	req, _ = http.NewRequest("GET", srv.URL, nil)
	req.Header.Set("X-Tenant", "t1")
	resp, err = tr.RoundTrip(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, int64(1), s.hits.Load())
}

// TestOptionsCheckedPerConstructor: an invalid option is a configuration
// error naming it, and so is WithMaxKeys given to NewTransport (the one
// option whose type allows a constructor it does not apply to). Options
// of the wrong type do not compile: TestWrongOptionDoesNotCompile.
func TestOptionsCheckedPerConstructor(t *testing.T) {
	t.Parallel()
	lim := newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Second), fakeclock.New(time.Unix(0, 0)))
	limits := []Limit{{Key: KeyByIP(), Limiter: lim}}
	keyed := func(opts ...ClientOption) error {
		_, err := NewKeyedTransport(nil, lim, KeyByIP(), opts...)
		return err
	}
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"WithMaxKeys to NewTransport", second(NewTransport(nil, nil, WithMaxKeys(10))), "httplimit.WithMaxKeys applies to NewKeyedTransport, not NewTransport"},
		{"negative WithRetries", keyed(WithRetries(-1)), "httplimit.WithRetries must not be negative, got -1"},
		{"zero WithMaxPause", second(NewTransport(nil, nil, WithMaxPause(0))), "httplimit.WithMaxPause must be positive, got 0s"},
		{"typed nil WithClock", second(NewTransport(nil, nil, WithClock((*clock.Mock)(nil)))), "httplimit.WithClock: clock is a nil *clock.Mock"},
		{"nil limiter", second(NewKeyedTransport(nil, nil, KeyByIP())), "httplimit.NewKeyedTransport: the limiter must not be nil"},
		{"nil key", second(NewKeyedTransport(nil, lim, nil)), "httplimit.NewKeyedTransport: the key function must not be nil"},
	} {
		if assert.Error(t, tc.err, tc.name) {
			assert.ErrorIs(t, tc.err, ratelimit.ErrInvalidConfig, tc.name)
			assert.Contains(t, tc.err.Error(), "ratelimit: invalid configuration: "+tc.want, tc.name)
		}
	}
	// The options that do apply are accepted, and WithCost and WithClock
	// apply to both.
	_, err := New(limits, WithCost(func(*http.Request) int { return 2 }), WithClock(fakeclock.New(time.Unix(0, 0))), WithLogger(nil), nil)
	assert.NoError(t, err)
	_, err = NewTransport(nil, nil, WithCost(func(*http.Request) int { return 2 }), WithClock(fakeclock.New(time.Unix(0, 0))), WithRetries(2), nil)
	assert.NoError(t, err)
}

func second[T any](_ T, err error) error { return err }

// TestTransportRetryTooLateReturnsAnswer: with WithRetries, a refused
// request whose retry cannot be sent in time (the pause, or the local
// limiter's wait, would outlast its deadline; its context ends while it
// waits) gets the server's answer back, body intact, as it would without
// retries. Before, the transport drained the 429 and returned
// ErrPauseDeadline (or the limiter's error) with no response.
func TestTransportRetryTooLateReturnsAnswer(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("why: quota spent. ", 8<<10) // 144 KiB: more than the transport buffers
	for _, tc := range []struct {
		name    string
		after   string // the 429's Retry-After
		body    string
		limiter bool // a local limiter with nothing left for a minute
		cancel  bool // the context ends while the retry waits
	}{
		{"pause outlasts the deadline", "30", "quota spent", false, false},
		{"long body", "30", big, false, false},
		{"limiter outlasts the deadline", "1", "quota spent", true, false},
		{"cancelled while waiting", "2", "quota spent", false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s, srv := startScripted(t, func(w http.ResponseWriter) {
				w.Header().Set("Retry-After", tc.after)
				w.WriteHeader(http.StatusTooManyRequests)
				_, _ = io.WriteString(w, tc.body)
			})
			clk := fakeclock.NewAnnouncing(epoch)
			var lim ratelimit.Limiter
			if tc.limiter {
				tb, err := ratelimit.NewTokenBucket(ratelimit.Per(1, time.Minute), 1, ratelimit.WithClock(clk))
				require.NoError(t, err)
				lim = tb
			}
			tr, err := NewTransport(nil, lim, WithRetries(3), WithClock(clk))
			require.NoError(t, err)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
			done := make(chan result, 1)
			go func() {
				resp, err := tr.RoundTrip(req)
				done <- result{resp, err}
			}()
			switch {
			case tc.cancel:
				assert.Equal(t, 2*time.Second, clk.Next(t))
				cancel()
			case tc.limiter:
				assert.Equal(t, time.Second, clk.Next(t), "the server's pause, then the limiter")
				clk.Add(time.Second)
			}
			r := <-done
			require.NoError(t, r.err, "the server's answer, not an error")
			require.Equal(t, http.StatusTooManyRequests, r.resp.StatusCode)
			body, err := io.ReadAll(r.resp.Body)
			require.NoError(t, err)
			assert.Equal(t, tc.body, string(body), "the body intact")
			require.NoError(t, r.resp.Body.Close())
			assert.Equal(t, int64(1), s.hits.Load(), "not retried")
		})
	}
}
