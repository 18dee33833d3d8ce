package httplimit

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/limitset"
	"github.com/rlkit/ratelimit/internal/testkit/eventrec"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// loopback serves h on a real loopback server for the test's lifetime.
func loopback(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

// reply is one response of a loopback server, body read.
type reply struct {
	code   int
	header http.Header
	body   string
}

// get sends a GET to srv with the header pairs hdr.
func get(t *testing.T, srv *httptest.Server, hdr ...string) reply {
	t.Helper()
	req, err := http.NewRequest("GET", srv.URL+"/", nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return reply{code: resp.StatusCode, header: resp.Header, body: string(body)}
}

// rateFields are every field the middleware may set on a limited reply.
var rateFields = []string{
	"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset",
	"RateLimit-Policy", "RateLimit", "Retry-After",
}

// assertNoRateFields checks that a carries none of the rate-limit fields.
func assertNoRateFields(t *testing.T, step string, a reply) {
	t.Helper()
	for _, f := range rateFields {
		assert.Emptyf(t, a.header.Get(f), "%s: %s", step, f)
	}
}

// remaining returns what lim still admits for key, without charging.
func remaining(t *testing.T, lim ratelimit.KeyedLimiter, key string) int {
	t.Helper()
	d, err := lim.Peek(context.Background(), key, 0)
	require.NoError(t, err)
	return d.Remaining
}

// events records the Events an observer receives.
type events struct{ eventrec.Recorder }

// exemptEvent and deniedEvent are the Events the middleware reports for
// limit name with the fixed window (the limiters of these tests).
func exemptEvent(name string, n int) ratelimit.Event {
	return ratelimit.Event{Name: name, Algorithm: ratelimit.FixedWindowAlgorithm, Home: ratelimit.HomeNone,
		Outcome: ratelimit.OutcomeExempt, N: n, Decision: ratelimit.Decision{Allowed: true}}
}

func deniedEvent(name string, outcome ratelimit.Outcome, n int) ratelimit.Event {
	return ratelimit.Event{Name: name, Algorithm: ratelimit.FixedWindowAlgorithm, Home: ratelimit.HomeNone,
		Outcome: outcome, N: n, Decision: ratelimit.Decision{RetryAfter: ratelimit.RetryNever}, Err: ErrDenied}
}

// overrideFrom is a middleware in front of the limits that sets the
// Override a test asks for in the X-Test-Override header: "exempt",
// "shadow" or "exempt,shadow".
func overrideFrom(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if v := r.Header.Get("X-Test-Override"); v != "" {
			o := Override{Exempt: strings.Contains(v, "exempt"), Shadow: strings.Contains(v, "shadow")}
			r = r.WithContext(WithOverride(r.Context(), o))
		}
		next.ServeHTTP(w, r)
	})
}

// TestExemptKeysAreNeverCharged: on a real server, a key of ExemptKeys
// passes its limit as often as it likes, uncharged and without rate-limit
// fields, while other keys are limited as before, and a second limit
// still applies to the exempt key.
func TestExemptKeysAreNeverCharged(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	perKey := newKeyed(t, ratelimit.FixedWindowPolicy(2, time.Minute), mock)
	srv := loopback(t, newMW(t, []Limit{
		{Name: "api", Key: KeyByHeader("X-API-Key"), Limiter: perKey, ExemptKeys: []string{"health-checker", "internal"}},
	}, WithClock(mock)).Handler(okHandler))

	for i := range 5 {
		a := get(t, srv, "X-API-Key", "internal")
		assert.Equalf(t, 200, a.code, "exempt key, request %d", i+1)
		assert.Equal(t, "ok", a.body)
		assertNoRateFields(t, "exempt key", a)
	}
	assert.Equal(t, 2, remaining(t, perKey, "internal"), "the exempt key was charged")
	for i, want := range []int{200, 200, 429} {
		assert.Equalf(t, want, get(t, srv, "X-API-Key", "customer").code, "customer, request %d", i+1)
	}

	// A second limit, keyed by address, still charges the exempt key.
	perIP := newKeyed(t, ratelimit.FixedWindowPolicy(3, time.Minute), mock)
	perKey2 := newKeyed(t, ratelimit.FixedWindowPolicy(2, time.Minute), mock)
	srv2 := loopback(t, newMW(t, []Limit{
		{Name: "api", Key: KeyByHeader("X-API-Key"), Limiter: perKey2, ExemptKeys: []string{"internal"}},
		{Name: "ip", Key: KeyByIP(), Limiter: perIP},
	}, WithClock(mock)).Handler(okHandler))
	for i, want := range []int{200, 200, 200, 429} {
		a := get(t, srv2, "X-API-Key", "internal")
		require.Equalf(t, want, a.code, "exempt key under the address limit, request %d", i+1)
		assert.Equal(t, `"ip";q=3;w=60`, a.header.Get("RateLimit-Policy"), "the address limit reports")
	}
	assert.Equal(t, 2, remaining(t, perKey2, "internal"), "the exempt key was charged in its own limit")
}

