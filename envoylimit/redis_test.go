package envoylimit_test

// The Service with its limits in Redis (redislimit on a real
// redis-server): the decisions of the configuration hold there as in
// memory. Each scenario runs on a pair of Services, one in memory and one
// on Redis, on one mock clock, and every response of the Redis one must
// equal the in-memory one's; the assertions then say what the decisions
// are.

import (
	"fmt"
	"hash/fnv"
	"math"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/envoylimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/rlkit/ratelimit/internal/testkit/redistest"
	"github.com/rlkit/ratelimit/redislimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/encoding/prototext"
	"google.golang.org/protobuf/proto"
)

// redisStart is where the Redis tests' mock clocks start: a time of
// today's magnitude at the start of a day (and so of every second, minute
// and hour window, as envoyproxy/ratelimit counts them from the epoch).
var redisStart = time.Unix(1_796_083_200, 0) // 2026-12-01T00:00:00Z

// redisHome is a redis-server of one test and a go-redis client of it.
type redisHome struct {
	srv    *redistest.Server
	client *redis.Client
	prefix string
}

var prefixSeq atomic.Int64

// startRedisHome starts a redis-server for t (or uses REDIS_ADDR, hence
// the test's own prefix) with a client closed when t ends.
func startRedisHome(t testing.TB) *redisHome {
	t.Helper()
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return &redisHome{srv: srv, client: c, prefix: fmt.Sprintf("envoytest:%d:%d:", time.Now().UnixNano(), prefixSeq.Add(1))}
}

// limitPrefix is the Redis key prefix of the limit called name under
// prefix: a hash of the name, which may hold '{' or '}' (Redis key
// prefixes must not), as the server program does.
func limitPrefix(prefix, name string) string {
	h := fnv.New64a()
	h.Write([]byte(name))
	return fmt.Sprintf("%s%016x:", prefix, h.Sum64())
}

// redisLimiters is a WithLimiters option making every limit a
// redislimit.Limiter on client, its keys under prefix and the limit's
// name, deciding at clk's time, with opts.
func redisLimiters(client redis.UniversalClient, prefix string, clk ratelimit.Clock, opts ...redislimit.Option) envoylimit.Option {
	return envoylimit.WithLimiters(func(name string, p ratelimit.Policy) (ratelimit.KeyedLimiter, error) {
		o := append([]redislimit.Option{redislimit.WithPrefix(limitPrefix(prefix, name)), redislimit.WithName(name), redislimit.WithClock(clk)}, opts...)
		return redislimit.New(client, p, o...)
	})
}

// redisTimeout is the WithTimeout of the limiters of serveRedis: these
// tests are of decisions, not of timeouts, and redislimit's default
// (100ms) was missed on a 2-CPU machine running another -race suite.
const redisTimeout = 10 * time.Second

// newMock returns a mock clock at redisStart, safe to share between the
// Service, its limiters and the test.
func newMock() *fakeclock.Mock { return fakeclock.New(redisStart) }

// serveRedis serves a Service for yaml with its limits on home's Redis,
// on clk, on a loopback gRPC server.
func serveRedis(t *testing.T, home *redisHome, clk *fakeclock.Mock, yaml string, opts ...envoylimit.Option) *rls {
	t.Helper()
	cfg, err := envoylimit.ParseConfig("test.yaml", []byte(yaml))
	require.NoError(t, err)
	all := append([]envoylimit.Option{envoylimit.WithClock(clk), redisLimiters(home.client, home.prefix, clk, redislimit.WithTimeout(redisTimeout))}, opts...)
	svc, err := envoylimit.NewService(cfg, all...)
	require.NoError(t, err)
	return serveService(t, svc, clk.Mock)
}

// pair is the same configuration served in memory and on Redis, on one
// mock clock: every request goes to both, and their responses must be
// equal.
type pair struct {
	t        *testing.T
	mem, rds *rls
	clock    *fakeclock.Mock
	home     *redisHome
	requests int
}

