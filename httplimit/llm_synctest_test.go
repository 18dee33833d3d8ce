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
	charged          int64
}

func (r llmRun) ratio() float64 { return float64(r.elapsed) / float64(r.minimum) }

func (r llmRun) String() string {
	return fmt.Sprintf("%-9s callers=%2d jobs=%d tokens=%d elapsed=%v minimum=%v ratio=%.3f 429s=%d",
		r.dialect, r.callers, r.jobs, r.charged, r.elapsed.Round(time.Millisecond), r.minimum.Round(time.Millisecond), r.ratio(), r.refused)
}

// runLLM sends jobs completions, each with a random estimate (its
// max_tokens) between 200 and 1000, from callers goroutines through a
// Transport with WithTokenCost, to an llmProvider of 20,000 tokens and
// 1,000 requests a minute speaking dialect, on a loopback server. The
// Transport's clock is a testing/synctest bubble's: time moves only when
// every caller waits (a request out blocks it, as if the network took no
// time), so the run is exact and takes no real time. A caller refused
// sends its job again.
func runLLM(t *testing.T, dialect string, callers, jobs int) llmRun {
	t.Helper()
	p := &llmProvider{dialect: dialect, window: time.Minute, rpm: 1000, tpm: 20000}
	srv := httptest.NewServer(p) // outside the bubble: its goroutines block on the network
	defer srv.Close()
	rng := rand.New(rand.NewPCG(27, uint64(len(dialect))))
	ests := make([]int64, jobs)
	for i := range ests {
		ests[i] = 200 + rng.Int64N(801)
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
	run.refused, run.ok, run.charged = p.refused, p.ok, p.charged
	p.mu.Unlock()
	return run
}

// TestTransportPacesLLMBudgets is the proof of the LLM dialects: against
// a provider limiting requests and tokens per minute, whose true token
// charge the client does not know, the Transport paced by either dialect,
// with 1 and with 16 callers, is never refused, and finishes within 10%
// of the least time the token budget allows.
func TestTransportPacesLLMBudgets(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"openai", "anthropic"} {
		for _, callers := range []int{1, 16} {
			t.Run(fmt.Sprintf("%s/%d", dialect, callers), func(t *testing.T) {
				t.Parallel()
				run := runLLM(t, dialect, callers, 400)
				t.Log(run)
				assert.Equal(t, 400, run.ok)
				assert.Zero(t, run.refused, "429s")
				assert.GreaterOrEqual(t, run.ratio(), 1.0, "faster than the buckets allow: the fake is wrong")
				assert.LessOrEqual(t, run.ratio(), 1.10, "more than 10%% over the least time")
			})
		}
	}
}
