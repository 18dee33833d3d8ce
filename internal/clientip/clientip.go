// Package clientip is the transport-free core of the client-address
// resolvers of httplimit and grpclimit: parsing and checking the trusted
// networks and prefix lengths they are configured with, parsing the
// addresses a connection's peer and forwarded values carry, the walk over
// forwarded values from right (nearest) to left that believes only what
// trusted proxies wrote, and the formatting of addresses into rate
// limiting keys, with a cache so that keying allocates nothing on the
// common path.
//
// The packages that use it keep their own option types and read their own
// transport (request headers, incoming metadata); error messages name the
// caller's option, which the caller passes in ("httplimit.TrustedProxies").
package clientip

import (
	"net/netip"
	"strings"
	"sync/atomic"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/errs"
	"github.com/rlkit/ratelimit/internal/sfv"
)

// Unknown is the key shared by callers whose address cannot be read (a
// Unix socket, an in-memory connection): they are limited together rather
// than not at all.
const Unknown = "unknown"

// Source is a kind of forwarded value a trusted proxy writes.
type Source uint8

const (
	// XForwardedFor is X-Forwarded-For: comma-separated addresses, the
	// nearest last.
	XForwardedFor Source = iota + 1
	// Forwarded is the RFC 7239 Forwarded field: comma-separated elements
	// whose for= parameter names each hop's client.
	Forwarded
	// XRealIP is X-Real-IP: one address, set by the proxy.
	XRealIP
)

// SourceOf returns the source named name, compared case-insensitively
// (ASCII only): "X-Forwarded-For", "Forwarded" or "X-Real-IP".
func SourceOf(name string) (Source, bool) {
	for i := 0; i < len(name); i++ {
		if name[i] >= 0x80 {
			return 0, false // no Unicode folding (a Kelvin sign is not a k)
		}
	}
	switch {
	case strings.EqualFold(name, "X-Forwarded-For"):
		return XForwardedFor, true
	case strings.EqualFold(name, "Forwarded"):
		return Forwarded, true
	case strings.EqualFold(name, "X-Real-IP"):
		return XRealIP, true
	}
	return 0, false
}

// Resolver holds what a client-address resolver is configured with (the
// trusted proxies' networks and the prefix lengths keys group addresses
// by) and a cache of recently formatted keys. Call [Resolver.Init] before
// anything else; a Resolver must not be copied after first use. Once
// configured, it is safe for concurrent use.
type Resolver struct {
	trusted []netip.Prefix
	v4bits  int
	v6bits  int
	// cache maps recently seen networks to their key strings, so that
	// formatting an IPv6 network does not allocate on every request.
	cache [256]atomic.Pointer[ipKey]
}

type ipKey struct {
	p netip.Prefix
	s string
}

// Init sets r's defaults: no trusted proxy, IPv4 addresses keyed one by
// one (/32), IPv6 ones by /64.
func (r *Resolver) Init() {
	r.trusted = nil
	r.v4bits = 32
	r.v6bits = 64
}

// AddTrusted adds networks (checked and unmapped, as [ParseNetworks] and
// [CheckPrefixes] return them) to those whose forwarded values r believes.
func (r *Resolver) AddTrusted(ps ...netip.Prefix) {
	r.trusted = append(r.trusted, ps...)
}

// SetIPv4Prefix makes r group IPv4 clients by networks of the given
// length, or returns an error naming the option opt ("httplimit.IPPrefixes v4").
func (r *Resolver) SetIPv4Prefix(opt string, bits int) error {
	if bits < 1 || bits > 32 {
		return configError("%s must be in [1, 32], got %d", opt, bits)
	}
	r.v4bits = bits
	return nil
}

// SetIPv6Prefix makes r group IPv6 clients by networks of the given
// length, or returns an error naming the option opt.
func (r *Resolver) SetIPv6Prefix(opt string, bits int) error {
	if bits < 1 || bits > 128 {
		return configError("%s must be in [1, 128], got %d", opt, bits)
	}
	r.v6bits = bits
	return nil
}

