package envoylimit_test

import (
	"testing"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typepb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/rlkit/ratelimit/envoylimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

const perMinute = `
domain: d
descriptors:
  - key: user
    rate_limit:
      unit: minute
      requests_per_unit: 5
  - key: path
    rate_limit:
      name: path_limit
      unit: minute
      requests_per_unit: 3
`

// Every status carries the limit, what remains and when it resets.
func TestStatusFields(t *testing.T) {
	r := serve(t, perMinute)
	r.clock.Add(20 * time.Second)
	resp := r.call("d", desc("user", "alice"), desc("path", "/a"), desc("other", "x"))
	require.Equal(t, []string{"OK", "OK", "OK", "OK"}, codesOf(resp))
	user, path, other := resp.Statuses[0], resp.Statuses[1], resp.Statuses[2]
	assert.Equal(t, uint32(5), user.GetCurrentLimit().GetRequestsPerUnit())
	assert.Equal(t, rlspb.RateLimitResponse_RateLimit_MINUTE, user.GetCurrentLimit().GetUnit())
	assert.Equal(t, uint32(4), user.GetLimitRemaining())
	assert.Equal(t, 40*time.Second, user.GetDurationUntilReset().AsDuration(), "the window ends on the minute")
	assert.Equal(t, "path_limit", path.GetCurrentLimit().GetName())
	assert.Equal(t, uint32(2), path.GetLimitRemaining())
	assert.Nil(t, other.GetCurrentLimit(), "no limit for an unknown descriptor")
	assert.Nil(t, other.GetDurationUntilReset())

	for range 2 {
		r.call("d", desc("path", "/a"))
	}
	resp = r.call("d", desc("path", "/a"))
	assert.Equal(t, []string{"OVER_LIMIT", "OVER_LIMIT"}, codesOf(resp))
	assert.Equal(t, uint32(0), resp.Statuses[0].GetLimitRemaining())
	assert.Equal(t, 40*time.Second, resp.Statuses[0].GetDurationUntilReset().AsDuration())
}

// hits_addend: the request's (0 means 1) and a descriptor's own (0 only
// looks); hits beyond what remains are denied and not charged.
func TestHitsAddend(t *testing.T) {
	r := serve(t, perMinute)
	resp, err := r.send(&rlspb.RateLimitRequest{Domain: "d", HitsAddend: 3, Descriptors: []*rlcommon.RateLimitDescriptor{desc("user", "u")}})
	require.NoError(t, err)
	assert.Equal(t, uint32(2), resp.Statuses[0].GetLimitRemaining())
	// 3 more do not fit in the 2 left: denied, nothing charged.
	resp, err = r.send(&rlspb.RateLimitRequest{Domain: "d", HitsAddend: 3, Descriptors: []*rlcommon.RateLimitDescriptor{desc("user", "u")}})
	require.NoError(t, err)
	assert.Equal(t, []string{"OVER_LIMIT", "OVER_LIMIT"}, codesOf(resp))
	assert.Equal(t, uint32(2), resp.Statuses[0].GetLimitRemaining(), "a denied request is not counted")
	// A descriptor's own hits_addend wins over the request's; 0 only looks.
	resp, err = r.send(&rlspb.RateLimitRequest{Domain: "d", HitsAddend: 3, Descriptors: []*rlcommon.RateLimitDescriptor{withHits(desc("user", "u"), 0)}})
	require.NoError(t, err)
	assert.Equal(t, []string{"OK", "OK"}, codesOf(resp))
	assert.Equal(t, uint32(2), resp.Statuses[0].GetLimitRemaining())
	resp = r.call("d", withHits(desc("user", "u"), 2))
	assert.Equal(t, uint32(0), resp.Statuses[0].GetLimitRemaining())
	// Exhausted: a look still answers OK (nothing is asked), one more hit does not.
	assert.Equal(t, []string{"OK", "OK"}, codesOf(r.call("d", withHits(desc("user", "u"), 0))))
	assert.Equal(t, []string{"OVER_LIMIT", "OVER_LIMIT"}, codesOf(r.call("d", desc("user", "u"))))
	// More hits than the limit can ever hold.
	assert.Equal(t, []string{"OVER_LIMIT", "OVER_LIMIT"}, codesOf(r.call("d", withHits(desc("user", "v"), 6))))
	assert.Equal(t, uint32(4), r.call("d", desc("user", "v")).Statuses[0].GetLimitRemaining())
}

// A request is all or nothing: the descriptors that would admit it are
// not charged when another denies it.
func TestAllOrNothing(t *testing.T) {
	r := serve(t, perMinute)
	for range 3 {
		require.Equal(t, "OK", r.call("d", desc("user", "u"), desc("path", "/p")).GetOverallCode().String())
	}
	resp := r.call("d", desc("user", "u"), desc("path", "/p"))
	assert.Equal(t, []string{"OVER_LIMIT", "OK", "OVER_LIMIT"}, codesOf(resp))
	assert.Equal(t, uint32(2), resp.Statuses[0].GetLimitRemaining(), "user was not charged by the denied request")
	assert.Equal(t, 2, r.okTimes(3, "d", desc("user", "u")))
}

// A descriptor's own limit (Envoy's limit override) replaces the
// configuration's: a fixed window of its requests per unit, for its
// entries.
func TestLimitOverride(t *testing.T) {
	r := serve(t, perMinute)
	over := func(d *rlcommon.RateLimitDescriptor, rpu uint32, unit rlspb.RateLimitResponse_RateLimit_Unit) *rlcommon.RateLimitDescriptor {
		d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: corepbUnit(unit)}
		return d
	}
	assert.Equal(t, 2, r.okTimes(4, "d", over(desc("user", "u"), 2, rlspb.RateLimitResponse_RateLimit_HOUR)))
	resp := r.call("d", over(desc("user", "w"), 2, rlspb.RateLimitResponse_RateLimit_HOUR))
	assert.Equal(t, uint32(2), resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit())
	assert.Equal(t, rlspb.RateLimitResponse_RateLimit_HOUR, resp.Statuses[0].GetCurrentLimit().GetUnit())
	assert.Equal(t, time.Hour, resp.Statuses[0].GetDurationUntilReset().AsDuration())
	// The configuration's limit for the same entries is apart, and intact.
	assert.Equal(t, uint32(4), r.call("d", desc("user", "u")).Statuses[0].GetLimitRemaining())
	// Applies to descriptors the configuration does not know too, but not
	// in a domain it lacks (as in envoyproxy/ratelimit).
	assert.Equal(t, 1, r.okTimes(2, "d", over(desc("k", "v"), 1, rlspb.RateLimitResponse_RateLimit_SECOND)))
	r.clock.Add(time.Second)
	assert.Equal(t, 2, r.okTimes(2, "other", over(desc("k", "v"), 1, rlspb.RateLimitResponse_RateLimit_SECOND)))
	// 0 per unit denies; an unknown unit is an error.
	assert.Equal(t, "OVER_LIMIT", r.call("d", over(desc("k", "v"), 0, rlspb.RateLimitResponse_RateLimit_SECOND)).GetOverallCode().String())
	_, err := r.send(&rlspb.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{over(desc("k", "v"), 1, rlspb.RateLimitResponse_RateLimit_UNKNOWN)}})
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.ErrorContains(t, err, "ratelimit: envoylimit: descriptor 0's limit has unit UNKNOWN")
}

