package envoylimit_test

import (
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The algorithms of this library, as extensions of a rate_limit block.
func TestAlgorithmExtensions(t *testing.T) {
	r := serve(t, `
domain: ext
descriptors:
  - key: tb
    rate_limit:
      algorithm: tokenbucket
      unit: second
      requests_per_unit: 2
      burst: 4
  - key: log
    rate_limit:
      algorithm: slidinglog
      window: 30s
      requests_per_unit: 3
  - key: counter
    rate_limit:
      algorithm: slidingcounter
      unit: minute
      requests_per_unit: 10
  - key: leaky
    rate_limit:
      algorithm: leakybucket
      unit: second
      requests_per_unit: 4
      burst: 2
  - key: fixed30
    rate_limit:
      window: 30s
      requests_per_unit: 2
`)
	// Token bucket: a burst of 4, then 2 a second.
	assert.Equal(t, 4, r.okTimes(6, "ext", desc("tb", "a")))
	r.clock.Add(500 * time.Millisecond)
	assert.Equal(t, 1, r.okTimes(3, "ext", desc("tb", "a")))
	st := r.call("ext", desc("tb", "b")).Statuses[0]
	assert.Equal(t, uint32(3), st.GetLimitRemaining())
	assert.Equal(t, uint32(2), st.GetCurrentLimit().GetRequestsPerUnit())
	assert.Equal(t, rlspb.RateLimitResponse_RateLimit_SECOND, st.GetCurrentLimit().GetUnit())
	assert.Equal(t, 500*time.Millisecond, st.GetDurationUntilReset().AsDuration(), "the bucket is full again in half a second")

	// Sliding log of 30 s: no boundary burst.
	r.clock.Add(20 * time.Second) // t = 20.5 s
	assert.Equal(t, 3, r.okTimes(4, "ext", desc("log", "a")))
	r.clock.Add(10 * time.Second) // a fixed 30 s window would have reset at 30 s
	assert.Equal(t, 0, r.okTimes(1, "ext", desc("log", "a")))
	st = r.call("ext", desc("log", "a")).Statuses[0]
	assert.Equal(t, rlspb.RateLimitResponse_RateLimit_UNKNOWN, st.GetCurrentLimit().GetUnit(), "30 s is no unit")
	assert.Equal(t, 20*time.Second, st.GetDurationUntilReset().AsDuration())
	r.clock.Add(20 * time.Second)
	assert.Equal(t, 3, r.okTimes(4, "ext", desc("log", "a")))

	// Leaky bucket: a queue of 2 leaking 4 a second.
	assert.Equal(t, 2, r.okTimes(3, "ext", desc("leaky", "a")))
	r.clock.Add(250 * time.Millisecond)
	assert.Equal(t, 1, r.okTimes(2, "ext", desc("leaky", "a")))

	// A fixed window of 30 s, aligned on the epoch.
	r.clock.Add(time.Duration(30-r.clock.Now().Unix()%30) * time.Second)
	assert.Equal(t, 2, r.okTimes(3, "ext", desc("fixed30", "a")))
	r.clock.Add(29 * time.Second)
	assert.Equal(t, 0, r.okTimes(1, "ext", desc("fixed30", "a")))
	r.clock.Add(time.Second)
	assert.Equal(t, 2, r.okTimes(3, "ext", desc("fixed30", "a")))

	assert.Equal(t, 10, r.okTimes(11, "ext", desc("counter", "a")))
}

// Two limits on one descriptor: both must admit, the status speaks for
// the tighter.
func TestSeveralLimits(t *testing.T) {
	r := serve(t, `
domain: two
descriptors:
  - key: api_key
    rate_limits:
      - unit: second
        requests_per_unit: 3
      - unit: hour
        requests_per_unit: 5
`)
	assert.Equal(t, 3, r.okTimes(4, "two", desc("api_key", "k")))
	r.clock.Add(time.Second)
	resp := r.call("two", desc("api_key", "k"))
	require.Equal(t, "OK", resp.GetOverallCode().String())
	assert.Equal(t, uint32(1), resp.Statuses[0].GetLimitRemaining(), "the hourly limit has 1 left")
	assert.Equal(t, rlspb.RateLimitResponse_RateLimit_HOUR, resp.Statuses[0].GetCurrentLimit().GetUnit())
	assert.Equal(t, 1, r.okTimes(3, "two", desc("api_key", "k")))
	r.clock.Add(time.Second)
	resp = r.call("two", desc("api_key", "k"))
	assert.Equal(t, "OVER_LIMIT", resp.GetOverallCode().String())
	assert.Equal(t, rlspb.RateLimitResponse_RateLimit_HOUR, resp.Statuses[0].GetCurrentLimit().GetUnit())
}

// A calendar quota: a day that starts at 09:00 in a time zone.
func TestCalendarQuota(t *testing.T) {
	r := serve(t, `
domain: quota
descriptors:
  - key: tenant
    rate_limit:
      algorithm: quota
      unit: day
      requests_per_unit: 2
      calendar:
        timezone: Asia/Tokyo
        hour: 9
`)
	// The mock clock starts at 1970-01-01 00:00 UTC = 09:00 in Tokyo.
	assert.Equal(t, 2, r.okTimes(3, "quota", desc("tenant", "t")))
	st := r.call("quota", desc("tenant", "t")).Statuses[0]
	assert.Equal(t, 24*time.Hour, st.GetDurationUntilReset().AsDuration())
	assert.Equal(t, rlspb.RateLimitResponse_RateLimit_DAY, st.GetCurrentLimit().GetUnit())
	r.clock.Add(24*time.Hour - time.Second)
	assert.Equal(t, 0, r.okTimes(1, "quota", desc("tenant", "t")))
	r.clock.Add(time.Second)
	assert.Equal(t, 2, r.okTimes(3, "quota", desc("tenant", "t")))
}
