package httplimit

// Adversarial tests (issue 9): forged forwarding headers in every proxy
// style, malformed and oversized headers, 429s with every header
// combination for the transport, done contexts.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/hints"
	"github.com/rlkit/ratelimit/internal/limitset"
	"github.com/rlkit/ratelimit/internal/pacer"
	"github.com/rlkit/ratelimit/internal/sfv"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
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
	res := mustResolver(t, TrustedProxies("::ffff:10.0.0.0/104"))
	assert.Equal(t, "203.0.113.9", appendingProxyKey(t, res, "X-Forwarded-For", "203.0.113.9"))
	res = mustResolver(t, TrustedProxies("::ffff:10.0.0.1/128"))
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
	lim := newKeyed(t, ratelimit.FixedWindowPolicy(5, time.Minute), fakeclock.New(time.Unix(0, 0)))
	for _, names := range [][2]string{{"api", "api"}, {"", "default"}, {"", ""}} {
		_, err := New([]Limit{
			{Name: names[0], Key: KeyByIP(), Limiter: lim},
			{Name: names[1], Key: KeyByHeader("X-API-Key"), Limiter: lim},
		})
		require.Error(t, err, "names %q", names)
		assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
		assert.Contains(t, err.Error(), "ratelimit: invalid configuration: httplimit.Limit.Name must be unique")
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
		{"IsRoute(mux)", When(IsRoute("GET /report", mux), KeyByIP())},
		{"KeyByRoute", KeyByRoute()},
		{"KeyByRoute(mux)", KeyByRoute(mux)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := newKeyed(t, ratelimit.FixedWindowPolicy(2, time.Hour), fakeclock.New(time.Unix(0, 0)))
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
func (f *failOpenOnDone) Peek(ctx context.Context, _ string, n int) (ratelimit.Decision, error) {
	return ratelimit.Decision{Allowed: true, Limit: 5, Remaining: 5}, ctx.Err()
}

// TestMiddlewareDoneContextNotServed: a request whose context is done is
// not admitted free when the limiter answers with the context's error,
// whatever Decision came with it (issue 9, item 1).
func TestMiddlewareDoneContextNotServed(t *testing.T) {
	t.Parallel()
	mem := newKeyed(t, ratelimit.FixedWindowPolicy(100, time.Minute), fakeclock.New(time.Unix(0, 0)))
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
			rec, logger := newLogRecorder()
			var served atomic.Int64
			lim := &failOpenOnDone{}
			h := newMW(t, tc.limits(lim), WithLogger(logger)).
				Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) { served.Add(1) }))
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			r := httptest.NewRequest("POST", "/", nil).WithContext(ctx)
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			assert.Equal(t, int64(1), lim.calls.Load())
			assert.Equal(t, int64(0), served.Load(), "handler ran for a done context")
			assert.NotEqual(t, 200, w.Code)
			assert.Empty(t, w.Header().Get("RateLimit"), "quota fields for an undecided request")
			assert.Empty(t, rec.records(), "the caller's cancellation is not a backend error")
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
	mem := newKeyed(t, ratelimit.FixedWindowPolicy(100, time.Minute), fakeclock.New(time.Unix(0, 0)))
	for _, open := range []bool{true, false} {
		for _, limits := range [][]Limit{
			{{Name: "redis", Key: KeyByIP(), Limiter: failing{open: open}}},
			{{Name: "mem", Key: KeyByIP(), Limiter: mem}, {Name: "redis", Key: KeyByIP(), Limiter: failing{open: open}}},
		} {
			w := do(newMW(t, limits).Handler(okHandler), "GET", "/")
			h := w.Result().Header
			if open {
				assert.Equal(t, 200, w.Code)
				assert.Empty(t, h.Get("Retry-After"))
			} else {
				assert.Equal(t, 429, w.Code)
				assert.Equal(t, "1", h.Get("Retry-After"), "fail closed still says when to retry")
			}
			for _, f := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit"} {
				assert.Empty(t, h.Get(f), "%s sent for a failure-policy decision (open=%v, %d limits)", f, open, len(limits))
			}
		}
	}
}

