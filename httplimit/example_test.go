package httplimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
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
		{Name: "api", Key: httplimit.KeyByHeader("X-API-Key"), Limiter: perKey},
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
		{Name: "api", Key: httplimit.KeyByHeader("X-API-Key"), Limiter: perKey},
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

// roundTripFunc adapts a function to http.RoundTripper, standing in for
// the network in the examples below.
type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// One transport for two APIs, each with a quota of its own (keyed by
// host): when api-a answers 429 with Retry-After, only api-a's requests
// pause. A request the key function has no key for is not sent.
func ExampleNewKeyedTransport() {
	mock := clock.NewMock()
	perHost, err := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(10, time.Second), 10), ratelimit.WithClock(mock))
	if err != nil {
		log.Fatal(err)
	}
	network := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: r}
		if r.URL.Host == "api-a.example" {
			resp.StatusCode = http.StatusTooManyRequests
			resp.Header.Set("Retry-After", "30")
		}
		return resp, nil
	})
	byHost := func(r *http.Request) (string, bool) { return r.URL.Host, r.URL.Host != "" }
	tr, err := httplimit.NewKeyedTransport(network, perHost, byHost, httplimit.WithClock(mock))
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: tr}
	for _, target := range []string{"http://api-a.example/items", "http://api-b.example/items"} {
		resp, err := client.Get(target)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
		fmt.Println(resp.Request.URL.Host, resp.StatusCode)
	}
	fmt.Println("api-a paused for", tr.PausedFor("api-a.example"))
	fmt.Println("api-b paused for", tr.PausedFor("api-b.example"))

	noHost := &http.Request{Method: "GET", URL: &url.URL{Path: "/relative"}, Header: http.Header{}}
	_, err = tr.RoundTrip(noHost)
	fmt.Println(errors.Is(err, httplimit.ErrNoKey))
	// Output:
	// api-a.example 429
	// api-b.example 200
	// api-a paused for 30s
	// api-b paused for 0s
	// true
}

// An authentication middleware, running before the rate limiter, exempts
// internal callers and charges batch requests by their size.
func ExampleWithOverride() {
	mock := clock.NewMock()
	perIP, _ := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(10, time.Minute), ratelimit.WithClock(mock))
	mw, err := httplimit.New([]httplimit.Limit{{Name: "ip", Key: httplimit.KeyByIP(), Limiter: perIP}}, httplimit.WithClock(mock))
	if err != nil {
		log.Fatal(err)
	}
	auth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch {
			case r.Header.Get("X-Internal") == "yes": // checked by mTLS in real life
				r = r.WithContext(httplimit.WithOverride(r.Context(), httplimit.Override{Exempt: true}))
			case r.URL.Path == "/batch":
				n, _ := strconv.Atoi(r.URL.Query().Get("n"))
				r = r.WithContext(httplimit.WithOverride(r.Context(), httplimit.Override{Cost: n}))
			}
			next.ServeHTTP(w, r)
		})
	}
	h := auth(mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))

	for _, target := range []string{"/item", "/batch?n=5", "/internal"} {
		r := httptest.NewRequest("GET", target, nil)
		if target == "/internal" {
			r.Header.Set("X-Internal", "yes")
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%-11s %d remaining=%q\n", target, w.Code, w.Header().Get("X-RateLimit-Remaining"))
	}
	// Output:
	// /item       200 remaining="9"
	// /batch?n=5  200 remaining="4"
	// /internal   200 remaining=""
}

type planKey struct{}

// Tiers: an authentication middleware stores the caller's plan in the
// request context, and a ratelimit.Tiered reads it there to choose the
// limiter: free callers get 2 requests a minute, pro callers 1,000. The
// tier function runs once per request.
func ExampleNew_tiers() {
	mock := clock.NewMock()
	free, _ := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(2, time.Minute), ratelimit.WithClock(mock))
	pro, _ := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(1000, time.Minute), ratelimit.WithClock(mock))
	plans, err := ratelimit.NewTiered(func(ctx context.Context, _ string) string {
		plan, _ := ctx.Value(planKey{}).(string)
		return plan // an unknown plan is denied with ratelimit.ErrUnknownTier
	}, map[string]ratelimit.KeyedLimiter{"free": free, "pro": pro})
	if err != nil {
		log.Fatal(err)
	}
	mw, err := httplimit.New([]httplimit.Limit{{Name: "plan", Key: httplimit.KeyByHeader("X-API-Key"), Limiter: plans}},
		httplimit.WithClock(mock), httplimit.WithLogger(nil))
	if err != nil {
		log.Fatal(err)
	}
	auth := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			plan := "free"
			if r.Header.Get("X-API-Key") == "key-pro" { // a lookup in real life
				plan = "pro"
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), planKey{}, plan)))
		})
	}
	h := auth(mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {})))

	for _, key := range []string{"key-free", "key-free", "key-free", "key-pro"} {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header.Set("X-API-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(key, w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"))
	}
	// Output:
	// key-free 200 "plan";q=2;w=60 "plan";r=1;t=60
	// key-free 200 "plan";q=2;w=60 "plan";r=0;t=60
	// key-free 429 "plan";q=2;w=60 "plan";r=0;t=60
	// key-pro 200 "plan";q=1000;w=60 "plan";r=999;t=60
}

