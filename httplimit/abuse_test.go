package httplimit

// Adversarial tests (issue 9): forged forwarding headers in every proxy
// style, malformed and oversized headers, 429s with every header
// combination for the transport, done contexts.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/rlkit/ratelimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// appendingProxy is the resolver of an application behind one trusted
// proxy, 10.0.0.1, that appends its peer to the Forwarded line the client
// sent, as nginx does with
// proxy_set_header Forwarded "$http_forwarded, for=$remote_addr".
func appendingProxyKey(t testing.TB, res *IPResolver, header string, lines ...string) string {
	t.Helper()
	r, err := http.NewRequest("GET", "http://example.com/", nil)
	require.NoError(t, err)
	r.RemoteAddr = "10.0.0.1:4711"
	r.Header[header] = lines
	k, ok := res.Key(r)
	require.True(t, ok)
	return k
}

// TestForwardedClientCannotHideProxyElement: whatever the client writes
// before the element its trusted proxy appends, the key is the address the
// proxy vouched for (issue 9, item 2).
func TestForwardedClientCannotHideProxyElement(t *testing.T) {
	res := mustResolver(t, TrustedProxies("10.0.0.0/8"), ProxyHeaders("Forwarded"))
	for _, client := range []string{
		`for=6.6.6.6;x="y`,
		`for="6.6.6.6`,
		`"`,
		`for=unknown;proto="https`,
		`for="6.6.6.6\`,
		`for="6.6.6.6\"`,
		`for=6.6.6.6, for="10.0.0.7`,
		`for=10.0.0.2;x="`,
		`,,,;;;===""`,
		strings.Repeat(`for=1.1.1.1, `, 100) + `"`,
		"",
	} {
		for _, appended := range []string{"203.0.113.9", `"203.0.113.9:1234"`, `"[2001:db8::9]"`} {
			want, _, ok := parseNode(strings.Trim(appended, `"`))
			require.True(t, ok)
			wantKey := mustResolver(t).keyOf(want, "")
			line := client + ", for=" + appended
			assert.Equal(t, wantKey, appendingProxyKey(t, res, "Forwarded", line), "Forwarded: %s", line)
			// A proxy that adds a line of its own instead.
			assert.Equal(t, wantKey, appendingProxyKey(t, res, "Forwarded", client, "for="+appended), "Forwarded: %q, %q", client, "for="+appended)
		}
	}
}

// TestTrustedPrefixesIPv4Mapped: an IPv4-mapped prefix trusts the IPv4
// network, as TrustedProxies does (issue 9, item 13).
func TestTrustedPrefixesIPv4Mapped(t *testing.T) {
	res := mustResolver(t, TrustedPrefixes(netip.MustParsePrefix("::ffff:10.0.0.0/104")))
	assert.Equal(t, "203.0.113.9", appendingProxyKey(t, res, "X-Forwarded-For", "203.0.113.9"))
	res = mustResolver(t, TrustedPrefixes(netip.MustParsePrefix("::ffff:10.0.0.1/128")))
	assert.Equal(t, "203.0.113.9", appendingProxyKey(t, res, "X-Forwarded-For", "203.0.113.9"))
}

// proxyAppended returns the address a fuzz case's trusted proxy appends:
// an IPv4 or IPv6 address outside the trusted 10.0.0.0/8, and its key.
func proxyAppended(t *testing.T, b []byte, v6 bool) (netip.Addr, string) {
	var a netip.Addr
	if v6 {
		var x [16]byte
		copy(x[:], b)
		x[0] = 0x20 // 2000::/8: global unicast, never mapped
		a = netip.AddrFrom16(x)
	} else {
		var x [4]byte
		copy(x[:], b)
		if x[0] == 10 {
			x[0] = 11
		}
		a = netip.AddrFrom4(x)
	}
	return a, mustResolver(t).keyOf(a, "")
}

// FuzzForwarded: whatever text the client puts in Forwarded, on the same
// line before the element its trusted proxy appends or on lines before
// the proxy's own, the key is the address the proxy appended (issue 9,
// item 2).
func FuzzForwarded(f *testing.F) {
	for _, s := range []string{`for=6.6.6.6;x="y`, `for="6.6.6.6`, `"`, `for=unknown;proto="https`, `\`, `for="\"`,
		`for=1.1.1.1, for="[::1]:80"`, `"a\\"b", "`, ""} {
		f.Add(s, []byte{203, 0, 113, 9}, false, false)
		f.Add(s, []byte{0x20, 1, 0xd, 0xb8}, true, true)
	}
	res := mustResolver(f, TrustedProxies("10.0.0.0/8", "fd00::/8"), ProxyHeaders("Forwarded"))
	f.Fuzz(func(t *testing.T, client string, addr []byte, v6, quoted bool) {
		a, want := proxyAppended(t, addr, v6)
		elem := "for=" + a.String()
		if v6 {
			elem = `for="[` + a.String() + `]:8080"`
		} else if quoted {
			elem = `for="` + a.String() + `:8080"`
		}
		if got := appendingProxyKey(t, res, "Forwarded", client+", "+elem); got != want {
			t.Fatalf("Forwarded: %s, %s: key %q, want %q", client, elem, got, want)
		}
		if got := appendingProxyKey(t, res, "Forwarded", client, elem); got != want {
			t.Fatalf("Forwarded: %q, %q: key %q, want %q", client, elem, got, want)
		}
		// Through a second trusted proxy, 10.0.0.2, that appended too.
		if got := appendingProxyKey(t, res, "Forwarded", client+", "+elem+", for=10.0.0.2"); got != want {
			t.Fatalf("Forwarded: %s, %s, for=10.0.0.2: key %q, want %q", client, elem, got, want)
		}
	})
}

