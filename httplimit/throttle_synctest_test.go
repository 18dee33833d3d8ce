//go:build go1.25

package httplimit

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
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

// TestSynctestThrottleOutage, over outage.Scenarios (ten clients with a
// Transport and a Throttle each, a 30 s and a 5 min outage): during the outage every attempt the server
// sees, probes aside, keeps the client's attempts in the window below
// K·accepts + 1, and every retry its retries below the budget; in the two
// windows after, at least 95% of the requests succeed.
func TestSynctestThrottleOutage(t *testing.T) {
	t.Parallel()
	for name, sc := range outage.Scenarios() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				sc.Start = time.Now()
				log := outage.New(sc)
				trs := make([]*Transport, sc.Clients)
				for c := range trs {
					th, err := ratelimit.NewThrottle(ratelimit.ThrottleConfig{})
					require.NoError(t, err)
					trs[c], err = NewTransport(&outageServer{log: log, client: c, sent: map[*http.Request]bool{}}, nil,
						WithThrottle(th), WithRetries(3), WithBackoff(10*time.Millisecond, 20*time.Millisecond))
					require.NoError(t, err)
				}
				var throttled atomic.Int64
				log.Run(func(c int) bool {
					req, _ := http.NewRequest(http.MethodGet, "http://api.test/", nil)
					resp, err := trs[c].RoundTrip(req)
					if errors.Is(err, ErrThrottled) {
						throttled.Add(1)
					}
					if err != nil {
						return false
					}
					_ = resp.Body.Close()
					return resp.StatusCode == http.StatusOK
				})
				f := log.Check()
				t.Logf("http, %s outage: %v; refused locally: %d", name, f, throttled.Load())
				assert.Empty(t, f.AttemptViolations, "attempts per window <= K·accepts + 1: %s", f.Violations())
				assert.Empty(t, f.RetryViolations, "retries within the budget: %s", f.Violations())
				assert.GreaterOrEqual(t, f.RecoveredShare(), 0.95, "recovered within two windows")
				assert.Positive(t, f.OutageRetries, "the refusals' retries were sent")
			})
		})
	}
}
