package envoylimit_test

import (
	"fmt"
	"testing"

	"github.com/benbjohnson/clock"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/envoylimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Two different descriptors whose metric path is the same ("d.a_b"):
// envoyproxy/ratelimit rejects them as a duplicate composite key; here
// they load, each with a limiter of its own, before and after a reload.
func TestPathCollisionKeepsLimitersApart(t *testing.T) {
	const y = `
domain: d
descriptors:
  - key: a_b
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: a
    value: b
    rate_limit: {unit: minute, requests_per_unit: 1}
`
	cfg, err := envoylimit.ParseConfig("test.yaml", []byte(y))
	require.NoError(t, err)
	mock := clock.NewMock()
	svc, err := envoylimit.NewService(cfg, envoylimit.WithClock(mock))
	require.NoError(t, err)
	r := serveService(t, svc, mock)
	cfg2, err := envoylimit.ParseConfig("test.yaml", []byte(y))
	require.NoError(t, err)
	require.NoError(t, svc.SetConfig(cfg2))
	// {a: b} and {a_b: b} are different descriptors with limits of their own.
	assert.Equal(t, "OK", r.call("d", desc("a", "b")).GetOverallCode().String())
	assert.Equal(t, "OK", r.call("d", desc("a_b", "b")).GetOverallCode().String(), "a_b's own counter was charged by {a: b}")
}

// nestedDotConfig has two limits of one path, "d.x.y".
const nestedDotConfig = `
domain: d
descriptors:
  - key: x.y
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: x
    descriptors:
      - key: y
        rate_limit: {unit: minute, requests_per_unit: 100}
`

// Same, with nesting: key "x.y" at the top and key "y" under "x" (no
// value) have the same path "d.x.y"; envoyproxy/ratelimit loads both, and
// so does this package, keeping their limits apart after a reload.
func TestPathCollisionNestedDot(t *testing.T) {
	cfg, err := envoylimit.ParseConfig("test.yaml", []byte(nestedDotConfig))
	require.NoError(t, err)
	mock := clock.NewMock()
	svc, err := envoylimit.NewService(cfg, envoylimit.WithClock(mock))
	require.NoError(t, err)
	r := serveService(t, svc, mock)
	_ = r
	cfg2, err := envoylimit.ParseConfig("test.yaml", []byte(nestedDotConfig))
	require.NoError(t, err)
	require.NoError(t, svc.SetConfig(cfg2))
	// {x: 1, y: v} has a limit of 100 per minute; after the reload it
	// shares x.y's limiter, and x.y's policy (1 per minute).
	assert.Equal(t, 5, r.okTimes(5, "d", desc("x", "1", "y", "v")), "x.1.y's limit of 100/min")
}

// Two identical descriptors in one request, limit 1: envoyproxy/ratelimit
// increments the one key twice and denies; no quota may be minted.
func TestDuplicateDescriptorsInOneCall(t *testing.T) {
	r := serve(t, `
domain: d
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 1}
`)
	// Each call charges 2 hits to one key of limit 1: none may pass, and
	// certainly not every one of them.
	assert.Equal(t, 0, r.okTimes(10, "d", desc("k", "v"), desc("k", "v")), "2 hits on a key whose limit is 1")
	// Nothing was charged: the key is still whole.
	assert.Equal(t, uint32(0), r.call("d", desc("k", "v")).GetStatuses()[0].GetLimitRemaining())
}

// A quota_mode descriptor over its limit (and the only one) denies the
// request: the enforced limits of the other descriptors must then not be
// charged (all or nothing, the documented intent).
func TestQuotaDenialChargesNothing(t *testing.T) {
	r := serve(t, `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: q
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`)
	assert.Equal(t, "OK", r.call("d", desc("a", "1"), desc("q", "1")).GetOverallCode().String())
	for range 5 {
		assert.Equal(t, "OVER_LIMIT", r.call("d", desc("a", "1"), desc("q", "1")).GetOverallCode().String())
	}
	// a: 1 admitted hit of 3; 2 left.
	resp := r.call("d", desc("a", "1"))
	assert.Equal(t, "OK", resp.GetOverallCode().String(), "denied requests were charged to a")
	assert.Equal(t, uint32(1), resp.GetStatuses()[0].GetLimitRemaining())
}

// YAML anchors and aliases, which envoyproxy/ratelimit (yaml.Unmarshal)
// loads, "load unchanged" per the doc.
func TestYAMLAliases(t *testing.T) {
	_, err := envoylimit.ParseConfig("test.yaml", []byte(`
domain: d
descriptors:
  - key: a
    rate_limit: &rl {unit: minute, requests_per_unit: 1}
  - key: b
    rate_limit: *rl
`))
	assert.NoError(t, err)
}

func TestYAMLMergeKey(t *testing.T) {
	_, err := envoylimit.ParseConfig("test.yaml", []byte(`
domain: d
descriptors:
  - &base
    key: a
    rate_limit: {unit: minute, requests_per_unit: 1}
  - <<: *base
    key: b
`))
	assert.NoError(t, err)
}

// rate_limit: null loads in envoyproxy/ratelimit (no limit).
func TestNullRateLimit(t *testing.T) {
	_, err := envoylimit.ParseConfig("test.yaml", []byte(`
domain: d
descriptors:
  - key: a
    rate_limit:
`))
	assert.NoError(t, err)
}

// share_threshold: two descriptors of one request that share a wildcard's
// counter are 2 hits on it.
func TestSharedWildcardTwiceInOneCall(t *testing.T) {
	r := serve(t, `
domain: d
descriptors:
  - key: path
    value: "/api/*"
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`)
	assert.Equal(t, 0, r.okTimes(10, "d", desc("path", "/api/a"), desc("path", "/api/b")))
}

// envoyproxy/ratelimit counts a shadow_mode quota_mode descriptor among
// the quota descriptors, never as failed: with one, a request is not
// denied because the other quota descriptors are over.
func TestShadowQuotaCountsAsQuota(t *testing.T) {
	r := serve(t, `
domain: d
descriptors:
  - key: q1
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: q2
    quota_mode: true
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
`)
	r.call("d", desc("q1", "x"))
	resp := r.call("d", desc("q1", "x"), desc("q2", "x"))
	assert.Equal(t, []string{"OK", "OVER_LIMIT", "OK"}, codesOf(resp))
}

// envoyproxy/ratelimit answers a descriptor with no entries as one that
// matches nothing (OK); an error makes Envoy apply failure_mode_deny to
// the whole request.
func TestEmptyDescriptorIsNoLimit(t *testing.T) {
	r := serve(t, `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: minute, requests_per_unit: 1}
`)
	resp, err := r.send(&rlspb.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{desc("a", "1"), {}}})
	require.NoError(t, err)
	assert.Equal(t, []string{"OK", "OK", "OK"}, codesOf(resp))
}