// servePair serves yaml in memory and on a fresh redis-server, with opts
// for both.
func servePair(t *testing.T, yaml string, opts ...envoylimit.Option) *pair {
	t.Helper()
	home := startRedisHome(t)
	clk := newMock()
	cfg, err := envoylimit.ParseConfig("test.yaml", []byte(yaml))
	require.NoError(t, err)
	memSvc, err := envoylimit.NewService(cfg, append([]envoylimit.Option{envoylimit.WithClock(clk)}, opts...)...)
	require.NoError(t, err)
	return &pair{
		t: t, clock: clk, home: home,
		mem: serveService(t, memSvc, clk.Mock),
		rds: serveRedis(t, home, clk, yaml, opts...),
	}
}

// send sends req to both Services and returns the Redis one's response,
// failing the test unless both answered alike.
func (p *pair) send(req *rlspb.RateLimitRequest) *rlspb.RateLimitResponse {
	p.t.Helper()
	p.requests++
	want, err := p.mem.send(req)
	require.NoError(p.t, err, "in memory")
	got, err := p.rds.send(req)
	require.NoError(p.t, err, "on Redis")
	if !proto.Equal(want, got) {
		assert.Fail(p.t, "Redis answered otherwise than memory",
			"request %d: %v\nmemory: %v\nredis:  %v", p.requests, prototext.Format(req), prototext.Format(want), prototext.Format(got))
	}
	return got
}

// call sends a request of descs in domain to both.
func (p *pair) call(domain string, descs ...*rlcommon.RateLimitDescriptor) *rlspb.RateLimitResponse {
	p.t.Helper()
	return p.send(&rlspb.RateLimitRequest{Domain: domain, Descriptors: descs})
}

// okTimes sends the same request n times to both and returns how many were
// OK.
func (p *pair) okTimes(n int, domain string, descs ...*rlcommon.RateLimitDescriptor) int {
	p.t.Helper()
	ok := 0
	for range n {
		if p.call(domain, descs...).GetOverallCode() == rlspb.RateLimitResponse_OK {
			ok++
		}
	}
	return ok
}

// remaining is a descriptor's limit_remaining, checked with hits_addend
// 0 (which charges nothing).
func (p *pair) remaining(domain string, kv ...string) uint32 {
	p.t.Helper()
	return p.call(domain, withHits(desc(kv...), 0)).GetStatuses()[0].GetLimitRemaining()
}

// setConfig puts yaml in force in both Services.
func (p *pair) setConfig(yaml string) {
	p.t.Helper()
	cfg, err := envoylimit.ParseConfig("test.yaml", []byte(yaml))
	require.NoError(p.t, err)
	require.NoError(p.t, p.mem.svc.SetConfig(cfg), "in memory")
	cfg, err = envoylimit.ParseConfig("test.yaml", []byte(yaml))
	require.NoError(p.t, err)
	require.NoError(p.t, p.rds.svc.SetConfig(cfg), "on Redis")
}

// The documentation's nested descriptors and key-only leaves, on Redis.
func TestRedisNestedAndKeyOnly(t *testing.T) {
	p := servePair(t, docNested)
	marketing := func(n string) []string {
		return codesOf(p.call("messaging", desc("message_type", "marketing", "to_number", n), desc("to_number", n)))
	}
	for range 3 {
		assert.Equal(t, []string{"OK", "OK", "OK"}, marketing("2061111111"))
	}
	assert.Equal(t, []string{"OVER_LIMIT", "OVER_LIMIT", "OK"}, marketing("2061111111"))
	assert.Equal(t, []string{"OK", "OK", "OK"}, marketing("2062222222"), "each number has its own limit")
	assert.Equal(t, []string{"OK", "OK"}, codesOf(p.call("messaging", desc("message_type", "marketing"))), "the placeholder has no limit")
	assert.Equal(t, uint32(2), p.remaining("messaging", "to_number", "2061111111"), "the denied 4th charged nothing")
	assert.Equal(t, 2, p.okTimes(4, "messaging", desc("to_number", "2061111111")))
	// A new day: everything back.
	p.clock.Add(24 * time.Hour)
	assert.Equal(t, []string{"OK", "OK", "OK"}, marketing("2061111111"))
}