// FuzzXForwardedFor: whatever the client puts in X-Forwarded-For, the key
// is the address its trusted proxy appended, on the same line or its own.
func FuzzXForwardedFor(f *testing.F) {
	for _, s := range []string{"6.6.6.6", `"`, ",,,", "10.0.0.3", "unknown", "[::1]:80", "1.1.1.1, 10.0.0.2", ""} {
		f.Add(s, []byte{203, 0, 113, 9}, false)
		f.Add(s, []byte{0x20, 1, 0xd, 0xb8}, true)
	}
	res := mustResolver(f, TrustedProxies("10.0.0.0/8", "fd00::/8"))
	f.Fuzz(func(t *testing.T, client string, addr []byte, v6 bool) {
		a, want := proxyAppended(t, addr, v6)
		if got := appendingProxyKey(t, res, "X-Forwarded-For", client+", "+a.String()); got != want {
			t.Fatalf("X-Forwarded-For: %s, %s: key %q, want %q", client, a, got, want)
		}
		if got := appendingProxyKey(t, res, "X-Forwarded-For", client, a.String()+", 10.0.0.2"); got != want {
			t.Fatalf("X-Forwarded-For: %q, %q: key %q, want %q", client, a.String()+", 10.0.0.2", got, want)
		}
	})
}

// TestNewRejectsDuplicateNames: two Limits with one Name would be
// indistinguishable in the fields and hooks (issue 9, item 15).
func TestNewRejectsDuplicateNames(t *testing.T) {
	lim := newKeyed(t, ratelimit.FixedWindowPolicy(5, time.Minute), clock.NewMock())
	for _, names := range [][2]string{{"api", "api"}, {"", "default"}, {"", ""}} {
		_, err := New([]Limit{
			{Name: names[0], Key: KeyByIP(), Limiter: lim},
			{Name: names[1], Key: KeyByAPIKey(), Limiter: lim},
		})
		require.Error(t, err, "names %q", names)
		assert.Contains(t, err.Error(), "httplimit:")
		assert.Contains(t, err.Error(), "twice")
	}
}

// TestHeadCountsAsGetRoute: ServeMux serves HEAD with a GET pattern's
// handler, so a route limit on GET charges HEAD too (issue 9, item 3).
func TestHeadCountsAsGetRoute(t *testing.T) {
	mux := http.NewServeMux()
	var runs int
	mux.HandleFunc("GET /report", func(w http.ResponseWriter, r *http.Request) { runs++ })
	mux.HandleFunc("GET /files/", func(w http.ResponseWriter, r *http.Request) { runs++ })
	for _, tc := range []struct {
		name string
		key  KeyFunc
	}{
		{"IsRoute", When(IsRoute("GET /report"), KeyByIP())},
		{"IsRoute subtree", When(IsRoute("GET /files/"), KeyByIP())},
		{"IsMuxRoute", When(IsMuxRoute(mux, "GET /report"), KeyByIP())},
		{"KeyByRoute", KeyByRoute()},
		{"KeyByMuxRoute", KeyByMuxRoute(mux)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := newKeyed(t, ratelimit.FixedWindowPolicy(2, time.Hour), clock.NewMock())
			h := newMW(t, []Limit{{Name: "report", Key: tc.key, Limiter: lim}}).Handler(mux)
			path := "/report"
			if tc.name == "IsRoute subtree" {
				path = "/files/a/b"
			}
			runs = 0
			var codes []int
			for _, m := range []string{"GET", "GET", "GET", "HEAD", "HEAD"} {
				codes = append(codes, do(h, m, path).Code)
			}
			assert.Equal(t, []int{200, 200, 429, 429, 429}, codes)
			assert.Equal(t, 2, runs, "handler runs")
		})
	}
}

// failOpenOnDone mimics a Redis limiter failing open: when ctx is done it
// answers an admission with ctx's error (first waiting for ctx to end when
// wait is set, as a call stuck on the network would); otherwise it admits.
type failOpenOnDone struct {
	wait  bool
	calls atomic.Int64
}

