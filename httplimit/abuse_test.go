package httplimit

// Adversarial tests (issue 9): forged forwarding headers in every proxy
// style, malformed and oversized headers, 429s with every header
// combination for the transport, done contexts.

import (
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/rlkit/ratelimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// appendingProxy is the resolver of an application behind one trusted
// proxy, 10.0.0.1, that appends its peer to the Forwarded line the client
// sent, as nginx does with
// proxy_set_header Forwarded "$http_forwarded, for=$remote_addr".
func appendingProxyKey(t testing.TB, res *IPResolver, header string, lines ...string) string {
	t.Helper()
	r, err := http.NewRequest("GET", "http://example.com/", nil)
	require.NoError(t, err)
	r.RemoteAddr = "10.0.0.1:4711"
	r.Header[header] = lines
	k, ok := res.Key(r)
	require.True(t, ok)
	return k
}

// TestForwardedClientCannotHideProxyElement: whatever the client writes
// before the element its trusted proxy appends, the key is the address the
// proxy vouched for (issue 9, item 2).
func TestForwardedClientCannotHideProxyElement(t *testing.T) {
	res := mustResolver(t, TrustedProxies("10.0.0.0/8"), ProxyHeaders("Forwarded"))
	for _, client := range []string{
		`for=6.6.6.6;x="y`,
		`for="6.6.6.6`,
		`"`,
		`for=unknown;proto="https`,
		`for="6.6.6.6\`,
		`for="6.6.6.6\"`,
		`for=6.6.6.6, for="10.0.0.7`,
		`for=10.0.0.2;x="`,
		`,,,;;;===""`,
		strings.Repeat(`for=1.1.1.1, `, 100) + `"`,
		"",
	} {
		for _, appended := range []string{"203.0.113.9", `"203.0.113.9:1234"`, `"[2001:db8::9]"`} {
			want, _, ok := parseNode(strings.Trim(appended, `"`))
			require.True(t, ok)
			wantKey := mustResolver(t).keyOf(want, "")
			line := client + ", for=" + appended
			assert.Equal(t, wantKey, appendingProxyKey(t, res, "Forwarded", line), "Forwarded: %s", line)
			// A proxy that adds a line of its own instead.
			assert.Equal(t, wantKey, appendingProxyKey(t, res, "Forwarded", client, "for="+appended), "Forwarded: %q, %q", client, "for="+appended)
		}
	}
}

// TestTrustedPrefixesIPv4Mapped: an IPv4-mapped prefix trusts the IPv4
// network, as TrustedProxies does (issue 9, item 13).
func TestTrustedPrefixesIPv4Mapped(t *testing.T) {
	res := mustResolver(t, TrustedPrefixes(netip.MustParsePrefix("::ffff:10.0.0.0/104")))
	assert.Equal(t, "203.0.113.9", appendingProxyKey(t, res, "X-Forwarded-For", "203.0.113.9"))
	res = mustResolver(t, TrustedPrefixes(netip.MustParsePrefix("::ffff:10.0.0.1/128")))
	assert.Equal(t, "203.0.113.9", appendingProxyKey(t, res, "X-Forwarded-For", "203.0.113.9"))
}

// proxyAppended returns the address a fuzz case's trusted proxy appends:
// an IPv4 or IPv6 address outside the trusted 10.0.0.0/8, and its key.
func proxyAppended(t *testing.T, b []byte, v6 bool) (netip.Addr, string) {
	var a netip.Addr
	if v6 {
		var x [16]byte
		copy(x[:], b)
		x[0] = 0x20 // 2000::/8: global unicast, never mapped
		a = netip.AddrFrom16(x)
	} else {
		var x [4]byte
		copy(x[:], b)
		if x[0] == 10 {
			x[0] = 11
		}
		a = netip.AddrFrom4(x)
	}
	return a, mustResolver(t).keyOf(a, "")
}

// FuzzForwarded: whatever text the client puts in Forwarded, on the same
// line before the element its trusted proxy appends or on lines before
// the proxy's own, the key is the address the proxy appended (issue 9,
// item 2).
func FuzzForwarded(f *testing.F) {
	for _, s := range []string{`for=6.6.6.6;x="y`, `for="6.6.6.6`, `"`, `for=unknown;proto="https`, `\`, `for="\"`,
		`for=1.1.1.1, for="[::1]:80"`, `"a\\"b", "`, ""} {
		f.Add(s, []byte{203, 0, 113, 9}, false, false)
		f.Add(s, []byte{0x20, 1, 0xd, 0xb8}, true, true)
	}
	res := mustResolver(f, TrustedProxies("10.0.0.0/8", "fd00::/8"), ProxyHeaders("Forwarded"))
	f.Fuzz(func(t *testing.T, client string, addr []byte, v6, quoted bool) {
		a, want := proxyAppended(t, addr, v6)
		elem := "for=" + a.String()
		if v6 {
			elem = `for="[` + a.String() + `]:8080"`
		} else if quoted {
			elem = `for="` + a.String() + `:8080"`
		}
		if got := appendingProxyKey(t, res, "Forwarded", client+", "+elem); got != want {
			t.Fatalf("Forwarded: %s, %s: key %q, want %q", client, elem, got, want)
		}
		if got := appendingProxyKey(t, res, "Forwarded", client, elem); got != want {
			t.Fatalf("Forwarded: %q, %q: key %q, want %q", client, elem, got, want)
		}
		// Through a second trusted proxy, 10.0.0.2, that appended too.
		if got := appendingProxyKey(t, res, "Forwarded", client+", "+elem+", for=10.0.0.2"); got != want {
			t.Fatalf("Forwarded: %s, %s, for=10.0.0.2: key %q, want %q", client, elem, got, want)
		}
	})
}

// FuzzXForwardedFor: whatever the client puts in X-Forwarded-For, the key
// is the address its trusted proxy appended, on the same line or its own.
func FuzzXForwardedFor(f *testing.F) {
	for _, s := range []string{"6.6.6.6", `"`, ",,,", "10.0.0.3", "unknown", "[::1]:80", "1.1.1.1, 10.0.0.2", ""} {
		f.Add(s, []byte{203, 0, 113, 9}, false)
		f.Add(s, []byte{0x20, 1, 0xd, 0xb8}, true)
	}
	res := mustResolver(f, TrustedProxies("10.0.0.0/8", "fd00::/8"))
	f.Fuzz(func(t *testing.T, client string, addr []byte, v6 bool) {
		a, want := proxyAppended(t, addr, v6)
		if got := appendingProxyKey(t, res, "X-Forwarded-For", client+", "+a.String()); got != want {
			t.Fatalf("X-Forwarded-For: %s, %s: key %q, want %q", client, a, got, want)
		}
		if got := appendingProxyKey(t, res, "X-Forwarded-For", client, a.String()+", 10.0.0.2"); got != want {
			t.Fatalf("X-Forwarded-For: %q, %q: key %q, want %q", client, a.String()+", 10.0.0.2", got, want)
		}
	})
}

// TestNewRejectsDuplicateNames: two Limits with one Name would be
// indistinguishable in the fields and hooks (issue 9, item 15).
func TestNewRejectsDuplicateNames(t *testing.T) {
	lim := newKeyed(t, ratelimit.FixedWindowPolicy(5, time.Minute), clock.NewMock())
	for _, names := range [][2]string{{"api", "api"}, {"", "default"}, {"", ""}} {
		_, err := New([]Limit{
			{Name: names[0], Key: KeyByIP(), Limiter: lim},
			{Name: names[1], Key: KeyByAPIKey(), Limiter: lim},
		})
		require.Error(t, err, "names %q", names)
		assert.Contains(t, err.Error(), "httplimit:")
		assert.Contains(t, err.Error(), "twice")
	}
}

// TestHeadCountsAsGetRoute: ServeMux serves HEAD with a GET pattern's
// handler, so a route limit on GET charges HEAD too (issue 9, item 3).
func TestHeadCountsAsGetRoute(t *testing.T) {
	mux := http.NewServeMux()
	var runs int
	mux.HandleFunc("GET /report", func(w http.ResponseWriter, r *http.Request) { runs++ })
	mux.HandleFunc("GET /files/", func(w http.ResponseWriter, r *http.Request) { runs++ })
	for _, tc := range []struct {
		name string
		key  KeyFunc
	}{
		{"IsRoute", When(IsRoute("GET /report"), KeyByIP())},
		{"IsRoute subtree", When(IsRoute("GET /files/"), KeyByIP())},
		{"IsMuxRoute", When(IsMuxRoute(mux, "GET /report"), KeyByIP())},
		{"KeyByRoute", KeyByRoute()},
		{"KeyByMuxRoute", KeyByMuxRoute(mux)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := newKeyed(t, ratelimit.FixedWindowPolicy(2, time.Hour), clock.NewMock())
			h := newMW(t, []Limit{{Name: "report", Key: tc.key, Limiter: lim}}).Handler(mux)
			path := "/report"
			if tc.name == "IsRoute subtree" {
				path = "/files/a/b"
			}
			runs = 0
			var codes []int
			for _, m := range []string{"GET", "GET", "GET", "HEAD", "HEAD"} {
				codes = append(codes, do(h, m, path).Code)
			}
			assert.Equal(t, []int{200, 200, 429, 429, 429}, codes)
			assert.Equal(t, 2, runs, "handler runs")
		})
	}
}
