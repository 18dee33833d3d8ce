//go:build go1.25

package httplimit

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit"
)

// TestSynctestReadsOwnResetHeader: this package's middleware and transport,
// both on the default clock inside a testing/synctest bubble (whose time
// starts in 2000), on a loopback server: the transport reads the
// middleware's X-RateLimit-Reset (a Unix time near 946,684,800) as the
// time it is, and pauses for the window's 3 s. Before, the value was below
// the fixed threshold of 1e9 and read as a delay of 30 years: PausedFor
// was the cap, 1 h. Nothing here waits on the bubble's clock (the
// server's goroutines block on the network, which does not let it move).
func TestSynctestReadsOwnResetHeader(t *testing.T) {
	t.Parallel()
	for _, headers := range []HeaderSet{XRateLimitHeaders, allHeaders} {
		t.Run(map[HeaderSet]string{XRateLimitHeaders: "x-ratelimit", allHeaders: "all"}[headers], func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				require.Less(t, time.Now().Unix(), int64(1e9), "the bubble's clock starts before 2001")
				lim, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(5, 3*time.Second))
				require.NoError(t, err)
				mw, err := New([]Limit{{Name: "w", Key: KeyByIP(), Limiter: lim}}, WithHeaders(headers))
				require.NoError(t, err)
				srv := httptest.NewServer(mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
					_, _ = w.Write([]byte("ok"))
				})))
				defer srv.Close()
				base := &http.Transport{}
				defer base.CloseIdleConnections()
				tr, err := NewTransport(base, nil)
				require.NoError(t, err)
				for i := range 5 {
					resp, err := tr.RoundTrip(mustGet(t, srv.URL))
					require.NoError(t, err)
					_ = resp.Body.Close()
					require.Equal(t, http.StatusOK, resp.StatusCode, "request %d", i)
				}
				// The window of 3 s started with the first request, at a
				// whole second of the bubble's clock: 3 s left, as the
				// middleware rounds up.
				got := tr.PausedFor()
				assert.Greater(t, got, time.Duration(0), "the quota is spent")
				assert.LessOrEqual(t, got, 3*time.Second, "paused until the window's end, not the cap")
			})
		})
	}
}