func (f *failOpenOnDone) AllowN(ctx context.Context, _ string, n int) (ratelimit.Decision, error) {
	f.calls.Add(1)
	if f.wait {
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Second):
		}
	}
	if err := ctx.Err(); err != nil {
		return ratelimit.Decision{Allowed: true, Limit: 5, Remaining: 5 - n}, err
	}
	return ratelimit.Decision{Allowed: true, Limit: 5, Remaining: 5 - n, ResetAfter: time.Second}, nil
}
func (f *failOpenOnDone) WaitN(ctx context.Context, _ string, _ int) error   { return ctx.Err() }
func (f *failOpenOnDone) RefundN(ctx context.Context, _ string, _ int) error { return nil }

// TestMiddlewareDoneContextNotServed: a request whose context is done is
// not admitted free when the limiter answers with the context's error,
// whatever Decision came with it (issue 9, item 1).
func TestMiddlewareDoneContextNotServed(t *testing.T) {
	t.Parallel()
	mem := newKeyed(t, ratelimit.FixedWindowPolicy(100, time.Minute), clock.NewMock())
	for _, tc := range []struct {
		name   string
		limits func(l ratelimit.KeyedLimiter) []Limit
	}{
		{"one limit", func(l ratelimit.KeyedLimiter) []Limit { return []Limit{{Name: "redis", Key: KeyByIP(), Limiter: l}} }},
		{"two limits", func(l ratelimit.KeyedLimiter) []Limit {
			return []Limit{{Name: "mem", Key: KeyByIP(), Limiter: mem}, {Name: "redis", Key: KeyByIP(), Limiter: l}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var hooked atomic.Int64
			var served atomic.Int64
			lim := &failOpenOnDone{}
			h := newMW(t, tc.limits(lim), WithErrorHook(func(*http.Request, string, error) { hooked.Add(1) })).
				Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }))
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			r := httptest.NewRequest("POST", "/", nil).WithContext(ctx)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			assert.Equal(t, int64(1), lim.calls.Load())
			assert.Equal(t, int64(0), served.Load(), "handler ran for a done context")
			assert.NotEqual(t, 200, w.Code)
			assert.Empty(t, w.Header().Get(HeaderRateLimit), "quota fields for an undecided request")
			assert.Equal(t, int64(0), hooked.Load(), "the caller's cancellation is not a backend error")
		})
	}
}

// TestMiddlewareHalfClosedClientNotServed: over real loopback, a client
// that sends a bodiless POST and half-closes at once ends the request's
// context while the limiter is deciding; its handler must not run.
func TestMiddlewareHalfClosedClientNotServed(t *testing.T) {
	t.Parallel()
	lim := &failOpenOnDone{wait: true}
	var served atomic.Int64
	finished := make(chan struct{}, 50)
	mw := newMW(t, []Limit{{Name: "redis", Key: KeyByIP(), Limiter: lim}})
	inner := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inner.ServeHTTP(w, r)
		finished <- struct{}{}
	}))
	t.Cleanup(srv.Close)
	const clients = 5
	for range clients {
		c, err := net.Dial("tcp", srv.Listener.Addr().String())
		require.NoError(t, err)
		_, err = io.WriteString(c, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n")
		require.NoError(t, err)
		require.NoError(t, c.(*net.TCPConn).CloseWrite())
		t.Cleanup(func() { _ = c.Close() })
	}
	for range clients {
		select {
		case <-finished:
		case <-time.After(10 * time.Second):
			t.Fatal("request not finished")
		}
	}
	assert.Equal(t, int64(0), served.Load(), "handlers run for clients that had gone")
}

// TestMiddlewareFailOpenHeadersTruthful: a Decision made by a failure
// policy (an error with it) admits, but the quota fields are not sent:
// they would be made up (issue 9, item 17).
func TestMiddlewareFailOpenHeadersTruthful(t *testing.T) {
	t.Parallel()
	mem := newKeyed(t, ratelimit.FixedWindowPolicy(100, time.Minute), clock.NewMock())
	for _, open := range []bool{true, false} {
		for _, limits := range [][]Limit{
			{{Name: "redis", Key: KeyByIP(), Limiter: failing{open: open}}},
			{{Name: "mem", Key: KeyByIP(), Limiter: mem}, {Name: "redis", Key: KeyByIP(), Limiter: failing{open: open}}},
		} {
			w := do(newMW(t, limits).Handler(okHandler), "GET", "/")
			h := w.Result().Header
			if open {
				assert.Equal(t, 200, w.Code)
				assert.Empty(t, h.Get(HeaderRetryAfter))
			} else {
				assert.Equal(t, 429, w.Code)
				assert.Equal(t, "1", h.Get(HeaderRetryAfter), "fail closed still says when to retry")
			}
			for _, f := range []string{HeaderXRateLimitLimit, HeaderXRateLimitRemaining, HeaderXRateLimitReset, HeaderRateLimitPolicy, HeaderRateLimit} {
				assert.Empty(t, h.Get(f), "%s sent for a failure-policy decision (open=%v, %d limits)", f, open, len(limits))
			}
		}
	}
}

