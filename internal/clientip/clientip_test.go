package clientip

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/rlkit/ratelimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newResolver(t testing.TB, trusted ...string) *Resolver {
	t.Helper()
	r := new(Resolver)
	r.Init()
	ps, err := ParseNetworks("test.TrustedProxies", trusted)
	require.NoError(t, err)
	r.AddTrusted(ps...)
	return r
}

// TestWalk: each source read right to left through trusted hops, from a
// trusted peer.
func TestWalk(t *testing.T) {
	t.Parallel()
	r := newResolver(t, "10.0.0.0/8", "fd00::/8")
	peer := netip.MustParseAddr("10.0.0.1")
	cases := []struct {
		src    Source
		values []string
		want   string
		text   string
	}{
		{XForwardedFor, nil, "10.0.0.1", "10.0.0.1"},
		{XForwardedFor, []string{"1.1.1.1, 198.51.100.9, 10.0.0.2"}, "198.51.100.9", "198.51.100.9"},
		{XForwardedFor, []string{"1.1.1.1", "198.51.100.9,10.0.0.2"}, "198.51.100.9", "198.51.100.9"},
		{XForwardedFor, []string{"10.9.9.9, 10.0.0.2"}, "10.9.9.9", "10.9.9.9"},
		{XForwardedFor, []string{"1.1.1.1, garbage, 10.0.0.2"}, "10.0.0.2", "10.0.0.2"},
		{XForwardedFor, []string{"2001:db8::1, fd00::9"}, "2001:db8::1", ""},
		{XForwardedFor, []string{"[::ffff:198.51.100.9]:80"}, "198.51.100.9", ""},
		{Forwarded, []string{`for=1.1.1.1, for="198.51.100.9:80";proto=https`}, "198.51.100.9", "198.51.100.9"},
		{Forwarded, []string{`for=1.1.1.1;by="a,b", FOR=198.51.100.9`}, "198.51.100.9", "198.51.100.9"},
		{Forwarded, []string{`for=1.1.1.1, for=unknown`}, "10.0.0.1", "10.0.0.1"},
		{Forwarded, []string{`for="6.6.6.6, for=198.51.100.9`}, "198.51.100.9", "198.51.100.9"},
		{Forwarded, []string{"for=6.6.6.6" + strings.Repeat(", for=10.0.0.9", 2*MaxForwardedHops)}, "10.0.0.9", "10.0.0.9"},
		{XRealIP, []string{"1.1.1.1", " 198.51.100.9 "}, "198.51.100.9", "198.51.100.9"},
	}
	for _, c := range cases {
		a, text := r.Walk(c.src, peer, "10.0.0.1", c.values)
		assert.Equal(t, c.want, a.String(), "Walk(%d, %q)", c.src, c.values)
		assert.Equal(t, c.text, text, "Walk(%d, %q) text", c.src, c.values)
	}
}

// TestKey: IPv4 by address, IPv6 by /64, other lengths, text reused.
func TestKey(t *testing.T) {
	r := newResolver(t)
	for _, c := range []struct{ addr, text, want string }{
		{"203.0.113.7", "203.0.113.7", "203.0.113.7"},
		{"203.0.113.7", "", "203.0.113.7"},
		{"2001:db8:1:2:3:4:5:6", "", "2001:db8:1:2::/64"},
	} {
		assert.Equal(t, c.want, r.Key(netip.MustParseAddr(c.addr), c.text))
	}
	require.NoError(t, r.SetIPv4Prefix("test.IPv4Prefix", 24))
	require.NoError(t, r.SetIPv6Prefix("test.IPv6Prefix", 128))
	assert.Equal(t, "203.0.113.0/24", r.Key(netip.MustParseAddr("203.0.113.7"), "203.0.113.7"))
	assert.Equal(t, "2001:db8::1", r.Key(netip.MustParseAddr("2001:db8::1"), ""))
	// A cached key is returned without allocating.
	a := netip.MustParseAddr("2001:db8::1")
	assert.Zero(t, testing.AllocsPerRun(100, func() { r.Key(a, "") }))
}

