package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// epoch is a whole minute in 2026, so fixed windows of a minute start on it.
var epoch = time.Unix(1767225600, 0)

func newKeyed(t testing.TB, p ratelimit.Policy, c ratelimit.Clock) *ratelimit.Keyed {
	t.Helper()
	k, err := ratelimit.NewKeyed(p, ratelimit.WithClock(c))
	if err != nil {
		t.Fatalf("NewKeyed(%v): %v", p, err)
	}
	return k
}

func newMW(t testing.TB, limits []Limit, opts ...Option) *Middleware {
	t.Helper()
	m, err := New(limits, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

var okHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
	_, _ = io.WriteString(w, "ok")
})

func do(h http.Handler, method, target string, hdr ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(method, target, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

type wantHeaders struct {
	status                   int
	limit, remaining, reset  string
	policy, ratelimit, retry string
}

func checkHeaders(t *testing.T, step string, w *httptest.ResponseRecorder, want wantHeaders) {
	t.Helper()
	h := w.Result().Header
	got := wantHeaders{
		status:    w.Code,
		limit:     h.Get("X-RateLimit-Limit"),
		remaining: h.Get("X-RateLimit-Remaining"),
		reset:     h.Get("X-RateLimit-Reset"),
		policy:    h.Get("RateLimit-Policy"),
		ratelimit: h.Get("RateLimit"),
		retry:     h.Get("Retry-After"),
	}
	if got != want {
		t.Errorf("%s: headers = %+v, want %+v", step, got, want)
	}
	for _, f := range []string{"RateLimit-Policy", "RateLimit"} {
		if v := h.Get(f); v != "" {
			if _, err := parseSFList(v); err != nil {
				t.Errorf("%s: %s is not a structured field List: %v", step, f, err)
			}
		}
	}
}

// TestHeadersExact walks a fixed window of 3 a minute on the mock clock and
// checks every field of every answer.
func TestHeadersExact(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch.Add(10 * time.Second))
	lim := newKeyed(t, ratelimit.FixedWindowPolicy(3, time.Minute), mock)
	h := newMW(t, []Limit{{Name: "api", Key: KeyByHeader("X-API-Key"), Limiter: lim}}, WithClock(mock)).Handler(okHandler)

	reset := strconv.FormatInt(epoch.Unix()+60, 10)
	for i, rem := range []string{"2", "1", "0"} {
		w := do(h, "GET", "/", "X-API-Key", "k1")
		checkHeaders(t, "request "+strconv.Itoa(i+1), w, wantHeaders{
			status: 200, limit: "3", remaining: rem, reset: reset,
			policy: `"api";q=3;w=60`, ratelimit: `"api";r=` + rem + `;t=50`,
		})
	}
	w := do(h, "GET", "/", "X-API-Key", "k1")
	checkHeaders(t, "request 4", w, wantHeaders{
		status: 429, limit: "3", remaining: "0", reset: reset,
		policy: `"api";q=3;w=60`, ratelimit: `"api";r=0;t=50`, retry: "50",
	})
	var body struct {
		Error      string `json:"error"`
		Message    string `json:"message"`
		RetryAfter int64  `json:"retryAfter"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatalf("429 body %q: %v", w.Body.String(), err)
	}
	if body.Error != "Too Many Requests" || body.RetryAfter != 50 || !strings.Contains(body.Message, `"api"`) {
		t.Errorf("429 body = %+v", body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json; charset=utf-8" {
		t.Errorf("429 Content-Type = %q", ct)
	}

	// Another key is untouched; a request without a key is not limited.
	checkHeaders(t, "other key", do(h, "GET", "/", "X-API-Key", "k2"), wantHeaders{
		status: 200, limit: "3", remaining: "2", reset: reset,
		policy: `"api";q=3;w=60`, ratelimit: `"api";r=2;t=50`,
	})
	checkHeaders(t, "no key", do(h, "GET", "/"), wantHeaders{status: 200})

	// Half a second before the window ends: t and Retry-After round up.
	mock.Add(49500 * time.Millisecond)
	checkHeaders(t, "at 59.5s", do(h, "GET", "/", "X-API-Key", "k1"), wantHeaders{
		status: 429, limit: "3", remaining: "0", reset: reset,
		policy: `"api";q=3;w=60`, ratelimit: `"api";r=0;t=1`, retry: "1",
	})
	mock.Add(500 * time.Millisecond)
	checkHeaders(t, "next window", do(h, "GET", "/", "X-API-Key", "k1"), wantHeaders{
		status: 200, limit: "3", remaining: "2", reset: strconv.FormatInt(epoch.Unix()+120, 10),
		policy: `"api";q=3;w=60`, ratelimit: `"api";r=2;t=60`,
	})
}

// TestRetryAfterRounding: Retry-After is RetryAfter rounded up, never 0,
// and waiting exactly that long then retrying succeeds.
func TestRetryAfterRounding(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name      string
		p         ratelimit.Policy
		wantRetry string
		wantT     string // RateLimit t on the denial
		wait      time.Duration
	}{
		// 1 token per 1.5 s: RetryAfter 1.5 s -> 2.
		{"tokenbucket 1.5s", ratelimit.TokenBucketPolicy(ratelimit.Per(2, 3*time.Second), 1), "2", "2", 1500 * time.Millisecond},
		// 10 tokens a second: RetryAfter 100 ms -> 1, never 0.
		{"tokenbucket 100ms", ratelimit.TokenBucketPolicy(ratelimit.Per(10, time.Second), 1), "1", "1", 100 * time.Millisecond},
		// Exactly 2 s: no rounding.
		{"leakybucket 2s", ratelimit.LeakyBucketPolicy(1, 2*time.Second), "2", "2", 2 * time.Second},
		{"slidinglog 30s", ratelimit.SlidingLogPolicy(1, 30*time.Second), "30", "30", 30 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mock := fakeclock.New(epoch.Add(123 * time.Millisecond))
			lim := newKeyed(t, tc.p, mock)
			h := newMW(t, []Limit{{Name: "x", Key: KeyByIP(), Limiter: lim}}, WithClock(mock)).Handler(okHandler)
			if w := do(h, "GET", "/"); w.Code != 200 {
				t.Fatalf("first request: %d", w.Code)
			}
			w := do(h, "GET", "/")
			if w.Code != 429 {
				t.Fatalf("second request: %d, want 429", w.Code)
			}
			if got := w.Header().Get("Retry-After"); got != tc.wantRetry {
				t.Errorf("Retry-After = %q, want %q", got, tc.wantRetry)
			}
			items, err := parseSFList(w.Header().Get("RateLimit"))
			if err != nil || len(items) != 1 {
				t.Fatalf("RateLimit %q: %v", w.Header().Get("RateLimit"), err)
			}
			tv, _ := items[0].param("t")
			if strconv.FormatInt(tv.(int64), 10) != tc.wantT {
				t.Errorf("RateLimit t = %v, want %s", tv, tc.wantT)
			}
			ra, _ := strconv.Atoi(tc.wantRetry)
			if tv.(int64) > int64(ra) {
				t.Errorf("Retry-After %d is earlier than t %d", ra, tv)
			}
			mock.Add(tc.wait - time.Nanosecond)
			if w := do(h, "GET", "/"); w.Code != 429 {
				t.Errorf("1ns before RetryAfter: %d, want 429", w.Code)
			}
			mock.Add(time.Nanosecond)
			if w := do(h, "GET", "/"); w.Code != 200 {
				t.Errorf("after exactly RetryAfter: %d, want 200", w.Code)
			}
		})
	}
}

// TestNever: a cost above the capacity is refused with no Retry-After and
// a body saying not to retry; its RateLimit field's t says, as on every
// answer, when the quota resets.
func TestNever(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	lim := newKeyed(t, ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Second), 5), mock)
	cost := func(r *http.Request) int {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		return n
	}
	var got Denial
	mw := newMW(t, []Limit{{Name: "batch", Key: KeyByIP(), Limiter: lim}}, WithClock(mock), WithCost(cost))
	h := mw.Handler(okHandler)
	w := do(h, "POST", "/?n=6")
	if w.Code != 429 || w.Header().Get("Retry-After") != "" {
		t.Fatalf("cost 6 of 5: status %d Retry-After %q, want 429 and none", w.Code, w.Header().Get("Retry-After"))
	}
	if rl := w.Header().Get("RateLimit"); rl != `"batch";r=5;t=0` {
		t.Errorf("RateLimit = %q, want the full bucket's t=0 (when the quota resets, as on every answer)", rl)
	}
	var body map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
		t.Fatal(err)
	}
	if body["retryNever"] != true || body["retryAfter"] != nil {
		t.Errorf("body = %v, want retryNever and no retryAfter", body)
	}
	// The quota is untouched, and a custom handler learns Never.
	h = newMW(t, []Limit{{Name: "batch", Key: KeyByIP(), Limiter: lim}}, WithClock(mock), WithCost(cost),
		WithDeniedHandler(func(w http.ResponseWriter, r *http.Request, d Denial) {
			got = d
			w.WriteHeader(http.StatusRequestEntityTooLarge)
		})).Handler(okHandler)
	if w := do(h, "POST", "/?n=6"); w.Code != 413 || !got.Never || got.RetryAfter != 0 || got.Limit != "batch" {
		t.Errorf("custom handler: status %d, denial %+v", w.Code, got)
	}
	if w := do(h, "POST", "/?n=5"); w.Code != 200 {
		t.Errorf("cost 5 of 5: %d", w.Code)
	}
	// Cost 0 is exempt.
	if w := do(h, "POST", "/?n=0"); w.Code != 200 || w.Header().Get("RateLimit") != "" {
		t.Errorf("cost 0: %d %v", w.Code, w.Header())
	}
}

// TestMultipleLimits: 5 a minute per API key plus 2 a minute per IP on
// POST /login, all or nothing, with the most restrictive one reported.
func TestMultipleLimits(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	perKey := newKeyed(t, ratelimit.FixedWindowPolicy(5, time.Minute), mock)
	login := newKeyed(t, ratelimit.FixedWindowPolicy(2, time.Minute), mock)
	mw := newMW(t, []Limit{
		{Name: "api", Key: KeyByHeader("X-API-Key"), Limiter: perKey},
		{Name: "login", Key: When(IsRoute("POST /login"), KeyByIP()), Limiter: login},
	}, WithClock(mock))
	mux := http.NewServeMux()
	mux.Handle("POST /login", okHandler)
	mux.Handle("/", okHandler)
	h := mw.Handler(mux)

	steps := []struct {
		method, path string
		status       int
		policy       string
		rl           string
	}{
		{"GET", "/a", 200, `"api";q=5;w=60`, `"api";r=4;t=60`},
		{"POST", "/login", 200, `"login";q=2;w=60`, `"login";r=1;t=60`},
		{"POST", "/login", 200, `"login";q=2;w=60`, `"login";r=0;t=60`},
		// login denies: api is not charged.
		{"POST", "/login", 429, `"login";q=2;w=60`, `"login";r=0;t=60`},
		{"GET", "/a", 200, `"api";q=5;w=60`, `"api";r=1;t=60`},
		{"GET", "/a", 200, `"api";q=5;w=60`, `"api";r=0;t=60`},
		{"GET", "/a", 429, `"api";q=5;w=60`, `"api";r=0;t=60`},
	}
	for i, s := range steps {
		w := do(h, s.method, s.path, "X-API-Key", "k")
		if w.Code != s.status || w.Header().Get("RateLimit-Policy") != s.policy || w.Header().Get("RateLimit") != s.rl {
			t.Errorf("step %d %s %s: %d %q %q, want %d %q %q", i, s.method, s.path, w.Code,
				w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"), s.status, s.policy, s.rl)
		}
	}
}

// TestTiers: per key through ratelimit.Tiered, and per request through
// Limit.Tier.
func TestTiers(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	free := newKeyed(t, ratelimit.FixedWindowPolicy(2, time.Minute), mock)
	pro := newKeyed(t, ratelimit.FixedWindowPolicy(100, time.Minute), mock)
	tiered, err := ratelimit.NewTiered(func(_ context.Context, key string) string {
		if strings.HasPrefix(key, "pro-") {
			return "pro"
		}
		return "free"
	}, map[string]ratelimit.KeyedLimiter{"free": free, "pro": pro})
	if err != nil {
		t.Fatal(err)
	}
	h := newMW(t, []Limit{{Name: "plan", Key: KeyByHeader("X-API-Key"), Limiter: tiered}}, WithClock(mock)).Handler(okHandler)
	for i := 0; i < 3; i++ {
		do(h, "GET", "/", "X-API-Key", "pro-1")
	}
	if w := do(h, "GET", "/", "X-API-Key", "pro-1"); w.Code != 200 || w.Header().Get("RateLimit-Policy") != `"plan";q=100;w=60` {
		t.Errorf("pro: %d %q", w.Code, w.Header().Get("RateLimit-Policy"))
	}
	do(h, "GET", "/", "X-API-Key", "f")
	do(h, "GET", "/", "X-API-Key", "f")
	if w := do(h, "GET", "/", "X-API-Key", "f"); w.Code != 429 || w.Header().Get("RateLimit-Policy") != `"plan";q=2;w=60` {
		t.Errorf("free: %d %q", w.Code, w.Header().Get("RateLimit-Policy"))
	}

}

type planKey struct{}

// withPlan is what an authentication middleware would do: store the
// caller's plan in the request context.
func withPlan(plan string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), planKey{}, plan)))
	})
}

// TestTiersFromRequestContext: a ratelimit.Tiered whose tier function
// reads the plan from the request context chooses the limiter per request;
// the tier function runs exactly once per request, with one limit and
// with two (the all-or-nothing path); RateLimit-Policy shows the tier's
// quota and window.
func TestTiersFromRequestContext(t *testing.T) {
	t.Parallel()
	for _, two := range []bool{false, true} {
		t.Run(fmt.Sprintf("two limits=%v", two), func(t *testing.T) {
			t.Parallel()
			mock := fakeclock.New(epoch)
			free := newKeyed(t, ratelimit.FixedWindowPolicy(2, time.Minute), mock)
			pro := newKeyed(t, ratelimit.FixedWindowPolicy(100, time.Hour), mock)
			var calls atomic.Int64
			tiered, err := ratelimit.NewTiered(func(ctx context.Context, _ string) string {
				calls.Add(1)
				plan, _ := ctx.Value(planKey{}).(string)
				return plan
			}, map[string]ratelimit.KeyedLimiter{"free": free, "pro": pro})
			require.NoError(t, err)
			limits := []Limit{{Name: "plan", Key: KeyByHeader("X-API-Key"), Limiter: tiered}}
			if two {
				limits = append(limits, Limit{Name: "ip", Key: KeyByIP(), Limiter: newKeyed(t, ratelimit.FixedWindowPolicy(1000, time.Minute), mock)})
			}
			rec, logger := newLogRecorder()
			mw := newMW(t, limits, WithClock(mock), WithLogger(logger)).Handler(okHandler)

			w := do(withPlan("pro", mw), "GET", "/", "X-API-Key", "k")
			assert.Equal(t, 200, w.Code)
			assert.Equal(t, `"plan";q=100;w=3600`, w.Header().Get("RateLimit-Policy"))
			assert.Equal(t, int64(1), calls.Load(), "tier function calls for one request")

			for i := range 2 {
				w = do(withPlan("free", mw), "GET", "/", "X-API-Key", "k")
				assert.Equal(t, 200, w.Code, "free request %d", i)
			}
			w = do(withPlan("free", mw), "GET", "/", "X-API-Key", "k")
			assert.Equal(t, 429, w.Code)
			assert.Equal(t, `"plan";q=2;w=60`, w.Header().Get("RateLimit-Policy"))
			assert.Equal(t, "60", w.Header().Get("Retry-After"))
			assert.Equal(t, int64(4), calls.Load(), "tier function calls for four requests")

			// The same key on the pro plan still has its pro quota.
			w = do(withPlan("pro", mw), "GET", "/", "X-API-Key", "k")
			assert.Equal(t, 200, w.Code)
			assert.Equal(t, `"plan";r=98;t=3600`, w.Header().Get("RateLimit"))

			// An unknown tier is the server's misconfiguration: 500, never
			// let through unlimited.
			w = do(withPlan("gold", mw), "GET", "/", "X-API-Key", "k")
			assert.Equal(t, 500, w.Code)
			assert.Equal(t, int64(6), calls.Load())
			recs := rec.records()
			require.Len(t, recs, 1)
			assert.ErrorIs(t, recs[0]["error"].(error), ratelimit.ErrUnknownTier)
			assert.Equal(t, "plan", recs[0]["limit"])
		})
	}
}

// failing is a KeyedLimiter whose backend is down, failing open or closed.
type failing struct{ open bool }

var errBackend = errors.New("redis: connection refused to 10.0.0.1:6379 (secret detail)")

func (f failing) AllowN(context.Context, string, int) (ratelimit.Decision, error) {
	return ratelimit.Decision{Allowed: f.open, Limit: 10, Remaining: 0, RetryAfter: 0}, errBackend
}
func (f failing) WaitN(context.Context, string, int) error   { return errBackend }
func (f failing) RefundN(context.Context, string, int) error { return errBackend }
func (f failing) Peek(ctx context.Context, key string, n int) (ratelimit.Decision, error) {
	return f.AllowN(ctx, key, n)
}

// TestBackendErrors: the limiter's failure policy decides, the error goes
// to the logger, and never to the client.
func TestBackendErrors(t *testing.T) {
	t.Parallel()
	for _, open := range []bool{true, false} {
		rec, logger := newLogRecorder()
		h := newMW(t, []Limit{{Name: "redis", Key: KeyByIP(), Limiter: failing{open: open}}},
			WithLogger(logger)).Handler(okHandler)
		w := do(h, "GET", "/")
		want := 429
		if open {
			want = 200
		}
		if w.Code != want {
			t.Errorf("open=%v: status %d, want %d", open, w.Code, want)
		}
		if strings.Contains(w.Body.String(), "secret") || strings.Contains(w.Body.String(), "redis:") {
			t.Errorf("open=%v: body leaks the error: %q", open, w.Body.String())
		}
		if !open && w.Header().Get("Retry-After") != "1" {
			t.Errorf("fail closed: Retry-After %q, want 1", w.Header().Get("Retry-After"))
		}
		recs := rec.records()
		if assert.Len(t, recs, 1, "open=%v", open) {
			assert.Equal(t, "redis", recs[0]["limit"])
			assert.ErrorIs(t, recs[0]["error"].(error), errBackend)
		}
	}
}

// callSpy is a KeyedLimiter wrapper counting its calls and denials.
type callSpy struct {
	ratelimit.KeyedLimiter
	mu             sync.Mutex
	calls, denials int
}

func (s *callSpy) AllowN(ctx context.Context, key string, n int) (ratelimit.Decision, error) {
	d, err := s.KeyedLimiter.AllowN(ctx, key, n)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls++
	if !d.Allowed {
		s.denials++
	}
	return d, err
}

func (s *callSpy) counts() (calls, denials int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls, s.denials
}

// TestShadow: a shadow limit never refuses; its limiter is charged like
// any other, and the middleware's observer, not the limiter (which cannot
// know), reports its denials as OutcomeShadow.
func TestShadow(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	live := &callSpy{KeyedLimiter: newKeyed(t, ratelimit.FixedWindowPolicy(10, time.Minute), mock)}
	trial := &callSpy{KeyedLimiter: newKeyed(t, ratelimit.FixedWindowPolicy(2, time.Minute), mock)}
	var obs events
	mk := func(headers bool) http.Handler {
		return newMW(t, []Limit{
			{Name: "live", Key: KeyByIP(), Limiter: live, Window: time.Minute},
			{Name: "trial", Key: KeyByIP(), Limiter: trial, Window: time.Minute, Shadow: true},
		}, WithClock(mock), WithShadowHeaders(headers), WithObserver(&obs)).Handler(okHandler)
	}
	h := mk(false)
	for i := 1; i <= 4; i++ {
		w := do(h, "GET", "/")
		if w.Code != 200 || w.Header().Get("RateLimit-Policy") != `"live";q=10;w=60` {
			t.Errorf("request %d: %d %q", i, w.Code, w.Header().Get("RateLimit-Policy"))
		}
	}
	calls, denials := trial.counts()
	assert.Equal(t, []int{4, 2}, []int{calls, denials}, "trial: calls, denials")
	calls, _ = live.counts()
	assert.Equal(t, 4, calls, "live: calls")
	outcomes := map[string][]ratelimit.Outcome{}
	for _, e := range obs.Take() {
		outcomes[e.Name] = append(outcomes[e.Name], e.Outcome)
	}
	a, sh := ratelimit.OutcomeAllowed, ratelimit.OutcomeShadow
	assert.Equal(t, map[string][]ratelimit.Outcome{"live": {a, a, a, a}, "trial": {a, a, sh, sh}}, outcomes)

	// With shadow headers the trial limit shows when most restrictive, but
	// still lets the request through, with no Retry-After.
	w := do(mk(true), "GET", "/")
	if w.Code != 200 || w.Header().Get("RateLimit") != `"trial";r=0;t=60` || w.Header().Get("Retry-After") != "" {
		t.Errorf("shadow headers: %d %q %q", w.Code, w.Header().Get("RateLimit"), w.Header().Get("Retry-After"))
	}
}

// TestOverride: exemption, cost and shadow through the context.
func TestOverride(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	lim := newKeyed(t, ratelimit.FixedWindowPolicy(3, time.Minute), mock)
	mw := newMW(t, []Limit{{Name: "api", Key: KeyByIP(), Limiter: lim}}, WithClock(mock))
	with := func(o Override) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mw.Handler(okHandler).ServeHTTP(w, r.WithContext(WithOverride(r.Context(), o)))
		})
	}
	if w := do(with(Override{Exempt: true}), "GET", "/"); w.Code != 200 || w.Header().Get("RateLimit") != "" {
		t.Errorf("exempt: %d %v", w.Code, w.Header())
	}
	if w := do(with(Override{Cost: 3}), "GET", "/"); w.Code != 200 || w.Header().Get("X-RateLimit-Remaining") != "0" {
		t.Errorf("cost 3: %d %v", w.Code, w.Header())
	}
	if w := do(with(Override{Shadow: true}), "GET", "/"); w.Code != 200 || w.Header().Get("RateLimit") != "" {
		t.Errorf("shadow: %d %v", w.Code, w.Header())
	}
	if w := do(mw.Handler(okHandler), "GET", "/"); w.Code != 429 {
		t.Errorf("plain: %d", w.Code)
	}
}

// TestHeaderSets: each set alone, and none.
func TestHeaderSets(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	for _, set := range []HeaderSet{NoHeaders, XRateLimitHeaders, IETFHeaders, allHeaders} {
		lim := newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Second), mock)
		h := newMW(t, []Limit{{Key: KeyByIP(), Limiter: lim}}, WithClock(mock), WithHeaders(set)).Handler(okHandler)
		w := do(h, "GET", "/")
		if (w.Header().Get("X-RateLimit-Limit") != "") != (set&XRateLimitHeaders != 0) ||
			(w.Header().Get("RateLimit") != "") != (set&IETFHeaders != 0) {
			t.Errorf("set %b: %v", set, w.Header())
		}
		if set == IETFHeaders && w.Header().Get("RateLimit-Policy") != `"default";q=1;w=1` {
			t.Errorf("default name: %q", w.Header().Get("RateLimit-Policy"))
		}
		// Retry-After is sent on a denial whatever the set.
		if w := do(h, "GET", "/"); w.Code != 429 || w.Header().Get("Retry-After") != "1" {
			t.Errorf("set %b denial: %d %v", set, w.Code, w.Header())
		}
	}
}

// TestPolicyNameEscaped: quotes and backslashes in names are escaped.
func TestPolicyNameEscaped(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	lim := newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Second), mock)
	h := newMW(t, []Limit{{Name: `a"b\c`, Key: KeyByIP(), Limiter: lim}}, WithClock(mock)).Handler(okHandler)
	v := do(h, "GET", "/").Header().Get("RateLimit-Policy")
	items, err := parseSFList(v)
	if err != nil || items[0].Value != sfString(`a"b\c`) {
		t.Errorf("RateLimit-Policy %q: %v %v", v, items, err)
	}
	if _, err := New([]Limit{{Name: "é", Key: KeyByIP(), Limiter: lim}}); err == nil {
		t.Error("non-ASCII name accepted")
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	lim := newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Second), fakeclock.New(time.Unix(0, 0)))
	bad := [][]Limit{
		nil,
		{{Limiter: lim}},
		{{Key: KeyByIP()}},
		{{Key: KeyByIP(), Limiter: (*ratelimit.Keyed)(nil)}},
		{{Key: KeyByIP(), Limiter: lim, Window: -1}},
		{{Name: "a", Key: KeyByIP(), Limiter: lim}, {Name: "a", Key: KeyByIP(), Limiter: lim}},
		{{Name: "é", Key: KeyByIP(), Limiter: lim}},
	}
	for i, ls := range bad {
		_, err := New(ls)
		if assert.Error(t, err, "case %d: New accepted %+v", i, ls) {
			assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig, "case %d", i)
			assert.True(t, strings.HasPrefix(err.Error(), "ratelimit: invalid configuration: httplimit."), "case %d: %v", i, err)
		}
	}
}