// TestDeniedKeysAreRefusedWith403: a key of DeniedKeys is refused at once
// with 403, no Retry-After and no rate-limit fields, charged in no limit;
// a custom DeniedHandler sees ErrDenied, Never and the limit's name.
func TestDeniedKeysAreRefusedWith403(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	perKey := newKeyed(t, ratelimit.FixedWindowPolicy(5, time.Minute), mock)
	perIP := newKeyed(t, ratelimit.FixedWindowPolicy(5, time.Minute), mock)
	limits := []Limit{
		{Name: "ip", Key: KeyByIP(), Limiter: perIP},
		{Name: "api", Key: KeyByHeader("X-API-Key"), Limiter: perKey, DeniedKeys: []string{"stolen-key"}},
	}
	srv := loopback(t, newMW(t, limits, WithClock(mock)).Handler(okHandler))

	for range 3 {
		a := get(t, srv, "X-API-Key", "stolen-key")
		require.Equal(t, http.StatusForbidden, a.code)
		assertNoRateFields(t, "denied key", a)
		assert.Equal(t, "application/json; charset=utf-8", a.header.Get("Content-Type"))
		var body map[string]any
		require.NoError(t, json.Unmarshal([]byte(a.body), &body), "body %q", a.body)
		assert.Equal(t, map[string]any{"error": "Forbidden", "message": "request denied", "retryNever": true}, body)
		assert.NotContains(t, a.body, "stolen-key", "the body names the key")
	}
	assert.Equal(t, 5, remaining(t, perKey, "stolen-key"), "the denied key was charged")
	assert.Equal(t, 5, remaining(t, perIP, "127.0.0.1"), "the address of a denied key was charged")
	assert.Equal(t, 200, get(t, srv, "X-API-Key", "good-key").code)

	var got []Denial
	var mu sync.Mutex
	custom := loopback(t, newMW(t, limits, WithClock(mock), WithDeniedHandler(func(w http.ResponseWriter, r *http.Request, d Denial) {
		mu.Lock()
		got = append(got, d)
		mu.Unlock()
		w.WriteHeader(http.StatusUnavailableForLegalReasons)
	})).Handler(okHandler))
	assert.Equal(t, http.StatusUnavailableForLegalReasons, get(t, custom, "X-API-Key", "stolen-key").code)
	require.Len(t, got, 1)
	assert.ErrorIs(t, got[0].Err, ErrDenied)
	assert.Equal(t, Denial{Limit: "api", Decision: ratelimit.Decision{RetryAfter: ratelimit.RetryNever}, Never: true, Err: ErrDenied}, got[0])
}

