package httplimit_test

import (
	"context"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/httplimit"
)

// Overload protection beside a rate limit: an adaptive concurrency limiter
// (its limit pinned at 5 here, so that the output is exact) sheds the
// least important requests first. With 5 requests in flight, the limit
// is full for default and sheddable requests (503 with Retry-After), while
// a critical one still finds a place in the reserve (20% above the limit).
// The priority comes from the request: here the path.
func ExampleWithAdaptive() {
	perIP, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(100, time.Minute))
	if err != nil {
		log.Fatal(err)
	}
	adaptive, err := ratelimit.NewAdaptive(ratelimit.AdaptiveConfig{Initial: 5, Min: 5, Max: 5})
	if err != nil {
		log.Fatal(err)
	}
	priority := func(r *http.Request) ratelimit.Priority {
		switch {
		case strings.HasPrefix(r.URL.Path, "/checkout"):
			return ratelimit.PriorityCritical
		case strings.HasPrefix(r.URL.Path, "/recommendations"):
			return ratelimit.PrioritySheddable
		}
		return ratelimit.PriorityDefault
	}
	mw, err := httplimit.New([]httplimit.Limit{{Name: "ip", Key: httplimit.KeyByIP(), Limiter: perIP}},
		httplimit.WithAdaptive(adaptive, priority))
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	}))

	// Five requests in flight (taken here directly, for the example).
	var inFlight []ratelimit.Flight
	for range 5 {
		f, _ := adaptive.Acquire(context.Background(), ratelimit.PriorityDefault)
		inFlight = append(inFlight, f)
	}
	for _, path := range []string{"/recommendations", "/items", "/checkout"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", path, nil))
		fmt.Printf("%s: %d Retry-After=%q %s", path, w.Code, w.Header().Get("Retry-After"), w.Body.String())
	}
	for _, f := range inFlight {
		f.Success()
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/items", nil))
	fmt.Printf("/items once they ended: %d, in flight now: %d\n", w.Code, adaptive.InFlight())
	// Output:
	// /recommendations: 503 Retry-After="1" {"error":"Service Unavailable","message":"server overloaded, retry in 1 s","retryAfter":1}
	// /items: 503 Retry-After="1" {"error":"Service Unavailable","message":"server overloaded, retry in 1 s","retryAfter":1}
	// /checkout: 200 Retry-After="" ok
	// /items once they ended: 200, in flight now: 0
}
