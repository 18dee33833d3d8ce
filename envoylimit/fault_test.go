package envoylimit_test

// The failure policy under network faults between the Service and Redis:
// faultproxy's faults of the reliability report (a black hole, a reply
// lost after the script ran, latency beyond redislimit's timeout, a reply
// cut in its middle), calls through the generated gRPC client on
// loopback. One limit's Redis client goes through the proxy and another's
// does not, so that a request of both has a limit charged before the one
// that fails: what it was charged must be given back, and nothing charged
// twice. The counts are read once the fault is cleared, through the
// Service (hits_addend 0 checks without charging).

import (
	"strings"
	"testing"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/envoylimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/rlkit/ratelimit/internal/testkit/faultproxy"
	"github.com/rlkit/ratelimit/redislimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// faultTimeout is the proxied limiters' WithTimeout: far above a
// loopback round trip (tens of µs, a few ms under -race; but calls were
// seen to miss 100ms on a 2-CPU machine running another -race suite),
// far below the latency fault.
const faultTimeout = 500 * time.Millisecond

// directTimeout is the direct limiter's WithTimeout: it sees no fault,
// and a timeout of its own (a refund missing it, say) would only make a
// test fail on a loaded machine.
const directTimeout = 10 * time.Second

// faultRecovery bounds the wait for Redis to answer again once a fault is
// cleared: generous, it only keeps a broken recovery from hanging.
const faultRecovery = 20 * time.Second

// faultLimit is every limit of faultYAML: 10 a day, so nothing refills
// during a test.
const faultLimit = 10

// faultYAML's limits: "direct" is on a client straight to Redis, the
// others on a client through the proxy; "shadow" is a shadow_mode limit.
const faultYAML = `
domain: d
descriptors:
  - key: direct
    rate_limit: {unit: day, requests_per_unit: 10}
  - key: proxied
    rate_limit: {unit: day, requests_per_unit: 10}
  - key: proxied2
    rate_limit: {unit: day, requests_per_unit: 10}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 10}
`

// netFault is one network fault of the proxy.
type netFault struct {
	name string
	set  func(*faultproxy.Proxy)
	// swallows: the fault lets no request reach Redis (the black hole);
	// the other faults lose, cut or delay the reply of a script that ran,
	// so a failed decision may stay charged on Redis, or be refunded when
	// the refund gets through (the Service refunds a failure policy's
	// admission, as redislimit's failure policies admit by default): its
	// limit then holds either its hits or nothing, never more.
	swallows bool
}

var netFaults = []netFault{
	{name: "blackhole", swallows: true, set: func(p *faultproxy.Proxy) {
		p.Set(faultproxy.Up, faultproxy.Faults{BlackHole: true})
	}},
	{name: "reset-after-reply", set: func(p *faultproxy.Proxy) {
		p.MatchRequests("evalsha")
		p.DropReplies(1, faultproxy.RST)
	}},
	{name: "latency-beyond-timeout", set: func(p *faultproxy.Proxy) {
		p.Set(faultproxy.Down, faultproxy.Faults{Latency: 10 * faultTimeout})
	}},
	{name: "cut-reply", set: func(p *faultproxy.Proxy) {
		p.CutReplies(1, 3, faultproxy.RST)
	}},
}

// requireOnce checks what a limit whose decision failed under f holds:
// nothing when f swallows requests, else its hits or nothing (the script
// ran at most once, and its refund ran or did not).
func (f netFault) requireOnce(t *testing.T, limit string, used, hits int) {
	t.Helper()
	if f.swallows {
		assert.Equal(t, 0, used, "%s: nothing reached Redis", limit)
		return
	}
	assert.Contains(t, []int{0, hits}, used, "%s: charged at most once, all or nothing", limit)
}

// faultRig is a Service whose "proxied" limits reach Redis through a
// fault proxy.
type faultRig struct {
	*rls
	px    *faultproxy.Proxy
	clock *fakeclock.Mock
}

// startFaultRig serves faultYAML with the limiters' options lopts (beside
// a prefix, the mock clock, faultTimeout and no breaker unless lopts set
// one) and the Service's options opts, and warms every limit up (its
// script loaded, a connection open) before any fault.
func startFaultRig(t *testing.T, lopts []redislimit.Option, opts ...envoylimit.Option) *faultRig {
	t.Helper()
	home := startRedisHome(t)
	px, err := faultproxy.New(home.srv.Addr())
	require.NoError(t, err)
	t.Cleanup(func() { _ = px.Close() })
	proxied := redis.NewClient(&redis.Options{Addr: px.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = proxied.Close() })
	clk := newMock()
	limiters := envoylimit.WithLimiters(func(name string, p ratelimit.Policy) (ratelimit.KeyedLimiter, error) {
		client, timeout := proxied, faultTimeout
		if name == "d.direct" {
			client, timeout = home.client, directTimeout
		}
		o := append([]redislimit.Option{
			redislimit.WithPrefix(limitPrefix(home.prefix, name)), redislimit.WithName(name), redislimit.WithClock(clk),
			redislimit.WithTimeout(timeout), redislimit.WithBreaker(0),
		}, lopts...)
		return redislimit.New(client, p, o...)
	})
	cfg, err := envoylimit.ParseConfig("test.yaml", []byte(faultYAML))
	require.NoError(t, err)
	svc, err := envoylimit.NewService(cfg, append([]envoylimit.Option{envoylimit.WithClock(clk), limiters}, opts...)...)
	require.NoError(t, err)
	rig := &faultRig{rls: serveService(t, svc, clk.Mock), px: px, clock: clk}
	rig.waitRedis()
	return rig
}

// check is a request of the given keys' descriptors (value "v") with
// hits_addend 0: it charges nothing.
func check(keys ...string) *rlspb.RateLimitRequest {
	req := &rlspb.RateLimitRequest{Domain: "d"}
	for _, k := range keys {
		req.Descriptors = append(req.Descriptors, withHits(desc(k, "v"), 0))
	}
	return req
}

// request is a request of the given keys' descriptors (value "v"), of
// hits hits.
func request(hits uint32, keys ...string) *rlspb.RateLimitRequest {
	req := &rlspb.RateLimitRequest{Domain: "d", HitsAddend: hits}
	for _, k := range keys {
		req.Descriptors = append(req.Descriptors, desc(k, "v"))
	}
	return req
}

// waitRedis waits, up to faultRecovery, until every limit answers again
// (a check through the Service succeeds), polling.
func (r *faultRig) waitRedis() {
	r.t.Helper()
	r.checkWithin(0, "direct", "proxied", "proxied2", "shadow")
}

// checkWithin sends a check of keys until one succeeds, up to
// faultRecovery, and returns its response; after each failed one it moves
// the mock clock on by advance (a breaker's cooldown), if not 0. A check
// charges nothing, so it may be sent again.
func (r *faultRig) checkWithin(advance time.Duration, keys ...string) *rlspb.RateLimitResponse {
	r.t.Helper()
	deadline := time.Now().Add(faultRecovery)
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		resp, err := r.send(check(keys...))
		if err == nil {
			return resp
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("Redis did not answer again within %v: %v", faultRecovery, err)
		}
		if advance > 0 {
			r.clock.Add(advance)
		}
		<-tick.C
	}
}

