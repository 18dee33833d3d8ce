package grpclimit_test

import (
	"context"
	"errors"
	"net"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testpb "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/grpclimit"
	"github.com/rlkit/ratelimit/httplimit"
)

func mustResolver(t testing.TB, opts ...grpclimit.ResolverOption) *grpclimit.IPResolver {
	t.Helper()
	r, err := grpclimit.NewIPResolver(opts...)
	require.NoError(t, err)
	return r
}

// tcpPeer returns a server context of a call from the TCP peer addr
// ("203.0.113.7:4711", "[2001:db8::1]:443") carrying the incoming metadata
// kv (key, value pairs; repeated keys add values).
func tcpPeer(t testing.TB, addr string, kv ...string) context.Context {
	t.Helper()
	ap := netip.MustParseAddrPort(addr)
	return fromPeer(&net.TCPAddr{IP: ap.Addr().AsSlice(), Port: int(ap.Port()), Zone: ap.Addr().Zone()}, kv...)
}

func fromPeer(addr net.Addr, kv ...string) context.Context {
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: addr})
	if len(kv) > 0 {
		ctx = metadata.NewIncomingContext(ctx, metadata.Pairs(kv...))
	}
	return ctx
}

// bufAddr is the address of a bufconn connection: not an IP address.
type bufAddr struct{}

func (bufAddr) Network() string { return "bufconn" }
func (bufAddr) String() string  { return "bufconn" }

