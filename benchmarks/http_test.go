package benchmarks

import (
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-chi/httprate"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/httplimit"
)

// BenchmarkHTTP compares what rate-limiting middleware adds to each allowed
// request, keyed by client IP with a limit no run reaches, in one run.
// Names are BenchmarkHTTP/<library>/<mode>:
//
//	bare                   the handler alone, the baseline
//	ratelimit-httplimit    httplimit, sliding counter per IP, default fields:
//	                       X-RateLimit-Limit/-Remaining/-Reset and the IETF
//	                       RateLimit-Policy and RateLimit
//	ratelimit-httplimit-x  the same with only the three X-RateLimit-* fields
//	httprate               go-chi/httprate LimitBy keyed by the RemoteAddr IP
//	                       (CanonicalizeIP, /64 for IPv6, as httplimit): a
//	                       sliding window counter, the three X-RateLimit-*
//	                       fields
//
// The handler writes only a status. The ResponseWriter keeps its header map
// between requests (cleared, as a server's is fresh), so the numbers are the
// middleware's. A middleware's added cost is its ns/op (or cpu-ns/op) minus
// bare's; httplimit-x and httprate write the same three fields, so their
// difference is the like-for-like comparison. Allocations are per request.
//
// serial drives one client address; in parallel each goroutine is its own
// client address, as on a server. Modes run outer and libraries inner, so
// compared numbers are taken seconds apart.
func BenchmarkHTTP(b *testing.B) {
	const limit, window = 1 << 30, time.Minute
	bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	ours := func(b *testing.B, set httplimit.HeaderSet) http.Handler {
		k, err := ratelimit.NewKeyed(ratelimit.SlidingCounterPolicy(limit, window))
		if err != nil {
			b.Fatal(err)
		}
		mw, err := httplimit.New([]httplimit.Limit{{Name: "ip", Key: httplimit.KeyByIP(), Limiter: k}}, httplimit.WithHeaders(set))
		if err != nil {
			b.Fatal(err)
		}
		return mw.Handler(bare)
	}
	libs := []struct {
		name string
		h    func(*testing.B) http.Handler
	}{
		{"bare", func(*testing.B) http.Handler { return bare }},
		{"ratelimit-httplimit", func(b *testing.B) http.Handler { return ours(b, httplimit.XRateLimitHeaders|httplimit.IETFHeaders) }},
		{"ratelimit-httplimit-x", func(b *testing.B) http.Handler { return ours(b, httplimit.XRateLimitHeaders) }},
		{"httprate", func(*testing.B) http.Handler { return httprate.LimitBy(limit, window, httprateIP)(bare) }},
	}
	for _, mode := range []struct {
		name  string
		bench func(*testing.B, http.Handler)
	}{
		{"serial", benchHTTPSerial},
		{"parallel", benchHTTPParallel},
	} {
		for _, lib := range libs {
			b.Run(lib.name+"/"+mode.name, func(b *testing.B) { mode.bench(b, lib.h(b)) })
		}
	}
}

func benchHTTPSerial(b *testing.B, h http.Handler) {
	r := httptest.NewRequest("GET", "/v1/items", nil)
	r.RemoteAddr = "203.0.113.7:4711"
	w := &discardWriter{h: make(http.Header)}
	h.ServeHTTP(w, r) // warm: the key exists before timing
	b.ReportAllocs()
	cpu0 := cpuTime()
	for b.Loop() {
		clear(w.h)
		h.ServeHTTP(w, r)
	}
	reportHTTP(b, cpu0)
	if w.code != http.StatusOK {
		b.Fatalf("status %d, want 200", w.code)
	}
}

func benchHTTPParallel(b *testing.B, h http.Handler) {
	var next atomic.Int64
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		id := next.Add(1)
		r := httptest.NewRequest("GET", "/v1/items", nil)
		r.RemoteAddr = "198.51." + strconv.FormatInt(id/250%250, 10) + "." + strconv.FormatInt(id%250, 10) + ":4711"
		w := &discardWriter{h: make(http.Header)}
		for pb.Next() {
			clear(w.h)
			h.ServeHTTP(w, r)
		}
		if w.code != 0 && w.code != http.StatusOK {
			b.Errorf("status %d, want 200", w.code)
		}
	})
	reportHTTP(b, cpu0)
}

// reportHTTP adds cpu-ns/op, the process's CPU time (all threads, so the
// garbage collector's work counts too) per request.
func reportHTTP(b *testing.B, cpu0 time.Duration) {
	if cpu1 := cpuTime(); cpu0 >= 0 && cpu1 >= 0 {
		b.ReportMetric(float64(cpu1-cpu0)/float64(b.N), "cpu-ns/op")
	}
}

// httprateIP keys httprate by the connection's address, the way its
// deprecated KeyByIP did and its documentation recommends.
func httprateIP(r *http.Request) (string, error) {
	ip, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		ip = r.RemoteAddr
	}
	return httprate.CanonicalizeIP(ip), nil
}

// discardWriter is a ResponseWriter that discards the body and keeps its
// header map between requests.
type discardWriter struct {
	h    http.Header
	code int
}

func (w *discardWriter) Header() http.Header         { return w.h }
func (w *discardWriter) Write(p []byte) (int, error) { return len(p), nil }
func (w *discardWriter) WriteHeader(code int)        { w.code = code }

// TestHTTPLikeForLike checks that the compared middlewares admit the
// benchmark's requests and write the fields the comparison says they do.
func TestHTTPLikeForLike(t *testing.T) {
	bare := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusOK) })
	k, err := ratelimit.NewKeyed(ratelimit.SlidingCounterPolicy(1<<30, time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	mw, err := httplimit.New([]httplimit.Limit{{Name: "ip", Key: httplimit.KeyByIP(), Limiter: k}}, httplimit.WithHeaders(httplimit.XRateLimitHeaders))
	if err != nil {
		t.Fatal(err)
	}
	for name, h := range map[string]http.Handler{
		"httplimit-x": mw.Handler(bare),
		"httprate":    httprate.LimitBy(1<<30, time.Minute, httprateIP)(bare),
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = "203.0.113.7:4711"
		w := &discardWriter{h: make(http.Header)}
		h.ServeHTTP(w, r)
		if w.code != http.StatusOK {
			t.Errorf("%s: status %d", name, w.code)
		}
		for _, f := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
			if w.h.Get(f) == "" {
				t.Errorf("%s: no %s", name, f)
			}
		}
	}
}
