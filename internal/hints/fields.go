package hints

import (
	"math"
	"time"

	"github.com/rlkit/ratelimit/internal/sfv"
)

// readRateLimit reads the RateLimit field: draft-08 Items and draft-07
// Dictionary members (which make one item together).
func (h *Hints) readRateLimit(lines []string) {
	var limit, remaining, reset number // the Dictionary's, last wins
	dict := false
	for it := (members{lines: lines}); ; {
		m, ok := it.next()
		if !ok {
			break
		}
		if m == "" {
			continue
		}
		if isDictMember(m) {
			dict = true
			kv, _, _ := sfv.Cut(m, ';') // a member's parameters are ignored
			k, v, _ := sfv.Cut(kv, '=')
			switch trimOWS(k) {
			case "limit":
				limit.read(trimOWS(v), true, math.MaxInt64)
			case "remaining":
				remaining.read(trimOWS(v), true, math.MaxInt64)
			case "reset":
				reset.read(trimOWS(v), true, MaxSeconds)
			}
			continue
		}
		h.readItem(m)
	}
	if !dict || limit.bad || remaining.bad || reset.bad || !reset.set {
		return
	}
	if limit.set {
		h.noteLimit(limit.v)
	}
	rem := int64(-1)
	if remaining.set {
		rem = remaining.v
	}
	h.addItem(rem, time.Duration(reset.v)*time.Second)
}

// readItem reads a draft-08 (or later) RateLimit Item: a String or Token
// with r (or a) and t (or w).
func (h *Hints) readItem(m string) {
	bare, params, _ := sfv.Cut(m, ';')
	if k := bareKind(trimOWS(bare)); k != kindString && k != kindToken {
		return
	}
	var r, a, t, w number
	for more := true; more; {
		var p string
		p, params, more = sfv.Cut(params, ';')
		k, v, hasValue := param(p)
		switch k {
		case "r":
			r.read(v, hasValue, math.MaxInt64)
		case "a":
			a.read(v, hasValue, math.MaxInt64)
		case "t":
			t.read(v, hasValue, MaxSeconds)
		case "w":
			w.read(v, hasValue, MaxSeconds)
		}
	}
	if r.bad || a.bad || t.bad || w.bad || !(r.set || a.set) || !(t.set || w.set) {
		return
	}
	rem, secs := int64(math.MaxInt64), int64(0)
	for _, n := range [...]number{r, a} {
		if n.set {
			rem = min(rem, n.v)
		}
	}
	for _, n := range [...]number{t, w} {
		if n.set {
			secs = max(secs, n.v)
		}
	}
	h.addItem(rem, time.Duration(secs)*time.Second)
}

// readPolicies reads a RateLimit-Policy (or RateLimit-Limit) field: members
// `"name";q=Q;w=W` or `Q;w=W`.
func (h *Hints) readPolicies(lines []string) {
	for it := (members{lines: lines}); ; {
		m, ok := it.next()
		if !ok {
			return
		}
		bare, params, _ := sfv.Cut(m, ';')
		bare = trimOWS(bare)
		var q, w number
		switch bareKind(bare) {
		case kindInteger:
			q.read(bare, true, math.MaxInt64)
		case kindString, kindToken:
		default:
			continue
		}
		integer := q.set
		for more := true; more; {
			var p string
			p, params, more = sfv.Cut(params, ';')
			k, v, hasValue := param(p)
			switch {
			case k == "q" && !integer:
				q.read(v, hasValue, math.MaxInt64)
			case k == "w":
				w.read(v, hasValue, MaxSeconds)
			}
		}
		if q.set && !q.bad {
			h.noteLimit(q.v)
		}
		if q.bad || w.bad || !q.set || !w.set || q.v == 0 || w.v == 0 {
			continue
		}
		h.addPolicy(q.v, time.Duration(w.v)*time.Second)
	}
}

// readPair reads the item of a remaining field and one or two reset
// fields, each a single value (its first line).
func (h *Hints) readPair(get func(string) []string, remName, resetName, afterName string, params bool, now, ref time.Time) {
	rem := int64(-1)
	v, st := single(get(remName), params)
	switch st {
	case invalid:
		return
	case present:
		n, ok := uintValue(v, math.MaxInt64)
		if !ok {
			return
		}
		rem = n
	}
	var reset time.Duration
	found := false
	if v, st := single(get(resetName), params); st == present {
		reset, found = ResetValue(v, now, ref)
	}
	if afterName != noField {
		if v, st := single(get(afterName), params); st == present {
			if d, ok := delayValue(v); ok {
				reset, found = max(reset, d), true
			}
		}
	}
	if found {
		h.addItem(rem, reset)
	}
}

// number is a parameter's or a field's integer value as read.
type number struct {
	v   int64
	set bool // given (last wins)
	bad bool // given, and not an unsigned integer
}