// TestExemptAndDeniedNetworksByPeer: the loopback peer is matched against
// the networks: exempt, it is never limited and gets no fields; denied, it
// gets 403; in neither, it is limited.
func TestExemptAndDeniedNetworksByPeer(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	for _, c := range []struct {
		name    string
		opt     Option
		want    []int
		limited bool // the peer is limited: charged, with rate-limit fields
	}{
		{"exempt", ExemptNetworks("127.0.0.0/8", "::1"), []int{200, 200, 200, 200}, false},
		{"exempt-prefix", ExemptNetworks("127.0.0.0/8", "::1/128"), []int{200, 200, 200, 200}, false},
		{"denied", DeniedNetworks("127.0.0.1", "::1"), []int{403, 403, 403, 403}, false},
		{"denied-prefix", DeniedNetworks("127.0.0.1/32", "::1/128"), []int{403, 403, 403, 403}, false},
		{"exempt-elsewhere", ExemptNetworks("10.0.0.0/8"), []int{200, 200, 429, 429}, true},
		{"denied-elsewhere", DeniedNetworks("10.0.0.0/8"), []int{200, 200, 429, 429}, true},
	} {
		lim := newKeyed(t, ratelimit.FixedWindowPolicy(2, time.Minute), mock)
		srv := loopback(t, newMW(t, []Limit{{Name: "ip", Key: KeyByIP(), Limiter: lim}}, WithClock(mock), c.opt).Handler(okHandler))
		for i, want := range c.want {
			a := get(t, srv)
			assert.Equalf(t, want, a.code, "%s: request %d", c.name, i+1)
			if c.limited {
				assert.NotEmptyf(t, a.header.Get("RateLimit"), "%s: request %d: RateLimit", c.name, i+1)
			} else {
				assertNoRateFields(t, c.name, a)
			}
		}
		peer, err := netip.ParseAddrPort(strings.TrimPrefix(srv.URL, "http://"))
		require.NoError(t, err)
		wantRem := 2
		if c.limited {
			wantRem = 0
		}
		assert.Equalf(t, wantRem, remaining(t, lim, peer.Addr().String()), "%s: quota left to the peer", c.name)
	}
}

// TestNetworksThroughTrustedProxy: behind a trusted proxy (the loopback
// peer), the client address of X-Forwarded-For decides; from an untrusted
// peer, the same forged header exempts nothing and denies nothing.
func TestNetworksThroughTrustedProxy(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	trusting, err := NewIPResolver(TrustedProxies("127.0.0.0/8", "::1"))
	require.NoError(t, err)
	nets := []Option{ExemptNetworks("10.0.0.0/8"), DeniedNetworks("10.66.0.0/16", "198.51.100.0/24")}
	const xff = "X-Forwarded-For"

	lim := newKeyed(t, ratelimit.FixedWindowPolicy(2, time.Minute), mock)
	srv := loopback(t, newMW(t, []Limit{{Name: "ip", Key: trusting.Key, Limiter: lim}},
		append(nets, WithClock(mock), WithIPResolver(trusting))...).Handler(okHandler))
	for i := range 4 {
		a := get(t, srv, xff, "203.0.113.50, 10.1.2.3")
		assert.Equalf(t, 200, a.code, "internal client behind the proxy, request %d", i+1)
		assertNoRateFields(t, "internal client", a)
	}
	for i, want := range []int{200, 200, 429} {
		assert.Equalf(t, want, get(t, srv, xff, "10.1.2.3, 203.0.113.50").code, "outside client naming an internal one to its left, request %d", i+1)
	}
	assert.Equal(t, 403, get(t, srv, xff, "10.66.1.1").code, "denied network inside the exempt one")
	assert.Equal(t, 403, get(t, srv, xff, "198.51.100.7").code, "denied network")
	assert.Equal(t, 2, remaining(t, lim, "10.1.2.3"), "the internal client was charged")
	assert.Equal(t, 2, remaining(t, lim, "198.51.100.7"), "the denied client was charged")

	// The default resolver, and one trusting another proxy, read no
	// forwarded header: a forged one neither exempts nor denies.
	other, err := NewIPResolver(TrustedProxies("192.0.2.1"))
	require.NoError(t, err)
	for name, res := range map[string]*IPResolver{"default": nil, "other proxy": other} {
		lim := newKeyed(t, ratelimit.FixedWindowPolicy(2, time.Minute), mock)
		opts := append(nets, WithClock(mock))
		if res != nil {
			opts = append(opts, WithIPResolver(res))
		}
		srv := loopback(t, newMW(t, []Limit{{Name: "ip", Key: KeyByIP(), Limiter: lim}}, opts...).Handler(okHandler))
		for i, want := range []int{200, 200, 429} {
			assert.Equalf(t, want, get(t, srv, xff, "10.1.2.3").code, "%s: forged exempt address, request %d", name, i+1)
		}
		lim2 := newKeyed(t, ratelimit.FixedWindowPolicy(2, time.Minute), mock)
		srv2 := loopback(t, newMW(t, []Limit{{Name: "ip", Key: KeyByIP(), Limiter: lim2}}, opts...).Handler(okHandler))
		assert.Equalf(t, 200, get(t, srv2, xff, "198.51.100.7").code, "%s: forged denied address", name)
	}
}