// used returns what each key's limit has used, read with a check.
func (r *faultRig) used(keys ...string) map[string]int {
	r.t.Helper()
	resp := r.checkWithin(0, keys...)
	out := map[string]int{}
	for i, k := range keys {
		out[k] = faultLimit - int(resp.GetStatuses()[i].GetLimitRemaining())
	}
	return out
}

// fault switches f on, runs fn, clears it and waits for Redis.
func (r *faultRig) fault(f netFault, fn func()) {
	r.t.Helper()
	f.set(r.px)
	fn()
	r.px.Clear()
	r.waitRedis()
}

// requireUnavailable requires err to be the gRPC UNAVAILABLE of a failed
// limit, its message prefixed "ratelimit:" and naming the limit.
func requireUnavailable(t *testing.T, err error, limit string) {
	t.Helper()
	require.Error(t, err)
	st, ok := status.FromError(err)
	require.True(t, ok, "not a gRPC status: %v", err)
	assert.Equal(t, codes.Unavailable, st.Code(), "%v", err)
	assert.True(t, strings.HasPrefix(st.Message(), "ratelimit:"), "the message %q is not prefixed ratelimit:", st.Message())
	assert.Contains(t, st.Message(), limit)
}

// With FailToEnvoy, a limit whose Redis fails makes the call UNAVAILABLE;
// a limit charged before it in the request is refunded, one after it not
// charged, the failed one charged at most once (see netFault.swallows),
// and a shadow_mode limit's failure fails nothing.
func TestFaultFailToEnvoy(t *testing.T) {
	for _, f := range netFaults {
		t.Run(f.name, func(t *testing.T) {
			r := startFaultRig(t, nil)
			const hits = 2
			var errs [3]error
			r.fault(f, func() {
				_, errs[0] = r.send(request(hits, "direct", "proxied"))
			})
			r.fault(f, func() {
				_, errs[1] = r.send(request(hits, "proxied2", "direct"))
			})
			var shadowResp *rlspb.RateLimitResponse
			r.fault(f, func() {
				shadowResp, errs[2] = r.send(request(hits, "direct", "shadow"))
			})
			requireUnavailable(t, errs[0], "d.proxied")
			requireUnavailable(t, errs[1], "d.proxied2")
			require.NoError(t, errs[2], "a shadow_mode limit's failure fails nothing")
			assert.Equal(t, []string{"OK", "OK", "OK"}, codesOf(shadowResp))

			used := r.used("direct", "proxied", "proxied2", "shadow")
			t.Logf("used after the faults: %v", used)
			assert.Equal(t, hits, used["direct"], "the shadow request's, admitted; both failed ones gave theirs back")
			for _, k := range []string{"proxied", "proxied2", "shadow"} {
				f.requireOnce(t, k, used[k], hits)
			}

			// Redis back: a request charges each limit once.
			resp, err := r.send(request(1, "direct", "proxied", "proxied2"))
			require.NoError(t, err)
			assert.Equal(t, []string{"OK", "OK", "OK", "OK"}, codesOf(resp))
			assert.Equal(t, map[string]int{"direct": hits + 1, "proxied": used["proxied"] + 1, "proxied2": used["proxied2"] + 1},
				r.used("direct", "proxied", "proxied2"))
		})
	}
}

