// Command httpserver is an HTTP API whose rate limit lives in Redis, so
// that every instance of the server shares one quota per client: 5
// requests a minute per API key (the X-API-Key header), admitted while
// Redis is down (the default failure policy, FailOpen).
//
// Start a Redis server, then run, from the redislimit directory:
//
//	REDIS_URL=redis://127.0.0.1:6379/0 go run ./examples/httpserver
//	curl -i -H 'X-API-Key: alice' http://127.0.0.1:8080/items
//
// The sixth request of a minute gets 429 Too Many Requests with its
// RateLimit and Retry-After headers. ADDR sets the address to listen on
// (default 127.0.0.1:8080); REDIS_URL defaults to redis://127.0.0.1:6379/0.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
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

func run() error {
	url := getenv("REDIS_URL", "redis://127.0.0.1:6379/0")
	opt, err := redis.ParseURL(url)
	if err != nil {
		return fmt.Errorf("REDIS_URL: %w", err)
	}
	// ContextTimeoutEnabled lets go-redis abandon I/O at each call's
	// deadline (see redislimit.WithTimeout).
	opt.ContextTimeoutEnabled = true
	client := redis.NewClient(opt)
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := client.Ping(ctx).Err(); err != nil {
		return fmt.Errorf("redis at %s: %w", opt.Addr, err)
	}

	handler, err := newHandler(client, "example-httpserver:")
	if err != nil {
		return err
	}
	addr := getenv("ADDR", "127.0.0.1:8080")
	log.Printf("listening on http://%s, limits on Redis at %s", addr, opt.Addr)
	srv := &http.Server{Addr: addr, Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	return srv.ListenAndServe()
}

// newHandler returns the API, GET /items, limited to 5 requests a minute
// per API key, with its state in Redis under prefix.
func newHandler(client redis.UniversalClient, prefix string) (http.Handler, error) {
	limiter, err := redislimit.New(client, ratelimit.SlidingCounterPolicy(5, time.Minute),
		redislimit.WithPrefix(prefix),
		redislimit.WithName("api"),
		redislimit.WithTimeout(50*time.Millisecond))
	if err != nil {
		return nil, err
	}
	mw, err := httplimit.New([]httplimit.Limit{{Name: "api", Key: httplimit.KeyByHeader("X-API-Key"), Limiter: limiter}})
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"items":[1,2,3]}`+"\n")
	})
	return mw.Handler(mux), nil
}

func getenv(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