// TestNetworksMatchUnmappedAddresses: IPv4-mapped IPv6 peers and prefixes
// match as the IPv4 ones they map, as the resolver compares them; a peer
// that is not an IP address matches no network.
func TestNetworksMatchUnmappedAddresses(t *testing.T) {
	t.Parallel()
	lim := fixedLimiter{}
	for _, c := range []struct {
		name   string
		opt    Option
		remote string
		want   int
	}{
		{"mapped peer, v4 network", DeniedNetworks("10.0.0.0/8"), "[::ffff:10.2.3.4]:80", 403},
		{"v4 peer, mapped network", DeniedNetworks("::ffff:10.0.0.0/104"), "10.2.3.4:80", 403},
		{"mapped peer, mapped network", DeniedNetworks("::ffff:10.0.0.0/104"), "[::ffff:10.9.9.9]:1", 403},
		{"mapped address", DeniedNetworks("::ffff:10.2.3.4"), "10.2.3.4:80", 403},
		{"outside", DeniedNetworks("::ffff:10.0.0.0/104"), "11.2.3.4:80", 200},
		{"zone dropped", DeniedNetworks("fe80::1"), "[fe80::1%eth0]:80", 403},
		{"unix socket", DeniedNetworks("0.0.0.0/0", "::/0"), "@", 200},
		{"empty peer", DeniedNetworks("0.0.0.0/0", "::/0"), "", 200},
	} {
		h := newMW(t, []Limit{{Name: "ip", Key: KeyByIP(), Limiter: lim}}, c.opt).Handler(okHandler)
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.remote
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		assert.Equalf(t, c.want, w.Code, "%s: RemoteAddr %q", c.name, c.remote)
	}
}

// TestExemptKeysCompareTheRawKey: keys are compared as the KeyFunc returns
// them, before a key longer than maxKeyLen is digested.
func TestExemptKeysCompareTheRawKey(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("k", maxKeyLen+1)
	mock := fakeclock.New(epoch)
	for _, c := range []struct {
		name   string
		exempt string
		want   []int
	}{
		{"raw key", long, []int{200, 200, 200}},
		{"digest", limitset.DigestKey(long), []int{200, 429, 429}},
	} {
		lim := newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Minute), mock)
		srv := loopback(t, newMW(t, []Limit{{Name: "api", Key: KeyByHeader("X-API-Key"), Limiter: lim, ExemptKeys: []string{c.exempt}}}, WithClock(mock)).Handler(okHandler))
		for i, want := range c.want {
			assert.Equalf(t, want, get(t, srv, "X-API-Key", long).code, "%s: request %d", c.name, i+1)
		}
	}
}

