package httplimit_test

import (
	"fmt"
	"log"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rlkit/ratelimit/httplimit"
)

// An LLM API limits tokens as well as requests, and says so on every
// answer (here OpenAI's x-ratelimit-*-tokens fields: 10,000 tokens a
// minute, a token bucket). The caller gives each request's estimate, its
// max_tokens; the server charges less (3,000 here), and the transport
// learns that from the remaining count it reports. Each request goes as
// soon as the bucket holds its estimate: the first three at once, then
// one every 18 s, the time 3,000 tokens take to come in. None is refused.
func ExampleWithTokenCost() {
	clk := &instantClock{now: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)}
	start := clk.Now()
	const capacity = 10000
	level, last := int64(capacity), start
	network := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		now := clk.Now()
		level = min(capacity, level+int64(now.Sub(last)/time.Millisecond)*capacity/60000)
		last = now
		resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: r}
		if level < 3000 {
			resp.StatusCode = http.StatusTooManyRequests
		} else {
			level -= 3000
		}
		resp.Header.Set("x-ratelimit-limit-tokens", strconv.Itoa(capacity))
		resp.Header.Set("x-ratelimit-remaining-tokens", strconv.FormatInt(level, 10))
		resp.Header.Set("x-ratelimit-reset-tokens", (time.Duration(capacity-level) * time.Minute / capacity).String())
		fmt.Printf("t=%v: %d, %d tokens left\n", now.Sub(start), resp.StatusCode, level)
		return resp, nil
	})
	maxTokens := func(r *http.Request) int {
		n, _ := strconv.Atoi(r.Header.Get("X-Max-Tokens")) // the body's max_tokens, say
		return n
	}
	tr, err := httplimit.NewTransport(network, nil, httplimit.WithClock(clk), httplimit.WithTokenCost(maxTokens))
	if err != nil {
		log.Fatal(err)
	}
	client := &http.Client{Transport: tr}
	for range 5 {
		req, _ := http.NewRequest(http.MethodPost, "http://llm.example/v1/chat/completions", strings.NewReader(`{"max_tokens":4000}`))
		req.Header.Set("X-Max-Tokens", "4000")
		resp, err := client.Do(req)
		if err != nil {
			log.Fatal(err)
		}
		resp.Body.Close()
	}
	// Output:
	// t=0s: 200, 7000 tokens left
	// t=0s: 200, 4000 tokens left
	// t=0s: 200, 1000 tokens left
	// t=18s: 200, 1000 tokens left
	// t=36s: 200, 1000 tokens left
}
