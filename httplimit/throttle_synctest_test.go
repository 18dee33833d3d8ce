//go:build go1.25

package httplimit

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/outage"
)

// outageServer is an in-memory server inside the bubble (a real socket
// would not let the bubble's time move): 503 during the outage, 200
// otherwise. It tells retries from first tries by the request: the
// transport sends a body-less request again as it is.
type outageServer struct {
	log    *outage.Log
	client int
	mu     sync.Mutex
	sent   map[*http.Request]bool
}

func (s *outageServer) RoundTrip(r *http.Request) (*http.Response, error) {
	s.mu.Lock()
	retry := s.sent[r]
	s.sent[r] = true
	s.mu.Unlock()
	code := http.StatusOK
	if !s.log.Serve(time.Now(), s.client, retry) {
		code = http.StatusServiceUnavailable
	}
	return &http.Response{StatusCode: code, Header: http.Header{}, Body: io.NopCloser(strings.NewReader("")), Request: r}, nil
}

// TestSynctestThrottleOutage is the client side's proof: ten clients, each
// with its Transport and Throttle (defaults: a one-minute window, K 2,
// retries 10% of requests), send 10 requests a second each, retrying 503s
// up to 3 times; the server fails everything for 30 s, a minute in, then
// recovers. During the outage every attempt the server sees keeps the
// client's attempts in the window below K·accepts + 1 and its retries
// below the budget; in the two windows after, at least 95% of the
// requests succeed.
func TestSynctestThrottleOutage(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sc := outage.Scenario{Start: time.Now(), Down: time.Minute, Up: 90 * time.Second, End: 210 * time.Second,
			Clients: 10, Every: 100 * time.Millisecond, Window: time.Minute, K: 2, Share: 0.1,
			RecoverFor: 2 * time.Minute, Lead: 20 * time.Millisecond, Probe: time.Second}
		log := outage.New(sc)
		var wg sync.WaitGroup
		var throttled [10]int
		for c := range sc.Clients {
			th, err := ratelimit.NewThrottle(ratelimit.ThrottleConfig{})
			require.NoError(t, err)
			srv := &outageServer{log: log, client: c, sent: map[*http.Request]bool{}}
			tr, err := NewTransport(srv, nil, WithThrottle(th), WithRetries(3), WithBackoff(10*time.Millisecond, 20*time.Millisecond))
			require.NoError(t, err)
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; ; i++ {
					at := sc.Start.Add(time.Duration(i) * sc.Every)
					if at.Sub(sc.Start) >= sc.End {
						return
					}
					time.Sleep(time.Until(at))
					req, _ := http.NewRequest(http.MethodGet, "http://api.test/", nil)
					resp, err := tr.RoundTrip(req)
					if errors.Is(err, ErrThrottled) {
						throttled[c]++
					}
					log.Result(at, c, err == nil && resp.StatusCode == http.StatusOK)
					if err == nil {
						_ = resp.Body.Close()
					}
				}
			}()
		}
		wg.Wait()
		f := log.Check()
		total := 0
		for _, n := range throttled {
			total += n
		}
		t.Logf("http: %v; refused locally: %d", f, total)
		assert.Empty(t, f.AttemptViolations, "attempts per window <= K·accepts + 1: %s", f.Violations())
		assert.Empty(t, f.RetryViolations, "retries within the budget: %s", f.Violations())
		assert.GreaterOrEqual(t, f.RecoveredShare(), 0.95, "recovered within two windows")
	})
}