// TestErrorReportsRateLimited: a backend that is down is reported once per
// limit per interval, with the count of errors left unreported, not once
// per request (issue 9, item 17).
func TestErrorReportsRateLimited(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	type report struct {
		limit      string
		suppressed int64
	}
	rec, logger := newLogRecorder()
	reports := func() []report {
		var got []report
		for _, r := range rec.records() {
			assert.ErrorIs(t, r["error"].(error), errBackend)
			got = append(got, report{r["limit"].(string), r["suppressed"].(int64)})
		}
		return got
	}
	h := newMW(t, []Limit{
		{Name: "a", Key: When(IsRoute("/a"), KeyByIP()), Limiter: failing{open: true}},
		{Name: "b", Key: When(IsRoute("/b"), KeyByIP()), Limiter: failing{open: true}},
	}, WithClock(mock), WithLogger(logger)).Handler(okHandler)
	for range 100 {
		do(h, "GET", "/a")
	}
	for range 10 {
		do(h, "GET", "/b")
	}
	assert.Equal(t, []report{{"a", 0}, {"b", 0}}, reports())
	mock.Add(defaultReportEvery - time.Millisecond)
	do(h, "GET", "/a")
	assert.Len(t, reports(), 2, "reported before the interval ended")
	mock.Add(time.Millisecond)
	do(h, "GET", "/a")
	do(h, "GET", "/b")
	assert.Equal(t, []report{{"a", 0}, {"b", 0}, {"a", 100}, {"b", 9}}, reports())

	// Interval 0 reports every error.
	all, logger := newLogRecorder()
	h = newMW(t, []Limit{{Name: "a", Key: KeyByIP(), Limiter: failing{open: true}}}, WithErrorReportInterval(0),
		WithLogger(logger)).Handler(okHandler)
	for range 10 {
		do(h, "GET", "/")
	}
	assert.Len(t, all.records(), 10)
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
		{"token bucket", []ratelimit.Policy{ratelimit.TokenBucketPolicy(ratelimit.Per(1, 7*time.Second), 2)}},
		{"1 per second and 1 per hour", []ratelimit.Policy{ratelimit.FixedWindowPolicy(1, time.Second), ratelimit.FixedWindowPolicy(1, time.Hour)}},
		{"1 per hour and 1 per second", []ratelimit.Policy{ratelimit.FixedWindowPolicy(1, time.Hour), ratelimit.FixedWindowPolicy(1, time.Second)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mock := fakeclock.New(epoch)
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
				secs, err := strconv.Atoi(resp.Header.Get("Retry-After"))
				require.NoError(t, err)
				mock.Add(time.Duration(secs) * time.Second)
				resp = get()
				require.Equal(t, 200, resp.StatusCode, "step %d: denied after waiting the announced Retry-After: %d", step, secs)
			}
			assert.Positive(t, denials)
		})
	}
}

// maxPauseDur is the cap of every pause parsed from a server's answer.
const maxPauseDur = hints.MaxSeconds * time.Second

// serverPause is the pause a 429 or 503 answer names, as the transport
// reads it; false for other answers and for refusals naming none (which
// back off instead).
func serverPause(resp *http.Response, now time.Time) (time.Duration, bool) {
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
		return 0, false
	}
	h := hints.Parse(resp.Header.Values, now)
	return pacer.Named(&h)
}