func corepbUnit(u rlspb.RateLimitResponse_RateLimit_Unit) typepb.RateLimitUnit {
	return typepb.RateLimitUnit(u)
}

// Bad requests are errors that say what is wrong.
func TestBadRequests(t *testing.T) {
	r := serve(t, perMinute)
	for _, tc := range []struct {
		req  *rlspb.RateLimitRequest
		want string
	}{
		{&rlspb.RateLimitRequest{Descriptors: []*rlcommon.RateLimitDescriptor{desc("user", "u")}}, "domain is empty"},
		{&rlspb.RateLimitRequest{Domain: "d"}, "no descriptors"},
	} {
		_, err := r.send(tc.req)
		assert.Equal(t, codes.InvalidArgument, status.Code(err))
		assert.ErrorContains(t, err, "ratelimit: envoylimit: ")
		assert.ErrorContains(t, err, tc.want)
	}
	assert.Equal(t, 5, r.okTimes(6, "d", desc("user", "u")), "nothing was charged by the bad requests")
}

func headerMap(hs []*corepb.HeaderValue) map[string]string {
	m := map[string]string{}
	for _, h := range hs {
		m[h.GetKey()] = h.GetValue()
	}
	return m
}

// The response's headers describe the descriptor closest to its limit, or
// the one that denied.
func TestResponseHeaders(t *testing.T) {
	r := serve(t, perMinute, envoylimit.WithHeaders(envoylimit.EnvoyHeaders))
	r.clock.Add(15 * time.Second)
	resp := r.call("d", desc("user", "u"), desc("path", "/p"))
	assert.Equal(t, map[string]string{"RateLimit-Limit": "3", "RateLimit-Remaining": "2", "RateLimit-Reset": "45"}, headerMap(resp.GetResponseHeadersToAdd()))
	r.call("d", desc("path", "/p"))
	r.call("d", desc("path", "/p"))
	resp = r.call("d", desc("user", "u"), desc("path", "/p"))
	assert.Equal(t, map[string]string{"RateLimit-Limit": "3", "RateLimit-Remaining": "0", "RateLimit-Reset": "45"}, headerMap(resp.GetResponseHeadersToAdd()))

	ietf := serve(t, perMinute, envoylimit.WithHeaders(envoylimit.IETFHeaders))
	resp = ietf.call("d", desc("path", "/p"))
	assert.Equal(t, map[string]string{
		"Ratelimit-Policy": `"d.path";q=3;w=60`,
		"Ratelimit":        `"d.path";r=2;t=60`,
	}, headerMap(resp.GetResponseHeadersToAdd()))

	none := serve(t, perMinute)
	assert.Empty(t, none.call("d", desc("path", "/p")).GetResponseHeadersToAdd())
}

// Global shadow mode answers OK, the statuses still tell.
func TestGlobalShadowMode(t *testing.T) {
	r := serve(t, perMinute, envoylimit.WithShadowMode())
	for range 3 {
		r.call("d", desc("path", "/p"))
	}
	assert.Equal(t, []string{"OK", "OVER_LIMIT"}, codesOf(r.call("d", desc("path", "/p"))))
}

// quota_mode: its descriptors deny only when all of them are over.
func TestQuotaMode(t *testing.T) {
	r := serve(t, `
domain: q
descriptors:
  - key: service
    value: s1
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 1
  - key: service
    value: s2
    quota_mode: true
    rate_limit:
      unit: minute
      requests_per_unit: 2
`)
	both := []*rlcommon.RateLimitDescriptor{desc("service", "s1"), desc("service", "s2")}
	assert.Equal(t, []string{"OK", "OK", "OK"}, codesOf(r.call("q", both...)))
	assert.Equal(t, []string{"OK", "OVER_LIMIT", "OK"}, codesOf(r.call("q", both...)), "one quota left: OK")
	assert.Equal(t, []string{"OVER_LIMIT", "OVER_LIMIT", "OVER_LIMIT"}, codesOf(r.call("q", both...)))
}