// A request whose second descriptor is over its limit is refused, and its
// first descriptor's limit, charged first on Redis, is refunded: its quota
// is untouched. With the first descriptor the one over, the second is not
// charged either.
func TestRedisDeniedBySecondLeavesFirstUntouched(t *testing.T) {
	p := servePair(t, `
domain: d
descriptors:
  - key: user
    rate_limit:
      unit: day
      requests_per_unit: 5
  - key: route
    rate_limit:
      unit: day
      requests_per_unit: 1
`)
	user, route := desc("user", "alice"), desc("route", "/pay")
	assert.Equal(t, []string{"OK", "OK", "OK"}, codesOf(p.call("d", user, route)))
	for range 3 {
		resp := p.call("d", user, route)
		assert.Equal(t, []string{"OVER_LIMIT", "OK", "OVER_LIMIT"}, codesOf(resp))
	}
	assert.Equal(t, uint32(4), p.remaining("d", "user", "alice"), "the refused requests left the user's quota untouched")
	assert.Equal(t, uint32(0), p.remaining("d", "route", "/pay"))

	// The other order: the route first, denied; the user after it.
	for range 3 {
		assert.Equal(t, []string{"OVER_LIMIT", "OVER_LIMIT", "OK"}, codesOf(p.call("d", route, user)))
	}
	assert.Equal(t, uint32(4), p.remaining("d", "user", "alice"))
	// Hits: 4 of the user's 4 left, with a route of its own.
	resp := p.send(&rlspb.RateLimitRequest{Domain: "d", HitsAddend: 4, Descriptors: []*rlcommon.RateLimitDescriptor{user, desc("route", "/other")}})
	assert.Equal(t, []string{"OVER_LIMIT", "OK", "OVER_LIMIT"}, codesOf(resp), "4 hits are over the route's 1")
	assert.Equal(t, uint32(4), p.remaining("d", "user", "alice"))
	assert.Equal(t, uint32(1), p.remaining("d", "route", "/other"))
	assert.Equal(t, 4, p.okTimes(5, "d", user))
}

// Three descriptors, the third over: the first two are refunded.
func TestRedisDeniedByThirdRefundsBoth(t *testing.T) {
	p := servePair(t, `
domain: d
descriptors:
  - key: a
    rate_limit: {unit: hour, requests_per_unit: 10}
  - key: b
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: c
    rate_limit: {unit: second, requests_per_unit: 2}
`)
	a, b, c := desc("a", "1"), desc("b", "1"), desc("c", "1")
	assert.Equal(t, 2, p.okTimes(5, "d", a, b, c))
	assert.Equal(t, uint32(8), p.remaining("d", "a", "1"))
	assert.Equal(t, uint32(8), p.remaining("d", "b", "1"))
	p.clock.Add(time.Second)
	assert.Equal(t, 2, p.okTimes(3, "d", a, b, c), "the next second, c has its 2 again")
	assert.Equal(t, uint32(6), p.remaining("d", "a", "1"))
	assert.Equal(t, uint32(6), p.remaining("d", "b", "1"))
}

// The most specific match, wildcards, share_threshold and a deny list of 0
// per unit, on Redis.
func TestRedisMatchWildcardShareDenyList(t *testing.T) {
	p := servePair(t, `
domain: d
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: remote_address
    value: 50.0.0.5
    rate_limit: {unit: second, requests_per_unit: 0}
  - key: path
    value: /api/*/action
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: files
    value: files/*
    share_threshold: true
    rate_limit: {unit: hour, requests_per_unit: 3}
`)
	assert.Equal(t, 3, p.okTimes(5, "d", desc("remote_address", "50.0.0.1")))
	assert.Equal(t, 3, p.okTimes(5, "d", desc("remote_address", "50.0.0.2")))
	resp := p.call("d", desc("remote_address", "50.0.0.5"))
	assert.Equal(t, []string{"OVER_LIMIT", "OVER_LIMIT"}, codesOf(resp))
	assert.Equal(t, uint32(0), resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit())
	// A denied 0-per-unit descriptor refunds the one charged before it.
	assert.Equal(t, []string{"OVER_LIMIT", "OK", "OVER_LIMIT"}, codesOf(p.call("d", desc("path", "/api/7/action"), desc("remote_address", "50.0.0.5"))))
	assert.Equal(t, uint32(2), p.remaining("d", "path", "/api/7/action"))

	assert.Equal(t, 2, p.okTimes(3, "d", desc("path", "/api/1/action")))
	assert.Equal(t, 2, p.okTimes(3, "d", desc("path", "/api/2/action")), "each value its own counter")
	assert.Equal(t, 3, p.okTimes(3, "d", desc("path", "/api/1/other")), "no match, no limit")
	assert.Equal(t, 2, p.okTimes(2, "d", desc("files", "files/a.pdf")))
	assert.Equal(t, 1, p.okTimes(3, "d", desc("files", "files/b.csv")), "shared: one left")
	p.clock.Add(time.Second)
	assert.Equal(t, 3, p.okTimes(4, "d", desc("remote_address", "50.0.0.1")))
	assert.Equal(t, 0, p.okTimes(1, "d", desc("files", "files/c")), "the hour's share is spent")
}

