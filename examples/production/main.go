// Command production is the setup most services run, on one screen: rate
// limits kept in Redis so that every instance of the service shares them,
// plans as tiers, the HTTP middleware, and OpenTelemetry metrics for every
// decision.
//
//   - "api": per API key (X-API-Key, else the client address), free
//     customers 100 requests a minute, pro customers 10,000. While Redis is
//     down these requests are admitted (redislimit.FailOpen): an outage of
//     the limiter must not become an outage of the API.
//   - "login": POST /login per client address, 5 attempts in any 15
//     minutes. While Redis is down these are refused (redislimit.FailClosed):
//     a login limit that fails open lets a password guesser through for as
//     long as the outage lasts. FailOpen is redislimit's default, so a
//     login limit must say FailClosed.
//
// The recipe is the function newLimits, which the README shows as it is
// here (TestREADMEShowsTheRecipe keeps them equal). Run it against a Redis
// server of your own (it writes keys under the prefix "example:"):
//
//	REDIS_ADDR=127.0.0.1:6379 go run ./examples/production
//
// It serves a few requests itself, prints their status codes and the
// decisions its metrics counted, and exits.
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"sort"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/httplimit"
	"github.com/rlkit/ratelimit/otellimit"
	"github.com/rlkit/ratelimit/redislimit"
)

func main() {
	log.SetFlags(0)
	addr := os.Getenv("REDIS_ADDR")
	if addr == "" {
		addr = "127.0.0.1:6379"
	}
	if err := run(context.Background(), os.Stdout, addr, "example:"); err != nil {
		log.Fatal(err)
	}
}

// plans is the customers' plans, as a service would read them from its
// database; a key it does not know is on the free plan.
var plans = map[string]string{"key-pro": "pro"}

// planOf returns the plan of the customer whose API key is key.
func planOf(_ context.Context, key string) string {
	if p, ok := plans[key]; ok {
		return p
	}
	return "free"
}

// recipe:begin

// newLimits returns the middleware of the service's two limits, on Redis,
// reporting every decision to the meter provider under the limit's name.
func newLimits(rdb redis.UniversalClient, meters metric.MeterProvider, prefix string) (*httplimit.Middleware, error) {
	// "api": per API key by plan. Admitted while Redis is down.
	free, err := redislimit.New(rdb, ratelimit.TokenBucketPolicy(ratelimit.Per(100, time.Minute), 100),
		redislimit.WithPrefix(prefix+"api:"), redislimit.WithFailurePolicy(redislimit.FailOpen))
	if err != nil {
		return nil, err
	}
	pro, err := redislimit.New(rdb, ratelimit.TokenBucketPolicy(ratelimit.Per(10_000, time.Minute), 1_000),
		redislimit.WithPrefix(prefix+"api:"), redislimit.WithFailurePolicy(redislimit.FailOpen))
	if err != nil {
		return nil, err
	}
	api, err := ratelimit.NewTiered(planOf, map[string]ratelimit.KeyedLimiter{"free": free, "pro": pro})
	if err != nil {
		return nil, err
	}
	// "login": 5 attempts in any 15 minutes per client address. Refused
	// while Redis is down: FailOpen is the default, and a login limit must
	// not have it.
	login, err := redislimit.New(rdb, ratelimit.SlidingLogPolicy(5, 15*time.Minute),
		redislimit.WithPrefix(prefix+"login:"), redislimit.WithFailurePolicy(redislimit.FailClosed))
	if err != nil {
		return nil, err
	}
	// Metrics: the middleware reports each decision once, under the
	// limit's name (the one its RateLimit headers carry), so the limiters
	// get no observer of their own.
	obs, err := otellimit.NewObserver(meters)
	if err != nil {
		return nil, err
	}
	return httplimit.New([]httplimit.Limit{
		{Name: "api", Key: httplimit.FirstOf(httplimit.KeyByHeader("X-API-Key"), httplimit.KeyByIP()), Limiter: api},
		{Name: "login", Key: httplimit.When(httplimit.IsRoute("POST /login"), httplimit.KeyByIP()), Limiter: login},
	}, httplimit.WithObserver(obs))
}

// recipe:end