// read sets n from the value v (hasValue false: a parameter without one,
// which is Boolean true, not a number), saturating at limit.
func (n *number) read(v string, hasValue bool, limit int64) {
	n.set = true
	n.v, n.bad = 0, true
	if hasValue {
		if x, ok := uintValue(v, limit); ok {
			n.v, n.bad = x, false
		}
	}
}

// state is how a single-valued field reads.
type state uint8

const (
	absent  state = iota // no line, or an empty first line
	present              // a value to read
	invalid              // a first line too long to read
)

// single returns the value of a single-valued field: its first line,
// trimmed, without the parameters if params.
func single(lines []string, params bool) (string, state) {
	if len(lines) == 0 {
		return "", absent
	}
	v := lines[0]
	if len(v) > maxLine {
		return "", invalid
	}
	if params {
		v, _, _ = sfv.Cut(v, ';')
	}
	if v = trimOWS(v); v == "" {
		return "", absent
	}
	return v, present
}

// members walks the members of a List or Dictionary field given as lines:
// at most MaxItems of them, of at most the first maxLine bytes of each
// line. A member that runs past that bound is dropped (it counts all the
// same).
type members struct {
	lines  []string
	rest   string // of the current line
	inLine bool
	cut    bool // the current line was cut at maxLine
	n      int  // members walked
}

// next returns the next member, trimmed (perhaps empty), or false when
// there are no more or MaxItems have been walked.
func (it *members) next() (string, bool) {
	for it.n < MaxItems {
		if !it.inLine {
			if len(it.lines) == 0 {
				return "", false
			}
			line := it.lines[0]
			it.lines = it.lines[1:]
			it.cut = len(line) > maxLine
			if it.cut {
				line = line[:maxLine]
			}
			it.rest, it.inLine = line, true
		}
		m, rest, found := sfv.Cut(it.rest, ',')
		it.rest = rest
		it.n++
		if !found {
			it.inLine = false
			if it.cut {
				continue
			}
		}
		return trimOWS(m), true
	}
	return "", false
}

// param splits a parameter ("key=value", perhaps with whitespace around
// its parts) into its key and value; hasValue is false for a key alone.
func param(p string) (key, value string, hasValue bool) {
	k, v, ok := sfv.Cut(p, '=')
	return trimOWS(k), trimOWS(v), ok
}

// isDictMember reports whether a member's first part holds a '=' outside
// quotes before any ';': `limit=5` (a draft-07 Dictionary member), not
// `"a=b";r=1` or `name;t=1` (an Item with parameters).
func isDictMember(m string) bool {
	quoted := false
	for i := 0; i < len(m); i++ {
		switch c := m[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case quoted:
		case c == '=':
			return true
		case c == ';':
			return false
		}
	}
	return false
}

// trimOWS removes the optional whitespace (spaces and tabs) around s.
func trimOWS(s string) string {
	for len(s) > 0 && (s[0] == ' ' || s[0] == '\t') {
		s = s[1:]
	}
	for len(s) > 0 && (s[len(s)-1] == ' ' || s[len(s)-1] == '\t') {
		s = s[:len(s)-1]
	}
	return s
}

// kind is the type of an RFC 8941 bare item, as far as it matters here.
type kind uint8

const (
	kindOther   kind = iota // anything else, valid or not
	kindInteger             // unsigned decimal digits
	kindString              // "quoted", with \" and \\ escapes
	kindToken               // name, *name, with tchar, ':' and '/'
)

// bareKind returns the kind of the bare item s.
func bareKind(s string) kind {
	switch {
	case s == "":
		return kindOther
	case isDigit(s[0]):
		if _, ok := uintValue(s, math.MaxInt64); ok {
			return kindInteger
		}
	case s[0] == '"':
		if validString(s) {
			return kindString
		}
	case isAlpha(s[0]) || s[0] == '*':
		for i := 1; i < len(s); i++ {
			if !isTokenChar(s[i]) {
				return kindOther
			}
		}
		return kindToken
	}
	return kindOther
}

// validString reports whether s is one RFC 8941 String: a quote, printable
// ASCII with \" and \\ escaped, a closing quote that ends s.
func validString(s string) bool {
	for i := 1; i < len(s); i++ {
		switch c := s[i]; {
		case c == '\\':
			if i+1 >= len(s) || (s[i+1] != '"' && s[i+1] != '\\') {
				return false
			}
			i++
		case c == '"':
			return i == len(s)-1
		case c < 0x20 || c > 0x7e:
			return false
		}
	}
	return false // no closing quote
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isAlpha(c byte) bool { return (c|0x20) >= 'a' && (c|0x20) <= 'z' }

// isTokenChar reports whether c may follow a token's first character:
// tchar (RFC 9110), ':' or '/'.
func isTokenChar(c byte) bool {
	if isAlpha(c) || isDigit(c) {
		return true
	}
	switch c {
	case '!', '#', '$', '%', '&', '\'', '*', '+', '-', '.', '^', '_', '`', '|', '~', ':', '/':
		return true
	}
	return false
}