// The handler reads the middleware's decision from the request context:
// here to tell the client how many requests it has left.
func ExampleResultFrom() {
	mock := clock.NewMock()
	perIP, _ := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(3, time.Minute), ratelimit.WithClock(mock))
	mw, err := httplimit.New([]httplimit.Limit{{Name: "ip", Key: httplimit.KeyByIP(), Limiter: perIP}},
		httplimit.WithClock(mock), httplimit.WithDecisionInContext(true))
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if res, ok := httplimit.ResultFrom(r.Context()); ok {
			fmt.Fprintf(w, "limit %q: %d of %d left", res.Limit, res.Decision.Remaining, res.Decision.Limit)
		}
	}))
	for range 2 {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		fmt.Println(w.Body.String())
	}
	// Output:
	// limit "ip": 2 of 3 left
	// limit "ip": 1 of 3 left
}

// Exemptions and denylists without a custom key function: the health
// checkers of the internal network are never limited, the billing
// service's API key is exempt from the per-key limit, and a leaked key is
// refused with 403 whatever its quota. The middleware's observer sees
// every decision of the limit, exemptions and denials included, each
// under the limit's name.
func Example_exemptions() {
	mock := clock.NewMock()
	mock.Set(time.Unix(1767225600, 0).Add(15 * time.Second))
	perKey, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(1, time.Minute), ratelimit.WithClock(mock))
	if err != nil {
		log.Fatal(err)
	}
	observer := ratelimit.ObserverFunc(func(_ context.Context, e ratelimit.Event) {
		fmt.Printf("    observed: limit %q %v (%v)\n", e.Name, e.Outcome, e.Err)
	})
	mw, err := httplimit.New([]httplimit.Limit{{
		Name: "api", Key: httplimit.KeyByHeader("X-API-Key"), Limiter: perKey,
		ExemptKeys: []string{"billing-service"},
		DeniedKeys: []string{"leaked-key"},
	}},
		httplimit.ExemptNetworks("10.0.0.0/8"), // behind a proxy: WithIPResolver(a resolver trusting it)
		httplimit.WithObserver(observer),
		httplimit.WithClock(mock))
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	send := func(from, key string) {
		r := httptest.NewRequest("GET", "/items", nil)
		r.RemoteAddr = from
		r.Header.Set("X-API-Key", key)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		line := fmt.Sprintf("%-16s %-15s %d %s", from, key, w.Code, w.Header().Get("RateLimit"))
		fmt.Println(strings.TrimSpace(line))
	}
	send("10.1.2.3:4711", "customer")
	send("203.0.113.7:80", "billing-service")
	send("203.0.113.7:80", "customer")
	send("203.0.113.7:80", "customer")
	send("203.0.113.7:80", "leaked-key")
	// Output:
	//     observed: limit "api" exempt (<nil>)
	// 10.1.2.3:4711    customer        200
	//     observed: limit "api" exempt (<nil>)
	// 203.0.113.7:80   billing-service 200
	//     observed: limit "api" allowed (<nil>)
	// 203.0.113.7:80   customer        200 "api";r=0;t=45
	//     observed: limit "api" denied (<nil>)
	// 203.0.113.7:80   customer        429 "api";r=0;t=45
	//     observed: limit "api" denied (ratelimit: request denied by a denylist)
	// 203.0.113.7:80   leaked-key      403
}

