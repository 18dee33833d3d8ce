// Command apiclient is a client of a rate-limited API that respects the
// server's limits, built on httplimit.Transport. It starts its own API on
// a loopback port (10 requests a second per API key, sending RateLimit and
// X-RateLimit fields) and calls it three times:
//
//  1. A burst of 15 concurrent requests before the client knows anything.
//     The server refuses what exceeds its quota with 429 and Retry-After;
//     the transport pauses until then and retries, so all 15 succeed.
//
//  2. 25 requests one after another. Every answer says how many requests
//     are left and when the quota is back; the transport waits when it is
//     spent, so the server refuses none.
//
//  3. A burst of 15 concurrent requests with WithPolicyShaping, after one
//     request has told the transport the policy (RateLimit-Policy:
//     "api";q=10;w=1): the requests are spread 100 ms apart instead of
//     spent at once, and the server refuses none.
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

	// 2. Paced by the server's fields: no 429 at all.
	tr2, err := httplimit.NewTransport(nil, nil, httplimit.WithRetries(5))
	if err != nil {
		return err
	}
	fmt.Println("25 requests in a row, paced by the server's RateLimit fields:")
	start = time.Now()
	ok = 0
	for i := range 25 {
		if get(&http.Client{Transport: tr2}, base, "key-sequence", i+1) {
			ok++
		}
	}
	fmt.Printf("  %d/25 succeeded in %v; the server refused %d attempts\n\n", ok, time.Since(start).Round(100*time.Millisecond), refused.Swap(0))

	// 3. Spread by the advertised policy. One transport per API host would
	// be NewKeyedTransport keyed by r.URL.Host, so that each API's quota
	// and pauses stay its own.
	tr3, err := httplimit.NewTransport(nil, nil, httplimit.WithRetries(5), httplimit.WithPolicyShaping(true))
	if err != nil {
		return err
	}
	shaped := &http.Client{Transport: tr3}
	get(shaped, base, "key-shaped", 0) // learn the policy
	fmt.Println("Burst of 15 requests with WithPolicyShaping, after one request:")
	start = time.Now()
	ok = burst(shaped, base, "key-shaped", 15)
	fmt.Printf("  %d/15 succeeded in %v; the server refused %d attempts\n", ok, time.Since(start).Round(100*time.Millisecond), refused.Load())
	return nil
}

// get sends one request and reports whether it succeeded.
func get(client *http.Client, base, apiKey string, n int) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", base+"/quote?n="+strconv.Itoa(n), nil)
	req.Header.Set("X-API-Key", apiKey)
	resp, err := client.Do(req)
	if err != nil {
		fmt.Println("  error:", err)
		return false
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Printf("  %d: gave up with %d\n", n, resp.StatusCode)
		return false
	}
	return true
}

// burst sends n concurrent requests and reports how many succeeded.
func burst(client *http.Client, base, apiKey string, n int) int {
	var ok atomic.Int32
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if get(client, base, apiKey, i+1) {
				ok.Add(1)
			}
		}()
	}
	wg.Wait()
	return int(ok.Load())
}

// startAPI serves 10 requests a second per API key on a loopback port and
// counts the requests it refuses.
func startAPI() (base string, refused *atomic.Int64, stop func(), err error) {
	perKey, err := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(10, time.Second), 10))
	if err != nil {
		return "", nil, nil, err
	}
	refused = new(atomic.Int64)
	mw, err := httplimit.New([]httplimit.Limit{{Name: "api", Key: httplimit.KeyByHeader("X-API-Key"), Limiter: perKey}},
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