// TestErrorHookRateLimited: a backend that is down is reported once per
// limit per interval, with the count of errors left unreported, not once
// per request (issue 9, item 17).
func TestErrorHookRateLimited(t *testing.T) {
	t.Parallel()
	mock := newMock(t, epoch)
	type report struct {
		limit      string
		suppressed int64
	}
	var mu sync.Mutex
	var got []report
	h := newMW(t, []Limit{
		{Name: "a", Key: When(IsRoute("/a"), KeyByIP()), Limiter: failing{open: true}},
		{Name: "b", Key: When(IsRoute("/b"), KeyByIP()), Limiter: failing{open: true}},
	}, WithClock(mock), WithErrorHook(func(_ *http.Request, limit string, err error) {
		assert.ErrorIs(t, err, errBackend)
		var s *ErrorSummary
		n := int64(0)
		if errors.As(err, &s) {
			n = s.Suppressed
		}
		mu.Lock()
		got = append(got, report{limit, n})
		mu.Unlock()
	})).Handler(okHandler)
	for range 100 {
		do(h, "GET", "/a")
	}
	for range 10 {
		do(h, "GET", "/b")
	}
	assert.Equal(t, []report{{"a", 0}, {"b", 0}}, got)
	mock.Add(DefaultErrorReportInterval - time.Millisecond)
	do(h, "GET", "/a")
	assert.Len(t, got, 2, "reported before the interval ended")
	mock.Add(time.Millisecond)
	do(h, "GET", "/a")
	do(h, "GET", "/b")
	assert.Equal(t, []report{{"a", 0}, {"b", 0}, {"a", 100}, {"b", 9}}, got)

	// Interval 0 reports every error.
	var all atomic.Int64
	h = newMW(t, []Limit{{Name: "a", Key: KeyByIP(), Limiter: failing{open: true}}}, WithErrorReportInterval(0),
		WithErrorHook(func(*http.Request, string, error) { all.Add(1) })).Handler(okHandler)
	for range 10 {
		do(h, "GET", "/")
	}
	assert.Equal(t, int64(10), all.Load())
}

// TestMiddlewareWaitingRetryAfterSucceeds: over real loopback, a client
// that waits exactly the Retry-After a 429 announced and retries is
// admitted, with one limit and with limits of 1/s and 1/h together (issue
// 9, item 8: the most restrictive denial is the one announced). The two
// limit case relies on ratelimit.AllowAll reporting the longest
// RetryAfter (the core fix of item 8).
func TestMiddlewareWaitingRetryAfterSucceeds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		policies []ratelimit.Policy
	}{
		{"one limit", []ratelimit.Policy{ratelimit.FixedWindowPolicy(1, time.Hour)}},
		{"token bucket", []ratelimit.Policy{ratelimit.TokenBucketPolicy(2, 1, 7*time.Second)}},
		{"1 per second and 1 per hour", []ratelimit.Policy{ratelimit.FixedWindowPolicy(1, time.Second), ratelimit.FixedWindowPolicy(1, time.Hour)}},
		{"1 per hour and 1 per second", []ratelimit.Policy{ratelimit.FixedWindowPolicy(1, time.Hour), ratelimit.FixedWindowPolicy(1, time.Second)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mock := newMock(t, epoch)
			var limits []Limit
			for i, p := range tc.policies {
				limits = append(limits, Limit{Name: fmt.Sprint("l", i), Key: KeyByIP(), Limiter: newKeyed(t, p, mock)})
			}
			srv := httptest.NewServer(newMW(t, limits, WithClock(mock)).Handler(okHandler))
			t.Cleanup(srv.Close)
			get := func() *http.Response {
				resp, err := http.Get(srv.URL)
				require.NoError(t, err)
				_, _ = io.Copy(io.Discard, resp.Body)
				_ = resp.Body.Close()
				return resp
			}
			denials := 0
			for step := 0; step < 6; step++ {
				resp := get()
				if resp.StatusCode == 200 {
					continue
				}
				require.Equal(t, 429, resp.StatusCode)
				denials++
				secs, err := strconv.Atoi(resp.Header.Get(HeaderRetryAfter))
				require.NoError(t, err)
				mock.Add(time.Duration(secs) * time.Second)
				resp = get()
				require.Equal(t, 200, resp.StatusCode, "step %d: denied after waiting the announced Retry-After: %d", step, secs)
			}
			assert.Positive(t, denials)
		})
	}
}
