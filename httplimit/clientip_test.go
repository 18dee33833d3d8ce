package httplimit

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func mustResolver(t testing.TB, opts ...ResolverOption) *IPResolver {
	t.Helper()
	r, err := NewIPResolver(opts...)
	if err != nil {
		t.Fatalf("NewIPResolver: %v", err)
	}
	return r
}

func reqFrom(remote string, hdr ...string) *http.Request {
	r := httptest.NewRequest("GET", "/", nil)
	r.RemoteAddr = remote
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Add(hdr[i], hdr[i+1])
	}
	return r
}

func TestClientIPKey(t *testing.T) {
	t.Parallel()
	def := mustResolver(t)
	proxied := mustResolver(t, TrustedProxies("10.0.0.0/8", "fd00::/8", "192.0.2.10"))
	fwd := mustResolver(t, TrustedProxies("10.0.0.0/8"), ProxyHeaders("Forwarded", "X-Real-IP"))
	wide := mustResolver(t, IPPrefixes(24, 48))
	cases := []struct {
		name string
		res  *IPResolver
		req  *http.Request
		want string
	}{
		{"ipv4", def, reqFrom("203.0.113.7:5555"), "203.0.113.7"},
		{"ipv4 no port", def, reqFrom("203.0.113.7"), "203.0.113.7"},
		{"ipv6 /64", def, reqFrom("[2001:db8:1:2:3:4:5:6]:443"), "2001:db8:1:2::/64"},
		{"ipv6 same /64", def, reqFrom("[2001:db8:1:2:ffff::1]:443"), "2001:db8:1:2::/64"},
		{"ipv6 zone", def, reqFrom("[fe80::1%eth0]:80"), "fe80::/64"},
		{"v4-mapped", def, reqFrom("[::ffff:203.0.113.7]:80"), "203.0.113.7"},
		{"unix socket", def, reqFrom("@"), "unknown"},
		{"empty", def, reqFrom(""), "unknown"},
		{"xff ignored untrusted", def, reqFrom("203.0.113.7:1", "X-Forwarded-For", "1.1.1.1"), "203.0.113.7"},
		{"real-ip ignored untrusted", def, reqFrom("203.0.113.7:1", "X-Real-IP", "1.1.1.1"), "203.0.113.7"},
		{"forwarded ignored untrusted", def, reqFrom("203.0.113.7:1", "Forwarded", "for=1.1.1.1"), "203.0.113.7"},
		{"xff from untrusted peer", proxied, reqFrom("203.0.113.7:1", "X-Forwarded-For", "1.1.1.1"), "203.0.113.7"},
		{"xff one proxy", proxied, reqFrom("10.1.1.1:1", "X-Forwarded-For", "198.51.100.9"), "198.51.100.9"},
		{"xff spoofed left part", proxied, reqFrom("10.1.1.1:1", "X-Forwarded-For", "1.1.1.1, 198.51.100.9"), "198.51.100.9"},
		{"xff two proxies", proxied, reqFrom("10.1.1.1:1", "X-Forwarded-For", "1.1.1.1, 198.51.100.9, 192.0.2.10"), "198.51.100.9"},
		{"xff lines", proxied, reqFrom("10.1.1.1:1", "X-Forwarded-For", "1.1.1.1", "X-Forwarded-For", "198.51.100.9,10.2.2.2"), "198.51.100.9"},
		{"xff all trusted", proxied, reqFrom("10.1.1.1:1", "X-Forwarded-For", "10.3.3.3, 10.2.2.2"), "10.3.3.3"},
		{"xff garbage hop", proxied, reqFrom("10.1.1.1:1", "X-Forwarded-For", "1.1.1.1, garbage, 10.2.2.2"), "10.2.2.2"},
		{"xff port", proxied, reqFrom("10.1.1.1:1", "X-Forwarded-For", "198.51.100.9:1234"), "198.51.100.9"},
		{"xff ipv6", proxied, reqFrom("[fd00::1]:1", "X-Forwarded-For", "2001:db8:a:b::99"), "2001:db8:a:b::/64"},
		{"xff empty", proxied, reqFrom("10.1.1.1:1", "X-Forwarded-For", ""), "10.1.1.1"},
		{"forwarded not configured", proxied, reqFrom("10.1.1.1:1", "Forwarded", "for=1.1.1.1"), "10.1.1.1"},
		{"forwarded", fwd, reqFrom("10.1.1.1:1", "Forwarded", `for=1.1.1.1, for="198.51.100.9:80";proto=https`), "198.51.100.9"},
		{"forwarded ipv6", fwd, reqFrom("10.1.1.1:1", "Forwarded", `For="[2001:db8::7]:4711"`), "2001:db8::/64"},
		{"forwarded quoted comma", fwd, reqFrom("10.1.1.1:1", "Forwarded", `for=1.1.1.1;by="a,b", for=198.51.100.9`), "198.51.100.9"},
		{"forwarded unknown", fwd, reqFrom("10.1.1.1:1", "Forwarded", `for=1.1.1.1, for=unknown`), "10.1.1.1"},
		{"forwarded over real-ip", fwd, reqFrom("10.1.1.1:1", "X-Real-IP", "1.1.1.1", "Forwarded", "for=198.51.100.9"), "198.51.100.9"},
		{"real-ip", fwd, reqFrom("10.1.1.1:1", "X-Real-IP", " 198.51.100.9 "), "198.51.100.9"},
		{"ipv4 /24", wide, reqFrom("203.0.113.7:1"), "203.0.113.0/24"},
		{"ipv6 /48", wide, reqFrom("[2001:db8:1:2::1]:1"), "2001:db8:1::/48"},
	}
	for _, tc := range cases {
		got, ok := tc.res.Key(tc.req)
		if !ok || got != tc.want {
			t.Errorf("%s: Key = %q, %v; want %q", tc.name, got, ok, tc.want)
		}
	}
}

