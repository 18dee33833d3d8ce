// Command httpserver is an HTTP API protected by package httplimit: tiered
// limits per API key (free 5 a minute, pro 100 a minute), 3 login attempts
// a minute per client address on POST /login, a shadow limit being rolled
// out, and a search endpoint that serves cached results instead of 429.
//
// It starts the server on a loopback port, plays a short scripted client
// against it, prints what the client sees, and exits.
//
// Limits live in memory by default. With REDIS_URL set (such as
// redis://127.0.0.1:6379/0) the same policies run on Redis through package
// redislimit, shared by every instance of the server, failing open if Redis
// goes away:
//
//	go run ./examples/httpserver
//	REDIS_URL=redis://127.0.0.1:6379/0 go run ./examples/httpserver
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/httplimit"
	"github.com/rlkit/ratelimit/redislimit"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

// store creates the keyed limiters: in memory, or on Redis.
type store struct {
	redis  redis.UniversalClient
	prefix string
}

func (s store) limiter(name string, p ratelimit.Policy) (ratelimit.KeyedLimiter, error) {
	if s.redis == nil {
		return ratelimit.NewKeyed(p)
	}
	// One prefix per limit: limits must not share Redis keys.
	return redislimit.New(s.redis, p,
		redislimit.WithPrefix(s.prefix+name+":"),
		redislimit.WithFailurePolicy(redislimit.FailOpen),
		redislimit.WithTimeout(50*time.Millisecond))
}

func run() error {
	var st store
	if url := os.Getenv("REDIS_URL"); url != "" {
		opt, err := redis.ParseURL(url)
		if err != nil {
			return fmt.Errorf("REDIS_URL: %w", err)
		}
		client := redis.NewClient(opt)
		defer client.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if err := client.Ping(ctx).Err(); err != nil {
			return fmt.Errorf("redis at %s: %w", url, err)
		}
		// A fresh prefix per run, so that runs do not share quotas.
		st = store{redis: client, prefix: fmt.Sprintf("example-httpserver:%d:", time.Now().UnixNano())}
		fmt.Println("limits on Redis at", opt.Addr)
	} else {
		fmt.Println("limits in memory (set REDIS_URL to use Redis)")
	}

	handler, err := newHandler(st)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}()

	return demo("http://" + ln.Addr().String())
}

