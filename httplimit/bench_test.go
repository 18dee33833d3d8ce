package httplimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/rlkit/ratelimit"
)

// discardWriter is a ResponseWriter that keeps its header map between
// requests (cleared, not reallocated), so that benchmarks measure the
// middleware rather than the recorder.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }

var bare = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })

// benchLimiter admits everything during a benchmark: a token bucket far
// larger than any b.N, refilling fast.
func benchLimiter(b *testing.B) *ratelimit.Keyed {
	k, err := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(1e9, time.Second), 1e9))
	if err != nil {
		b.Fatal(err)
	}
	return k
}

// benchConcurrency admits everything a benchmark holds at once.
func benchConcurrency(b *testing.B) *ratelimit.Concurrency {
	c, err := ratelimit.NewConcurrency(1 << 30)
	if err != nil {
		b.Fatal(err)
	}
	return c
}

// BenchmarkMiddleware measures the cost per request of the middleware
// against the bare handler: bare, one limit keyed by client IP with every
// header, the same with no headers, and two limits at once. Allowed
// requests only; compare ns/op and allocs/op with the bare case.
func BenchmarkMiddleware(b *testing.B) {
	cases := []struct {
		name string
		h    func(b *testing.B) http.Handler
	}{
		{"bare", func(*testing.B) http.Handler { return bare }},
		{"ip", func(b *testing.B) http.Handler {
			return newMW(b, []Limit{{Name: "ip", Key: KeyByIP(), Limiter: benchLimiter(b)}}).Handler(bare)
		}},
		{"ip-noheaders", func(b *testing.B) http.Handler {
			return newMW(b, []Limit{{Name: "ip", Key: KeyByIP(), Limiter: benchLimiter(b)}}, WithHeaders(NoHeaders)).Handler(bare)
		}},
		{"ip-decision", func(b *testing.B) http.Handler {
			return newMW(b, []Limit{{Name: "ip", Key: KeyByIP(), Limiter: benchLimiter(b)}}, WithDecisionInContext(true)).Handler(bare)
		}},
		{"ip-noheaders-decision", func(b *testing.B) http.Handler {
			return newMW(b, []Limit{{Name: "ip", Key: KeyByIP(), Limiter: benchLimiter(b)}}, WithHeaders(NoHeaders), WithDecisionInContext(true)).Handler(bare)
		}},
		// Exemptions configured, none matching: what they cost a limited
		// request. Compare with ip.
		{"ip-lists", func(b *testing.B) http.Handler {
			return newMW(b, []Limit{{Name: "ip", Key: KeyByIP(), Limiter: benchLimiter(b),
				ExemptKeys: []string{"10.0.0.1"}, DeniedKeys: []string{"10.0.0.2"}}},
				ExemptNetworks("10.0.0.0/8", "fd00::/8"), DeniedNetworks("198.51.100.0/24")).Handler(bare)
		}},
		// A request from an exempt network, reported to an observer.
		{"exempt-network", func(b *testing.B) http.Handler {
			obs := ratelimit.ObserverFunc(func(context.Context, ratelimit.Event) {})
			return newMW(b, []Limit{{Name: "ip", Key: KeyByIP(), Limiter: benchLimiter(b)}},
				ExemptNetworks("203.0.113.0/24"), WithObserver(obs)).Handler(bare)
		}},
		{"apikey+ip", func(b *testing.B) http.Handler {
			return newMW(b, []Limit{
				{Name: "key", Key: KeyByHeader("X-API-Key"), Limiter: benchLimiter(b)},
				{Name: "ip", Key: KeyByIP(), Limiter: benchLimiter(b)},
			}).Handler(bare)
		}},
		// Every decision reported to an observer, under the limit's name.
		// Compare with ip.
		{"ip-observed", func(b *testing.B) http.Handler {
			obs := ratelimit.ObserverFunc(func(context.Context, ratelimit.Event) {})
			return newMW(b, []Limit{{Name: "ip", Key: KeyByIP(), Limiter: benchLimiter(b)}}, WithObserver(obs)).Handler(bare)
		}},
		// A concurrency limit in memory held for each request, alone and
		// beside a rate limit. Compare with ip.
		{"conc", func(b *testing.B) http.Handler {
			return newMW(b, []Limit{{Name: "conc", Key: KeyByIP(), Concurrency: benchConcurrency(b)}}).Handler(bare)
		}},
		{"ip+conc", func(b *testing.B) http.Handler {
			return newMW(b, []Limit{
				{Name: "ip", Key: KeyByIP(), Limiter: benchLimiter(b)},
				{Name: "conc", Key: KeyByIP(), Concurrency: benchConcurrency(b)},
			}).Handler(bare)
		}},
		// A limit counting only failures: reserved before the handler,
		// settled (here at 0) once it returns. Compare with ip.
		{"ip-failures", func(b *testing.B) http.Handler {
			count := func(status, _ int) int {
				if status >= 400 {
					return 1
				}
				return 0
			}
			return newMW(b, []Limit{{Name: "ip", Key: KeyByIP(), Limiter: benchLimiter(b), Count: count}}).Handler(bare)
		}},
		{"ip+shadow", func(b *testing.B) http.Handler {
			return newMW(b, []Limit{
				{Name: "ip", Key: KeyByIP(), Limiter: benchLimiter(b)},
				{Name: "trial", Key: KeyByIP(), Limiter: benchLimiter(b), Shadow: true},
			}).Handler(bare)
		}},
	}
	for _, c := range cases {
		h := c.h(b)
		b.Run(c.name+"/serial", func(b *testing.B) {
			r := httptest.NewRequest("GET", "/v1/items", nil)
			r.RemoteAddr = "203.0.113.7:4711"
			r.Header.Set("X-API-Key", "key-1")
			w := &discardWriter{h: make(http.Header)}
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				clear(w.h)
				h.ServeHTTP(w, r)
			}
			if w.code != 200 {
				b.Fatalf("status %d", w.code)
			}
		})
		b.Run(c.name+"/parallel", func(b *testing.B) {
			b.ReportAllocs()
			var id int64
			b.RunParallel(func(pb *testing.PB) {
				// One client per goroutine, as on a real server.
				id++
				r := httptest.NewRequest("GET", "/v1/items", nil)
				r.RemoteAddr = "203.0.113." + strconv.FormatInt(id%250, 10) + ":4711"
				r.Header.Set("X-API-Key", "key-"+strconv.FormatInt(id, 10))
				w := &discardWriter{h: make(http.Header)}
				for pb.Next() {
					clear(w.h)
					h.ServeHTTP(w, r)
				}
			})
		})
	}
}