// newHandler returns the service, GET /items and POST /login, behind the
// limits of newLimits.
func newHandler(limits *httplimit.Middleware) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /items", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "items\n")
	})
	mux.HandleFunc("POST /login", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "welcome\n")
	})
	return limits.Handler(mux)
}

// run serves the service on a loopback port with its limits on the Redis
// server at redisAddr, makes a few requests, and prints their status codes
// and the decisions the metrics counted, by limit and outcome.
func run(ctx context.Context, out io.Writer, redisAddr, prefix string) error {
	// ContextTimeoutEnabled lets go-redis abandon I/O at each call's
	// deadline (redislimit.WithTimeout, 50 ms by default).
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, ContextTimeoutEnabled: true})
	defer func() { _ = rdb.Close() }()
	pctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if err := rdb.Ping(pctx).Err(); err != nil {
		return fmt.Errorf("redis at %s: %w", redisAddr, err)
	}
	reader := sdkmetric.NewManualReader()
	meters := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	defer func() { _ = meters.Shutdown(context.Background()) }()
	limits, err := newLimits(rdb, meters, prefix)
	if err != nil {
		return err
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: newHandler(limits), ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()
	base := "http://" + ln.Addr().String()

	count := func(method, path, apiKey string, n int) error {
		codes := map[int]int{}
		for range n {
			code, err := send(ctx, method, base+path, apiKey)
			if err != nil {
				return err
			}
			codes[code]++
		}
		fmt.Fprintf(out, "%d x %s %s %s: %s\n", n, method, path, keyNote(apiKey), summary(codes))
		return nil
	}
	if err := count("GET", "/items", "key-free", 101); err != nil {
		return err
	}
	if err := count("GET", "/items", "key-pro", 101); err != nil {
		return err
	}
	if err := count("POST", "/login", "", 6); err != nil {
		return err
	}
	return printDecisions(ctx, out, reader)
}

// send makes one request and returns its status code.
func send(ctx context.Context, method, url, apiKey string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, method, url, nil)
	if err != nil {
		return 0, err
	}
	if apiKey != "" {
		req.Header.Set("X-API-Key", apiKey)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, res.Body)
	_ = res.Body.Close()
	return res.StatusCode, nil
}

func keyNote(apiKey string) string {
	if apiKey == "" {
		return "(no API key)"
	}
	return "as " + apiKey
}

// summary formats status-code counts in code order: "100 x 200, 1 x 429".
func summary(codes map[int]int) string {
	keys := make([]int, 0, len(codes))
	for c := range codes {
		keys = append(keys, c)
	}
	sort.Ints(keys)
	s := ""
	for i, c := range keys {
		if i > 0 {
			s += ", "
		}
		s += fmt.Sprintf("%d x %d", codes[c], c)
	}
	return s
}

// printDecisions prints the ratelimit.decisions counter by limit and
// outcome, sorted.
func printDecisions(ctx context.Context, out io.Writer, reader *sdkmetric.ManualReader) error {
	counts, err := decisions(ctx, reader)
	if err != nil {
		return err
	}
	names := make([]string, 0, len(counts))
	for k := range counts {
		names = append(names, k)
	}
	sort.Strings(names)
	fmt.Fprintln(out, "ratelimit.decisions by limit and outcome:")
	for _, k := range names {
		fmt.Fprintf(out, "  %s: %d\n", k, counts[k])
	}
	return nil
}

// decisions reads the ratelimit.decisions counter from reader, summed by
// "limit/outcome".
func decisions(ctx context.Context, reader *sdkmetric.ManualReader) (map[string]int64, error) {
	var rm metricdata.ResourceMetrics
	if err := reader.Collect(ctx, &rm); err != nil {
		return nil, err
	}
	counts := map[string]int64{}
	for _, sm := range rm.ScopeMetrics {
		for _, m := range sm.Metrics {
			sum, ok := m.Data.(metricdata.Sum[int64])
			if m.Name != "ratelimit.decisions" || !ok {
				continue
			}
			for _, dp := range sum.DataPoints {
				counts[attr(dp.Attributes, attribute.Key("ratelimit.limit"))+"/"+attr(dp.Attributes, attribute.Key("ratelimit.outcome"))] += dp.Value
			}
		}
	}
	return counts, nil
}

func attr(set attribute.Set, key attribute.Key) string {
	v, _ := set.Value(key)
	return v.Emit()
}