// TestExemptionPrecedence: denial beats every exemption; an Override with
// Exempt beats nothing that denies; shadow mode reports a denied key
// instead of enforcing it, but not a denied network.
func TestExemptionPrecedence(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	trusting, err := NewIPResolver(TrustedProxies("127.0.0.0/8", "::1"))
	require.NoError(t, err)
	const xff = "X-Forwarded-For"
	type req struct {
		hdr  []string
		want int
	}
	for _, c := range []struct {
		name   string
		limits func(lim ratelimit.KeyedLimiter) []Limit
		opts   []Option
		reqs   []req
	}{
		{
			name: "denied network inside an exempt one",
			limits: func(lim ratelimit.KeyedLimiter) []Limit {
				return []Limit{{Name: "ip", Key: trusting.Key, Limiter: lim}}
			},
			opts: []Option{ExemptNetworks("10.0.0.0/8"), DeniedNetworks("10.6.6.6")},
			reqs: []req{{[]string{xff, "10.6.6.6"}, 403}, {[]string{xff, "10.6.6.7"}, 200}},
		},
		{
			name: "denied key from an exempt network",
			limits: func(lim ratelimit.KeyedLimiter) []Limit {
				return []Limit{{Name: "api", Key: KeyByHeader("X-API-Key"), Limiter: lim, DeniedKeys: []string{"bad"}}}
			},
			opts: []Option{ExemptNetworks("10.0.0.0/8")},
			reqs: []req{{[]string{xff, "10.1.1.1", "X-API-Key", "bad"}, 403}, {[]string{xff, "10.1.1.1", "X-API-Key", "good"}, 200}},
		},
		{
			name: "denied key with an Override exempting the request",
			limits: func(lim ratelimit.KeyedLimiter) []Limit {
				return []Limit{{Name: "api", Key: KeyByHeader("X-API-Key"), Limiter: lim, DeniedKeys: []string{"bad"}}}
			},
			reqs: []req{{[]string{"X-Test-Override", "exempt", "X-API-Key", "bad"}, 403}},
		},
		{
			name: "denied network with an Override exempting the request",
			limits: func(lim ratelimit.KeyedLimiter) []Limit {
				return []Limit{{Name: "ip", Key: trusting.Key, Limiter: lim}}
			},
			opts: []Option{DeniedNetworks("10.0.0.0/8")},
			reqs: []req{{[]string{"X-Test-Override", "exempt", xff, "10.1.1.1"}, 403}},
		},
		{
			name: "denied network in shadow mode",
			limits: func(lim ratelimit.KeyedLimiter) []Limit {
				return []Limit{{Name: "ip", Key: trusting.Key, Limiter: lim}}
			},
			opts: []Option{DeniedNetworks("10.0.0.0/8")},
			reqs: []req{{[]string{"X-Test-Override", "shadow", xff, "10.1.1.1"}, 403}},
		},
		{
			name: "one limit's exempt key, another limit's denied key",
			limits: func(lim ratelimit.KeyedLimiter) []Limit {
				return []Limit{
					{Name: "api", Key: KeyByHeader("X-API-Key"), Limiter: lim, ExemptKeys: []string{"partner"}},
					{Name: "ip", Key: trusting.Key, Limiter: lim, DeniedKeys: []string{"10.6.6.6"}},
				}
			},
			reqs: []req{{[]string{"X-API-Key", "partner", xff, "10.6.6.6"}, 403}, {[]string{"X-API-Key", "partner", xff, "10.6.6.7"}, 200}},
		},
		{
			name: "denied key of a shadow limit is reported, not enforced",
			limits: func(lim ratelimit.KeyedLimiter) []Limit {
				return []Limit{{Name: "api", Key: KeyByHeader("X-API-Key"), Limiter: lim, DeniedKeys: []string{"bad"}, Shadow: true}}
			},
			reqs: []req{{[]string{"X-API-Key", "bad"}, 200}, {[]string{"X-API-Key", "bad"}, 200}, {[]string{"X-API-Key", "bad"}, 200}},
		},
		{
			name: "denied key under an Override with Shadow",
			limits: func(lim ratelimit.KeyedLimiter) []Limit {
				return []Limit{{Name: "api", Key: KeyByHeader("X-API-Key"), Limiter: lim, DeniedKeys: []string{"bad"}}}
			},
			reqs: []req{{[]string{"X-Test-Override", "shadow", "X-API-Key", "bad"}, 200}, {[]string{"X-API-Key", "bad"}, 403}},
		},
		{
			name: "denied key of a shadow limit, request exempt",
			limits: func(lim ratelimit.KeyedLimiter) []Limit {
				return []Limit{{Name: "api", Key: KeyByHeader("X-API-Key"), Limiter: lim, DeniedKeys: []string{"bad"}, Shadow: true}}
			},
			reqs: []req{{[]string{"X-Test-Override", "exempt", "X-API-Key", "bad"}, 200}},
		},
	} {
		lim := newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Minute), mock)
		opts := append([]Option{WithClock(mock), WithIPResolver(trusting)}, c.opts...)
		srv := loopback(t, overrideFrom(newMW(t, c.limits(lim), opts...).Handler(okHandler)))
		for i, r := range c.reqs {
			assert.Equalf(t, r.want, get(t, srv, r.hdr...).code, "%s: request %d %v", c.name, i+1, r.hdr)
		}
		for _, key := range []string{"bad", "10.6.6.6", "10.1.1.1"} {
			assert.Equalf(t, 1, remaining(t, lim, key), "%s: denied %q charged", c.name, key)
		}
	}
}

