package httplimit

import (
	"net/http"
	"net/netip"

	"github.com/rlkit/ratelimit/internal/adapter"
	"github.com/rlkit/ratelimit/internal/clientip"
)

// IPResolver finds a request's client address and turns it into a rate
// limiting key. By default it believes only the connection's peer
// (RemoteAddr): forwarded headers are written by whoever sends the request,
// so reading them without knowing who wrote them lets any client pick its
// own key.
//
// Behind reverse proxies, name them with [TrustedProxies]: when the peer is
// one of them, the resolver reads the header they write ([ProxyHeaders],
// X-Forwarded-For by default) from right to left, skipping addresses of
// trusted proxies, and takes the first address that is not one as the
// client's. Entries to its left were written by the client or by proxies
// nobody vouches for, and are never read.
//
// Keys group addresses by network so that one host cannot dodge its limit
// by rotating through addresses: IPv6 clients are keyed by their /64
// since a single host commonly holds a whole /64, IPv4 clients by their
// address ([IPPrefixes] changes both).
//
// Create one with [NewIPResolver]; the zero value is not usable. An
// IPResolver is safe for concurrent use.
type IPResolver struct {
	headers []proxyHeader // in order of preference
	core    clientip.Resolver
}

// proxyHeader is a forwarded header a resolver reads.
type proxyHeader struct {
	name string // canonical
	src  clientip.Source
}

// TrustedProxies names the reverse proxies (addresses or CIDR networks,
// such as "10.0.0.0/8", "fd00::/8" or "192.0.2.10") whose forwarded headers
// the resolver believes. Without it no forwarded header is ever read. An
// IPv4-mapped network such as ::ffff:10.0.0.0/104 trusts the IPv4 network
// it maps (10.0.0.0/8), since client addresses are compared unmapped; a
// [netip.Prefix] p is given as p.String(). For [NewIPResolver].
func TrustedProxies(cidrs ...string) ResolverOption {
	return resolverOption(func(r *IPResolver) error {
		ps, err := parseNetworks("TrustedProxies", cidrs)
		r.core.AddTrusted(ps...)
		return err
	})
}

// parseNetworks parses the addresses and CIDR networks of the option
// named opt, as [TrustedProxies] documents them; see
// [clientip.ParseNetworks]. It returns the networks parsed before the
// first error.
func parseNetworks(opt string, cidrs []string) ([]netip.Prefix, error) {
	return clientip.ParseNetworks("httplimit."+opt, cidrs)
}

// ProxyHeaders names the headers, in order of preference, that the trusted
// proxies write: "X-Forwarded-For" (the default), "Forwarded" (RFC 7239) or
// "X-Real-IP". The first one present on a request is read; the others are
// ignored. Name only headers your proxies set or overwrite: a header they
// pass through unchanged is the client's to forge. For [NewIPResolver].
func ProxyHeaders(names ...string) ResolverOption {
	return resolverOption(func(r *IPResolver) error {
		r.headers = r.headers[:0]
		for _, n := range names {
			src, ok := clientip.SourceOf(n)
			if !ok {
				return configError("httplimit.ProxyHeaders: want X-Forwarded-For, Forwarded or X-Real-IP, got %q", n)
			}
			r.headers = append(r.headers, proxyHeader{http.CanonicalHeaderKey(n), src})
		}
		if len(r.headers) == 0 {
			return configError("httplimit.ProxyHeaders needs at least one header, got none")
		}
		return nil
	})
}

// IPPrefixes groups clients by networks of the given lengths: IPv4
// clients by their /v4 (default 32: each address on its own; 24 groups a
// /24), IPv6 clients by their /v6 (default 64, the network a single host
// is commonly given), such as IPPrefixes(32, 48) to key IPv6 clients by
// their /48. v4 must be in [1, 32], v6 in [1, 128]. For [NewIPResolver].
func IPPrefixes(v4, v6 int) ResolverOption {
	return resolverOption(func(r *IPResolver) error {
		if err := r.core.SetIPv4Prefix("httplimit.IPPrefixes v4", v4); err != nil {
			return err
		}
		return r.core.SetIPv6Prefix("httplimit.IPPrefixes v6", v6)
	})
}

// NewIPResolver returns a resolver configured by opts. The options that
// apply are [TrustedProxies], [ProxyHeaders] and [IPPrefixes]. It returns an error wrapping
// [ratelimit.ErrInvalidConfig] for an invalid option.
func NewIPResolver(opts ...ResolverOption) (*IPResolver, error) {
	r := &IPResolver{headers: []proxyHeader{{"X-Forwarded-For", clientip.XForwardedFor}}}
	r.core.Init()
	if err := adapter.Apply(opts, func(o ResolverOption) error { return o.applyResolver(r) }); err != nil {
		return nil, err
	}
	return r, nil
}

// ClientIP returns the client's address, or false when RemoteAddr is not
// an IP address (a Unix socket, a test that left it empty).
func (res *IPResolver) ClientIP(r *http.Request) (netip.Addr, bool) {
	a, _, ok := res.resolve(r)
	return a, ok
}

// unknownKey is the key shared by requests whose address cannot be read:
// they are limited together rather than not at all.
const unknownKey = clientip.Unknown

// Key is a [KeyFunc]: it keys a request by its client's network, such as
// "203.0.113.7" or "2001:db8:1:2::/64" (the network with its length, when
// shorter than a full address). Requests whose RemoteAddr is not an IP
// address all share the key "unknown". It allocates nothing for an IPv4
// client keyed by address, nor for a network seen recently.
func (res *IPResolver) Key(r *http.Request) (string, bool) {
	a, text, ok := res.resolve(r)
	if !ok {
		return unknownKey, true
	}
	return res.core.Key(a, text), true
}

// keyOf returns the key of a (unmapped, no zone); text is a's canonical
// textual form if the caller has it as a substring of its input, else "".
func (res *IPResolver) keyOf(a netip.Addr, text string) string {
	return res.core.Key(a, text)
}

// resolve returns the client address and, when the address is IPv4 and
// its text is a substring of the request, that text (so keying needs no
// allocation).
func (res *IPResolver) resolve(r *http.Request) (netip.Addr, string, bool) {
	a, text, ok := clientip.ParseNode(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, "", false
	}
	if !res.core.Proxied() || !res.core.Trusts(a) {
		return a, text, true
	}
	for _, h := range res.headers {
		if lines := r.Header[h.name]; len(lines) != 0 {
			a, text = res.core.Walk(h.src, a, text, lines)
			return a, text, true
		}
	}
	return a, text, true
}

// inNetworks reports whether one of ps contains a.
func inNetworks(ps []netip.Prefix, a netip.Addr) bool {
	return clientip.InNetworks(ps, a)
}

// parseNode parses an address as forwarding headers and RemoteAddr write
// it; see [clientip.ParseNode].
func parseNode(s string) (a netip.Addr, text string, ok bool) {
	return clientip.ParseNode(s)
}