// fixedLimiter admits everything with a fixed Decision and allocates
// nothing, so that allocation tests count the middleware's own.
type fixedLimiter struct{}

func (fixedLimiter) AllowN(context.Context, string, int) (ratelimit.Decision, error) {
	return ratelimit.Decision{Allowed: true, Limit: 100, Remaining: 99, ResetAfter: 600 * time.Millisecond}, nil
}
func (fixedLimiter) WaitN(context.Context, string, int) error   { return nil }
func (fixedLimiter) RefundN(context.Context, string, int) error { return nil }
func (fixedLimiter) Peek(context.Context, string, int) (ratelimit.Decision, error) {
	return ratelimit.Decision{Allowed: true, Limit: 100, Remaining: 99, ResetAfter: 600 * time.Millisecond}, nil
}

// allocConc is the concurrency limiter of TestMiddlewareAllocs.
var allocConc, _ = ratelimit.NewConcurrency(1 << 20)

// TestMiddlewareAllocs pins the middleware's own allocations on an allowed
// request (the limiter's are not counted): none beyond the one that holds
// the header values (the []string backing array and the formatted values
// in one block), and none at all without headers.
func TestMiddlewareAllocs(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "203.0.113.7:4711"
	r.Header.Set("X-API-Key", "k")
	for _, c := range []struct {
		name   string
		limits []Limit
		set    HeaderSet
		want   float64
	}{
		{"ip", []Limit{{Name: "ip", Key: KeyByIP(), Limiter: fixedLimiter{}, Window: time.Minute}}, allHeaders, 1},
		// Remaining below 1024, a reset shared with the previous request and
		// no RateLimit field: nothing to format, one []string.
		{"ip-x", []Limit{{Name: "ip", Key: KeyByIP(), Limiter: fixedLimiter{}}}, XRateLimitHeaders, 1},
		{"ip-noheaders", []Limit{{Name: "ip", Key: KeyByIP(), Limiter: fixedLimiter{}}}, NoHeaders, 0},
		{"apikey+ip-noheaders", []Limit{
			{Name: "key", Key: KeyByHeader("X-API-Key"), Limiter: fixedLimiter{}},
			{Name: "ip", Key: KeyByIP(), Limiter: fixedLimiter{}},
		}, NoHeaders, 1}, // ratelimit.AllowAll's own []Decision; the middleware adds none
		// A shadow limit costs nothing more: no context marks its
		// limiter's calls any more (the middleware labels them itself).
		// A concurrency limit in memory: acquiring, holding and releasing
		// the permit allocate nothing.
		{"conc", []Limit{{Name: "c", Key: KeyByIP(), Concurrency: allocConc}}, allHeaders, 1},
		{"conc-noheaders", []Limit{{Name: "c", Key: KeyByIP(), Concurrency: allocConc}}, NoHeaders, 0},
		{"ip+conc-noheaders", []Limit{
			{Name: "ip", Key: KeyByIP(), Limiter: fixedLimiter{}},
			{Name: "c", Key: KeyByIP(), Concurrency: allocConc},
		}, NoHeaders, 0},
		{"ip+shadow-noheaders", []Limit{
			{Name: "ip", Key: KeyByIP(), Limiter: fixedLimiter{}},
			{Name: "trial", Key: KeyByIP(), Limiter: fixedLimiter{}, Shadow: true},
		}, NoHeaders, 0},
	} {
		h := newMW(t, c.limits, WithHeaders(c.set), WithLogger(nil)).Handler(bare)
		w := &discardWriter{h: make(http.Header)}
		h.ServeHTTP(w, r)
		got := testing.AllocsPerRun(200, func() {
			clear(w.h)
			h.ServeHTTP(w, r)
		})
		if got > c.want {
			t.Errorf("%s: %v allocations per request, want <= %v", c.name, got, c.want)
		}
	}
}

// TestDecisionInContextAllocs pins the cost of WithDecisionInContext: two
// allocations per admitted request (the context holding the Result and
// the request copy carrying it), on top of the headers'.
func TestDecisionInContextAllocs(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "203.0.113.7:4711"
	h := newMW(t, []Limit{{Name: "ip", Key: KeyByIP(), Limiter: fixedLimiter{}}}, WithHeaders(NoHeaders), WithDecisionInContext(true)).
		Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if _, ok := ResultFrom(r.Context()); !ok {
				t.Error("no decision in the context")
			}
		}))
	w := &discardWriter{h: make(http.Header)}
	got := testing.AllocsPerRun(200, func() { h.ServeHTTP(w, r) })
	if got > 2 {
		t.Errorf("%v allocations per request, want <= 2", got)
	}
}