// TestDegradedHandler: a custom handler serves a cached response instead
// of 429.
func TestDegradedHandler(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	lim := newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Minute), mock)
	h := newMW(t, []Limit{{Name: "search", Key: KeyByIP(), Limiter: lim}}, WithClock(mock),
		WithDeniedHandler(func(w http.ResponseWriter, r *http.Request, d Denial) {
			w.Header().Set("Warning", `199 - "served from cache"`)
			_, _ = io.WriteString(w, "cached")
		})).Handler(okHandler)
	do(h, "GET", "/")
	w := do(h, "GET", "/")
	if w.Code != 200 || w.Body.String() != "cached" || w.Header().Get("Retry-After") != "60" {
		t.Errorf("degraded: %d %q %v", w.Code, w.Body.String(), w.Header())
	}
}

// recordingLimiter records the keys it is asked about.
type recordingLimiter struct {
	mu   sync.Mutex
	keys []string
}

func (l *recordingLimiter) AllowN(_ context.Context, key string, _ int) (ratelimit.Decision, error) {
	l.mu.Lock()
	l.keys = append(l.keys, key)
	l.mu.Unlock()
	return ratelimit.Decision{Allowed: true, Limit: 10, Remaining: 9}, nil
}
func (l *recordingLimiter) WaitN(context.Context, string, int) error   { return nil }
func (l *recordingLimiter) RefundN(context.Context, string, int) error { return nil }
func (l *recordingLimiter) Peek(context.Context, string, int) (ratelimit.Decision, error) {
	return ratelimit.Decision{Allowed: true, Limit: 10, Remaining: 10}, nil
}

// TestLongKeysDigested: a client cannot make the limiter store huge keys.
func TestLongKeysDigested(t *testing.T) {
	t.Parallel()
	rec := &recordingLimiter{}
	h := newMW(t, []Limit{{Key: KeyByHeader("X-API-Key"), Limiter: rec}}).Handler(okHandler)
	long := strings.Repeat("k", 100000)
	do(h, "GET", "/", "X-API-Key", long)
	do(h, "GET", "/", "X-API-Key", long)
	do(h, "GET", "/", "X-API-Key", long+"x")
	do(h, "GET", "/", "X-API-Key", "short")
	k := rec.keys
	if len(k) != 4 || len(k[0]) > maxKeyLen || k[0] != k[1] || k[0] == k[2] || !strings.HasPrefix(k[0], "sha256:") || k[3] != "short" {
		t.Errorf("keys = %.80q", k)
	}
}
