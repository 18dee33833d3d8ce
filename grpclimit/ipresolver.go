package grpclimit

import (
	"context"
	"net"
	"net/netip"

	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"

	"github.com/rlkit/ratelimit/internal/adapter"
	"github.com/rlkit/ratelimit/internal/clientip"
)

// IPResolver finds a call's client address and turns it into a rate
// limiting key. By default it believes only the connection's peer
// ([peer.FromContext]): forwarded metadata is written by whoever sends the
// call, so reading it without knowing who wrote it lets any client pick
// its own key.
//
// Behind reverse proxies (Envoy, a gRPC-aware load balancer), name them
// with [TrustedProxies]: when the peer is one of them, the resolver reads
// the metadata they write ([ProxyMetadata], x-forwarded-for by default)
// from right to left, skipping addresses of trusted proxies, and takes the
// first address that is not one as the client's. Entries to its left were
// written by the client or by proxies nobody vouches for, and are never
// read. These are the rules of httplimit's IPResolver, applied to incoming
// metadata instead of request headers.
//
// Keys group addresses by network so that one host cannot dodge its limit
// by rotating through addresses: IPv6 clients are keyed by their /64
// since a single host commonly holds a whole /64, IPv4 clients by their
// address ([IPPrefixes] changes both).
//
// Create one with [NewIPResolver]; the zero value is not usable. An
// IPResolver is safe for concurrent use.
type IPResolver struct {
	metadata []proxyMetadata // in order of preference
	core     clientip.Resolver
}

// proxyMetadata is a forwarded metadata key a resolver reads.
type proxyMetadata struct {
	key string // lower-case
	src clientip.Source
}

// TrustedProxies names the reverse proxies (addresses or CIDR networks,
// such as "10.0.0.0/8", "fd00::/8" or "192.0.2.10") whose forwarded
// metadata the resolver believes. Without it no forwarded metadata is ever
// read. Repeated options add up. An IPv4-mapped network such as
// ::ffff:10.0.0.0/104 trusts the IPv4 network it maps (10.0.0.0/8), since
// client addresses are compared unmapped; a [netip.Prefix] p is given as
// p.String(). For [NewIPResolver].
func TrustedProxies(cidrs ...string) ResolverOption {
	return resolverOption(func(r *IPResolver) error {
		ps, err := clientip.ParseNetworks("grpclimit.TrustedProxies", cidrs)
		r.core.AddTrusted(ps...)
		return err
	})
}

// ProxyMetadata names the incoming metadata keys, in order of preference,
// that the trusted proxies write: "x-forwarded-for" (the default),
// "forwarded" (RFC 7239, read as httplimit reads the Forwarded header) or
// "x-real-ip"; names are compared case-insensitively. The first one present
// on a call is read; the others are ignored. Name only keys your proxies
// set or overwrite: one they pass through unchanged is the client's to
// forge. For [NewIPResolver].
func ProxyMetadata(names ...string) ResolverOption {
	return resolverOption(func(r *IPResolver) error {
		r.metadata = r.metadata[:0]
		for _, n := range names {
			src, ok := clientip.SourceOf(n)
			if !ok {
				return configError("grpclimit.ProxyMetadata: want x-forwarded-for, forwarded or x-real-ip, got %q", n)
			}
			r.metadata = append(r.metadata, proxyMetadata{sourceKeys[src], src})
		}
		if len(r.metadata) == 0 {
			return configError("grpclimit.ProxyMetadata needs at least one key, got none")
		}
		return nil
	})
}

// sourceKeys are the metadata keys of the forwarded sources, lower-case as
// gRPC delivers them.
var sourceKeys = [...]string{
	clientip.XForwardedFor: "x-forwarded-for",
	clientip.Forwarded:     "forwarded",
	clientip.XRealIP:       "x-real-ip",
}