// TestObserverSeesExemptionsAndDenials: the middleware's observer receives
// one Event per Limit for a request exempt from all of them or refused by
// a denied network, one for a limit's exempt or denied key, an
// OutcomeShadow for a shadow limit's denied key (all with Home none: no
// limiter decided), and the decisions the limiters take (Home keyed).
func TestObserverSeesExemptionsAndDenials(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	trusting, err := NewIPResolver(TrustedProxies("127.0.0.0/8", "::1"))
	require.NoError(t, err)
	var obs events
	perKey := newKeyed(t, ratelimit.FixedWindowPolicy(100, time.Minute), mock)
	perIP := newKeyed(t, ratelimit.FixedWindowPolicy(100, time.Minute), mock)
	trial := newKeyed(t, ratelimit.FixedWindowPolicy(100, time.Minute), mock)
	mw := newMW(t, []Limit{
		{Name: "api", Key: KeyByHeader("X-API-Key"), Limiter: perKey, ExemptKeys: []string{"internal"}, DeniedKeys: []string{"bad"}},
		{Name: "ip", Key: trusting.Key, Limiter: perIP},
		{Name: "trial", Key: KeyByHeader("X-API-Key"), Limiter: trial, Shadow: true, DeniedKeys: []string{"suspect"}},
	}, WithClock(mock), WithIPResolver(trusting), WithObserver(&obs),
		ExemptNetworks("10.0.0.0/8"), DeniedNetworks("198.51.100.0/24"),
		WithCost(func(r *http.Request) int {
			if r.URL.Query().Has("free") {
				return 0
			}
			return 2
		}))
	srv := loopback(t, overrideFrom(mw.Handler(okHandler)))
	const xff = "X-Forwarded-For"

	all := func(f func(name string) ratelimit.Event) []ratelimit.Event {
		return []ratelimit.Event{f("api"), f("ip"), f("trial")}
	}
	// withoutDecisions returns evs without the limiters' decisions (Home
	// keyed), counting them by limit in decisions.
	decisions := map[string]int{}
	withoutDecisions := func(evs []ratelimit.Event) []ratelimit.Event {
		var out []ratelimit.Event
		for _, e := range evs {
			if e.Home == ratelimit.HomeKeyed {
				decisions[e.Name]++
				continue
			}
			out = append(out, e)
		}
		return out
	}
	for _, c := range []struct {
		name string
		hdr  []string
		code int
		want []ratelimit.Event
	}{
		{"limited", []string{"X-API-Key", "customer", xff, "203.0.113.1"}, 200, nil},
		{"exempt network", []string{"X-API-Key", "customer", xff, "10.1.1.1"}, 200,
			all(func(name string) ratelimit.Event { return exemptEvent(name, 2) })},
		{"exempt network, no key", []string{xff, "10.1.1.1"}, 200,
			all(func(name string) ratelimit.Event { return exemptEvent(name, 2) })},
		{"override", []string{"X-Test-Override", "exempt", xff, "203.0.113.1"}, 200,
			all(func(name string) ratelimit.Event { return exemptEvent(name, 2) })},
		{"exempt key", []string{"X-API-Key", "internal", xff, "203.0.113.1"}, 200,
			[]ratelimit.Event{exemptEvent("api", 2)}},
		{"denied key", []string{"X-API-Key", "bad", xff, "203.0.113.1"}, 403,
			[]ratelimit.Event{deniedEvent("api", ratelimit.OutcomeDenied, 2)}},
		{"denied network", []string{"X-API-Key", "customer", xff, "198.51.100.9"}, 403,
			all(func(name string) ratelimit.Event { return deniedEvent(name, ratelimit.OutcomeDenied, 2) })},
		{"shadow denied key", []string{"X-API-Key", "suspect", xff, "203.0.113.1"}, 200,
			[]ratelimit.Event{deniedEvent("trial", ratelimit.OutcomeShadow, 2)}},
	} {
		a := get(t, srv, c.hdr...)
		assert.Equalf(t, c.code, a.code, "%s: status", c.name)
		assert.Equalf(t, c.want, withoutDecisions(obs.Take()), "%s: events", c.name)
	}

	// A cost of 0 exempts the request from every limit: N is the cost.
	req, err := http.NewRequest("GET", srv.URL+"/?free", nil)
	require.NoError(t, err)
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	_ = resp.Body.Close()
	assert.Equal(t, all(func(name string) ratelimit.Event { return exemptEvent(name, 0) }), obs.Take(), "cost 0")

	// The limiters' decisions were there too, each once, under its limit.
	assert.Equal(t, map[string]int{"api": 2, "ip": 3, "trial": 2}, decisions,
		"decisions (customer: api, ip, trial; the exempt key: ip, trial; suspect: api, ip)")
}