// TestIPResolverKey: the peer alone unless it is a trusted proxy; from a
// trusted proxy, the forwarded metadata read right to left up to the first
// untrusted hop; IPv6 by /64; peers that are not IP addresses "unknown".
func TestIPResolverKey(t *testing.T) {
	t.Parallel()
	def := mustResolver(t)
	proxied := mustResolver(t, grpclimit.TrustedProxies("10.0.0.0/8", "fd00::/8", "192.0.2.10"))
	fwd := mustResolver(t, grpclimit.TrustedProxies("10.0.0.0/8"), grpclimit.ProxyMetadata("Forwarded", "x-real-ip"))
	wide := mustResolver(t, grpclimit.IPPrefixes(24, 48))
	mapped := mustResolver(t, grpclimit.TrustedProxies("::ffff:10.0.0.0/104"))
	cases := []struct {
		name string
		res  *grpclimit.IPResolver
		ctx  context.Context
		want string
	}{
		{"ipv4", def, tcpPeer(t, "203.0.113.7:5555"), "203.0.113.7"},
		{"ipv6 /64", def, tcpPeer(t, "[2001:db8:1:2:3:4:5:6]:443"), "2001:db8:1:2::/64"},
		{"ipv6 same /64", def, tcpPeer(t, "[2001:db8:1:2:ffff::1]:443"), "2001:db8:1:2::/64"},
		{"ipv6 zone", def, tcpPeer(t, "[fe80::1%eth0]:80"), "fe80::/64"},
		{"v4-mapped", def, tcpPeer(t, "[::ffff:203.0.113.7]:80"), "203.0.113.7"},
		{"16-byte ipv4", def, fromPeer(&net.TCPAddr{IP: net.ParseIP("203.0.113.7"), Port: 1}), "203.0.113.7"},
		{"udp", def, fromPeer(&net.UDPAddr{IP: net.ParseIP("203.0.113.7"), Port: 1}), "203.0.113.7"},
		{"bufconn", def, fromPeer(bufAddr{}), "unknown"},
		{"unix socket", def, fromPeer(&net.UnixAddr{Name: "/tmp/s", Net: "unix"}), "unknown"},
		{"nil tcp addr", def, fromPeer((*net.TCPAddr)(nil)), "unknown"},
		{"nil udp addr", def, fromPeer((*net.UDPAddr)(nil)), "unknown"},
		{"empty tcp addr", def, fromPeer(&net.TCPAddr{}), "unknown"},
		{"nil addr", def, fromPeer(nil), "unknown"},
		{"no peer", def, context.Background(), "unknown"},
		{"xff ignored by default", def, tcpPeer(t, "10.1.1.1:1", "x-forwarded-for", "1.1.1.1"), "10.1.1.1"},
		{"xff spoofed by untrusted peer", proxied, tcpPeer(t, "203.0.113.7:1", "x-forwarded-for", "1.1.1.1"), "203.0.113.7"},
		{"xff one proxy", proxied, tcpPeer(t, "10.1.1.1:1", "x-forwarded-for", "198.51.100.9"), "198.51.100.9"},
		{"xff spoofed left part", proxied, tcpPeer(t, "10.1.1.1:1", "x-forwarded-for", "1.1.1.1, 198.51.100.9"), "198.51.100.9"},
		{"xff two proxies", proxied, tcpPeer(t, "10.1.1.1:1", "x-forwarded-for", "1.1.1.1, 198.51.100.9, 192.0.2.10"), "198.51.100.9"},
		{"xff values", proxied, tcpPeer(t, "10.1.1.1:1", "x-forwarded-for", "1.1.1.1", "x-forwarded-for", "198.51.100.9,10.2.2.2"), "198.51.100.9"},
		{"xff all trusted", proxied, tcpPeer(t, "10.1.1.1:1", "x-forwarded-for", "10.3.3.3, 10.2.2.2"), "10.3.3.3"},
		{"xff garbage hop", proxied, tcpPeer(t, "10.1.1.1:1", "x-forwarded-for", "1.1.1.1, garbage, 10.2.2.2"), "10.2.2.2"},
		{"xff garbage", proxied, tcpPeer(t, "10.1.1.1:1", "x-forwarded-for", "\x00,,;\"[::"), "10.1.1.1"},
		{"xff port", proxied, tcpPeer(t, "10.1.1.1:1", "x-forwarded-for", "198.51.100.9:1234"), "198.51.100.9"},
		{"xff ipv6", proxied, tcpPeer(t, "[fd00::1]:1", "x-forwarded-for", "2001:db8:a:b::99"), "2001:db8:a:b::/64"},
		{"xff empty", proxied, tcpPeer(t, "10.1.1.1:1", "x-forwarded-for", ""), "10.1.1.1"},
		{"forwarded not configured", proxied, tcpPeer(t, "10.1.1.1:1", "forwarded", "for=1.1.1.1"), "10.1.1.1"},
		{"forwarded", fwd, tcpPeer(t, "10.1.1.1:1", "forwarded", `for=1.1.1.1, for="198.51.100.9:80";proto=https`), "198.51.100.9"},
		{"forwarded ipv6", fwd, tcpPeer(t, "10.1.1.1:1", "forwarded", `For="[2001:db8::7]:4711"`), "2001:db8::/64"},
		{"forwarded quoted comma", fwd, tcpPeer(t, "10.1.1.1:1", "forwarded", `for=1.1.1.1;by="a,b", for=198.51.100.9`), "198.51.100.9"},
		{"forwarded unknown", fwd, tcpPeer(t, "10.1.1.1:1", "forwarded", `for=1.1.1.1, for=unknown`), "10.1.1.1"},
		{"forwarded unbalanced quote", fwd, tcpPeer(t, "10.1.1.1:1", "forwarded", `for="6.6.6.6, for=198.51.100.9`), "198.51.100.9"},
		{"forwarded over real-ip", fwd, tcpPeer(t, "10.1.1.1:1", "x-real-ip", "1.1.1.1", "forwarded", "for=198.51.100.9"), "198.51.100.9"},
		{"xff not configured", fwd, tcpPeer(t, "10.1.1.1:1", "x-forwarded-for", "1.1.1.1"), "10.1.1.1"},
		{"real-ip", fwd, tcpPeer(t, "10.1.1.1:1", "x-real-ip", " 198.51.100.9 "), "198.51.100.9"},
		{"ipv4 /24", wide, tcpPeer(t, "203.0.113.7:1"), "203.0.113.0/24"},
		{"ipv6 /48", wide, tcpPeer(t, "[2001:db8:1:2::1]:1"), "2001:db8:1::/48"},
		{"mapped prefix trusts ipv4", mapped, tcpPeer(t, "10.1.1.1:1", "x-forwarded-for", "198.51.100.9"), "198.51.100.9"},
	}
	for _, tc := range cases {
		got, ok := tc.res.Key(tc.ctx, "/grpc.testing.TestService/EmptyCall")
		assert.True(t, ok, tc.name)
		assert.Equal(t, tc.want, got, tc.name)
		a, ok := tc.res.ClientIP(tc.ctx)
		if tc.want == "unknown" {
			assert.False(t, ok, "%s: ClientIP = %v", tc.name, a)
		} else {
			assert.True(t, ok && a.IsValid() && !a.Is4In6() && a.Zone() == "", "%s: ClientIP = %v, %v", tc.name, a, ok)
		}
	}
}