// TestServerPauseEveryHeaderCombination: for 429, 503 and other answers
// with every combination of Retry-After, RateLimit and X-RateLimit-* the
// transport pauses exactly as documented: Retry-After when positive, else
// the longest reset among the RateLimit items it reports exhausted and
// X-RateLimit-Reset unless X-RateLimit-Remaining says quota is left (or
// is unreadable); a zero pause (a date in the past, a reset now) names
// none. Never negative, never beyond the cap.
func TestServerPauseEveryHeaderCombination(t *testing.T) {
	t.Parallel()
	now := epoch
	type hv struct {
		v    string
		d    time.Duration
		ok   bool // the value names a pause
		left bool // (X-RateLimit-Remaining) quota is left
	}
	retryAfters := []hv{
		{"", 0, false, false}, {"7", 7 * time.Second, true, false},
		{now.Add(9 * time.Second).UTC().Format(http.TimeFormat), 9 * time.Second, true, false},
		{now.Add(-time.Hour).UTC().Format(http.TimeFormat), 0, true, false},
		{"Fri, 31 Dec 9999 23:59:59 GMT", maxPauseDur, true, false},
		{"99999999999999999999999999", maxPauseDur, true, false},
		{"soon", 0, false, false}, {"-3", 0, false, false}, {"1.5", 0, false, false}, {`"7"`, 0, false, false},
	}
	rateLimits := []hv{
		{"", 0, false, false},
		{`"burst";r=0;t=5, "daily";r=4000;t=80000`, 5 * time.Second, true, false},
		{`"daily";r=4000;t=80000`, 0, false, false},
		{`"a";t=50`, 0, false, false},
		{`"a";r=0;t=99999999999999999999`, maxPauseDur, true, false},
		{`"a;r=0;t=3";r=1;t=4`, 0, false, false},
		{`garbage;;;,,"`, 0, false, false},
	}
	remainings := []hv{{"", 0, false, false}, {"0", 0, false, false}, {"3", 0, false, true}, {"x", 0, false, true}}
	resets := []hv{
		{"", 0, false, false}, {"11", 11 * time.Second, true, false},
		{strconv.FormatInt(now.Unix()+13, 10), 13 * time.Second, true, false},
		{strconv.FormatInt(now.Unix()-13, 10), 0, true, false},
		{"99999999999999999999", maxPauseDur, true, false},
		{strconv.FormatInt(now.UnixMilli()+1500, 10), 1500 * time.Millisecond, true, false},
		{"12.5", 12500 * time.Millisecond, true, false},
		{"-1", 0, false, false}, {"12.", 0, false, false}, {"1e3", 0, false, false},
	}
	for _, status := range []int{429, 503, 500, 200} {
		for _, ra := range retryAfters {
			for _, rl := range rateLimits {
				for _, rem := range remainings {
					for _, rs := range resets {
						h := http.Header{}
						for _, f := range []struct{ k, v string }{{"Retry-After", ra.v}, {"RateLimit", rl.v},
							{"X-RateLimit-Remaining", rem.v}, {"X-RateLimit-Reset", rs.v}} {
							if f.v != "" {
								h.Set(f.k, f.v)
							}
						}
						var want time.Duration
						var wantOK bool
						switch {
						case status != 429 && status != 503:
						case ra.ok && ra.d > 0:
							want, wantOK = ra.d, true
						default:
							if rl.ok {
								want = rl.d
							}
							if rs.ok && !rem.left {
								want = max(want, rs.d)
							}
							wantOK = want > 0
						}
						d, ok := serverPause(&http.Response{StatusCode: status, Header: h}, now)
						if d != want || ok != wantOK {
							t.Errorf("%d %v: pause %v, %v; want %v, %v", status, h, d, ok, want, wantOK)
						}
					}
				}
			}
		}
	}
}

// FuzzRetryAfter: both forms of Retry-After parse to what they say,
// within [0, cap]; anything else parses to a value within the cap or not
// at all.
func FuzzRetryAfter(f *testing.F) {
	f.Add(uint64(7), int64(9), "7")
	f.Add(uint64(1<<63), int64(-1<<40), "Fri, 31 Dec 9999 23:59:59 GMT")
	f.Add(uint64(0), int64(1<<40), "Thu Jan  1 00:01:30 2026")
	f.Fuzz(func(t *testing.T, secs uint64, offset int64, raw string) {
		d, ok := parseRetryAfter(strconv.FormatUint(secs, 10), epoch)
		want := time.Duration(min(secs, hints.MaxSeconds)) * time.Second
		if !ok || d != want {
			t.Fatalf("parseRetryAfter(%d) = %v, %v; want %v", secs, d, ok, want)
		}
		offset %= 1 << 36 // dates from 1 to 4000 AD
		at := epoch.Add(time.Duration(offset) * time.Second)
		if at.Year() >= 1 && at.Year() <= 9999 {
			d, ok = parseRetryAfter(at.UTC().Format(http.TimeFormat), epoch)
			want = min(max(at.Sub(epoch), 0), maxPauseDur)
			if !ok || d != want {
				t.Fatalf("parseRetryAfter(%s) = %v, %v; want %v", at.UTC().Format(http.TimeFormat), d, ok, want)
			}
		}
		if d, ok := parseRetryAfter(raw, epoch); ok && (d < 0 || d > maxPauseDur) {
			t.Fatalf("parseRetryAfter(%q) = %v", raw, d)
		}
	})
}