func configError(format string, args ...any) error {
	return errs.Config(ratelimit.ErrInvalidConfig, format, args...)
}

// ParseNetworks parses addresses and CIDR networks such as "10.0.0.0/8",
// "fd00::/8" or "192.0.2.10": an address stands for itself alone (its
// zone, if any, dropped, as client addresses' are); IPv4-mapped IPv6 ones
// are unmapped. Errors name the option opt ("httplimit.TrustedProxies").
// It returns the networks parsed before the first error.
func ParseNetworks(opt string, cidrs []string) ([]netip.Prefix, error) {
	ps := make([]netip.Prefix, 0, len(cidrs))
	for _, c := range cidrs {
		var p netip.Prefix
		var err error
		if strings.Contains(c, "/") {
			p, err = netip.ParsePrefix(c)
		} else {
			var a netip.Addr
			a, err = netip.ParseAddr(c)
			p = netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen())
		}
		if err != nil {
			return ps, configError("%s: %v, got %q", opt, err, c)
		}
		if p, err = unmapPrefix(opt, p); err != nil {
			return ps, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// CheckPrefixes checks and unmaps prefixes, with errors naming the option
// opt. It returns the prefixes checked before the first error.
func CheckPrefixes(opt string, prefixes []netip.Prefix) ([]netip.Prefix, error) {
	ps := make([]netip.Prefix, 0, len(prefixes))
	for _, p := range prefixes {
		if !p.IsValid() {
			return ps, configError("%s: prefix is invalid, got %v", opt, p)
		}
		p, err := unmapPrefix(opt, p)
		if err != nil {
			return ps, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// unmapPrefix returns p masked and, when it is an IPv4-mapped IPv6 prefix
// (::ffff:10.0.0.0/104), as the IPv4 prefix it maps (10.0.0.0/8): client
// addresses are compared unmapped. A mapped prefix shorter than 96 bits
// covers more than IPv4-mapped space and is refused, with an error naming
// the option opt.
func unmapPrefix(opt string, p netip.Prefix) (netip.Prefix, error) {
	// Checked before masking: masked to fewer than 96 bits, a mapped
	// prefix is no longer one (::ffff:10.0.0.0/80 is ::/80, which holds
	// ::1) and would slip through.
	if !p.Addr().Is4In6() {
		return p.Masked(), nil
	}
	if p.Bits() < 96 {
		return netip.Prefix{}, configError("%s: an IPv4-mapped prefix needs at least 96 bits, got %v", opt, p)
	}
	return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96).Masked(), nil
}

// InNetworks reports whether one of ps contains a.
func InNetworks(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// Proxied reports whether r trusts any proxy at all: when it does not,
// callers skip [Resolver.Trusts] and forwarded values altogether (checked
// first, the common case returns without spilling the peer's address).
func (r *Resolver) Proxied() bool { return len(r.trusted) != 0 }

// Trusts reports whether a (unmapped, no zone) is a trusted proxy's.
func (r *Resolver) Trusts(a netip.Addr) bool {
	return InNetworks(r.trusted, a)
}

// Walk returns the client's address given the peer's (peer, unmapped, no
// zone; peerText its text when the caller has it, as [ParseNode] returns
// it) and the values of one forwarded field of kind src, in the order they
// arrived (the last one nearest). It walks the hops from right to left,
// skipping trusted proxies' addresses, and returns the first address that
// is not one, or the farthest readable address when every hop is trusted;
// an unreadable hop ("unknown", an obfuscated name, garbage) ends the walk
// at the nearest address known. text is the returned address's text when
// it is an IPv4 address standing as a substring of the input, else "".
//
// The caller checks that the peer is trusted before calling Walk: the
// values of an untrusted peer are the client's to forge.
func (r *Resolver) Walk(src Source, peer netip.Addr, peerText string, values []string) (a netip.Addr, text string) {
	if len(values) == 0 {
		return peer, peerText
	}
	w := walker{res: r, addr: peer, text: peerText}
	switch src {
	case XForwardedFor:
		w.xff(values)
	case Forwarded:
		w.forwarded(values)
	case XRealIP:
		w.hop(strings.TrimSpace(values[len(values)-1]))
	}
	return w.addr, w.text
}

// walker walks forwarded hops from right (nearest) to left. addr is the
// nearest address known so far; done is set once the client is found.
type walker struct {
	res  *Resolver
	addr netip.Addr
	text string
	done bool
}

// hop takes the next hop to the left. An unreadable hop ("unknown", an
// obfuscated name, garbage) ends the walk at the nearest address known.
func (w *walker) hop(s string) {
	if w.done {
		return
	}
	a, text, ok := ParseNode(s)
	if !ok {
		w.done = true
		return
	}
	w.addr, w.text = a, text
	if !w.res.Trusts(a) {
		w.done = true
	}
}

// xff walks X-Forwarded-For lines: comma-separated addresses, the nearest
// last, over as many lines as the request has, the last line nearest.
func (w *walker) xff(lines []string) {
	for i := len(lines) - 1; i >= 0 && !w.done; i-- {
		s := lines[i]
		for !w.done {
			j := strings.LastIndexByte(s, ',')
			w.hop(strings.TrimSpace(s[j+1:]))
			if j < 0 {
				break
			}
			s = s[:j]
		}
	}
}

// MaxForwardedHops bounds how many elements of one Forwarded line are
// examined (the nearest ones). No real chain of proxies comes near it.
const MaxForwardedHops = 32

// forwarded walks RFC 7239 Forwarded lines: comma-separated elements of
// semicolon-separated pairs, of which for= names the hop's client.
//
// Each line is split from the right, the end a trusted proxy appends to,
// so that whatever text stands to the left of a proxy's element (an
// unbalanced quote, a stray backslash, garbage) cannot reach into it: the
// element a trusted proxy wrote is always read as it wrote it. An element
// that cannot be read (its quotes do not balance, it has no for= address)
// ends the walk at the nearest address known, as an "unknown" hop does;
// since only client text can be malformed, that address is the one the
// nearest trusted proxy vouched for.
func (w *walker) forwarded(lines []string) {
	for i := len(lines) - 1; i >= 0 && !w.done; i-- {
		s := lines[i]
		for hops := 0; !w.done; hops++ {
			if hops == MaxForwardedHops {
				w.done = true // too many hops: stop at the oldest one examined
				break
			}
			start, ok := sfv.LastElement(s)
			if !ok {
				w.done = true // unbalanced quotes: unreadable
				break
			}
			w.hop(ForwardedFor(s[start:]))
			if start == 0 {
				break
			}
			s = s[:start-1]
		}
	}
}

// ForwardedFor returns the value of the for= pair of one Forwarded
// element, unquoted, or "" if it has none.
func ForwardedFor(elem string) string {
	for elem != "" {
		var pair string
		pair, elem, _ = sfv.Cut(elem, ';')
		k, v, ok := strings.Cut(strings.TrimSpace(pair), "=")
		if !ok || !strings.EqualFold(strings.TrimSpace(k), "for") {
			continue
		}
		v = strings.TrimSpace(v)
		if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' {
			v = v[1 : len(v)-1]
			if strings.IndexByte(v, '\\') >= 0 {
				return "" // escapes never occur in an address: reject
			}
		}
		return v
	}
	return ""
}

// ParseNode parses an address as forwarded values and peer addresses write
// it: "192.0.2.1", "192.0.2.1:8080", "2001:db8::1", "[2001:db8::1]" or
// "[2001:db8::1]:8080". The address is unmapped and stripped of its zone.
// text is the IPv4 address as a substring of s when it is one.
func ParseNode(s string) (a netip.Addr, text string, ok bool) {
	if s == "" {
		return netip.Addr{}, "", false
	}
	if a, n, ok := parseIPv4Prefix(s); ok && (n == len(s) || validPort(s[n:])) {
		return a, s[:n], true
	}
	host := s
	if s[0] == '[' {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return netip.Addr{}, "", false
		}
		host = s[1:end]
		if rest := s[end+1:]; rest != "" && !validPort(rest) {
			return netip.Addr{}, "", false
		}
	} else if i := strings.IndexByte(s, ':'); i >= 0 && strings.IndexByte(s[i+1:], ':') < 0 {
		// One colon: IPv4 with a port. More than one: a bare IPv6 address.
		host = s[:i]
		if !validPort(s[i:]) {
			return netip.Addr{}, "", false
		}
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return netip.Addr{}, "", false
	}
	if a.Is4() {
		return a, host, true
	}
	// Normalize, by hand: the call would not be inlined.
	a = a.WithZone("")
	if a.Is4In6() {
		return a.Unmap(), "", true
	}
	return a, "", true
}

// Normalize returns a as client addresses are compared and keyed:
// unmapped (::ffff:192.0.2.1 is 192.0.2.1) and without its zone.
func Normalize(a netip.Addr) netip.Addr {
	a = a.WithZone("")
	if a.Is4In6() {
		return a.Unmap()
	}
	return a
}

// validPort reports whether s is ":" followed by 1 to 5 digits.
func validPort(s string) bool {
	if len(s) < 2 || len(s) > 6 || s[0] != ':' {
		return false
	}
	for i := 1; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// parseIPv4Prefix parses the dotted-quad IPv4 address s starts with, in the
// strict form netip accepts (decimal, no leading zeros, each part at most
// 255), and returns it with its length. It is the fast path for the common
// "192.0.2.1:4711"; anything else falls through to netip. Each part is
// read digit by digit, unrolled: one test per character rather than a
// loop's four (FuzzParseNode checks it against the loop it replaced).
func parseIPv4Prefix(s string) (netip.Addr, int, bool) {
	var ip [4]byte
	i := 0
	for part := 0; part < 4; part++ {
		if part > 0 {
			if i >= len(s) || s[i] != '.' {
				return netip.Addr{}, 0, false
			}
			i++
		}
		if i >= len(s) || s[i]-'0' > 9 {
			return netip.Addr{}, 0, false
		}
		v := uint(s[i] - '0')
		i++
		if i < len(s) && s[i]-'0' <= 9 {
			if v == 0 { // a leading zero
				return netip.Addr{}, 0, false
			}
			v = v*10 + uint(s[i]-'0')
			i++
			if i < len(s) && s[i]-'0' <= 9 {
				v = v*10 + uint(s[i]-'0')
				i++
				if v > 255 {
					return netip.Addr{}, 0, false
				}
			}
		}
		ip[part] = byte(v)
	}
	if i < len(s) && s[i] != ':' {
		return netip.Addr{}, 0, false // more digits, or not an address
	}
	return netip.AddrFrom4(ip), i, true
}

// Key returns the key of a (unmapped, no zone): its network under r's
// prefix lengths, such as "203.0.113.7" or "2001:db8:1:2::/64" (with the
// length when shorter than a full address). text is a's canonical textual
// form if the caller has it as a substring of its input, else "". It
// allocates nothing for an IPv4 address with its text keyed by address,
// nor for a network seen recently.
func (r *Resolver) Key(a netip.Addr, text string) string {
	bits := r.v6bits
	if a.Is4() {
		bits = r.v4bits
		if bits == 32 && text != "" {
			return text
		}
	}
	p := netip.PrefixFrom(a, bits).Masked()
	b16 := p.Addr().As16()
	h := uint64(bits)
	for _, c := range b16 {
		h = (h ^ uint64(c)) * 0x100000001b3
	}
	slot := &r.cache[(h^h>>32)%uint64(len(r.cache))]
	if e := slot.Load(); e != nil && e.p == p {
		return e.s
	}
	var s string
	if bits == a.BitLen() {
		s = p.Addr().String()
	} else {
		s = p.String()
	}
	slot.Store(&ipKey{p: p, s: s})
	return s
}