// TestIPResolverMetadataKeyCase: metadata built by hand with an
// upper-case key is still read, as gRPC's own accessors read it.
func TestIPResolverMetadataKeyCase(t *testing.T) {
	t.Parallel()
	res := mustResolver(t, grpclimit.TrustedProxies("10.0.0.0/8"))
	ctx := peer.NewContext(context.Background(), &peer.Peer{Addr: &net.TCPAddr{IP: net.IPv4(10, 1, 1, 1)}})
	ctx = metadata.NewIncomingContext(ctx, metadata.MD{"X-Forwarded-For": {"198.51.100.9"}})
	k, _ := res.Key(ctx, "/m")
	assert.Equal(t, "198.51.100.9", k)
}

// TestKeyByPeer: the peer's network, whatever the metadata says.
func TestKeyByPeer(t *testing.T) {
	t.Parallel()
	key := grpclimit.KeyByIP()
	for _, c := range []struct {
		ctx  context.Context
		want string
	}{
		{tcpPeer(t, "10.0.0.1:1", "x-forwarded-for", "198.51.100.9", "forwarded", "for=198.51.100.9", "x-real-ip", "198.51.100.9"), "10.0.0.1"},
		{tcpPeer(t, "[2001:db8:1:2::9]:1", "x-forwarded-for", "198.51.100.9"), "2001:db8:1:2::/64"},
		{fromPeer(bufAddr{}), "unknown"},
	} {
		got, ok := key(c.ctx, "/pkg.Service/Method")
		assert.True(t, ok)
		assert.Equal(t, c.want, got)
	}
}

// TestIPResolverErrors: every invalid option is refused with an error that
// names it and matches ratelimit.ErrInvalidConfig.
func TestIPResolverErrors(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		opt  grpclimit.ResolverOption
		want string
	}{
		{grpclimit.TrustedProxies("10.0.0.0/33"), `grpclimit.TrustedProxies: netip.ParsePrefix("10.0.0.0/33"): prefix length out of range, got "10.0.0.0/33"`},
		{grpclimit.TrustedProxies("not-an-ip"), `grpclimit.TrustedProxies: ParseAddr("not-an-ip"): unable to parse IP, got "not-an-ip"`},
		{grpclimit.TrustedProxies("::ffff:10.0.0.0/80"), "grpclimit.TrustedProxies: an IPv4-mapped prefix needs at least 96 bits, got ::ffff:10.0.0.0/80"},
		{grpclimit.ProxyMetadata("x-client-ip"), `grpclimit.ProxyMetadata: want x-forwarded-for, forwarded or x-real-ip, got "x-client-ip"`},
		{grpclimit.ProxyMetadata(), "grpclimit.ProxyMetadata needs at least one key, got none"},
		{grpclimit.IPPrefixes(0, 64), "grpclimit.IPPrefixes v4 must be in [1, 32], got 0"},
		{grpclimit.IPPrefixes(33, 64), "grpclimit.IPPrefixes v4 must be in [1, 32], got 33"},
		{grpclimit.IPPrefixes(32, 0), "grpclimit.IPPrefixes v6 must be in [1, 128], got 0"},
		{grpclimit.IPPrefixes(32, 129), "grpclimit.IPPrefixes v6 must be in [1, 128], got 129"},
	} {
		res, err := grpclimit.NewIPResolver(c.opt)
		assert.Nil(t, res)
		require.Error(t, err, c.want)
		assert.True(t, errors.Is(err, ratelimit.ErrInvalidConfig), "%v", err)
		assert.Equal(t, "ratelimit: invalid configuration: "+c.want, err.Error())
	}
	// A nil option is ignored.
	_, err := grpclimit.NewIPResolver(nil)
	assert.NoError(t, err)
	// Options of other constructors do not compile:
	// TestWrongOptionDoesNotCompile.
}