// FuzzXRateLimitReset: delay-seconds, Unix seconds and Unix milliseconds
// all parse to the pause they mean, within [0, cap]; anything else within
// the cap or not at all.
func FuzzXRateLimitReset(f *testing.F) {
	f.Add(uint64(11), "11")
	f.Add(uint64(epoch.Unix()+13), "1767225613")
	f.Add(uint64(epoch.UnixMilli()+13), "1767225613000")
	f.Add(uint64(1<<63), "99999999999999999999999")
	f.Fuzz(func(t *testing.T, v uint64, raw string) {
		d, ok := parseXRateLimitReset(strconv.FormatUint(v, 10), epoch)
		var want time.Duration
		switch {
		case v < uint64(epoch.Unix()/2): // delay-seconds
			want = time.Duration(v) * time.Second
		case v < uint64(epoch.Unix()*500): // Unix seconds
			want = min(max(time.Unix(int64(v), 0).Sub(epoch), 0), maxPauseDur)
		case v <= 1<<50: // Unix milliseconds
			want = min(max(time.UnixMilli(int64(v)).Sub(epoch), 0), maxPauseDur)
		default: // thousands of years away
			want = maxPauseDur
		}
		if !ok || d != want {
			t.Fatalf("parseXRateLimitReset(%d) = %v, %v; want %v", v, d, ok, want)
		}
		if d, ok := parseXRateLimitReset(raw, epoch); ok && (d < 0 || d > maxPauseDur) {
			t.Fatalf("parseXRateLimitReset(%q) = %v", raw, d)
		}
	})
}

// FuzzRateLimitFields: the transport's RateLimit parser never panics,
// stays within the cap, reads exactly the t of the exhausted item in the
// fields the middleware writes, and its splitter keeps every byte of a
// RateLimit-Policy line.
func FuzzRateLimitFields(f *testing.F) {
	f.Add(`"burst";r=0;t=1, "daily";r=4000;t=80000`, "api", 3, 0, int64(1500))
	f.Add(`"a\";r=0;t=9";r=1;t=2`, `we"ird\name`, 0, 5, int64(0))
	f.Add(`,,;;"`, "", 10, 10, int64(-1))
	f.Fuzz(func(t *testing.T, raw, name string, limit, remaining int, retryMillis int64) {
		if d, ok := parseRateLimitReset([]string{raw, raw}); ok && (d < 0 || d > maxPauseDur) {
			t.Fatalf("parseRateLimitReset(%q) = %v", raw, d)
		}
		var joined []string
		for rest, more := raw, true; more; {
			var part string
			part, rest, more = sfv.Cut(rest, ',')
			joined = append(joined, part)
		}
		if strings.Join(joined, ",") != raw {
			t.Fatalf("cutTopLevel(%q, ',') lost bytes: %q", raw, joined)
		}
		if !limitset.ValidName(name) || limit < 0 || remaining < 0 {
			return
		}
		// Round trip: what the middleware writes, the transport reads. t is
		// the time until the quota resets (at or after a denial's
		// RetryAfter), on admissions and denials alike.
		dec := ratelimit.Decision{Allowed: remaining > 0, Limit: limit, Remaining: remaining}
		retry := time.Duration(retryMillis%(1<<40)) * time.Millisecond
		dec.ResetAfter = retry.Abs() + time.Second
		if !dec.Allowed {
			dec.Remaining = 0
			dec.RetryAfter = retry
			if dec.RetryAfter < 0 {
				dec.RetryAfter = ratelimit.RetryNever
			}
		}
		h := http.Header{}
		limitset.WriteDecision(h, &limitset.HTTPNames, limitset.AllFields, dec, name, 0, epoch.UnixNano())
		d, ok := parseRateLimitReset(h.Values("RateLimit"))
		switch {
		case dec.Allowed:
			if ok {
				t.Fatalf("%v: RateLimit %q read as a pause of %v", dec, h.Get("RateLimit"), d)
			}
		default: // spent (r=0): wait for the reset, denied for good or not
			want := min((dec.ResetAfter + time.Second - 1).Truncate(time.Second), maxPauseDur) // rounded up
			if !ok || d != want {
				t.Fatalf("%v: RateLimit %q read as %v, %v; want %v", dec, h.Get("RateLimit"), d, ok, want)
			}
		}
	})
}

