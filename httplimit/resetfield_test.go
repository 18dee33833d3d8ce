package httplimit

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// resetPolicies are one policy of every algorithm, each with a quota of 3
// whose reset (full again) comes later than the first retry can succeed,
// except for the windows, where both are the window's end.
var resetPolicies = []ratelimit.Policy{
	ratelimit.TokenBucketPolicy(ratelimit.Per(1, 10*time.Second), 3),
	ratelimit.LeakyBucketPolicy(3, 10*time.Second),
	ratelimit.FixedWindowPolicy(3, time.Minute),
	ratelimit.SlidingLogPolicy(3, time.Minute),
	ratelimit.SlidingCounterPolicy(3, time.Minute),
	ratelimit.QuotaPolicy(3, ratelimit.Calendar{Unit: ratelimit.Daily, Location: time.UTC}),
}

// TestRateLimitTIsReset: the t of the RateLimit field has one meaning on
// every answer, admitted or refused, for every algorithm: the seconds until
// the quota is full again, the instant X-RateLimit-Reset names (both
// rounded up: t == reset - now when now is a whole second, and they differ
// by less than a second otherwise). Retry-After alone says when a refused
// request could succeed. Real server on loopback, mock clock.
func TestRateLimitTIsReset(t *testing.T) {
	t.Parallel()
	for _, p := range resetPolicies {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			t.Parallel()
			mock := fakeclock.New(epoch.Add(30 * time.Second))
			mw := newMW(t, []Limit{{Name: "api", Key: KeyByHeader("X-API-Key"), Limiter: newKeyed(t, p, mock)}}, WithClock(mock))
			srv := httptest.NewServer(mw.Handler(okHandler))
			t.Cleanup(srv.Close)
			client := srv.Client()
			var refusals, differ int
			// Steps at whole seconds first, then at 0.7 s past them.
			for i, step := range []time.Duration{0, time.Second, time.Second, 2 * time.Second, 700 * time.Millisecond, time.Second, 300 * time.Millisecond, 5 * time.Second} {
				mock.Add(step)
				req, err := http.NewRequest("GET", srv.URL, nil)
				require.NoError(t, err)
				req.Header.Set("X-API-Key", "k")
				resp, err := client.Do(req)
				require.NoError(t, err)
				_ = resp.Body.Close()
				now := mock.Now()
				items, err := parseSFList(resp.Header.Get("RateLimit"))
				require.NoError(t, err, "request %d: RateLimit %q", i, resp.Header.Get("RateLimit"))
				require.Len(t, items, 1, "request %d", i)
				tv, ok := items[0].param("t")
				require.True(t, ok, "request %d (%d): RateLimit %q has no t", i, resp.StatusCode, resp.Header.Get("RateLimit"))
				tSecs := tv.(int64)
				reset, err := strconv.ParseInt(resp.Header.Get("X-RateLimit-Reset"), 10, 64)
				require.NoError(t, err)
				untilReset := time.Duration(reset*int64(time.Second) - now.UnixNano())
				if now.Nanosecond() == 0 {
					assert.Equal(t, time.Duration(tSecs)*time.Second, untilReset, "request %d (%d) at %v: t=%d, X-RateLimit-Reset - now = %v", i, resp.StatusCode, now, tSecs, untilReset)
				} else {
					assert.Less(t, (time.Duration(tSecs)*time.Second - untilReset).Abs(), time.Second, "request %d (%d) at %v: t=%d, X-RateLimit-Reset - now = %v", i, resp.StatusCode, now, tSecs, untilReset)
				}
				if resp.StatusCode == http.StatusTooManyRequests {
					refusals++
					retry, err := strconv.ParseInt(resp.Header.Get("Retry-After"), 10, 64)
					require.NoError(t, err, "request %d: Retry-After", i)
					assert.LessOrEqual(t, retry, tSecs, "request %d: Retry-After %d after the reset t=%d", i, retry, tSecs)
					if retry != tSecs {
						differ++
					}
				}
			}
			require.NotZero(t, refusals, "no request was refused: the test checks no 429")
			if p.Algorithm == ratelimit.TokenBucketAlgorithm || p.Algorithm == ratelimit.LeakyBucketAlgorithm || p.Algorithm == ratelimit.SlidingLogAlgorithm {
				assert.NotZero(t, differ, "every refusal's Retry-After equalled t: the test cannot tell the two apart")
			}
		})
	}
}