// newHandler builds the API and its limits.
func newHandler(st store) (http.Handler, error) {
	free, err := st.limiter("free", ratelimit.SlidingCounterPolicy(5, time.Minute))
	if err != nil {
		return nil, err
	}
	pro, err := st.limiter("pro", ratelimit.SlidingCounterPolicy(100, time.Minute))
	if err != nil {
		return nil, err
	}
	// The tier of each key. A real service would look the key up; here pro
	// keys start with "pro_", and anonymous clients (keyed by address) are
	// free.
	plans, err := ratelimit.NewTiered(func(_ context.Context, key string) string {
		if strings.HasPrefix(key, "pro_") {
			return "pro"
		}
		return "free"
	}, map[string]ratelimit.KeyedLimiter{"free": free, "pro": pro})
	if err != nil {
		return nil, err
	}
	login, err := st.limiter("login", ratelimit.SlidingLogPolicy(3, time.Minute))
	if err != nil {
		return nil, err
	}
	burst, err := st.limiter("burst", ratelimit.TokenBucketPolicy(ratelimit.Per(2, time.Second), 2))
	if err != nil {
		return nil, err
	}
	search, err := st.limiter("search", ratelimit.TokenBucketPolicy(ratelimit.Per(1, 10*time.Second), 1))
	if err != nil {
		return nil, err
	}

	// Without proxies in front, client addresses come from the connection.
	// Behind a load balancer, trust it explicitly:
	//   ips, _ := httplimit.NewIPResolver(httplimit.TrustedProxies("10.0.0.0/8"))
	ips, err := httplimit.NewIPResolver()
	if err != nil {
		return nil, err
	}
	client := httplimit.FirstOf(httplimit.KeyByAPIKey(), ips.Key)
	apiLimits := []httplimit.Limit{
		{Name: "api", Key: client, Limiter: plans},
		// Being rolled out: 2 a second per client, reported, not enforced.
		{Name: "burst", Key: client, Limiter: burst, Shadow: true},
	}
	loginLimit := httplimit.Limit{Name: "login", Key: ips.Key, Limiter: login}
	hooks := []httplimit.Option{
		httplimit.WithErrorHook(func(r *http.Request, limit string, err error) {
			log.Printf("rate limiter %q: %v", limit, err) // a metric in real life
		}),
		httplimit.WithShadowHook(func(r *http.Request, limit string, d ratelimit.Decision) {
			fmt.Printf("    server log: shadow limit %q would have refused %s %s\n", limit, r.Method, r.URL.Path)
		}),
	}

	api, err := httplimit.New(apiLimits, hooks...)
	if err != nil {
		return nil, err
	}
	// POST /login counts against the API quota and the login limit, all or
	// nothing: a refused login attempt does not use API quota.
	loginMW, err := httplimit.New(append(apiLimits, loginLimit), hooks...)
	if err != nil {
		return nil, err
	}
	// Search degrades instead of failing: past its limit it serves the last
	// results it computed.
	searchMW, err := httplimit.New([]httplimit.Limit{{Name: "search", Key: client, Limiter: search}},
		httplimit.WithDeniedHandler(func(w http.ResponseWriter, r *http.Request, d httplimit.Denial) {
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"results":["cached"],"stale":true}`+"\n")
		}))
	if err != nil {
		return nil, err
	}

	mux := http.NewServeMux()
	mux.Handle("GET /items", api.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"items":[1,2,3]}`+"\n")
	})))
	mux.Handle("POST /login", loginMW.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "wrong password", http.StatusUnauthorized)
	})))
	mux.Handle("GET /search", searchMW.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"results":["fresh"]}`+"\n")
	})))
	return mux, nil
}

// demo plays a client against the server and prints what it sees.
func demo(base string) error {
	client := &http.Client{Timeout: 5 * time.Second}
	call := func(method, path, apiKey string) error {
		req, err := http.NewRequest(method, base+path, nil)
		if err != nil {
			return err
		}
		if apiKey != "" {
			req.Header.Set(httplimit.HeaderAPIKey, apiKey)
		}
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		h := resp.Header
		fmt.Printf("%-5s %-8s key=%-9s -> %d  RateLimit-Policy: %s  RateLimit: %s",
			method, path, apiKey, resp.StatusCode, h.Get(httplimit.HeaderRateLimitPolicy), h.Get(httplimit.HeaderRateLimit))
		if ra := h.Get(httplimit.HeaderRetryAfter); ra != "" {
			fmt.Printf("  Retry-After: %s", ra)
		}
		fmt.Printf("\n      %s\n", strings.TrimSpace(string(body)))
		return nil
	}
	steps := []struct {
		title string
		calls [][3]string
	}{
		{"A free key gets 5 requests a minute:", repeat(6, "GET", "/items", "free_alice")},
		{"A pro key gets 100:", repeat(2, "GET", "/items", "pro_bob")},
		{"Login attempts: 3 a minute per address, on top of the API quota:", repeat(4, "POST", "/login", "pro_carol")},
		{"Search serves cached results past its limit:", repeat(2, "GET", "/search", "pro_dave")},
	}
	for _, s := range steps {
		fmt.Println()
		fmt.Println(s.title)
		for _, c := range s.calls {
			if err := call(c[0], c[1], c[2]); err != nil {
				return errors.Join(fmt.Errorf("%s %s", c[0], c[1]), err)
			}
		}
	}
	return nil
}

func repeat(n int, method, path, key string) [][3]string {
	out := make([][3]string, n)
	for i := range out {
		out[i] = [3]string{method, path, key}
	}
	return out
}