// With FailToEnvoy, a request of two limits that both fail: UNAVAILABLE,
// the first charged at most once (see netFault.swallows), the second
// only asked, never charged.
func TestFaultFailToEnvoyBothFail(t *testing.T) {
	for _, f := range netFaults {
		t.Run(f.name, func(t *testing.T) {
			r := startFaultRig(t, nil)
			var err error
			r.fault(f, func() {
				_, err = r.send(request(3, "proxied", "proxied2"))
			})
			requireUnavailable(t, err, "d.proxied")
			used := r.used("proxied", "proxied2")
			t.Logf("used after the fault: %v", used)
			f.requireOnce(t, "proxied", used["proxied"], 3)
			assert.Equal(t, 0, used["proxied2"], "only asked")
		})
	}
}

// With FailAsLimiter the answer is redislimit's failure policy's
// decision: fail open admits (and keeps the other limits' charges, the
// request being admitted), fail closed refuses (and refunds them).
func TestFaultFailAsLimiterOpenClosed(t *testing.T) {
	for _, pol := range []struct {
		name   string
		policy redislimit.FailurePolicy
		want   []string
		direct int // the direct limit's use after the request
	}{
		{"open", redislimit.FailOpen, []string{"OK", "OK", "OK"}, 2},
		{"closed", redislimit.FailClosed, []string{"OVER_LIMIT", "OK", "OVER_LIMIT"}, 0},
	} {
		for _, f := range netFaults {
			t.Run(pol.name+"/"+f.name, func(t *testing.T) {
				r := startFaultRig(t, []redislimit.Option{redislimit.WithFailurePolicy(pol.policy)},
					envoylimit.WithFailurePolicy(envoylimit.FailAsLimiter))
				var resp *rlspb.RateLimitResponse
				var err error
				r.fault(f, func() {
					resp, err = r.send(request(2, "direct", "proxied"))
				})
				require.NoError(t, err)
				assert.Equal(t, pol.want, codesOf(resp))
				used := r.used("direct", "proxied")
				t.Logf("used after the fault: %v", used)
				assert.Equal(t, pol.direct, used["direct"])
				f.requireOnce(t, "proxied", used["proxied"], 2)
			})
		}
	}
}

