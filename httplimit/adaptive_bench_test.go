package httplimit

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rlkit/ratelimit"
)

// benchAdaptive is an Adaptive that never sheds a benchmark's requests.
func benchAdaptive(b testing.TB) *ratelimit.Adaptive {
	a, err := ratelimit.NewAdaptive(ratelimit.AdaptiveConfig{Initial: 1 << 20, Min: 1, Max: 1 << 20})
	if err != nil {
		b.Fatal(err)
	}
	return a
}

// BenchmarkAdaptiveOverhead measures what WithAdaptive adds to a request
// it does not shed: the same middleware (one limit keyed by client IP,
// with every header and with none) without and with an Adaptive,
// interleaved in one run in chunks of 256 requests, so that both see the
// same machine state. It reports ns/without and ns/with (per request),
// ns/overhead (their difference) and with/without (their ratio); ns/op
// and allocs/op are those of one request of each. The parallel
// sub-benchmarks (not interleaved) show the Adaptive's lock contended.
func BenchmarkAdaptiveOverhead(b *testing.B) {
	const chunk = 256
	for _, c := range []struct {
		name string
		opts []Option
	}{{"ip", nil}, {"ip-noheaders", []Option{WithHeaders(NoHeaders)}}} {
		limits := func() []Limit { return []Limit{{Name: "ip", Key: KeyByIP(), Limiter: benchLimiter(b)}} }
		without := newMW(b, limits(), c.opts...).Handler(bare)
		ad := benchAdaptive(b)
		with := newMW(b, limits(), append(c.opts, WithAdaptive(ad, nil))...).Handler(bare)
		b.Run(c.name+"/interleaved", func(b *testing.B) {
			r := httptest.NewRequest("GET", "/v1/items", nil)
			r.RemoteAddr = "203.0.113.7:4711"
			w := &discardWriter{h: make(http.Header)}
			serve := func(h http.Handler, n int) time.Duration {
				start := time.Now()
				for range n {
					clear(w.h)
					h.ServeHTTP(w, r)
				}
				return time.Since(start)
			}
			b.ReportAllocs()
			var tWithout, tWith time.Duration
			for done := 0; done < b.N; done += chunk {
				n := min(chunk, b.N-done)
				tWithout += serve(without, n)
				tWith += serve(with, n)
			}
			if w.code != 200 || ad.InFlight() != 0 {
				b.Fatalf("status %d, %d in flight", w.code, ad.InFlight())
			}
			per := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / float64(b.N) }
			b.ReportMetric(per(tWithout), "ns/without")
			b.ReportMetric(per(tWith), "ns/with")
			b.ReportMetric(per(tWith)-per(tWithout), "ns/overhead")
			b.ReportMetric(float64(tWith)/float64(tWithout), "with/without")
		})
		for _, h := range []struct {
			name string
			h    http.Handler
		}{{"without", without}, {"with", with}} {
			b.Run(c.name+"/parallel/"+h.name, func(b *testing.B) {
				b.ReportAllocs()
				b.RunParallel(func(pb *testing.PB) {
					r := httptest.NewRequest("GET", "/v1/items", nil)
					r.RemoteAddr = "203.0.113.7:4711"
					w := &discardWriter{h: make(http.Header)}
					for pb.Next() {
						clear(w.h)
						h.h.ServeHTTP(w, r)
					}
				})
			})
		}
	}
}

// TestAdaptiveAllocs: an Adaptive that does not shed adds no allocation
// to a request, however the limits let it through.
func TestAdaptiveAllocs(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "203.0.113.7:4711"
	for _, c := range []struct {
		name   string
		limits []Limit
		opts   []Option
	}{
		{"ip", []Limit{{Name: "ip", Key: KeyByIP(), Limiter: fixedLimiter{}}}, nil},
		{"ip+conc", []Limit{{Name: "ip", Key: KeyByIP(), Limiter: fixedLimiter{}}, {Name: "c", Key: KeyByIP(), Concurrency: allocConc}}, nil},
		{"no limit applies", []Limit{{Name: "key", Key: KeyByHeader("X-None"), Limiter: fixedLimiter{}}}, nil},
		{"exempt network", []Limit{{Name: "ip", Key: KeyByIP(), Limiter: fixedLimiter{}}}, []Option{ExemptNetworks("203.0.113.0/24")}},
	} {
		allocs := func(opts ...Option) float64 {
			h := newMW(t, c.limits, append(append([]Option{WithHeaders(NoHeaders), WithLogger(nil)}, c.opts...), opts...)...).Handler(bare)
			w := &discardWriter{h: make(http.Header)}
			h.ServeHTTP(w, r)
			return testing.AllocsPerRun(200, func() { h.ServeHTTP(w, r) })
		}
		base, with := allocs(), allocs(WithAdaptive(benchAdaptive(t), nil))
		if with > base {
			t.Errorf("%s: %v allocations per request with an Adaptive, %v without", c.name, with, base)
		}
	}
}
