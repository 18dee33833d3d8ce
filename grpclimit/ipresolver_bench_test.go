package grpclimit_test

import (
	"testing"

	"github.com/rlkit/ratelimit/grpclimit"
)

// BenchmarkIPResolverKey measures keying a call by client address: a bare
// IPv4 or IPv6 peer, an untrusted peer sending x-forwarded-for, and a
// trusted proxy writing x-forwarded-for or forwarded.
func BenchmarkIPResolverKey(b *testing.B) {
	proxied := mustResolver(b, grpclimit.TrustedProxies("10.0.0.0/8", "fd00::/8"))
	fwd := mustResolver(b, grpclimit.TrustedProxies("10.0.0.0/8"), grpclimit.ProxyMetadata("forwarded"))
	for _, c := range []struct {
		name string
		key  grpclimit.KeyFunc
		peer string
		kv   []string
	}{
		{"ipv4", grpclimit.KeyByIP(), "203.0.113.7:4711", nil},
		{"ipv6", grpclimit.KeyByIP(), "[2001:db8:1:2::7]:4711", nil},
		{"xff-untrusted-peer", proxied.Key, "203.0.113.7:4711", []string{"x-forwarded-for", "1.1.1.1"}},
		{"xff", proxied.Key, "10.0.0.1:4711", []string{"x-forwarded-for", "1.1.1.1, 198.51.100.9, 10.0.0.2"}},
		{"xff-ipv6", proxied.Key, "[fd00::1]:4711", []string{"x-forwarded-for", "2001:db8:a:b::99, fd00::2"}},
		{"forwarded", fwd.Key, "10.0.0.1:4711", []string{"forwarded", `for=1.1.1.1, for="198.51.100.9:80";proto=https`}},
	} {
		ctx := tcpPeer(b, c.peer, c.kv...)
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				if _, ok := c.key(ctx, "/pkg.Service/Method"); !ok {
					b.Fatal("no key")
				}
			}
		})
	}
}