// Behind a reverse proxy, the networks are matched against the client the
// proxy names in X-Forwarded-For, but only when the request comes from the
// proxy: a client sending the same header itself is matched by its own
// address, so it cannot exempt itself.
func ExampleWithIPResolver() {
	proxies, err := httplimit.NewIPResolver(httplimit.TrustedProxies("192.0.2.10"))
	if err != nil {
		log.Fatal(err)
	}
	perIP, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(1, time.Hour))
	if err != nil {
		log.Fatal(err)
	}
	mw, err := httplimit.New([]httplimit.Limit{{Name: "ip", Key: proxies.Key, Limiter: perIP}},
		httplimit.WithIPResolver(proxies),
		httplimit.ExemptNetworks("10.0.0.0/8"),
		httplimit.WithHeaders(httplimit.NoHeaders))
	if err != nil {
		log.Fatal(err)
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	send := func(from, forwardedFor string) int {
		r := httptest.NewRequest("GET", "/health", nil)
		r.RemoteAddr = from
		r.Header.Set("X-Forwarded-For", forwardedFor)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	fmt.Println("health checker via the proxy:", send("192.0.2.10:5000", "10.0.0.7"), send("192.0.2.10:5000", "10.0.0.7"))
	fmt.Println("client forging the header:   ", send("203.0.113.9:6000", "10.0.0.7"), send("203.0.113.9:6000", "10.0.0.7"))
	// Output:
	// health checker via the proxy: 200 200
	// client forging the header:    200 429
}

// instantClock is a fake clock on which every wait ends at once, moving
// the time forward by the wait: the examples below wait seconds in no
// time.
type instantClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *instantClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *instantClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

// A transport paces itself by the quota the server reports on every
// answer (here the IETF RateLimit field, 3 requests per 10 s window): it
// sends what is left, then waits for the announced reset, so the server
// never has to refuse it.
func ExampleNewTransport_pacing() {
	clk := &instantClock{now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	start := clk.Now()
	var windowEnd time.Time
	used := 0
	network := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		now := clk.Now()
		if !now.Before(windowEnd) {
			windowEnd, used = now.Add(10*time.Second), 0
		}
		used++
		resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: r}
		if used > 3 {
			resp.StatusCode = http.StatusTooManyRequests
		}
		resp.Header.Set("RateLimit-Policy", `"api";q=3;w=10`)
		resp.Header.Set("RateLimit", fmt.Sprintf(`"api";r=%d;t=%d`, max(3-used, 0), windowEnd.Sub(now)/time.Second))
		fmt.Printf("t=%v: %d\n", now.Sub(start), resp.StatusCode)
		return resp, nil
	})
	tr, err := httplimit.NewTransport(network, nil, httplimit.WithClock(clk))
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: tr}
	for range 7 {
		resp, err := client.Get("http://api.example/items")
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
	}
	// Output:
	// t=0s: 200
	// t=0s: 200
	// t=0s: 200
	// t=10s: 200
	// t=10s: 200
	// t=10s: 200
	// t=20s: 200
}

// After a 429 that names no pause (no Retry-After, no RateLimit fields),
// the transport backs the key off with jitter: the k-th such refusal in a
// row waits a random time between first/2 and min(max, first·2^k), never
// sending the next request at once.
func ExampleWithBackoff() {
	clk := &instantClock{now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	network := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: http.StatusTooManyRequests, Header: http.Header{}, Body: http.NoBody, Request: r}, nil
	})
	first, ceiling := time.Second, 4*time.Second
	count := 0 // refusals so far
	tr, err := httplimit.NewTransport(network, nil, httplimit.WithClock(clk), httplimit.WithBackoff(first, ceiling),
		httplimit.WithPauseHook(func(_ *http.Request, _ *http.Response, d time.Duration) {
			fmt.Println("backing off between 500ms and", min(ceiling, first<<count), d >= first/2 && d <= min(ceiling, first<<count))
			count++
		}))
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: tr}
	for range 4 {
		resp, err := client.Get("http://api.example/items")
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
	}
	// Output:
	// backing off between 500ms and 1s true
	// backing off between 500ms and 2s true
	// backing off between 500ms and 4s true
	// backing off between 500ms and 4s true
}

// A concurrency limit beside a rate limit: each API key may have 20
// exports in flight, and 100 requests a second. The 21st export at once is
// refused with 429 and the concurrency fields, and the rate limit it had
// passed is refunded; once the exports end, a new one is admitted.
func ExampleLimit_concurrency() {
	mock := clock.NewMock() // frozen, so that the rate limit's figures are exact
	perKey, err := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(100, time.Second), 100), ratelimit.WithClock(mock))
	if err != nil {
		log.Fatal(err)
	}
	exports, err := ratelimit.NewConcurrency(20)
	if err != nil {
		log.Fatal(err)
	}
	mw, err := httplimit.New([]httplimit.Limit{
		{Name: "api", Key: httplimit.KeyByHeader("X-API-Key"), Limiter: perKey},
		{Name: "exports", Key: httplimit.KeyByHeader("X-API-Key"), Concurrency: exports},
	}, httplimit.WithClock(mock))
	if err != nil {
		log.Fatal(err)
	}
	entered, finish := make(chan struct{}, 32), make(chan struct{})
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-finish // a slow export
	}))
	send := func() *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "/exports", nil)
		r.Header.Set("X-API-Key", "key-123")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w
	}

	var wg sync.WaitGroup
	for range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			send()
		}()
		<-entered
	}
	w := send()
	fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"), strconv.Quote(w.Header().Get("Retry-After")))
	fmt.Print(w.Body.String())
	d, _ := perKey.Peek(context.Background(), "key-123", 0)
	fmt.Println("api remaining:", d.Remaining)

	close(finish)
	wg.Wait()
	fmt.Println("in flight:", exports.InFlight("key-123"))
	w = send()
	fmt.Println(w.Code, w.Header().Get("RateLimit"))
	// Output:
	// 429 "exports";q=20;qu="concurrent-requests" "exports";r=0 ""
	// {"error":"Too Many Requests","message":"concurrency limit \"exports\" exceeded: too many requests in flight, retry once one ends"}
	// api remaining: 80
	// in flight: 0
	// 200 "exports";r=19
}
