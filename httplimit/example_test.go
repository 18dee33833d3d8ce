package httplimit_test

import (
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/httplimit"
)

// Two requests a minute per API key; the third is refused with 429. The
// mock clock makes the output exact.
func ExampleNew() {
	mock := clock.NewMock()
	mock.Set(time.Unix(1767225600, 0).Add(15 * time.Second))
	perKey, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(2, time.Minute), ratelimit.WithClock(mock))
	if err != nil {
		log.Fatal(err)
	}
	mw, err := httplimit.New([]httplimit.Limit{
		{Name: "api", Key: httplimit.KeyByAPIKey(), Limiter: perKey},
	}, httplimit.WithClock(mock))
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /items", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "items")
	})))

	for range 3 {
		r := httptest.NewRequest("GET", "/items", nil)
		r.Header.Set("X-API-Key", "key-123")
		w := httptest.NewRecorder()
		mux.ServeHTTP(w, r)
		h := w.Result().Header
		fmt.Println(w.Code, h.Get("RateLimit-Policy"), h.Get("RateLimit"), h.Get("X-RateLimit-Reset"))
		if w.Code == http.StatusTooManyRequests {
			fmt.Print("Retry-After: ", h.Get("Retry-After"), "\n", w.Body.String())
		}
	}
	// Output:
	// 200 "api";q=2;w=60 "api";r=1;t=45 1767225660
	// 200 "api";q=2;w=60 "api";r=0;t=45 1767225660
	// 429 "api";q=2;w=60 "api";r=0;t=45 1767225660
	// Retry-After: 45
	// {"error":"Too Many Requests","message":"rate limit \"api\" exceeded, retry in 45 s","retryAfter":45}
}

// Several limits at once, all or nothing: 100 a minute per API key, plus 3
// a minute per client address on POST /login. The login limit applies only
// to that route ([httplimit.When]); when it refuses, the API key is not
// charged.
func ExampleNew_multipleLimits() {
	perKey, _ := ratelimit.NewKeyed(ratelimit.SlidingCounterPolicy(100, time.Minute))
	login, _ := ratelimit.NewKeyed(ratelimit.SlidingLogPolicy(3, time.Minute))
	mw, err := httplimit.New([]httplimit.Limit{
		{Name: "api", Key: httplimit.KeyByAPIKey(), Limiter: perKey},
		{Name: "login", Key: httplimit.When(httplimit.IsRoute("POST /login"), httplimit.KeyByIP()), Limiter: login},
	})
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, r *http.Request) {})
	handler := mw.Handler(mux)

	for range 4 {
		r := httptest.NewRequest("POST", "/login", nil)
		r.Header.Set("X-API-Key", "key-123")
		w := httptest.NewRecorder()
		handler.ServeHTTP(w, r)
		fmt.Println(w.Code, w.Result().Header.Get("RateLimit-Policy"))
	}
	// Output:
	// 200 "login";q=3;w=60
	// 200 "login";q=3;w=60
	// 200 "login";q=3;w=60
	// 429 "login";q=3;w=60
}

// Graceful degradation: when the search limit is reached, serve a cached
// result instead of an error.
func ExampleWithDeniedHandler() {
	search, _ := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Minute), 1))
	cached := "cached results"
	mw, _ := httplimit.New([]httplimit.Limit{{Name: "search", Key: httplimit.KeyByIP(), Limiter: search}},
		httplimit.WithDeniedHandler(func(w http.ResponseWriter, r *http.Request, d httplimit.Denial) {
			if d.Never {
				httplimit.WriteDenied(w, r, d)
				return
			}
			w.Header().Set("Cache-Status", "degraded; hit")
			io.WriteString(w, cached)
		}))
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "fresh results")
	}))
	for range 2 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/search?q=go", nil))
		fmt.Println(w.Code, w.Body.String())
	}
	// Output:
	// 200 fresh results
	// 200 cached results
}

// Behind a reverse proxy at 10.0.0.0/8 that appends to X-Forwarded-For,
// the client is the rightmost address the proxy did not write itself;
// whatever the client put further left is ignored.
func ExampleIPResolver() {
	res, err := httplimit.NewIPResolver(httplimit.TrustedProxies("10.0.0.0/8"))
	if err != nil {
		log.Fatal(err)
	}
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = "10.0.0.5:41000"                                  // the proxy
	r.Header.Set("X-Forwarded-For", "6.6.6.6, 2001:db8:aa:bb::1234") // forged, then real
	key, _ := res.Key(r)
	fmt.Println(key)

	r.RemoteAddr = "198.51.100.7:41000" // not a proxy: headers ignored
	key, _ = res.Key(r)
	fmt.Println(key)
	// Output:
	// 2001:db8:aa:bb::/64
	// 198.51.100.7
}

// A client that waits for its own limiter (10 requests a second) and, when
// the server answers 429 with Retry-After, pauses every request through the
// transport for that long (here one real second) and retries.
func ExampleNewTransport() {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		io.WriteString(w, "hello")
	}))
	defer srv.Close()

	lim, _ := ratelimit.NewTokenBucket(ratelimit.Per(10, time.Second), 10)
	tr, err := httplimit.NewTransport(http.DefaultTransport, lim,
		httplimit.WithRetries(3),
		httplimit.WithPauseHook(func(r *http.Request, resp *http.Response, d time.Duration) {
			fmt.Printf("server answered %d: pausing %v\n", resp.StatusCode, d)
		}))
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: tr}
	resp, err := client.Get(srv.URL)
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	io.Copy(os.Stdout, resp.Body)
	fmt.Printf("\n%d after %d requests\n", resp.StatusCode, calls.Load())
	// Output:
	// server answered 429: pausing 1s
	// hello
	// 200 after 2 requests
}
