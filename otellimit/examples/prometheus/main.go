// Command prometheus serves an HTTP endpoint limited per client address and
// exposes the limiter's decisions as Prometheus metrics on /metrics, through
// otellimit and the OpenTelemetry Prometheus exporter.
//
// It is a module of its own, so that the Prometheus client and exporter
// are not requirements of otellimit, whose users would otherwise get
// their versions raised to these. Run it from this directory with
// "go run .", or from otellimit/ with "go run ./examples/prometheus" (in
// the repository's go.work).
//
// With -addr it listens until interrupted; try
//
//	go run . -addr localhost:8080
//	for i in 1 2 3 4 5; do curl -s -o /dev/null -w '%{http_code}\n' localhost:8080/; done
//	curl -s localhost:8080/metrics | grep ^ratelimit_
//
// Without -addr it makes those requests itself, prints the ratelimit lines
// of /metrics and exits.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/httplimit"
	"github.com/rlkit/ratelimit/otellimit"
)

func main() {
	addr := flag.String("addr", "", "listen on this address (such as localhost:8080) until interrupted; without it, make a few requests, print the ratelimit lines of /metrics and exit")
	flag.Parse()
	log.SetFlags(0)

	handler, shutdown, err := newServer()
	if err != nil {
		log.Fatal(err)
	}
	defer func() { _ = shutdown(context.Background()) }()

	if *addr != "" {
		log.Printf("listening on %s: / is limited to 3 requests a minute per client address, /metrics is not", *addr)
		log.Fatal(http.ListenAndServe(*addr, handler))
	}
	if err := demo(os.Stdout, handler); err != nil {
		log.Fatal(err)
	}
}

// newServer returns the handler: "/" limited per client address, and
// "/metrics". The shutdown function stops the meter provider.
func newServer() (http.Handler, func(context.Context) error, error) {
	// The OpenTelemetry side: the Prometheus exporter is the reader of a
	// meter provider, and registers with a registry of our own.
	registry := prometheus.NewRegistry()
	exporter, err := otelprom.New(otelprom.WithRegisterer(registry), otelprom.WithoutTargetInfo(), otelprom.WithoutScopeInfo())
	if err != nil {
		return nil, nil, err
	}
	provider := sdkmetric.NewMeterProvider(sdkmetric.WithReader(exporter))
	obs, err := otellimit.NewObserver(provider)
	if err != nil {
		return nil, nil, err
	}

	// The middleware reports every decision of its limits to the Observer,
	// under the limit's name (the one in the RateLimit headers); the
	// limiter needs no observer (nor name) of its own.
	perIP, err := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(3, time.Minute), 3))
	if err != nil {
		return nil, nil, err
	}
	limits, err := httplimit.New([]httplimit.Limit{{Name: "per-ip", Key: httplimit.KeyByIP(), Limiter: perIP}},
		httplimit.WithObserver(obs))
	if err != nil {
		return nil, nil, err
	}

	mux := http.NewServeMux()
	mux.Handle("/", limits.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "hello\n")
	})))
	mux.Handle("/metrics", promhttp.HandlerFor(registry, promhttp.HandlerOpts{}))
	return mux, provider.Shutdown, nil
}

// demo serves handler on a local port, requests "/" five times and prints
// the status codes and the ratelimit lines of /metrics.
func demo(out io.Writer, handler http.Handler) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer func() { _ = srv.Close() }()
	base := "http://" + ln.Addr().String()

	for i := range 5 {
		res, err := http.Get(base + "/")
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, res.Body)
		_ = res.Body.Close()
		fmt.Fprintf(out, "GET / #%d: %s\n", i+1, res.Status)
	}

	lines, err := metricLines(base + "/metrics")
	if err != nil {
		return err
	}
	fmt.Fprintln(out, "GET /metrics (the ratelimit lines):")
	for _, l := range lines {
		fmt.Fprintln(out, l)
	}
	return nil
}

// metricLines returns the lines of the page at url that are about the
// ratelimit_ metrics, their HELP and TYPE lines included.
func metricLines(url string) ([]string, error) {
	res, err := http.Get(url)
	if err != nil {
		return nil, err
	}
	defer func() { _ = res.Body.Close() }()
	if res.StatusCode != http.StatusOK {
		return nil, errors.New("GET " + url + ": " + res.Status)
	}
	var lines []string
	sc := bufio.NewScanner(res.Body)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "ratelimit_") || strings.HasPrefix(l, "# HELP ratelimit_") || strings.HasPrefix(l, "# TYPE ratelimit_") {
			lines = append(lines, l)
		}
	}
	return lines, sc.Err()
}