// TestOversizedForwardingHeaders: forwarding headers as large as a server
// accepts resolve quickly to the address the trusted proxy appended.
func TestOversizedForwardingHeaders(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("1.2.3.4, ", 100_000)
	quotes := strings.Repeat(`for="\"`, 100_000)
	backslashes := strings.Repeat(`\`, 500_000) + `"`
	fwd := mustResolver(t, TrustedProxies("10.0.0.0/8"), ProxyHeaders("Forwarded"))
	xff := mustResolver(t, TrustedProxies("10.0.0.0/8"))
	start := time.Now()
	for _, client := range []string{big, quotes, backslashes} {
		assert.Equal(t, "203.0.113.9", appendingProxyKey(t, fwd, "Forwarded", client+", for=203.0.113.9"))
		assert.Equal(t, "203.0.113.9", appendingProxyKey(t, xff, "X-Forwarded-For", client+", 203.0.113.9"))
		lines := make([]string, 1000)
		for i := range lines {
			lines[i] = client[:1000]
		}
		assert.Equal(t, "203.0.113.9", appendingProxyKey(t, fwd, "Forwarded", append(lines, "for=203.0.113.9")...))
	}
	// A chain of trusted proxies longer than any real one stops at the
	// oldest hop examined, never at a client-chosen address beyond it.
	chain := "for=6.6.6.6" + strings.Repeat(", for=10.0.0.9", 2*maxForwardedHops)
	assert.Equal(t, "10.0.0.9", appendingProxyKey(t, fwd, "Forwarded", chain))
	assert.Less(t, time.Since(start), 5*time.Second)

	// A client-chosen key of a megabyte is stored as its digest.
	lim := &recordingLimiter{}
	h := newMW(t, []Limit{{Name: "api", Key: KeyByHeader("X-API-Key"), Limiter: lim}}).Handler(okHandler)
	do(h, "GET", "/", "X-API-Key", strings.Repeat("k", 1<<20))
	require.Len(t, lim.keys, 1)
	assert.LessOrEqual(t, len(lim.keys[0]), maxKeyLen)
}

// TestForgedForwardingHeadersUntrustedPeer: from a peer that is not a
// trusted proxy, no forwarding header of any style, however many lines,
// changes the key.
func TestForgedForwardingHeadersUntrustedPeer(t *testing.T) {
	t.Parallel()
	res := mustResolver(t, TrustedProxies("10.0.0.0/8"), ProxyHeaders("Forwarded", "X-Forwarded-For", "X-Real-IP"))
	for _, hdr := range []map[string][]string{
		{"X-Forwarded-For": {"10.0.0.1", "6.6.6.6"}},
		{"Forwarded": {`for=6.6.6.6`, `for="[2001:db8::6]"`}},
		{"X-Real-Ip": {"6.6.6.6"}},
		{"X-Forwarded-For": {"6.6.6.6"}, "Forwarded": {"for=7.7.7.7"}, "X-Real-Ip": {"8.8.8.8"}},
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "198.51.100.7:5555"
		for k, v := range hdr {
			r.Header[k] = v
		}
		k, ok := res.Key(r)
		require.True(t, ok)
		assert.Equal(t, "198.51.100.7", k, "headers %v", hdr)
	}
}