// Unlimited descriptors, and an unknown domain or descriptor, on Redis.
func TestRedisUnlimited(t *testing.T) {
	p := servePair(t, `
domain: internal
descriptors:
  - key: ldap
    rate_limit:
      unlimited: true
  - key: azure
    rate_limit: {unit: minute, requests_per_unit: 2}
`)
	for range 4 {
		resp := p.call("internal", desc("ldap", "x"), desc("azure", "y"))
		assert.Equal(t, uint32(math.MaxUint32), resp.Statuses[0].GetLimitRemaining())
	}
	assert.Equal(t, 0, p.okTimes(1, "internal", desc("azure", "y")))
	assert.Equal(t, 3, p.okTimes(3, "internal", desc("ldap", "x")))
	assert.Equal(t, 3, p.okTimes(3, "nosuchdomain", desc("azure", "x")))
	assert.Equal(t, 3, p.okTimes(3, "internal", desc("gcp", "x")))
}

// A shadow_mode limit is charged on Redis and never denies, nor makes a
// request's other limits refund; global shadow mode answers OK to all.
func TestRedisShadowMode(t *testing.T) {
	yaml := `
domain: d
descriptors:
  - key: user
    value: user-a
    shadow_mode: true
    rate_limit: {unit: second, requests_per_unit: 2}
  - key: user
    rate_limit: {unit: second, requests_per_unit: 3}
  - key: route
    rate_limit: {unit: second, requests_per_unit: 10}
`
	t.Run("descriptor", func(t *testing.T) {
		p := servePair(t, yaml)
		for i := range 4 {
			resp := p.call("d", desc("user", "user-a"), desc("route", "r"))
			require.Equal(t, []string{"OK", "OK", "OK"}, codesOf(resp))
			assert.Equal(t, uint32(max(0, 1-i)), resp.Statuses[0].GetLimitRemaining(), "the shadow limit is charged")
		}
		assert.Equal(t, uint32(6), p.remaining("d", "route", "r"), "the route was charged every time")
		assert.Equal(t, 3, p.okTimes(5, "d", desc("user", "user-b")))
	})
	t.Run("global", func(t *testing.T) {
		p := servePair(t, yaml, envoylimit.WithShadowMode())
		for range 5 {
			resp := p.call("d", desc("user", "user-b"), desc("route", "r"))
			assert.Equal(t, "OK", codesOf(resp)[0])
		}
		// What the statuses say: user-b over after 3, and all-or-nothing
		// still holds under global shadow mode (the denied were refunded).
		resp := p.call("d", withHits(desc("user", "user-b"), 0), withHits(desc("route", "r"), 0))
		assert.Equal(t, uint32(0), resp.Statuses[0].GetLimitRemaining())
		assert.Equal(t, uint32(7), resp.Statuses[1].GetLimitRemaining())
	})
}

// replaces on Redis: the replaced limit is neither applied nor charged.
func TestRedisReplaces(t *testing.T) {
	p := servePair(t, docReplaces)
	both := []string{"key_1", "value_1", "user", "bkthomps"}
	assert.Equal(t, 4, p.okTimes(6, "example7", desc(both...), desc("key_2", "value_2", "user", "bkthomps")))
	assert.Equal(t, 2, p.okTimes(3, "example7", desc(both...)))
}