// With FailAsLimiter and redislimit's local fallback for 2 instances, the
// proxied limit of 10 admits its share, 5, while Redis fails: the 6th
// request is OVER_LIMIT, and the direct limit charged before it refunded.
func TestFaultFailAsLimiterLocalFallback(t *testing.T) {
	for _, f := range netFaults {
		t.Run(f.name, func(t *testing.T) {
			r := startFaultRig(t, []redislimit.Option{redislimit.WithLocalFallback(2)},
				envoylimit.WithFailurePolicy(envoylimit.FailAsLimiter))
			var got [][]string
			r.fault(f, func() {
				for range 6 {
					resp, err := r.send(request(1, "direct", "proxied"))
					require.NoError(t, err)
					got = append(got, codesOf(resp))
				}
			})
			ok := []string{"OK", "OK", "OK"}
			assert.Equal(t, [][]string{ok, ok, ok, ok, ok, {"OVER_LIMIT", "OK", "OVER_LIMIT"}}, got)
			used := r.used("direct", "proxied")
			assert.Equal(t, 5, used["direct"])
			// Each call ran its script once at most (the first, on the
			// connection open before the fault; the next ones need a new
			// connection, whose set-up the latency and the cut reply fail
			// before any script is sent).
			t.Logf("used after the fault: %v", used)
			assert.LessOrEqual(t, used["proxied"], 6)
			if f.swallows {
				assert.Equal(t, 0, used["proxied"])
			}
		})
	}
}

// redislimit's breaker: after a call finds Redis unreachable, the next
// calls fail at once (UNAVAILABLE with FailToEnvoy) until its cooldown has
// passed on the mock clock; then a call finds Redis again.
func TestFaultBreakerUnavailable(t *testing.T) {
	r := startFaultRig(t, []redislimit.Option{redislimit.WithBreaker(time.Minute)})
	f := netFaults[0] // black hole
	f.set(r.px)
	_, err := r.send(request(1, "direct", "proxied"))
	requireUnavailable(t, err, "d.proxied")
	r.px.Clear()
	// Redis is reachable again, but the breaker answers for it.
	for range 3 {
		start := time.Now()
		_, err = r.send(request(1, "direct", "proxied"))
		requireUnavailable(t, err, "d.proxied")
		assert.Contains(t, status.Convert(err).Message(), "breaker open", "the breaker answered")
		assert.Less(t, time.Since(start), faultTimeout, "at once, without waiting for Redis")
	}
	r.clock.Add(time.Minute)
	// A probe that misses its timeout (a loaded machine) opens the
	// breaker again: the wait moves the clock past each cooldown.
	r.checkWithin(time.Minute, "direct", "proxied")
	assert.Equal(t, map[string]int{"direct": 0, "proxied": 0}, r.used("direct", "proxied"))
	resp, err := r.send(request(1, "direct", "proxied"))
	require.NoError(t, err)
	assert.Equal(t, []string{"OK", "OK", "OK"}, codesOf(resp))
}

// With FailAsLimiter and redislimit's local fallback, a request that the
// fallback admitted for one limit and another limit refused is charged to
// none: the refund reaches the fallback (redislimit's RefundN makes it
// there when Redis cannot), so the refused requests leave the fallback's
// share whole. Here the proxied limit's share is 5 (10 for 2 instances);
// 5 requests the direct limit refuses, then 5 of the proxied limit alone,
// all while Redis is unreachable: those 5 must be OK.
func TestFaultLocalFallbackRefundedOnRefusal(t *testing.T) {
	r := startFaultRig(t, []redislimit.Option{redislimit.WithLocalFallback(2)},
		envoylimit.WithFailurePolicy(envoylimit.FailAsLimiter))
	resp, err := r.send(request(faultLimit, "direct"))
	require.NoError(t, err)
	require.Equal(t, "OK", codesOf(resp)[0], "the direct limit spent")
	var refused, alone [][]string
	r.fault(netFaults[0], func() { // black hole
		for range 5 {
			resp, err := r.send(request(1, "proxied", "direct"))
			require.NoError(t, err)
			refused = append(refused, codesOf(resp))
		}
		for range 5 {
			resp, err := r.send(request(1, "proxied"))
			require.NoError(t, err)
			alone = append(alone, codesOf(resp))
		}
	})
	no := []string{"OVER_LIMIT", "OK", "OVER_LIMIT"}
	assert.Equal(t, [][]string{no, no, no, no, no}, refused)
	ok := []string{"OK", "OK"}
	assert.Equal(t, [][]string{ok, ok, ok, ok, ok}, alone, "the refused requests left the fallback's share of 5 whole")
}
