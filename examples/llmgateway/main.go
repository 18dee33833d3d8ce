// Command llmgateway is a small gateway in front of an LLM API. It limits
// its own clients per API key by requests and by tokens, and calls the
// upstream API through a transport that paces itself by the upstream's
// rate-limit headers. Both ends run on loopback ports; the upstream is a
// fake that emulates a provider's requests-per-minute and
// tokens-per-minute limits (scaled to one second, so the run is short)
// and answers 429 when they are exceeded.
//
// The gateway's limits per API key are 20 requests and 6,000 tokens a
// second (token buckets). A completion's tokens are known only once it
// ran, so each request reserves its max_tokens with ratelimit.ReserveAll,
// and settles the usage the upstream reports: what was not used is given
// back at once, an overrun is paid for by the key's later requests. The
// transport to the upstream paces by its x-ratelimit-*-requests and
// -tokens fields, each request's token estimate its max_tokens
// (httplimit.WithTokenCost), so that the upstream refuses nothing.
//
//	go run ./examples/llmgateway
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/httplimit"
)

func main() {
	if err := run(); err != nil {
		log.Fatal(err)
	}
}

// request is the part of a completion request the gateway reads.
type request struct {
	MaxTokens int    `json:"max_tokens"`
	Prompt    string `json:"prompt"`
}

// answer is the part of a completion answer the gateway reads.
type answer struct {
	Usage struct {
		TotalTokens int `json:"total_tokens"`
	} `json:"usage"`
}

func run() error {
	up, err := startUpstream(upstreamLimits{requests: 40, tokens: 9_000})
	if err != nil {
		return err
	}
	defer up.stop()
	gw, err := startGateway(up.url)
	if err != nil {
		return err
	}
	defer gw.stop()

	// Three clients for 2 seconds: two ask for 300 tokens at a time, the
	// third is greedy (2,000 at a time, as fast as it can).
	type result struct {
		sent, ok, refused int
	}
	clients := []struct {
		key       string
		maxTokens int
		every     time.Duration
	}{
		{"key-alice", 300, 80 * time.Millisecond},
		{"key-bob", 300, 80 * time.Millisecond},
		{"key-greedy", 2_000, 10 * time.Millisecond},
	}
	results := make([]result, len(clients))
	var wg sync.WaitGroup
	end := time.Now().Add(2 * time.Second)
	for i, c := range clients {
		for range 4 { // 4 concurrent callers per key
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(end) {
					code, err := complete(gw.url, c.key, c.maxTokens)
					gw.mu.Lock()
					results[i].sent++
					switch {
					case err != nil:
						fmt.Println("  error:", err)
					case code == http.StatusOK:
						results[i].ok++
					case code == http.StatusTooManyRequests:
						results[i].refused++
					}
					gw.mu.Unlock()
					time.Sleep(c.every)
				}
			}()
		}
	}
	wg.Wait()

	fmt.Println("Gateway: 20 requests/s and 6,000 tokens/s per API key, reserving max_tokens, settling usage")
	for i, c := range clients {
		r := results[i]
		fmt.Printf("  %-10s max_tokens %5d: %3d sent, %3d answered, %3d refused by the gateway (429)\n", c.key, c.maxTokens, r.sent, r.ok, r.refused)
	}
	gw.mu.Lock()
	fmt.Printf("  tokens reserved %d, settled at the usage reported %d: %d given back\n", gw.reserved, gw.settled, gw.reserved-gw.settled)
	gw.mu.Unlock()
	fmt.Printf("Upstream: %d requests, %d refused with 429 after the first answer\n", up.served(), up.refusedAfterFirst())
	// What the example shows, checked, so that its test can fail.
	if n := up.refusedAfterFirst(); n > 0 {
		return fmt.Errorf("the transport let %d requests be refused by the upstream after its first answer", n)
	}
	gw.mu.Lock()
	defer gw.mu.Unlock()
	if gw.settled > gw.reserved || results[0].ok == 0 || results[1].ok == 0 {
		return fmt.Errorf("settled %d of %d tokens reserved; answered %d and %d", gw.settled, gw.reserved, results[0].ok, results[1].ok)
	}
	return nil
}

// complete sends one completion request to the gateway and returns the
// status code.
func complete(base, key string, maxTokens int) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	body := fmt.Sprintf(`{"max_tokens": %d, "prompt": "Say hello"}`, maxTokens)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/completions", strings.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// maxTokensKey carries a request's max_tokens to the transport.
type maxTokensKey struct{}

// gateway is the gateway's server and its counts.
type gateway struct {
	url  string
	stop func()

	mu                sync.Mutex
	reserved, settled int64
}