// hits_addend on Redis: the request's, a descriptor's own overriding it,
// and a descriptor's 0, which checks without charging.
func TestRedisHitsAddend(t *testing.T) {
	p := servePair(t, `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 10}
  - key: bytes
    rate_limit: {unit: minute, requests_per_unit: 100}
`, envoylimit.WithHeaders(envoylimit.EnvoyHeaders))
	req := func(hits uint32, descs ...*rlcommon.RateLimitDescriptor) *rlspb.RateLimitResponse {
		return p.send(&rlspb.RateLimitRequest{Domain: "d", HitsAddend: hits, Descriptors: descs})
	}
	// The request's 3 hits: 3 calls fit in 10, the 4th does not.
	for range 3 {
		assert.Equal(t, "OK", codesOf(req(3, desc("user", "u")))[0])
	}
	resp := req(3, desc("user", "u"))
	assert.Equal(t, []string{"OVER_LIMIT", "OVER_LIMIT"}, codesOf(resp))
	assert.Equal(t, uint32(1), resp.Statuses[0].GetLimitRemaining())
	// A descriptor's own hits_addend: 40 bytes, while the user counts 1.
	resp = req(0, desc("user", "u"), withHits(desc("bytes", "u"), 40))
	assert.Equal(t, []string{"OK", "OK", "OK"}, codesOf(resp))
	assert.Equal(t, uint32(0), resp.Statuses[0].GetLimitRemaining())
	assert.Equal(t, uint32(60), resp.Statuses[1].GetLimitRemaining())
	// 0 only checks: the user is at 0 left and the check is OK; bytes
	// unchanged.
	for range 3 {
		resp = req(5, withHits(desc("user", "u"), 0), withHits(desc("bytes", "u"), 0))
		assert.Equal(t, []string{"OK", "OK", "OK"}, codesOf(resp))
		assert.Equal(t, uint32(0), resp.Statuses[0].GetLimitRemaining())
		assert.Equal(t, uint32(60), resp.Statuses[1].GetLimitRemaining())
	}
	// A check beside a denied descriptor: still nothing charged.
	resp = req(0, withHits(desc("bytes", "u"), 0), desc("user", "u"))
	assert.Equal(t, []string{"OVER_LIMIT", "OK", "OVER_LIMIT"}, codesOf(resp))
	assert.Equal(t, uint32(60), p.remaining("d", "bytes", "u"))
	// More hits than the limit: denied, nothing charged.
	resp = req(0, withHits(desc("bytes", "v"), 101))
	assert.Equal(t, []string{"OVER_LIMIT", "OVER_LIMIT"}, codesOf(resp))
	assert.Equal(t, uint32(100), p.remaining("d", "bytes", "v"))
	p.clock.Add(time.Minute)
	assert.Equal(t, uint32(10), p.remaining("d", "user", "u"))
}

// A descriptor's own limit (Envoy's per-descriptor override) on Redis: a
// fixed window of its requests_per_unit, a counter per descriptor, 0
// denying every hit.
func TestRedisLimitOverride(t *testing.T) {
	p := servePair(t, `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 100}
`)
	override := func(rpu uint32, unit rlspb.RateLimitResponse_RateLimit_Unit, kv ...string) *rlcommon.RateLimitDescriptor {
		d := desc(kv...)
		d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: typev3.RateLimitUnit(unit)}
		return d
	}
	u := override(2, rlspb.RateLimitResponse_RateLimit_MINUTE, "user", "u")
	assert.Equal(t, 2, p.okTimes(4, "d", u))
	resp := p.call("d", u)
	assert.Equal(t, []string{"OVER_LIMIT", "OVER_LIMIT"}, codesOf(resp))
	assert.Equal(t, uint32(2), resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit())
	assert.Equal(t, rlspb.RateLimitResponse_RateLimit_MINUTE, resp.Statuses[0].GetCurrentLimit().GetUnit())
	assert.Equal(t, 2, p.okTimes(3, "d", override(2, rlspb.RateLimitResponse_RateLimit_MINUTE, "user", "v")), "another descriptor, its own counter")
	assert.Equal(t, 0, p.okTimes(2, "d", override(0, rlspb.RateLimitResponse_RateLimit_MINUTE, "user", "w")))
	assert.Equal(t, uint32(100), p.remaining("d", "user", "u"), "the configuration's limit was not charged")
	// An override denying refunds the configured limit charged before it.
	assert.Equal(t, []string{"OVER_LIMIT", "OK", "OVER_LIMIT"}, codesOf(p.call("d", desc("user", "x"), u)))
	assert.Equal(t, uint32(100), p.remaining("d", "user", "x"))
	p.clock.Add(time.Minute)
	assert.Equal(t, 2, p.okTimes(3, "d", u))
}

