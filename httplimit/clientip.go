package httplimit

import (
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
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
// ([IPv6Prefix]) since a single host commonly holds a whole /64, IPv4
// clients by their address ([IPv4Prefix]).
//
// Create one with [NewIPResolver]; the zero value is not usable. An
// IPResolver is safe for concurrent use.
type IPResolver struct {
	trusted []netip.Prefix
	headers []string // canonical header names, in order of preference
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

// TrustedProxies names the reverse proxies (addresses or CIDR networks,
// such as "10.0.0.0/8", "fd00::/8" or "192.0.2.10") whose forwarded headers
// the resolver believes. Without it no forwarded header is ever read. For
// [NewIPResolver].
func TrustedProxies(cidrs ...string) Option {
	return option{"TrustedProxies", forResolver, func(cfg *config) error {
		ps, err := parseNetworks("TrustedProxies", cidrs)
		cfg.r.trusted = append(cfg.r.trusted, ps...)
		return err
	}}
}

// TrustedPrefixes is [TrustedProxies] for parsed networks. An IPv4-mapped
// IPv6 prefix such as ::ffff:10.0.0.0/104 trusts the IPv4 network it maps
// (10.0.0.0/8), since client addresses are compared unmapped. For
// [NewIPResolver].
func TrustedPrefixes(prefixes ...netip.Prefix) Option {
	return option{"TrustedPrefixes", forResolver, func(cfg *config) error {
		ps, err := checkPrefixes("TrustedPrefixes", prefixes)
		cfg.r.trusted = append(cfg.r.trusted, ps...)
		return err
	}}
}

// parseNetworks parses the addresses and CIDR networks of the option
// named opt, as [TrustedProxies] documents them: an address stands for
// itself alone (its zone, if any, dropped, as client addresses' are);
// IPv4-mapped IPv6 ones are unmapped. It returns the
// networks parsed before the first error.
func parseNetworks(opt string, cidrs []string) ([]netip.Prefix, error) {
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
			return ps, configError("httplimit.%s: %v, got %q", opt, err, c)
		}
		if p, err = unmapPrefix(opt, p); err != nil {
			return ps, err
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// checkPrefixes checks and unmaps the prefixes of the option named opt. It
// returns the prefixes checked before the first error.
func checkPrefixes(opt string, prefixes []netip.Prefix) ([]netip.Prefix, error) {
	ps := make([]netip.Prefix, 0, len(prefixes))
	for _, p := range prefixes {
		if !p.IsValid() {
			return ps, configError("httplimit.%s: prefix is invalid, got %v", opt, p)
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
		return netip.Prefix{}, configError("httplimit.%s: an IPv4-mapped prefix needs at least 96 bits, got %v", opt, p)
	}
	return netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96).Masked(), nil
}

// ProxyHeaders names the headers, in order of preference, that the trusted
// proxies write: "X-Forwarded-For" (the default), "Forwarded" (RFC 7239) or
// "X-Real-IP". The first one present on a request is read; the others are
// ignored. Name only headers your proxies set or overwrite: a header they
// pass through unchanged is the client's to forge. For [NewIPResolver].
func ProxyHeaders(names ...string) Option {
	return option{"ProxyHeaders", forResolver, func(cfg *config) error {
		r := cfg.r
		r.headers = r.headers[:0]
		for _, n := range names {
			c := http.CanonicalHeaderKey(n)
			switch c {
			case "X-Forwarded-For", "Forwarded", "X-Real-Ip":
			default:
				return configError("httplimit.ProxyHeaders: want X-Forwarded-For, Forwarded or X-Real-IP, got %q", n)
			}
			r.headers = append(r.headers, c)
		}
		if len(r.headers) == 0 {
			return configError("httplimit.ProxyHeaders needs at least one header, got none")
		}
		return nil
	}}
}

// IPv4Prefix groups IPv4 clients by networks of the given length (default
// 32: each address on its own; 24 groups a /24). For [NewIPResolver].
func IPv4Prefix(bits int) Option {
	return option{"IPv4Prefix", forResolver, func(cfg *config) error {
		r := cfg.r
		if bits < 1 || bits > 32 {
			return configError("httplimit.IPv4Prefix must be in [1, 32], got %d", bits)
		}
		r.v4bits = bits
		return nil
	}}
}

// IPv6Prefix groups IPv6 clients by networks of the given length (default
// 64, the network a single host is commonly given). For [NewIPResolver].
func IPv6Prefix(bits int) Option {
	return option{"IPv6Prefix", forResolver, func(cfg *config) error {
		r := cfg.r
		if bits < 1 || bits > 128 {
			return configError("httplimit.IPv6Prefix must be in [1, 128], got %d", bits)
		}
		r.v6bits = bits
		return nil
	}}
}

// NewIPResolver returns a resolver configured by opts: [TrustedProxies],
// [TrustedPrefixes], [ProxyHeaders], [IPv4Prefix] and [IPv6Prefix]. It
// returns an error wrapping [ratelimit.ErrInvalidConfig] for an invalid
// option or one that does not apply to a resolver.
func NewIPResolver(opts ...Option) (*IPResolver, error) {
	r := &IPResolver{v4bits: 32, v6bits: 64, headers: []string{"X-Forwarded-For"}}
	if err := applyOptions(&config{to: forResolver, r: r}, opts); err != nil {
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
const unknownKey = "unknown"

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
	return res.keyOf(a, text), true
}

// keyOf returns the key of a (unmapped, no zone); text is a's canonical
// textual form if the caller has it as a substring of its input, else "".
func (res *IPResolver) keyOf(a netip.Addr, text string) string {
	bits := res.v6bits
	if a.Is4() {
		bits = res.v4bits
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
	slot := &res.cache[(h^h>>32)%uint64(len(res.cache))]
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

// resolve returns the client address and, when the address is IPv4 and
// its text is a substring of the request, that text (so keying needs no
// allocation).
func (res *IPResolver) resolve(r *http.Request) (netip.Addr, string, bool) {
	a, text, ok := parseNode(r.RemoteAddr)
	if !ok {
		return netip.Addr{}, "", false
	}
	if len(res.trusted) == 0 || !res.isTrusted(a) {
		return a, text, true
	}
	for _, name := range res.headers {
		lines := r.Header[name]
		if len(lines) == 0 {
			continue
		}
		w := walker{res: res, addr: a, text: text}
		switch name {
		case "X-Forwarded-For":
			w.xff(lines)
		case "Forwarded":
			w.forwarded(lines)
		default: // X-Real-Ip: one address, set by the proxy
			w.hop(strings.TrimSpace(lines[len(lines)-1]))
		}
		return w.addr, w.text, true
	}
	return a, text, true
}

func (res *IPResolver) isTrusted(a netip.Addr) bool {
	return inNetworks(res.trusted, a)
}

// inNetworks reports whether one of ps contains a.
func inNetworks(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// walker walks forwarded hops from right (nearest) to left. addr is the
// nearest address known so far; done is set once the client is found.
type walker struct {
	res  *IPResolver
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
	a, text, ok := parseNode(s)
	if !ok {
		w.done = true
		return
	}
	w.addr, w.text = a, text
	if !w.res.isTrusted(a) {
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

// maxForwardedHops bounds how many elements of one Forwarded line are
// examined (the nearest ones). No real chain of proxies comes near it.
const maxForwardedHops = 32

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
			if hops == maxForwardedHops {
				w.done = true // too many hops: stop at the oldest one examined
				break
			}
			start, ok := lastElement(s)
			if !ok {
				w.done = true // unbalanced quotes: unreadable
				break
			}
			w.hop(forwardedFor(s[start:]))
			if start == 0 {
				break
			}
			s = s[:start-1]
		}
	}
}

// lastElement returns where the last comma-separated element of s begins,
// scanning from the right; quoted strings may hold commas. It reports
// false when a quoted string is still open at the start of s.
func lastElement(s string) (int, bool) {
	quoted := false
	for j := len(s) - 1; j >= 0; j-- {
		c := s[j]
		if quoted {
			if c == '"' && !escapedAt(s, j) {
				quoted = false
			}
			continue
		}
		switch c {
		case '"':
			quoted = true
		case ',':
			return j + 1, true
		}
	}
	return 0, !quoted
}

// escapedAt reports whether s[j] is preceded by an odd number of
// backslashes (a quoted-pair inside a quoted string).
func escapedAt(s string, j int) bool {
	n := 0
	for j--; j >= 0 && s[j] == '\\'; j-- {
		n++
	}
	return n%2 == 1
}

// forwardedFor returns the value of the for= pair of one Forwarded element,
// unquoted, or "" if it has none.
func forwardedFor(elem string) string {
	for elem != "" {
		var pair string
		pair, elem, _ = cutTopLevel(elem, ';')
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

// parseNode parses an address as forwarding headers and RemoteAddr write
// it: "192.0.2.1", "192.0.2.1:8080", "2001:db8::1", "[2001:db8::1]" or
// "[2001:db8::1]:8080". The address is unmapped and stripped of its zone.
// text is the IPv4 address as a substring of s when it is one.
func parseNode(s string) (a netip.Addr, text string, ok bool) {
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
	a = a.WithZone("")
	if a.Is4In6() {
		return a.Unmap(), "", true
	}
	return a, "", true
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
// "192.0.2.1:4711"; anything else falls through to netip.
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
		return netip.Addr{}, 0, false // more digits, or not an address
	}
	return netip.AddrFrom4(ip), i, true
}
