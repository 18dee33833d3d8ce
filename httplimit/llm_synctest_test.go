//go:build go1.25

package httplimit

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// llmRun is what one run of the proof measured.
type llmRun struct {
	dialect          string
	callers, jobs    int
	elapsed, minimum time.Duration
	refused, ok      int
	blindRefused     int // 429s to the first round, sent before any answer
	charged          int64
}

func (r llmRun) ratio() float64 { return float64(r.elapsed) / float64(r.minimum) }

func (r llmRun) String() string {
	return fmt.Sprintf("%-9s callers=%2d jobs=%d tokens=%d elapsed=%v minimum=%v ratio=%.3f 429s=%d (blind %d)",
		r.dialect, r.callers, r.jobs, r.charged, r.elapsed.Round(time.Millisecond), r.minimum.Round(time.Millisecond), r.ratio(),
		r.refused, r.blindRefused)
}

// runLLM sends jobs completions, each with a random estimate (its
// max_tokens) between lo and hi, from callers goroutines through a
// Transport with WithTokenCost, to an llmProvider of 20,000 tokens and
// 1,000 requests a minute speaking dialect, on a loopback server. The
// Transport's clock is a testing/synctest bubble's: time moves only when
// every caller waits (a request out blocks it, as if the network took no
// time), so the run is exact and takes no real time. A caller refused
// sends its job again. The first round, one request per caller, is held
// by the server until all of it has arrived: blind, sent before the
// transport could know the budgets.
func runLLM(t *testing.T, dialect string, callers, jobs int, lo, hi int64) llmRun {
	t.Helper()
	p := &llmProvider{dialect: dialect, window: time.Minute, rpm: 1000, tpm: 20000, hold: min(callers, jobs)}
	p.gate.Add(p.hold)
	srv := httptest.NewServer(p) // outside the bubble: its goroutines block on the network
	defer srv.Close()
	rng := rand.New(rand.NewPCG(27, uint64(len(dialect))))
	ests := make([]int64, jobs)
	for i := range ests {
		ests[i] = lo + rng.Int64N(hi-lo+1)
	}
	run := llmRun{dialect: dialect, callers: callers, jobs: jobs, minimum: p.minimum(ests)}
	synctest.Test(t, func(t *testing.T) {
		base := &http.Transport{DisableKeepAlives: true} // no idle connection blocks the bubble
		defer base.CloseIdleConnections()
		tr, err := NewTransport(stampNow{base}, nil, WithTokenCost(func(r *http.Request) int {
			n, _ := strconv.Atoi(r.URL.Query().Get("max_tokens"))
			return n
		}))
		require.NoError(t, err)
		start := time.Now()
		var next atomic.Int64
		var wg sync.WaitGroup
		for range callers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for job := next.Add(1) - 1; job < int64(jobs); job = next.Add(1) - 1 {
					for attempt := 0; ; attempt++ {
						url := fmt.Sprintf("%s/v1/messages?job=%d&max_tokens=%d", srv.URL, job, ests[job])
						req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, url, nil)
						require.NoError(t, err)
						resp, err := tr.RoundTrip(req)
						if !assert.NoError(t, err) {
							return
						}
						_, _ = io.Copy(io.Discard, resp.Body)
						_ = resp.Body.Close()
						if resp.StatusCode == http.StatusOK {
							break
						}
						if !assert.Less(t, attempt, 10, "job %d refused again and again", job) {
							return
						}
					}
				}
			}()
		}
		wg.Wait()
		run.elapsed = time.Since(start)
	})
	p.mu.Lock()
	run.refused, run.ok, run.charged, run.blindRefused = p.refused, p.ok, p.charged, p.blind
	p.mu.Unlock()
	return run
}

// TestTransportPacesLLMBudgets is the proof of the LLM dialects: against
// a provider limiting requests and tokens per minute, whose true token
// charge the client does not know, the Transport paced by either dialect,
// with 1 and with 16 callers, is never refused, and finishes within 10%
// of the least time the token budget allows.
func TestTransportPacesLLMBudgets(t *testing.T) {
	// Not parallel with the other tests: its 16 callers load the CPU, and
	// tests that wait in real time would wait longer.
	for _, dialect := range []string{"openai", "anthropic"} {
		for _, callers := range []int{1, 16} {
			t.Run(fmt.Sprintf("%s/%d", dialect, callers), func(t *testing.T) {
				t.Parallel()
				run := runLLM(t, dialect, callers, 400, 200, 1000)
				t.Log(run)
				assert.Equal(t, 400, run.ok)
				assert.Zero(t, run.refused, "429s")
				assert.GreaterOrEqual(t, run.ratio(), 1.0, "faster than the buckets allow: the fake is wrong")
				assert.LessOrEqual(t, run.ratio(), 1.10, "more than 10%% over the least time")
			})
		}
	}
}

// TestTransportPacesLLMBudgetsBlindBurst: 16 callers whose first round
// (estimates of 2,000 to 4,000 tokens, sent before any answer) overflows
// the 20,000-token bucket: those refused pause for their Retry-After and
// a probe, and no request sent after an answer came back is refused. With
// estimates this large against the bucket (a fifth of it each, charged
// 62% of it on average), a request waits for its estimate where the
// least time counts what the server charged: 3-9% over it in 40 runs, so
// the bound here is 15%.
func TestTransportPacesLLMBudgetsBlindBurst(t *testing.T) {
	// Not parallel with the other tests: its 16 callers load the CPU, and
	// tests that wait in real time would wait longer.
	for _, dialect := range []string{"openai", "anthropic"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			run := runLLM(t, dialect, 16, 200, 2000, 4000)
			t.Log(run)
			assert.Equal(t, 200, run.ok)
			assert.Positive(t, run.blindRefused, "the blind round overflows the bucket")
			assert.Equal(t, run.blindRefused, run.refused, "429s to requests sent after an answer came back")
			assert.GreaterOrEqual(t, run.ratio(), 1.0)
			assert.LessOrEqual(t, run.ratio(), 1.15)
		})
	}
}
