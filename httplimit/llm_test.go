package httplimit

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit/internal/hints"
	"github.com/rlkit/ratelimit/internal/pacer"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// llmProvider is a fake LLM API: a requests-per-window and a
// tokens-per-window token bucket, each full at the start and refilled
// continuously (as Anthropic documents its limits; OpenAI's reset, "the
// time until the rate limit resets to its initial state", reads the
// same). A request names its job and its estimate (?job=&max_tokens=);
// its true cost, drawn from the job between a quarter of the estimate and
// the estimate, is known only to the server. A request the buckets cannot
// take is refused 429 with a Retry-After; every answer carries the
// buckets' state in one dialect ("openai" or "anthropic", whose remaining
// tokens are rounded to the nearest thousand, as Anthropic documents),
// with a Date.
//
// The first hold requests are held until all have arrived, then decided:
// they are the blind round, sent before the client could know the
// budgets, whatever the goroutines' timing; blindRefused counts their
// 429s.
//
// Time is the client's: each request carries its clock's reading in
// X-Fake-Now (UnixNano), so that a server outside a testing/synctest
// bubble runs on the bubble's time, exactly.
type llmProvider struct {
	dialect string
	window  time.Duration
	rpm     int64 // requests per window, the requests bucket's capacity
	tpm     int64 // tokens per window, the tokens bucket's capacity
	hold    int
	gate    sync.WaitGroup // Add(hold) before the first request

	mu       sync.Mutex
	arrivals int
	started  bool
	last     int64 // UnixNano of the last refill
	reqLevel int64 // requests × window in ns
	tokLevel int64 // tokens × window in ns
	ok       int
	refused  int
	blind    int   // refusals of the held round
	charged  int64 // true tokens charged
	lastOK   time.Time
}

// trueCost is what the server charges job for an estimate of est: within
// [est/4, est], from the job alone.
func trueCost(job, est int64) int64 {
	h := uint64(job)*0x9e3779b97f4a7c15 + 1
	h ^= h >> 29
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 32
	lo := max(est/4, 1)
	return lo + int64(h%uint64(est-lo+1))
}