// TestConfigErrors: errors name the caller's option and match
// ratelimit.ErrInvalidConfig.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	r := new(Resolver)
	r.Init()
	_, err1 := ParseNetworks("pkg.TrustedProxies", []string{"10.0.0.0/8", "10.0.0.0/33"})
	_, err2 := CheckPrefixes("pkg.TrustedPrefixes", []netip.Prefix{{}})
	_, err3 := ParseNetworks("pkg.TrustedProxies", []string{"::ffff:10.0.0.0/80"})
	for _, c := range []struct {
		err  error
		want string
	}{
		{err1, `ratelimit: invalid configuration: pkg.TrustedProxies: netip.ParsePrefix("10.0.0.0/33"): prefix length out of range, got "10.0.0.0/33"`},
		{err2, "ratelimit: invalid configuration: pkg.TrustedPrefixes: prefix is invalid, got invalid Prefix"},
		{err3, "ratelimit: invalid configuration: pkg.TrustedProxies: an IPv4-mapped prefix needs at least 96 bits, got ::ffff:10.0.0.0/80"},
		{r.SetIPv4Prefix("pkg.IPv4Prefix", 33), "ratelimit: invalid configuration: pkg.IPv4Prefix must be in [1, 32], got 33"},
		{r.SetIPv6Prefix("pkg.IPv6Prefix", 0), "ratelimit: invalid configuration: pkg.IPv6Prefix must be in [1, 128], got 0"},
	} {
		require.Error(t, c.err)
		assert.Equal(t, c.want, c.err.Error())
		assert.True(t, errors.Is(c.err, ratelimit.ErrInvalidConfig))
	}
	ps, err := ParseNetworks("pkg.TrustedProxies", []string{"::ffff:10.0.0.0/104", "192.0.2.10", "fe80::1%eth0"})
	require.NoError(t, err)
	assert.Equal(t, []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("192.0.2.10/32"),
		netip.MustParsePrefix("fe80::1/128")}, ps)
}

func TestSourceOf(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]Source{
		"X-Forwarded-For": XForwardedFor, "x-forwarded-for": XForwardedFor, "forwarded": Forwarded,
		"X-Real-IP": XRealIP, "x-real-ip": XRealIP, "X-Client-IP": 0, "": 0, "X-Forwarded-For ": 0,
		"X-Real-Ip\u212a": 0, "Forwarded\u212a": 0,
	} {
		got, ok := SourceOf(name)
		assert.Equal(t, want, got, "SourceOf(%q)", name)
		assert.Equal(t, want != 0, ok, "SourceOf(%q)", name)
	}
}

// parseIPv4PrefixLoop is parseIPv4Prefix as it was before it was
// unrolled: the reference it must match.
func parseIPv4PrefixLoop(s string) (netip.Addr, int, bool) {
	var ip [4]byte
	i := 0
	for part := 0; part < 4; part++ {
		if part > 0 {
			if i >= len(s) || s[i] != '.' {
				return netip.Addr{}, 0, false
			}
			i++
		}
		start, v := i, 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' && i-start < 3 {
			v = v*10 + int(s[i]-'0')
			i++
		}
		if i == start || v > 255 || (i-start > 1 && s[start] == '0') {
			return netip.Addr{}, 0, false
		}
		ip[part] = byte(v)
	}
	if i < len(s) && s[i] != ':' {
		return netip.Addr{}, 0, false
	}
	return netip.AddrFrom4(ip), i, true
}

// FuzzParseNode: parseNode never panics and agrees with netip on what it
// accepts.
func FuzzParseNode(f *testing.F) {
	for _, s := range []string{"1.2.3.4", "1.2.3.4:80", "[::1]:80", "::1", "[::1", "1.2.3.4:", "[fe80::1%eth0]:1", ":80",
		"01.2.3.4", "1.2.3.256", "1.2.3.4.5", "1.2.3", "1.2.3.4:x", "255.255.255.255:65535", "1.2.3.4:8:9", "1.2.3.4444",
		"0.0.0.0", "00.1.2.3", "1.2.3.0", "1.2.3.00", "1.2.3.09", "255.255.255.255", "256.1.1.1", "199.299.1.1", "1.2.3.", ".1.2.3", "1..2.3", "1.2.3.4a", "/.1.1.1", ":.1.1.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		// The unrolled IPv4 fast path decides as the loop it replaced.
		pa, pn, pok := parseIPv4Prefix(s)
		if wa, wn, wok := parseIPv4PrefixLoop(s); pa != wa || pn != wn || pok != wok {
			t.Fatalf("parseIPv4Prefix(%q) = %v, %d, %v; the loop says %v, %d, %v", s, pa, pn, pok, wa, wn, wok)
		}
		a, text, ok := ParseNode(s)
		if !ok {
			return
		}
		if !a.IsValid() || a.Zone() != "" || a.Is4In6() {
			t.Fatalf("ParseNode(%q) = %v", s, a)
		}
		if text != "" && (!a.Is4() || text != a.String()) {
			t.Fatalf("ParseNode(%q) text %q for %v", s, text, a)
		}
		// The IPv4 fast path agrees with netip.
		if a2, n, ok := parseIPv4Prefix(s); ok {
			if want, err := netip.ParseAddr(s[:n]); err != nil || want != a2 {
				t.Fatalf("parseIPv4Prefix(%q) = %v, netip says %v, %v", s, a2, want, err)
			}
		}
	})
}