// startGateway serves /v1/completions on a loopback port, limited per API
// key, forwarding to upstream.
func startGateway(upstream string) (*gateway, error) {
	requests, err := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(20, time.Second), 20))
	if err != nil {
		return nil, err
	}
	tokens, err := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(6_000, time.Second), 6_000))
	if err != nil {
		return nil, err
	}
	// The outbound transport paces the gateway by the upstream's headers,
	// requests and tokens both: each request's token estimate is its
	// max_tokens, which the handler puts on the request's context.
	tr, err := httplimit.NewTransport(nil, nil, httplimit.WithRetries(3),
		httplimit.WithTokenCost(func(r *http.Request) int {
			n, _ := r.Context().Value(maxTokensKey{}).(int)
			return n
		}))
	if err != nil {
		return nil, err
	}
	client := &http.Client{Transport: tr}
	gw := &gateway{}

	handle := func(w http.ResponseWriter, r *http.Request) {
		key, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok {
			http.Error(w, "no API key", http.StatusUnauthorized)
			return
		}
		raw, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		var req request
		if err == nil {
			err = json.Unmarshal(raw, &req)
		}
		if err != nil || req.MaxTokens <= 0 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		// One request and max_tokens tokens, all or nothing.
		res, err := ratelimit.ReserveAll(r.Context(), req.MaxTokens, time.Minute,
			ratelimit.Dimension{Name: "requests", Limiter: requests, Key: key, N: 1},
			ratelimit.Dimension{Name: "tokens", Limiter: tokens, Key: key})
		if err != nil || !res.Allowed {
			if res.RetryAfter != ratelimit.RetryNever {
				w.Header().Set("Retry-After", strconv.Itoa(int((res.RetryAfter+time.Second-1)/time.Second)))
			}
			http.Error(w, "rate limited by the gateway", http.StatusTooManyRequests)
			return
		}
		used := req.MaxTokens // settled at the estimate unless the upstream says otherwise
		defer func() {
			_ = res.Settle(context.WithoutCancel(r.Context()), used)
			gw.mu.Lock()
			gw.reserved += int64(req.MaxTokens)
			gw.settled += int64(used)
			gw.mu.Unlock()
		}()
		ctx := context.WithValue(r.Context(), maxTokensKey{}, req.MaxTokens)
		out, err := http.NewRequestWithContext(ctx, http.MethodPost, upstream+"/v1/completions", strings.NewReader(string(raw)))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		resp, err := client.Do(out)
		if err != nil {
			http.Error(w, "upstream: "+err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		if err != nil {
			http.Error(w, "upstream: "+err.Error(), http.StatusBadGateway)
			return
		}
		var a answer
		if resp.StatusCode == http.StatusOK && json.Unmarshal(body, &a) == nil && a.Usage.TotalTokens >= 0 {
			used = a.Usage.TotalTokens
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(body)
	}
	url, stop, err := serve(http.HandlerFunc(handle))
	if err != nil {
		return nil, err
	}
	gw.url, gw.stop = url, stop
	return gw, nil
}

// upstreamLimits are the fake provider's limits per second.
type upstreamLimits struct {
	requests, tokens int
}

// upstream is the fake provider and its counts.
type upstream struct {
	url  string
	stop func()

	mu             sync.Mutex
	n, refusedLate int
	answered       bool
}

func (u *upstream) served() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.n
}

func (u *upstream) refusedAfterFirst() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.refusedLate
}

// startUpstream serves a fake completions API on a loopback port: token
// buckets of lim.requests requests and lim.tokens tokens refilled over a
// second, the request's tokens (prompt and completion, known only to the
// server: between a fifth and all of max_tokens) charged when it is
// answered, and the OpenAI-style x-ratelimit-* fields on every answer.
func startUpstream(lim upstreamLimits) (*upstream, error) {
	u := &upstream{}
	reqs := bucket{capacity: float64(lim.requests), level: float64(lim.requests), rate: float64(lim.requests), last: time.Now()}
	toks := bucket{capacity: float64(lim.tokens), level: float64(lim.tokens), rate: float64(lim.tokens), last: time.Now()}
	rng := rand.New(rand.NewPCG(1, 2))
	handle := func(w http.ResponseWriter, r *http.Request) {
		var req request
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.MaxTokens <= 0 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		u.mu.Lock()
		now := time.Now()
		u.n++
		cost := req.MaxTokens/5 + rng.IntN(req.MaxTokens-req.MaxTokens/5+1)
		okR, okT := reqs.take(now, 1), toks.take(now, float64(req.MaxTokens))
		if okR && okT {
			toks.give(float64(req.MaxTokens - cost)) // charge the real cost
		} else {
			if okR {
				reqs.give(1)
			}
			if okT {
				toks.give(float64(req.MaxTokens))
			}
		}
		header(w.Header(), "requests", lim.requests, reqs, now)
		header(w.Header(), "tokens", lim.tokens, toks, now)
		refused := !(okR && okT)
		if refused && u.answered {
			u.refusedLate++
		}
		u.answered = true
		u.mu.Unlock()
		if refused {
			w.Header().Set("Retry-After", "1")
			http.Error(w, `{"error": "rate limit exceeded"}`, http.StatusTooManyRequests)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"choices": [{"text": "Hello!"}], "usage": {"total_tokens": %d}}`, cost)
	}
	url, stop, err := serve(http.HandlerFunc(handle))
	if err != nil {
		return nil, err
	}
	u.url, u.stop = url, stop
	return u, nil
}

// header writes the OpenAI-style fields of one budget.
func header(h http.Header, unit string, limit int, b bucket, now time.Time) {
	h.Set("x-ratelimit-limit-"+unit, strconv.Itoa(limit))
	h.Set("x-ratelimit-remaining-"+unit, strconv.Itoa(int(b.level)))
	h.Set("x-ratelimit-reset-"+unit, b.untilFull().Round(time.Millisecond).String())
}

// bucket is the fake provider's token bucket.
type bucket struct {
	capacity, level, rate float64
	last                  time.Time
}

func (b *bucket) refill(now time.Time) {
	b.level = min(b.capacity, b.level+now.Sub(b.last).Seconds()*b.rate)
	b.last = now
}

func (b *bucket) take(now time.Time, n float64) bool {
	b.refill(now)
	if b.level < n {
		return false
	}
	b.level -= n
	return true
}

func (b *bucket) give(n float64) { b.level = min(b.capacity, b.level+n) }

func (b *bucket) untilFull() time.Duration {
	return time.Duration((b.capacity - b.level) / b.rate * float64(time.Second))
}

// serve serves h on a loopback port.
func serve(h http.Handler) (url string, stop func(), err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Print(err)
		}
	}()
	return "http://" + ln.Addr().String(), func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}