// TestIPResolverKeyAllocs: keying a peer whose network was seen before
// allocates nothing; reading forwarded metadata from a trusted proxy
// allocates once (gRPC copies the values it hands out).
func TestIPResolverKeyAllocs(t *testing.T) {
	res := mustResolver(t, grpclimit.TrustedProxies("10.0.0.0/8"))
	for _, c := range []struct {
		ctx    context.Context
		allocs float64
	}{
		{tcpPeer(t, "203.0.113.7:5555"), 0},
		{tcpPeer(t, "[2001:db8:1:2::1]:443"), 0},
		{tcpPeer(t, "203.0.113.7:5555", "x-forwarded-for", "1.1.1.1"), 0},
		{tcpPeer(t, "10.0.0.1:5555"), 0},
		{tcpPeer(t, "10.0.0.1:5555", "x-forwarded-for", "1.1.1.1, 198.51.100.9"), 1},
		{fromPeer(bufAddr{}), 0},
	} {
		res.Key(c.ctx, "/m")
		n := testing.AllocsPerRun(100, func() { res.Key(c.ctx, "/m") })
		assert.Equal(t, c.allocs, n, "Key(%v) allocations", c.ctx)
	}
}

// keyServer serves TestService's EmptyCall, answering with the key that
// key gives the call in the response header "key".
type keyServer struct {
	testpb.UnimplementedTestServiceServer
	key grpclimit.KeyFunc
}

func (s keyServer) EmptyCall(ctx context.Context, _ *testpb.Empty) (*testpb.Empty, error) {
	method, _ := grpc.Method(ctx)
	k, ok := s.key(ctx, method)
	if !ok {
		k = "(none)"
	}
	if err := grpc.SetHeader(ctx, metadata.Pairs("key", k)); err != nil {
		return nil, err
	}
	return &testpb.Empty{}, nil
}