// TestExemptionConfigErrors: bad networks name the option and the value;
// an exempt key that is also denied is refused without naming it.
func TestExemptionConfigErrors(t *testing.T) {
	t.Parallel()
	limits := []Limit{{Name: "api", Key: KeyByHeader("X-API-Key"), Limiter: fixedLimiter{}}}
	var nilObserver *events
	for _, c := range []struct {
		opt  Option
		want string
	}{
		{ExemptNetworks("10.0.0.0/33"), `httplimit.ExemptNetworks: netip.ParsePrefix("10.0.0.0/33"): prefix length out of range, got "10.0.0.0/33"`},
		{DeniedNetworks("10.0.0.0/8", "not-an-ip"), `httplimit.DeniedNetworks: ParseAddr("not-an-ip"): unable to parse IP, got "not-an-ip"`},
		{DeniedNetworks("::ffff:10.0.0.0/80"), `httplimit.DeniedNetworks: an IPv4-mapped prefix needs at least 96 bits, got ::ffff:10.0.0.0/80`},
		{WithObserver(nilObserver), `httplimit.WithObserver: observer is a nil *httplimit.events`},
	} {
		_, err := New(limits, c.opt)
		require.ErrorIs(t, err, ratelimit.ErrInvalidConfig, c.want)
		assert.EqualError(t, err, "ratelimit: invalid configuration: "+c.want)
	}

	// The same rule for the resolver's trusted proxies: a mapped prefix of
	// fewer than 96 bits used to be masked into an IPv6 one (::/80, which
	// holds ::1) and accepted.
	_, err := NewIPResolver(TrustedProxies("::ffff:10.0.0.0/80"))
	assert.EqualError(t, err, "ratelimit: invalid configuration: httplimit.TrustedProxies: an IPv4-mapped prefix needs at least 96 bits, got ::ffff:10.0.0.0/80")
	_, err = NewIPResolver(TrustedProxies("::ffff:10.0.0.0/95"))
	assert.EqualError(t, err, "ratelimit: invalid configuration: httplimit.TrustedProxies: an IPv4-mapped prefix needs at least 96 bits, got ::ffff:10.0.0.0/95")

	_, err = New([]Limit{{Name: "api", Key: KeyByHeader("X-API-Key"), Limiter: fixedLimiter{},
		ExemptKeys: []string{"a", "secret-key"}, DeniedKeys: []string{"secret-key"}}})
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	assert.EqualError(t, err, `ratelimit: invalid configuration: httplimit.Limit.ExemptKeys of limit "api" must not repeat a key of its DeniedKeys, got one at index 1`)

	// Nil values are the defaults.
	_, err = New(limits, WithIPResolver(nil), WithObserver(nil), ExemptNetworks(), DeniedNetworks())
	assert.NoError(t, err)
}

// TestExemptionsAllocateNothing: configured exemptions that do not match
// add no allocation to a limited request, and an exempt or denied request
// (observer included) allocates nothing in the middleware.
func TestExemptionsAllocateNothing(t *testing.T) {
	obs := ratelimit.ObserverFunc(func(context.Context, ratelimit.Event) {})
	lists := Limit{Name: "ip", Key: KeyByIP(), Limiter: fixedLimiter{}, ExemptKeys: []string{"10.0.0.1"}, DeniedKeys: []string{"10.0.0.2"}}
	opts := []Option{WithHeaders(NoHeaders), WithLogger(nil), WithObserver(obs), ExemptNetworks("10.1.0.0/16"), DeniedNetworks("10.2.0.0/16"),
		WithDeniedHandler(func(w http.ResponseWriter, r *http.Request, d Denial) { w.WriteHeader(403) })}
	h := newMW(t, []Limit{lists}, opts...).Handler(bare)
	for _, c := range []struct {
		remote string
		code   int
	}{
		{"203.0.113.7:4711", 200}, // limited
		{"10.0.0.1:4711", 200},    // exempt key
		{"10.0.0.2:4711", 403},    // denied key
		{"10.1.0.1:4711", 200},    // exempt network
		{"10.2.0.1:4711", 403},    // denied network
	} {
		r := httptest.NewRequest("GET", "/", nil)
		r.RemoteAddr = c.remote
		w := &discardWriter{h: make(http.Header)}
		got := testing.AllocsPerRun(200, func() {
			clear(w.h)
			h.ServeHTTP(w, r)
		})
		assert.Equalf(t, c.code, w.code, "%s: status", c.remote)
		assert.Zerof(t, got, "%s: allocations per request", c.remote)
	}
}

