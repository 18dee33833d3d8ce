package httplimit

import (
	"net/http"
	"testing"
)

// BenchmarkIPResolverKey measures keying a request by client address: a
// bare IPv4 or IPv6 peer, and trusted proxies writing X-Forwarded-For or
// Forwarded. Every case allocates nothing.
func BenchmarkIPResolverKey(b *testing.B) {
	plain := mustResolver(b)
	proxied := mustResolver(b, TrustedProxies("10.0.0.0/8", "fd00::/8"))
	fwd := mustResolver(b, TrustedProxies("10.0.0.0/8"), ProxyHeaders("Forwarded"))
	cases := []struct {
		name string
		res  *IPResolver
		req  *http.Request
	}{
		{"ipv4", plain, reqFrom("203.0.113.7:4711")},
		{"ipv6", plain, reqFrom("[2001:db8:1:2::7]:4711")},
		{"xff-untrusted-peer", proxied, reqFrom("203.0.113.7:4711", "X-Forwarded-For", "1.1.1.1")},
		{"xff", proxied, reqFrom("10.0.0.1:4711", "X-Forwarded-For", "1.1.1.1, 198.51.100.9, 10.0.0.2")},
		{"xff-ipv6", proxied, reqFrom("[fd00::1]:4711", "X-Forwarded-For", "2001:db8:a:b::99, fd00::2")},
		{"forwarded", fwd, reqFrom("10.0.0.1:4711", "Forwarded", `for=1.1.1.1, for="198.51.100.9:80";proto=https`)},
	}
	for _, c := range cases {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, ok := c.res.Key(c.req); !ok {
					b.Fatal("no key")
				}
			}
		})
	}
}
