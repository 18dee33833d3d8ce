package envoylimit_test

// The decisions envoyproxy/ratelimit's documentation describes for its
// configuration examples (its README, "Examples"), on configurations of
// the same shapes.

import (
	"math"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// docNested is the documentation's example of nested descriptors and
// key-only leaves (Example 2).
const docNested = `
domain: messaging
descriptors:
  - key: message_type
    value: marketing
    descriptors:
      - key: to_number
        rate_limit:
          unit: day
          requests_per_unit: 3
  - key: to_number
    rate_limit:
      unit: day
      requests_per_unit: 5
`

// Nested descriptors: a placeholder level with a key-only leaf gives each
// value its own limit; several descriptors in a request are all decided.
func TestDocNestedAndKeyOnly(t *testing.T) {
	r := serve(t, docNested)
	marketing := func(n string) []string {
		return codesOf(r.call("messaging", desc("message_type", "marketing", "to_number", n), desc("to_number", n)))
	}
	for range 3 {
		assert.Equal(t, []string{"OK", "OK", "OK"}, marketing("2061111111"))
	}
	assert.Equal(t, []string{"OVER_LIMIT", "OVER_LIMIT", "OK"}, marketing("2061111111"),
		"the 4th marketing message to one number is over its 3 a day")
	// Each number has its own limit.
	assert.Equal(t, []string{"OK", "OK", "OK"}, marketing("2062222222"))
	// The placeholder level alone has no limit.
	assert.Equal(t, []string{"OK", "OK"}, codesOf(r.call("messaging", desc("message_type", "marketing"))))
	// The per-number limit: 3 charged above, 2 left; the denied 4th charged nothing.
	assert.Equal(t, 2, r.okTimes(4, "messaging", desc("to_number", "2061111111")))
}

// The most specific match wins: key and value before key alone; 0
// requests per unit denies every hit.
func TestDocSpecificMatchAndDenyList(t *testing.T) {
	r := serve(t, `
domain: edge_proxy_per_ip
descriptors:
  - key: remote_address
    rate_limit:
      unit: second
      requests_per_unit: 10
  - key: remote_address
    value: 50.0.0.5
    rate_limit:
      unit: second
      requests_per_unit: 0
`)
	assert.Equal(t, 10, r.okTimes(12, "edge_proxy_per_ip", desc("remote_address", "50.0.0.1")))
	assert.Equal(t, 10, r.okTimes(12, "edge_proxy_per_ip", desc("remote_address", "50.0.0.2")))
	resp := r.call("edge_proxy_per_ip", desc("remote_address", "50.0.0.5"))
	assert.Equal(t, []string{"OVER_LIMIT", "OVER_LIMIT"}, codesOf(resp))
	assert.Equal(t, uint32(0), resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit())
	assert.Equal(t, rlspb.RateLimitResponse_RateLimit_SECOND, resp.Statuses[0].GetCurrentLimit().GetUnit())
	// The next second, the first address has its 10 again.
	r.clock.Add(time.Second)
	assert.Equal(t, 10, r.okTimes(12, "edge_proxy_per_ip", desc("remote_address", "50.0.0.1")))
}

// A descriptor matches only a configuration of its own depth.
func TestDocDepthMustMatch(t *testing.T) {
	r := serve(t, `
domain: example4
descriptors:
  - key: key
    value: value
    rate_limit:
      requests_per_unit: 1
      unit: second
    descriptors:
      - key: subkey
        rate_limit:
          requests_per_unit: 2
          unit: second
`)
	// Two entries: the second level's limit (2), not the first's (1).
	assert.Equal(t, 2, r.okTimes(3, "example4", desc("key", "value", "subkey", "subvalue")))
	assert.Equal(t, 1, r.okTimes(3, "example4", desc("key", "value")))
	// Three entries match nothing: no limit.
	assert.Equal(t, 3, r.okTimes(3, "example4", desc("key", "value", "subkey", "x", "deeper", "y")))
	resp := r.call("example4", desc("key", "value", "subkey", "x", "deeper", "y"))
	assert.Nil(t, resp.Statuses[0].GetCurrentLimit(), "no limit applies")
}

// Unlimited descriptors answer OK with the most remaining; an unknown
// domain or descriptor has no limit.
func TestDocUnlimited(t *testing.T) {
	r := serve(t, `
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    rate_limit:
      unit: minute
      requests_per_unit: 2
`)
	for range 5 {
		resp := r.call("internal", desc("ldap", "x"))
		require.Equal(t, []string{"OK", "OK"}, codesOf(resp))
		assert.Equal(t, uint32(math.MaxUint32), resp.Statuses[0].GetLimitRemaining())
		assert.Nil(t, resp.Statuses[0].GetCurrentLimit())
	}
	assert.Equal(t, 2, r.okTimes(3, "internal", desc("azure", "x")))
	assert.Equal(t, 3, r.okTimes(3, "nosuchdomain", desc("azure", "x")))
	assert.Equal(t, 3, r.okTimes(3, "internal", desc("gcp", "x")))
}

// A shadow_mode limit is charged and reported, but never denies.
func TestDocShadowMode(t *testing.T) {
	r := serve(t, `
domain: example6
descriptors:
  - key: service
    descriptors:
      - key: user
        value: user-a
        rate_limit:
          requests_per_unit: 2
          unit: second
        shadow_mode: true
      - key: user
        value: user-b
        rate_limit:
          requests_per_unit: 3
          unit: second
`)
	for i := range 5 {
		resp := r.call("example6", desc("service", "auth", "user", "user-a"))
		require.Equal(t, []string{"OK", "OK"}, codesOf(resp))
		assert.Equal(t, uint32(max(0, 1-i)), resp.Statuses[0].GetLimitRemaining(), "the shadow limit is charged")
	}
	assert.Equal(t, 3, r.okTimes(5, "example6", desc("service", "auth", "user", "user-b")))
}

// docReplaces is the documentation's example of replaces (Example 7).
const docReplaces = `
domain: example7
descriptors:
  - key: key_1
    value: value_1
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          name: specific_limit
          requests_per_unit: 2
          unit: second
  - key: key_2
    value: value_2
    descriptors:
      - key: user
        value: bkthomps
        rate_limit:
          replaces:
            - name: specific_limit
          requests_per_unit: 4
          unit: second
`

// replaces: a matching limit named in another matching limit's replaces is
// not applied, nor charged.
func TestDocReplaces(t *testing.T) {
	r := serve(t, docReplaces)
	both := []string{"key_1", "value_1", "user", "bkthomps"}
	// Both descriptors: only the replacing limit of 4 applies.
	assert.Equal(t, 4, r.okTimes(6, "example7", desc(both...), desc("key_2", "value_2", "user", "bkthomps")))
	// The replaced limit was not charged: its 2 are intact.
	assert.Equal(t, 2, r.okTimes(3, "example7", desc(both...)))
}

// Wildcard values: trailing, middle and several '*'; each matching value
// has its own counter unless share_threshold.
func TestDocWildcards(t *testing.T) {
	r := serve(t, `
domain: example9
descriptors:
  - key: key1
    value: value*
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: path
    value: /api/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: route
    value: /api/*/resource/*/action
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: files
    value: files/*
    share_threshold: true
    rate_limit:
      unit: hour
      requests_per_unit: 3
`)
	for _, d := range [][]string{
		{"key1", "value1"}, {"key1", "valueXYZ"}, {"key1", "value"},
		{"path", "/api/123/action"}, {"path", "/api/user-id/action"},
		{"route", "/api/v1/resource/123/action"},
	} {
		assert.Equal(t, 2, r.okTimes(3, "example9", desc(d...)), "%v has its own 2", d)
	}
	for _, d := range [][]string{{"key1", "vxalue1"}, {"path", "/api/123/other"}, {"route", "/api/v1/resource/123"}} {
		assert.Equal(t, 3, r.okTimes(3, "example9", desc(d...)), "%v matches nothing", d)
	}
	// Shared: 2 for a.pdf, then b.csv has only 1 left.
	assert.Equal(t, 2, r.okTimes(2, "example9", desc("files", "files/a.pdf")))
	assert.Equal(t, 1, r.okTimes(3, "example9", desc("files", "files/b.csv")))
}