func (p *llmProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ns, err := strconv.ParseInt(r.Header.Get("X-Fake-Now"), 10, 64)
	job, err2 := strconv.ParseInt(r.URL.Query().Get("job"), 10, 64)
	est, err3 := strconv.ParseInt(r.URL.Query().Get("max_tokens"), 10, 64)
	if err != nil || err2 != nil || err3 != nil || est <= 0 {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	cost := trueCost(job, est)
	now := time.Unix(0, ns)
	W := int64(p.window)
	p.mu.Lock()
	idx := p.arrivals
	p.arrivals++
	p.mu.Unlock()
	if idx < p.hold {
		p.gate.Done()
		p.gate.Wait()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.started {
		p.started, p.last = true, ns
		p.reqLevel, p.tokLevel = p.rpm*W, p.tpm*W
	}
	if el := ns - p.last; el > 0 {
		p.reqLevel = min(p.reqLevel+el*p.rpm, p.rpm*W)
		p.tokLevel = min(p.tokLevel+el*p.tpm, p.tpm*W)
		p.last = ns
	}
	status := http.StatusOK
	if p.reqLevel < W || p.tokLevel < cost*W {
		status = http.StatusTooManyRequests
		wait := max(ceilDiv64(W-p.reqLevel, p.rpm), ceilDiv64(cost*W-p.tokLevel, p.tpm))
		w.Header().Set("Retry-After", strconv.FormatInt(ceilDiv64(wait, int64(time.Second)), 10))
		p.refused++
		if idx < p.hold {
			p.blind++
		}
	} else {
		p.reqLevel -= W
		p.tokLevel -= cost * W
		p.ok++
		p.charged += cost
		p.lastOK = now
	}
	h := w.Header()
	h.Set("Date", now.UTC().Format(http.TimeFormat))
	p.writeBudget(h, "requests", p.rpm, p.reqLevel, now)
	p.writeBudget(h, "tokens", p.tpm, p.tokLevel, now)
	w.WriteHeader(status)
	_, _ = fmt.Fprintf(w, `{"usage":{"total_tokens":%d}}`, cost)
}

// writeBudget writes one bucket's limit, remaining and reset (the time
// until it is full) in the provider's dialect. Requires p.mu held.
func (p *llmProvider) writeBudget(h http.Header, unit string, limit, level int64, now time.Time) {
	W := int64(p.window)
	remaining := level / W
	full := time.Duration(ceilDiv64(limit*W-level, limit)) // ns until full
	switch p.dialect {
	case "openai":
		h.Set("x-ratelimit-limit-"+unit, strconv.FormatInt(limit, 10))
		h.Set("x-ratelimit-remaining-"+unit, strconv.FormatInt(remaining, 10))
		h.Set("x-ratelimit-reset-"+unit, ceilTo(full, time.Millisecond).String()) // "59.123s", "1m0s"
	case "anthropic":
		if unit == "tokens" {
			remaining = (remaining + 500) / 1000 * 1000 // "rounded to the nearest thousand"
		}
		h.Set("anthropic-ratelimit-"+unit+"-limit", strconv.FormatInt(limit, 10))
		h.Set("anthropic-ratelimit-"+unit+"-remaining", strconv.FormatInt(remaining, 10))
		at := now.Add(full)
		if t := at.Truncate(time.Second); t.Before(at) {
			at = t.Add(time.Second) // whole seconds, rounded up
		}
		h.Set("anthropic-ratelimit-"+unit+"-reset", at.UTC().Format(time.RFC3339))
	}
}

// minimum returns the least time from the first request until the last
// of jobs (with their estimates) can be admitted: the buckets start full
// and refill at their rates, so the total charged beyond the capacity
// takes that long to come in.
func (p *llmProvider) minimum(ests []int64) time.Duration {
	var total int64
	for job, est := range ests {
		total += trueCost(int64(job), est)
	}
	tok := time.Duration(max(total-p.tpm, 0) * int64(p.window) / p.tpm)
	req := time.Duration(max(int64(len(ests))-p.rpm, 0) * int64(p.window) / p.rpm)
	return max(tok, req)
}

func ceilDiv64(a, b int64) int64 {
	if a <= 0 {
		return 0
	}
	return (a + b - 1) / b
}

func ceilTo(d, unit time.Duration) time.Duration {
	return time.Duration(ceilDiv64(int64(d), int64(unit))) * unit
}

// stampNow is the base transport of the proof: it puts its clock's time
// in each request, for llmProvider.
type stampNow struct{ base http.RoundTripper }

func (s stampNow) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Fake-Now", strconv.FormatInt(time.Now().UnixNano(), 10))
	return s.base.RoundTrip(r)
}

// TestTransportIgnoresLLMGarbage: the -1 and 0 an Azure OpenAI gateway
// sends for quotas it does not know never pause the transport, and never
// lift a pause a true answer asked for.
func TestTransportIgnoresLLMGarbage(t *testing.T) {
	t.Parallel()
	clk := fakeclock.New(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	garbage := func(h http.Header) {
		h.Set("x-ratelimit-limit-tokens", "-1")
		h.Set("x-ratelimit-remaining-tokens", "-1")
		h.Set("x-ratelimit-reset-tokens", "0")
		h.Set("x-ratelimit-limit-requests", "0")
		h.Set("x-ratelimit-remaining-requests", "0")
		h.Set("x-ratelimit-reset-requests", "0")
		h.Set("anthropic-ratelimit-tokens-limit", "-1")
		h.Set("anthropic-ratelimit-tokens-remaining", "0")
		h.Set("anthropic-ratelimit-tokens-reset", "0")
	}
	var mu sync.Mutex
	answer := garbage
	base := rtFunc(func(r *http.Request) (*http.Response, error) {
		resp := &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody, Request: r}
		mu.Lock()
		answer(resp.Header)
		mu.Unlock()
		return resp, nil
	})
	var pauses int
	tr, err := NewTransport(base, nil, WithClock(clk), WithTokenCost(func(*http.Request) int { return 500 }),
		WithPauseHook(func(*http.Request, *http.Response, time.Duration) { pauses++ }))
	require.NoError(t, err)
	for i := range 50 {
		resp, err := tr.RoundTrip(mustGet(t, "http://llm.example/"))
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Zero(t, tr.PausedFor(), "after garbage answer %d", i)
	}
	assert.Zero(t, pauses)
	// A true answer: no request left for 10 s (no limit stated: a probe then).
	mu.Lock()
	answer = func(h http.Header) {
		h.Set("x-ratelimit-remaining-requests", "0")
		h.Set("x-ratelimit-reset-requests", "10s")
	}
	mu.Unlock()
	_, err = tr.RoundTrip(mustGet(t, "http://llm.example/"))
	require.NoError(t, err)
	assert.Equal(t, 10*time.Second, tr.PausedFor())
	assert.Equal(t, 1, pauses)
	// A garbage answer that comes in later (a request answered late, or
	// noted) lifts nothing.
	h := http.Header{}
	garbage(h)
	parsed := hints.Parse(h.Values, clk.Now())
	tr.pacer.Note("", clk.Now(), pacer.Answer{Hints: &parsed})
	assert.Equal(t, 10*time.Second, tr.PausedFor())
	assert.Equal(t, 1, pauses)
}

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
