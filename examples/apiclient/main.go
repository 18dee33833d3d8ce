// Command apiclient is a client of a rate-limited API that respects the
// server's limits, built on httplimit.Transport. It starts its own API on
// a loopback port (10 requests a second per API key) and calls it twice:
//
//  1. A burst of 15 requests with no client-side limit. The server refuses
//     what exceeds its quota with 429 and Retry-After; the transport pauses
//     every request until then and retries, so all 15 succeed.
//
//  2. The client reads the quota the server advertises (RateLimit-Policy:
//     "api";q=10;w=1), builds a matching limiter per API host
//     (httplimit.NewKeyedTransport), and sends 15 requests paced by it:
//     none is refused.
//
//     go run ./examples/apiclient
package main

import (
	"context"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/httplimit"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

func run() error {
	base, refused, stop, err := startAPI()
	if err != nil {
		return err
	}
	defer stop()

	// 1. No client-side limit: the server's 429s drive the pacing.
	tr, err := httplimit.NewTransport(nil, nil,
		httplimit.WithRetries(5),
		httplimit.WithPauseHook(func(r *http.Request, resp *http.Response, d time.Duration) {
			fmt.Printf("  %s: server answered %d, pausing all requests for %v\n", r.URL.Query().Get("n"), resp.StatusCode, d)
		}))
	if err != nil {
		return err
	}
	fmt.Println("Burst of 15 requests, no client-side limit:")
	start := time.Now()
	ok := burst(&http.Client{Transport: tr}, base, "key-burst", 15)
	fmt.Printf("  %d/15 succeeded in %v; the server refused %d attempts\n\n", ok, time.Since(start).Round(100*time.Millisecond), refused.Swap(0))

	// 2. Learn the quota from the server and pace requests to it.
	q, w, err := discoverPolicy(base, "key-paced")
	if err != nil {
		return err
	}
	fmt.Printf("The server advertises %d requests per %v; pacing to that:\n", q, w)
	// One bucket per API host, refilling q every w. A client talking to
	// several APIs keys the transport by host, so that each API's quota
	// (and each API's 429 pauses) stays its own. This host's bucket starts
	// with room for only one request, since the probe above already spent
	// some quota.
	perHost, err := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(q, w), q))
	if err != nil {
		return err
	}
	byHost := func(r *http.Request) (string, bool) { return r.URL.Host, true }
	host := strings.TrimPrefix(base, "http://")
	_, _ = perHost.AllowN(context.Background(), host, q-1) // no burst on top of the probe
	tr2, err := httplimit.NewKeyedTransport(nil, perHost, byHost, httplimit.WithRetries(5))
	if err != nil {
		return err
	}
	start = time.Now()
	ok = burst(&http.Client{Transport: tr2}, base, "key-paced", 15)
	fmt.Printf("  %d/15 succeeded in %v; the server refused %d attempts\n", ok, time.Since(start).Round(100*time.Millisecond), refused.Load())
	return nil
}

// burst sends n concurrent requests and reports how many succeeded.
func burst(client *http.Client, base, apiKey string, n int) int {
	var ok atomic.Int32
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", base+"/quote?n="+strconv.Itoa(i+1), nil)
			req.Header.Set(httplimit.HeaderAPIKey, apiKey)
			resp, err := client.Do(req)
			if err != nil {
				fmt.Println("  error:", err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				ok.Add(1)
			} else {
				fmt.Printf("  %d: gave up with %d\n", i+1, resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	return int(ok.Load())
}

// discoverPolicy makes one request and reads q and w from the server's
// RateLimit-Policy field.
func discoverPolicy(base, apiKey string) (int, time.Duration, error) {
	req, _ := http.NewRequest("GET", base+"/quote", nil)
	req.Header.Set(httplimit.HeaderAPIKey, apiKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, 0, err
	}
	_ = resp.Body.Close()
	v := resp.Header.Get(httplimit.HeaderRateLimitPolicy) // "api";q=10;w=1
	var q, w int
	for _, param := range strings.Split(v, ";")[1:] {
		k, val, _ := strings.Cut(strings.TrimSpace(param), "=")
		n, _ := strconv.Atoi(val)
		switch k {
		case "q":
			q = n
		case "w":
			w = n
		}
	}
	if q <= 0 || w <= 0 {
		return 0, 0, fmt.Errorf("no usable RateLimit-Policy in %q", v)
	}
	return q, time.Duration(w) * time.Second, nil
}

// startAPI serves 10 requests a second per API key on a loopback port and
// counts the requests it refuses.
func startAPI() (base string, refused *atomic.Int64, stop func(), err error) {
	perKey, err := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(10, time.Second), 10))
	if err != nil {
		return "", nil, nil, err
	}
	refused = new(atomic.Int64)
	mw, err := httplimit.New([]httplimit.Limit{{Name: "api", Key: httplimit.KeyByAPIKey(), Limiter: perKey}},
		httplimit.WithDeniedHandler(func(w http.ResponseWriter, r *http.Request, d httplimit.Denial) {
			refused.Add(1)
			httplimit.WriteDenied(w, r, d)
		}))
	if err != nil {
		return "", nil, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, nil, err
	}
	srv := &http.Server{
		Handler: mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "The best way to predict the future is to invent it.\n")
		})),
		ReadHeaderTimeout: 5 * time.Second,
	}
	go func() { _ = srv.Serve(ln) }()
	stop = func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}
	return "http://" + ln.Addr().String(), refused, stop, nil
}