// serveKeys starts a gRPC server on lis answering with key's keys, and
// returns a client connected through dial (nil: the listener's address).
func serveKeys(t *testing.T, lis net.Listener, key grpclimit.KeyFunc, dial func(context.Context, string) (net.Conn, error)) testpb.TestServiceClient {
	t.Helper()
	srv := grpc.NewServer()
	testpb.RegisterTestServiceServer(srv, keyServer{key: key})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	target := lis.Addr().String()
	if dial != nil {
		opts = append(opts, grpc.WithContextDialer(dial))
		target = "passthrough:///bufnet"
	}
	conn, err := grpc.NewClient(target, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return testpb.NewTestServiceClient(conn)
}

// callKey makes one EmptyCall with the outgoing metadata kv and returns
// the key the server reported.
func callKey(t *testing.T, c testpb.TestServiceClient, kv ...string) string {
	t.Helper()
	ctx := metadata.AppendToOutgoingContext(context.Background(), kv...)
	var hdr metadata.MD
	_, err := c.EmptyCall(ctx, &testpb.Empty{}, grpc.Header(&hdr))
	require.NoError(t, err)
	require.Len(t, hdr.Get("key"), 1)
	return hdr.Get("key")[0]
}

// TestIPResolverOverGRPC: on a real server on loopback TCP, a client's
// x-forwarded-for is ignored unless the loopback peer is a trusted proxy,
// in which case the rightmost untrusted hop is the key; over bufconn the
// key is "unknown".
func TestIPResolverOverGRPC(t *testing.T) {
	t.Parallel()
	listen := func() net.Listener {
		lis, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		return lis
	}
	peerOnly := serveKeys(t, listen(), grpclimit.KeyByIP(), nil)
	assert.Equal(t, "127.0.0.1", callKey(t, peerOnly))
	assert.Equal(t, "127.0.0.1", callKey(t, peerOnly, "x-forwarded-for", "198.51.100.9"), "spoofed x-forwarded-for read")

	untrusted := mustResolver(t, grpclimit.TrustedProxies("10.0.0.0/8"))
	c := serveKeys(t, listen(), untrusted.Key, nil)
	assert.Equal(t, "127.0.0.1", callKey(t, c, "x-forwarded-for", "198.51.100.9"), "spoofed x-forwarded-for read")

	trusted := mustResolver(t, grpclimit.TrustedProxies("127.0.0.0/8", "10.0.0.0/8"))
	c = serveKeys(t, listen(), trusted.Key, nil)
	assert.Equal(t, "127.0.0.1", callKey(t, c))
	assert.Equal(t, "198.51.100.9", callKey(t, c, "x-forwarded-for", "6.6.6.6, 198.51.100.9, 10.0.0.2"))
	assert.Equal(t, "198.51.100.9", callKey(t, c, "x-forwarded-for", "6.6.6.6", "x-forwarded-for", "198.51.100.9"))
	assert.Equal(t, "2001:db8:1:2::/64", callKey(t, c, "x-forwarded-for", "2001:db8:1:2::77"))
	assert.Equal(t, "10.0.0.2", callKey(t, c, "x-forwarded-for", "garbage, 10.0.0.2"))

	fwd := mustResolver(t, grpclimit.TrustedProxies("127.0.0.0/8"), grpclimit.ProxyMetadata("forwarded"))
	c = serveKeys(t, listen(), fwd.Key, nil)
	assert.Equal(t, "198.51.100.9", callKey(t, c, "forwarded", `for=6.6.6.6, for="198.51.100.9:443";proto=https`))
	assert.Equal(t, "127.0.0.1", callKey(t, c, "x-forwarded-for", "198.51.100.9"))

	bl := bufconn.Listen(1 << 16)
	c = serveKeys(t, bl, trusted.Key, func(ctx context.Context, _ string) (net.Conn, error) { return bl.DialContext(ctx) })
	assert.Equal(t, "unknown", callKey(t, c, "x-forwarded-for", "198.51.100.9"))
}

// TestIPResolverOverGRPCIPv6: the same over IPv6 loopback, when the host
// has it: the peer ::1 is keyed by its /64.
func TestIPResolverOverGRPCIPv6(t *testing.T) {
	t.Parallel()
	lis, err := net.Listen("tcp", "[::1]:0")
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	c := serveKeys(t, lis, grpclimit.KeyByIP(), nil)
	assert.Equal(t, "::/64", callKey(t, c, "x-forwarded-for", "198.51.100.9"))
	trusted := mustResolver(t, grpclimit.TrustedProxies("::1"))
	lis, err = net.Listen("tcp", "[::1]:0")
	require.NoError(t, err)
	c = serveKeys(t, lis, trusted.Key, nil)
	assert.Equal(t, "198.51.100.9", callKey(t, c, "x-forwarded-for", "6.6.6.6, 198.51.100.9"))
}

// FuzzIPResolverMetadata: no metadata panics the resolver; the client
// address is the peer's unless the peer is trusted, and otherwise always
// an address written somewhere in the metadata the call carries; and
// httplimit, given the same peer and values as headers, agrees.
func FuzzIPResolverMetadata(f *testing.F) {
	f.Add([]byte{10, 0, 0, 1}, "1.1.1.1, 198.51.100.9", `for="[2001:db8::1]:80", for=unknown`, "203.0.113.1", false)
	f.Add([]byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}, "garbage,,, ", `for="\`, " ", true)
	f.Add([]byte{203, 0, 113, 7}, "10.0.0.2", "for=10.0.0.3;by=x", "::1", false)
	f.Add([]byte{10, 9, 9, 9}, "fe80::1%a,b, ::ffff:10.0.0.1", `for="fe80::1%a,b", for=10.0.0.4`, "[::1]:80", true)
	f.Add([]byte{}, "", "", "", false)
	f.Fuzz(func(t *testing.T, ip []byte, xff, forwarded, realIP string, trustAll bool) {
		if len(xff)+len(forwarded)+len(realIP) > 512 {
			return // the substring check below is quadratic
		}
		trusted := []string{"10.0.0.0/8", "fd00::/8"}
		if trustAll {
			trusted = []string{"0.0.0.0/0", "::/0"}
		}
		peerAddr := &net.TCPAddr{IP: ip, Port: 1}
		peerIP, peerOK := netip.AddrFromSlice(ip)
		peerIP = peerIP.Unmap()
		for _, names := range [][]string{{"x-forwarded-for"}, {"forwarded"}, {"x-real-ip"}, {"forwarded", "x-forwarded-for", "x-real-ip"}} {
			res := mustResolver(t, grpclimit.TrustedProxies(trusted...), grpclimit.ProxyMetadata(names...))
			ctx := fromPeer(peerAddr, "x-forwarded-for", xff, "forwarded", forwarded, "x-real-ip", realIP)
			a, ok := res.ClientIP(ctx)
			k, kok := res.Key(ctx, "/m")
			if !kok || k == "" {
				t.Fatalf("Key = %q, %v", k, kok)
			}
			// httplimit, given the same peer and the same values as
			// headers, finds the same client and key.
			hres, err := httplimit.NewIPResolver(httplimit.TrustedProxies(trusted...), httplimit.ProxyHeaders(names...))
			require.NoError(t, err)
			r := httptest.NewRequest("GET", "/", nil)
			r.RemoteAddr = ""
			if peerOK {
				r.RemoteAddr = netip.AddrPortFrom(peerIP, 1).String()
			}
			r.Header["X-Forwarded-For"] = []string{xff}
			r.Header["Forwarded"] = []string{forwarded}
			r.Header["X-Real-Ip"] = []string{realIP}
			ha, hok := hres.ClientIP(r)
			hk, _ := hres.Key(r)
			if ha != a || hok != ok || hk != k {
				t.Fatalf("%v: grpclimit finds %v, %v, key %q; httplimit %v, %v, key %q", names, a, ok, k, ha, hok, hk)
			}
			if ok != peerOK {
				t.Fatalf("peer %v (%v): ClientIP = %v, %v", ip, peerOK, a, ok)
			}
			if !ok {
				if k != "unknown" {
					t.Fatalf("no address but key %q", k)
				}
				continue
			}
			if a == peerIP {
				continue
			}
			if !trustAll && !netip.MustParsePrefix("10.0.0.0/8").Contains(peerIP) && !netip.MustParsePrefix("fd00::/8").Contains(peerIP) {
				t.Fatalf("peer %v is not trusted, yet the client is %v", peerIP, a)
			}
			if !inText(a, xff, forwarded, realIP) {
				t.Fatalf("client %v appears nowhere in %q, %q, %q", a, xff, forwarded, realIP)
			}
		}
	})
}

// inText reports whether a is written, in any form an address takes in
// forwarded metadata, as a substring of one of texts.
func inText(a netip.Addr, texts ...string) bool {
	for _, s := range texts {
		for i := 0; i < len(s); i++ {
			for j := i + 1; j <= len(s); j++ {
				if b, ok := parseHop(s[i:j]); ok && b == a {
					return true
				}
			}
		}
	}
	return false
}

// parseHop parses s as a forwarded hop: an address, bracketed or not, with
// or without a port, unmapped and without its zone.
func parseHop(s string) (netip.Addr, bool) {
	if ap, err := netip.ParseAddrPort(s); err == nil {
		return ap.Addr().WithZone("").Unmap(), true
	}
	s = strings.TrimSuffix(strings.TrimPrefix(s, "["), "]")
	a, err := netip.ParseAddr(s)
	return a.WithZone("").Unmap(), err == nil
}

// TestIPResolverLimitsBehindProxy: a limit keyed by a resolver that trusts
// the loopback proxy gives each forwarded client its own quota, and a
// client that forges hops to the left of its address stays on its quota.
func TestIPResolverLimitsBehindProxy(t *testing.T) {
	t.Parallel()
	res := mustResolver(t, grpclimit.TrustedProxies("127.0.0.0/8"))
	lim, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(2, time.Hour))
	require.NoError(t, err)
	ic, err := grpclimit.New([]grpclimit.Limit{{Name: "ip", Key: res.Key, Limiter: lim}})
	require.NoError(t, err)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ic.Unary()))
	testpb.RegisterTestServiceServer(srv, keyServer{key: res.Key})
	go func() { _ = srv.Serve(lis) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	c := testpb.NewTestServiceClient(conn)

	call := func(xff string) codes.Code {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-forwarded-for", xff)
		_, err := c.EmptyCall(ctx, &testpb.Empty{})
		return status.Code(err)
	}
	assert.Equal(t, codes.OK, call("198.51.100.9"))
	assert.Equal(t, codes.OK, call("1.1.1.1, 198.51.100.9"))
	assert.Equal(t, codes.ResourceExhausted, call("2.2.2.2, 198.51.100.9"), "forged hops dodged the limit")
	assert.Equal(t, codes.OK, call("198.51.100.10"), "another client shares the first one's quota")
	assert.Equal(t, codes.OK, call("2001:db8:1:2::1"))
	assert.Equal(t, codes.OK, call("2001:db8:1:2::2"))
	assert.Equal(t, codes.ResourceExhausted, call("2001:db8:1:2::3"), "an IPv6 client escaped its /64")
}