// Several rate_limits on one descriptor on Redis: all are charged, the
// tighter denies, and a denial refunds the other.
func TestRedisSeveralLimits(t *testing.T) {
	p := servePair(t, `
domain: d
descriptors:
  - key: user
    rate_limits:
      - {unit: second, requests_per_unit: 2}
      - {unit: minute, requests_per_unit: 5}
`)
	assert.Equal(t, 2, p.okTimes(4, "d", desc("user", "u")))
	p.clock.Add(time.Second)
	assert.Equal(t, 2, p.okTimes(4, "d", desc("user", "u")))
	p.clock.Add(time.Second)
	assert.Equal(t, 1, p.okTimes(4, "d", desc("user", "u")), "the minute's 5 are spent")
	p.clock.Add(time.Minute)
	assert.Equal(t, 2, p.okTimes(4, "d", desc("user", "u")))
}

// A reload with a changed limit keeps each key's used count on Redis:
// raised, the key has the difference; lowered below what it used, it is
// over.
func TestRedisReloadKeepsUsed(t *testing.T) {
	conf := func(n int) string {
		return fmt.Sprintf(`
domain: d
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: %d}
  - key: route
    rate_limit: {unit: day, requests_per_unit: 3}
`, n)
	}
	p := servePair(t, conf(5))
	assert.Equal(t, 3, p.okTimes(3, "d", desc("user", "u")))
	assert.Equal(t, 1, p.okTimes(1, "d", desc("route", "r")))
	p.setConfig(conf(10))
	assert.Equal(t, uint32(7), p.remaining("d", "user", "u"), "3 used of the new 10")
	assert.Equal(t, uint32(2), p.remaining("d", "route", "r"), "an unchanged limit keeps its keys")
	assert.Equal(t, 7, p.okTimes(8, "d", desc("user", "u")))
	p.setConfig(conf(4))
	assert.Equal(t, 0, p.okTimes(2, "d", desc("user", "u")), "10 used, over the new 4")
	assert.Equal(t, 4, p.okTimes(5, "d", desc("user", "other")))
	p.clock.Add(24 * time.Hour)
	assert.Equal(t, 4, p.okTimes(5, "d", desc("user", "u")), "a new day under the new limit")
}

// The algorithms of this package's extensions decide on Redis as in
// memory: a token bucket with its burst, a sliding window, a leaky
// bucket, a calendar quota.
func TestRedisAlgorithms(t *testing.T) {
	p := servePair(t, `
domain: d
descriptors:
  - key: tb
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: tokenbucket, burst: 4}
  - key: sl
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: slidinglog}
  - key: sc
    rate_limit: {unit: minute, requests_per_unit: 3, algorithm: slidingcounter}
  - key: lb
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: leakybucket, burst: 3}
  - key: q
    rate_limit: {unit: day, requests_per_unit: 3, algorithm: quota}
`)
	for _, k := range []string{"tb", "sl", "sc", "lb", "q"} {
		p.okTimes(6, "d", desc(k, "x"))
	}
	for range 4 {
		p.clock.Add(700 * time.Millisecond)
		for _, k := range []string{"tb", "sl", "sc", "lb", "q"} {
			p.okTimes(2, "d", desc(k, "x"))
		}
	}
	p.clock.Add(time.Minute)
	assert.Equal(t, 4, p.okTimes(5, "d", desc("tb", "x")), "the bucket full again")
	assert.Equal(t, 3, p.okTimes(4, "d", desc("sl", "x")))
}

// A Service on Redis serves concurrent requests exactly: of 40 requests
// of two descriptors racing for a limit of 10 (the other limit roomy), 10
// are OK, and every refused one gave its charge back.
func TestRedisConcurrentAllOrNothing(t *testing.T) {
	home := startRedisHome(t)
	clk := newMock()
	r := serveRedis(t, home, clk, `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 1000}
  - key: route
    rate_limit: {unit: day, requests_per_unit: 10}
`)
	const n = 40
	results := make(chan string, n)
	for range n {
		go func() {
			resp, err := r.send(&rlspb.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{desc("user", "u"), desc("route", "r")}})
			if err != nil {
				results <- err.Error()
				return
			}
			results <- resp.GetOverallCode().String()
		}()
	}
	count := map[string]int{}
	for range n {
		count[<-results]++
	}
	assert.Equal(t, map[string]int{"OK": 10, "OVER_LIMIT": n - 10}, count)
	resp := r.call("d", withHits(desc("user", "u"), 0))
	assert.Equal(t, uint32(990), resp.Statuses[0].GetLimitRemaining(), "only the admitted requests were charged to the user")
}

