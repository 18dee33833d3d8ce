// Command httpserver is a small HTTP API limited by package httplimit, in
// memory: 3 requests a minute per client address, so that a few requests
// by hand show the rate-limit fields counting down and then a 429.
//
// Run without flags, it starts the server on a loopback port, sends it
// four requests, prints what the client sees, and exits:
//
//	go run ./examples/httpserver
//
// With -addr it listens on that address until interrupted, for curl:
//
//	go run ./examples/httpserver -addr 127.0.0.1:8080
//	curl -i http://127.0.0.1:8080/
//
// The server with Redis, tiers, several limits and a shadow limit is in
// the redislimit module: redislimit/examples/httpserver.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/httplimit"
)

func main() {
	addr := flag.String("addr", "", "listen on this address (such as 127.0.0.1:8080) until interrupted; without it, run a short demo and exit")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var err error
	if *addr != "" {
		err = listen(ctx, *addr, func(a net.Addr) {
			log.Printf("listening on http://%s/ (3 requests a minute per client address; Ctrl-C stops)", a)
		})
	} else {
		err = demo(ctx, os.Stdout)
	}
	if err != nil {
		log.Fatal(err)
	}
}

// newHandler returns the API: GET / answers with a greeting and how many
// requests the client has left: at most 3 in any minute per client
// address (a sliding log, exact).
func newHandler() (http.Handler, error) {
	perIP, err := ratelimit.NewKeyed(ratelimit.SlidingLogPolicy(3, time.Minute), ratelimit.WithMaxKeys(100_000))
	if err != nil {
		return nil, err
	}
	// KeyByIP reads RemoteAddr only. Behind a reverse proxy, name it:
	//   ips, _ := httplimit.NewIPResolver(httplimit.TrustedProxies("10.0.0.0/8"))
	// and use ips.Key instead.
	mw, err := httplimit.New([]httplimit.Limit{
		{Name: "per-ip", Key: httplimit.KeyByIP(), Limiter: perIP},
	}, httplimit.WithDecisionInContext(true))
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		left := ""
		if res, ok := httplimit.ResultFrom(r.Context()); ok {
			left = fmt.Sprintf(", %d of %d requests left", res.Decision.Remaining, res.Decision.Limit)
		}
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintf(w, "hello%s\n", left)
	})))
	return mux, nil
}

// listen serves the API on addr until ctx is done, calling ready with the
// address it listens on once it does.
func listen(ctx context.Context, addr string, ready func(net.Addr)) error {
	h, err := newHandler()
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	ready(ln.Addr())
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return err
	}
	if err := <-done; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// demo starts the server on a loopback port, sends it four requests, and
// prints each answer's status, rate-limit fields and body to out.
func demo(ctx context.Context, out io.Writer) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	addrs := make(chan net.Addr, 1)
	served := make(chan error, 1)
	go func() { served <- listen(ctx, "127.0.0.1:0", func(a net.Addr) { addrs <- a }) }()
	var base string
	select {
	case a := <-addrs:
		base = "http://" + a.String() + "/"
	case err := <-served:
		return err
	}
	fmt.Fprintf(out, "Four requests to %s (3 a minute per client address):\n\n", base)
	for i := 0; i < 4; i++ {
		resp, err := http.Get(base)
		if err != nil {
			return err
		}
		body, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s %s\n", resp.Proto, resp.Status)
		printFields(out, resp.Header)
		fmt.Fprintf(out, "\n%s\n", strings.TrimRight(string(body), "\n"))
		fmt.Fprintln(out)
	}
	cancel()
	return <-served
}

// printFields prints the rate-limit fields of h, in a fixed order.
func printFields(out io.Writer, h http.Header) {
	names := []string{
		"Retry-After",
		"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
		"RateLimit-Policy", "RateLimit",
	}
	sort.Strings(names)
	for _, n := range names {
		if v := h.Get(n); v != "" {
			fmt.Fprintf(out, "%s: %s\n", n, v)
		}
	}
}