// FuzzNetworksTrustOnlyTrustedProxies: whatever forwarded headers a
// request carries, a client that is not a trusted proxy is matched by its
// own address (so it can neither exempt itself nor get another client
// denied), and behind a trusted proxy the networks see exactly the client
// the resolver finds.
func FuzzNetworksTrustOnlyTrustedProxies(f *testing.F) {
	f.Add("10.1.2.3", "for=10.1.2.3", "10.1.2.3")
	f.Add("203.0.113.9, 10.1.2.3", `for="[::ffff:10.1.2.3]"`, "192.168.1.1")
	f.Add("10.1.2.3, 127.0.0.1", "for=unknown, for=10.0.0.1", "")
	f.Add(",,,", `for="10.1.2.3`, "::ffff:192.168.7.7")
	res, err := NewIPResolver(TrustedProxies("127.0.0.0/8"), ProxyHeaders("Forwarded", "X-Forwarded-For", "X-Real-IP"))
	require.NoError(f, err)
	m := newMW(f, []Limit{{Name: "ip", Key: KeyByIP(), Limiter: fixedLimiter{}}},
		WithIPResolver(res), ExemptNetworks("10.0.0.0/8"), DeniedNetworks("192.168.0.0/16"))
	f.Fuzz(func(t *testing.T, xff, fwd, realIP string) {
		r := httptest.NewRequest("GET", "/", nil)
		r.Header["X-Forwarded-For"] = []string{xff}
		r.Header["Forwarded"] = []string{fwd}
		r.Header["X-Real-Ip"] = []string{realIP}
		r.RemoteAddr = "203.0.113.7:4711"
		if v := m.matchNetwork(r); v != netNone {
			t.Fatalf("untrusted peer with X-Forwarded-For %q, Forwarded %q, X-Real-IP %q: verdict %d, want none", xff, fwd, realIP, v)
		}
		r.RemoteAddr = "127.0.0.1:4711"
		want := netNone
		if a, ok := res.ClientIP(r); ok {
			switch {
			case netip.MustParsePrefix("192.168.0.0/16").Contains(a):
				want = netDenied
			case netip.MustParsePrefix("10.0.0.0/8").Contains(a):
				want = netExempt
			}
		}
		if v := m.matchNetwork(r); v != want {
			t.Fatalf("trusted peer with X-Forwarded-For %q, Forwarded %q, X-Real-IP %q: verdict %d, want %d", xff, fwd, realIP, v, want)
		}
	})
}

// TestDenialBeatsAnEarlierLimitsExemption: a key one limit exempts and a
// later one denies is refused, and the observer hears only of the denial,
// not of an exemption the request never got.
func TestDenialBeatsAnEarlierLimitsExemption(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	var obs events
	mw := newMW(t, []Limit{
		{Name: "api", Key: KeyByHeader("X-API-Key"), Limiter: newKeyed(t, ratelimit.FixedWindowPolicy(100, time.Minute), mock), ExemptKeys: []string{"partner"}},
		{Name: "abuse", Key: KeyByHeader("X-API-Key"), Limiter: newKeyed(t, ratelimit.FixedWindowPolicy(100, time.Minute), mock), DeniedKeys: []string{"partner"}},
	}, WithClock(mock), WithObserver(&obs))
	srv := loopback(t, mw.Handler(okHandler))
	a := get(t, srv, "X-API-Key", "partner")
	assert.Equal(t, http.StatusForbidden, a.code)
	assert.Equal(t, []ratelimit.Event{deniedEvent("abuse", ratelimit.OutcomeDenied, 1)}, obs.Take())
}