// The status of a descriptor that had room, in a request another
// descriptor refused, is what its limit has left (5 here: the refused
// request charged nothing), whatever the order of the descriptors, the
// home, and the limit that refused. The Service decides in order and
// refunds on Redis (and in memory too when the refusing limit is 0 per
// unit), so the descriptor before the refusal is charged and refunded
// while the one after it is only asked (Peek); in memory otherwise,
// AllowAll decides and each is asked with Peek.
func TestRedisRefundedStatusAsPeeked(t *testing.T) {
	p := servePair(t, `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 5}
  - key: never
    rate_limit: {unit: day, requests_per_unit: 0}
  - key: spent
    rate_limit: {unit: day, requests_per_unit: 1}
`)
	for _, home := range []struct {
		name string
		r    *rls
	}{{"memory", p.mem}, {"redis", p.rds}} {
		require.Equal(t, "OK", codesOf(home.r.call("d", desc("spent", "s")))[0])
		for _, denier := range []string{"never", "spent"} {
			after := home.r.call("d", desc(denier, "s"), desc("user", "u"))
			before := home.r.call("d", desc("user", "u"), desc(denier, "s"))
			require.Equal(t, []string{"OVER_LIMIT", "OVER_LIMIT", "OK"}, codesOf(after))
			require.Equal(t, []string{"OVER_LIMIT", "OK", "OVER_LIMIT"}, codesOf(before))
			assert.Equal(t, uint32(5), after.Statuses[1].GetLimitRemaining(), "%s, refused by %s: the user after the refusal", home.name, denier)
			assert.Equal(t, uint32(5), before.Statuses[0].GetLimitRemaining(), "%s, refused by %s: the user before the refusal", home.name, denier)
		}
		resp := home.r.call("d", withHits(desc("user", "u"), 0))
		assert.Equal(t, uint32(5), resp.Statuses[0].GetLimitRemaining(), "%s: nothing charged", home.name)
	}
}

// Two Services on one Redis, as two replicas of the server: they share
// every count, a refusal on one is refunded for both, and a reload that
// both make keeps the shared count.
func TestRedisTwoServicesShareCounts(t *testing.T) {
	home := startRedisHome(t)
	clk := newMock()
	yaml := `
domain: d
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 6}
  - key: route
    rate_limit: {unit: day, requests_per_unit: 2}
`
	a, b := serveRedis(t, home, clk, yaml), serveRedis(t, home, clk, yaml)
	ok := 0
	for i := range 8 {
		r := a
		if i%2 == 1 {
			r = b
		}
		if r.call("d", desc("user", "u")).GetOverallCode() == rlspb.RateLimitResponse_OK {
			ok++
		}
	}
	assert.Equal(t, 6, ok, "one limit of 6 between the two")

	assert.Equal(t, 2, a.okTimes(2, "d", desc("user", "w"), desc("route", "r")))
	assert.Equal(t, []string{"OVER_LIMIT", "OK", "OVER_LIMIT"}, codesOf(b.call("d", desc("user", "w"), desc("route", "r"))))
	assert.Equal(t, uint32(4), a.call("d", withHits(desc("user", "w"), 0)).GetStatuses()[0].GetLimitRemaining(), "b's refusal refunded w")

	cfg, err := envoylimit.ParseConfig("test.yaml", []byte(strings.Replace(yaml, "requests_per_unit: 6", "requests_per_unit: 9", 1)))
	require.NoError(t, err)
	require.NoError(t, a.svc.SetConfig(cfg))
	require.NoError(t, b.svc.SetConfig(cfg))
	assert.Equal(t, uint32(7), b.call("d", withHits(desc("user", "w"), 0)).GetStatuses()[0].GetLimitRemaining(), "2 used of the new 9")
	assert.Equal(t, 7, a.okTimes(4, "d", desc("user", "w"))+b.okTimes(4, "d", desc("user", "w")))
}
