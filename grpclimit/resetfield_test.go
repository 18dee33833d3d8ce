package grpclimit_test

import (
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/grpclimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// rateLimitItem matches the one item of a ratelimit field the interceptors
// write, such as "api";r=0;t=26.
var rateLimitItem = regexp.MustCompile(`^"api";r=(\d+);t=(\d+)$`)

// TestRateLimitTIsReset: the t of the ratelimit field has one meaning on
// every answer, admitted or refused, for every algorithm: the seconds until
// the quota is full again, the instant x-ratelimit-reset names (both
// rounded up: t == reset - now when now is a whole second, and they differ
// by less than a second otherwise). retry-after and RetryInfo alone say
// when a refused call could succeed. Real server on loopback, mock clock.
func TestRateLimitTIsReset(t *testing.T) {
	t.Parallel()
	for _, p := range []ratelimit.Policy{
		ratelimit.TokenBucketPolicy(ratelimit.Per(1, 10*time.Second), 3),
		ratelimit.LeakyBucketPolicy(3, 10*time.Second),
		ratelimit.FixedWindowPolicy(3, time.Minute),
		ratelimit.SlidingLogPolicy(3, time.Minute),
		ratelimit.SlidingCounterPolicy(3, time.Minute),
		ratelimit.QuotaPolicy(3, ratelimit.Calendar{Unit: ratelimit.Daily, Location: time.UTC}),
	} {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			t.Parallel()
			mock := fakeclock.New(epoch.Add(30 * time.Second))
			ic := newIC(t, []grpclimit.Limit{{Name: "api", Key: grpclimit.KeyByMetadata("x-api-key"), Limiter: newKeyed(t, p, mock)}}, grpclimit.WithClock(mock))
			c := serve(t, &testService{}, ic)
			var refusals, differ int
			// Steps at whole seconds first, then at 0.7 s past them.
			for i, step := range []time.Duration{0, time.Second, time.Second, 2 * time.Second, 700 * time.Millisecond, time.Second, 300 * time.Millisecond, 5 * time.Second} {
				mock.Add(step)
				md, err := unary(t, c, "k")
				now := mock.Now()
				f := fieldsOf(md)
				m := rateLimitItem.FindStringSubmatch(f.ratelimit)
				require.NotNil(t, m, "call %d (%v): ratelimit %q", i, status.Code(err), f.ratelimit)
				tSecs, _ := strconv.ParseInt(m[2], 10, 64)
				reset, err2 := strconv.ParseInt(f.reset, 10, 64)
				require.NoError(t, err2)
				untilReset := time.Duration(reset*int64(time.Second) - now.UnixNano())
				if now.Nanosecond() == 0 {
					assert.Equal(t, time.Duration(tSecs)*time.Second, untilReset, "call %d (%v) at %v: t=%d, x-ratelimit-reset - now = %v", i, status.Code(err), now, tSecs, untilReset)
				} else {
					assert.Less(t, (time.Duration(tSecs)*time.Second - untilReset).Abs(), time.Second, "call %d (%v) at %v: t=%d, x-ratelimit-reset - now = %v", i, status.Code(err), now, tSecs, untilReset)
				}
				if status.Code(err) == codes.ResourceExhausted {
					refusals++
					retry, err := strconv.ParseInt(f.retry, 10, 64)
					require.NoError(t, err, "call %d: retry-after", i)
					assert.LessOrEqual(t, retry, tSecs, "call %d: retry-after %d after the reset t=%d", i, retry, tSecs)
					if retry != tSecs {
						differ++
					}
				} else {
					require.NoError(t, err, "call %d", i)
				}
			}
			require.NotZero(t, refusals, "no call was refused: the test checks no denial")
			if p.Algorithm == ratelimit.TokenBucketAlgorithm || p.Algorithm == ratelimit.LeakyBucketAlgorithm || p.Algorithm == ratelimit.SlidingLogAlgorithm {
				assert.NotZero(t, differ, "every refusal's retry-after equalled t: the test cannot tell the two apart")
			}
		})
	}
}