func TestIPResolverErrors(t *testing.T) {
	t.Parallel()
	for _, o := range []ResolverOption{
		TrustedProxies("10.0.0.0/33"), TrustedProxies("not-an-ip"), ProxyHeaders("X-Client-IP"), ProxyHeaders(),
		IPPrefixes(0, 64), IPPrefixes(33, 64), IPPrefixes(32, 0), IPPrefixes(32, 129),
	} {
		if _, err := NewIPResolver(o); err == nil {
			t.Errorf("option accepted: %+v", o)
		}
	}
}

// TestIPKeyNoAlloc: keying an IPv4 peer, or an IPv6 network seen before,
// allocates nothing.
func TestIPKeyNoAlloc(t *testing.T) {
	res := mustResolver(t, TrustedProxies("10.0.0.0/8"))
	for _, r := range []*http.Request{
		reqFrom("203.0.113.7:5555"),
		reqFrom("[2001:db8:1:2::1]:443"),
		reqFrom("10.0.0.1:5555", "X-Forwarded-For", "1.1.1.1, 198.51.100.9"),
	} {
		res.Key(r)
		if n := testing.AllocsPerRun(100, func() { res.Key(r) }); n != 0 {
			t.Errorf("Key(%s %v) allocates %v times", r.RemoteAddr, r.Header, n)
		}
	}
}

// FuzzClientIP: no input panics; without trusted proxies the key depends on
// RemoteAddr alone; with them, a header address is used only when the peer
// and every hop to its right are trusted, and the key is always derived
// from an address that appears in the request.
func FuzzClientIP(f *testing.F) {
	f.Add("10.0.0.1:1", "1.1.1.1, 198.51.100.9", `for="[2001:db8::1]:80", for=unknown`, "203.0.113.1")
	f.Add("[fd00::1]:443", "garbage,,, ", `for="\`, " ")
	f.Add("203.0.113.7:80", "10.0.0.2", "for=10.0.0.3;by=x", "::1")
	f.Add("@", "", "", "")
	f.Fuzz(func(t *testing.T, remote, xff, forwarded, realIP string) {
		plain := mustResolver(t)
		base, baseOK := plain.Key(reqFrom(remote))
		r := reqFrom(remote)
		// Header.Add would canonicalize; set the raw values.
		r.Header["X-Forwarded-For"] = []string{xff}
		r.Header["Forwarded"] = []string{forwarded}
		r.Header["X-Real-Ip"] = []string{realIP}
		if k, ok := plain.Key(r); k != base || ok != baseOK {
			t.Fatalf("untrusted: headers changed the key from %q to %q", base, k)
		}
		for _, hdrs := range [][]string{{"X-Forwarded-For"}, {"Forwarded"}, {"X-Real-IP"}} {
			res := mustResolver(t, TrustedProxies("10.0.0.0/8", "fd00::/8"), ProxyHeaders(hdrs...))
			a, ok := res.ClientIP(r)
			if !ok {
				if k, _ := res.Key(r); k != unknownKey {
					t.Fatalf("no address but key %q", k)
				}
				continue
			}
			peer, _, _ := parseNode(remote)
			if a == peer {
				continue
			}
			if !res.isTrusted(peer) {
				t.Fatalf("peer %v is not trusted, yet the client is %v", peer, a)
			}
			// The address must be one of the hops, and every hop to its
			// right trusted.
			var hops []string
			switch hdrs[0] {
			case "X-Forwarded-For":
				hops = strings.Split(xff, ",")
			case "Forwarded":
				hops = nil
				for _, e := range strings.Split(forwarded, ",") {
					hops = append(hops, forwardedFor(e))
				}
			default:
				hops = []string{realIP}
			}
			found := false
			for i := len(hops) - 1; i >= 0; i-- {
				h, _, hok := parseNode(strings.TrimSpace(hops[i]))
				if hok && h == a {
					found = true
					break
				}
				if !hok || !res.isTrusted(h) {
					break
				}
			}
			if !found && hdrs[0] != "Forwarded" { // quoting makes naive splitting unreliable for Forwarded
				t.Fatalf("client %v is not reachable through trusted hops of %q", a, hops)
			}
			if k, _ := res.Key(r); k == "" {
				t.Fatal("empty key")
			}
		}
	})
}

// FuzzParseRetryAfter: no panic, never negative.
func FuzzParseRetryAfter(f *testing.F) {
	for _, s := range []string{"120", "0", "Wed, 21 Oct 2026 07:28:00 GMT", "99999999999999999999", "-1", "1.5"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if d, ok := parseRetryAfter(s, epoch); ok && d < 0 {
			t.Fatalf("parseRetryAfter(%q) = %v", s, d)
		}
		if d, ok := parseRateLimitReset([]string{s}); ok && d < 0 {
			t.Fatalf("parseRateLimitReset(%q) = %v", s, d)
		}
	})
}