// The limit names WithLimiters receives are "the limit's name": the
// server keys Redis by them (cmd/envoylimit-server), so two limits of one
// configuration must not share one, or they share counters from the start.
func TestLimiterNamesUnique(t *testing.T) {
	cfg, err := envoylimit.ParseConfig("t.yaml", []byte(nestedDotConfig))
	require.NoError(t, err)
	names := map[string]int{}
	_, err = envoylimit.NewService(cfg, envoylimit.WithLimiters(func(name string, p ratelimit.Policy) (ratelimit.KeyedLimiter, error) {
		names[name]++
		return ratelimit.NewKeyed(p)
	}))
	require.NoError(t, err)
	for n, c := range names {
		assert.Equal(t, 1, c, "limit name %q given to %d limits", n, c)
	}
}

// share_threshold below the 16th level: the two values of one wildcard
// share one counter there as above it.
func TestShareThresholdDeep(t *testing.T) {
	y := "domain: d\ndescriptors:\n"
	ind := "  "
	var kv []string
	for i := range 16 {
		y += fmt.Sprintf("%s- key: k%d\n%s  descriptors:\n", ind, i, ind)
		ind += "    "
		kv = append(kv, fmt.Sprintf("k%d", i), "v")
	}
	y += ind + "- key: last\n" + ind + "  value: \"p*\"\n" + ind + "  share_threshold: true\n" + ind + "  rate_limit: {unit: minute, requests_per_unit: 1}\n"
	r := serve(t, y)
	a := append(append([]string{}, kv...), "last", "p1")
	b := append(append([]string{}, kv...), "last", "p2")
	assert.Equal(t, "OK", r.call("d", desc(a...)).GetOverallCode().String())
	assert.Equal(t, "OVER_LIMIT", r.call("d", desc(b...)).GetOverallCode().String(), "p1 and p2 share p*'s counter")
}