// IPPrefixes groups clients by networks of the given lengths: IPv4
// clients by their /v4 (default 32: each address on its own; 24 groups a
// /24), IPv6 clients by their /v6 (default 64, the network a single host
// is commonly given), such as IPPrefixes(32, 48) to key IPv6 clients by
// their /48. v4 must be in [1, 32], v6 in [1, 128]. For [NewIPResolver].
func IPPrefixes(v4, v6 int) ResolverOption {
	return resolverOption(func(r *IPResolver) error {
		if err := r.core.SetIPv4Prefix("grpclimit.IPPrefixes v4", v4); err != nil {
			return err
		}
		return r.core.SetIPv6Prefix("grpclimit.IPPrefixes v6", v6)
	})
}

// NewIPResolver returns a resolver configured by opts. The options that
// apply are [TrustedProxies], [ProxyMetadata] and [IPPrefixes]. It returns an error wrapping
// [ratelimit.ErrInvalidConfig] for an invalid option.
func NewIPResolver(opts ...ResolverOption) (*IPResolver, error) {
	r := &IPResolver{metadata: []proxyMetadata{{"x-forwarded-for", clientip.XForwardedFor}}}
	r.core.Init()
	if err := adapter.Apply(opts, func(o ResolverOption) error { return o.applyResolver(r) }); err != nil {
		return nil, err
	}
	return r, nil
}

// ClientIP returns the address of the client of the call whose server
// context is ctx, or false when the call's peer is not an IP address (a
// Unix socket, an in-memory bufconn listener) or ctx holds no peer. The
// address is unmapped (::ffff:192.0.2.1 is 192.0.2.1) and has no zone.
func (res *IPResolver) ClientIP(ctx context.Context) (netip.Addr, bool) {
	a, _, ok := res.resolve(ctx)
	return a, ok
}

// Key is a [KeyFunc]: it keys a call by its client's network, such as
// "203.0.113.7" or "2001:db8:1:2::/64" (the network with its length, when
// shorter than a full address), whatever its method. Calls whose peer is
// not an IP address all share the key "unknown". It allocates nothing for
// a network seen recently, except that reading forwarded metadata from a
// trusted proxy copies the metadata's values (one allocation).
func (res *IPResolver) Key(ctx context.Context, method string) (string, bool) {
	a, text, ok := res.resolve(ctx)
	if !ok {
		return clientip.Unknown, true
	}
	return res.core.Key(a, text), true
}

// resolve returns the client address and, when the address is IPv4 and
// was read from metadata, its text there (so keying needs no allocation).
func (res *IPResolver) resolve(ctx context.Context) (netip.Addr, string, bool) {
	a, ok := peerAddr(ctx)
	if !ok {
		return netip.Addr{}, "", false
	}
	if !res.core.Proxied() || !res.core.Trusts(a) {
		return a, "", true
	}
	for _, m := range res.metadata {
		if vals := metadata.ValueFromIncomingContext(ctx, m.key); len(vals) != 0 {
			c, text := res.core.Walk(m.src, a, "", vals)
			return c, text, true
		}
	}
	return a, "", true
}

// peerAddr returns the IP address of the peer of ctx's call: a
// *net.TCPAddr, as gRPC's TCP transport gives, or any address with an
// AddrPort method (a *net.UDPAddr, a listener's own type).
func peerAddr(ctx context.Context) (netip.Addr, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok || p == nil {
		return netip.Addr{}, false
	}
	var a netip.Addr
	switch pa := p.Addr.(type) {
	case *net.TCPAddr:
		if pa == nil {
			return netip.Addr{}, false
		}
		a, ok = netip.AddrFromSlice(pa.IP)
	case interface{ AddrPort() netip.AddrPort }:
		a = pa.AddrPort().Addr()
		ok = a.IsValid()
	default:
		return netip.Addr{}, false
	}
	if !ok {
		return netip.Addr{}, false
	}
	return clientip.Normalize(a), true
}

// KeyByIP keys calls by the address of the connection's peer, IPv4
// addresses one by one and IPv6 addresses grouped by /64 network; calls
// whose peer is not an IP address (a Unix socket, bufconn) share the key
// "unknown". It ignores forwarded metadata; behind a reverse proxy use an
// [IPResolver] that trusts it. Equivalent to the Key method of an
// IPResolver created with no options.
func KeyByIP() KeyFunc { return defaultResolver.Key }

var defaultResolver, _ = NewIPResolver()
