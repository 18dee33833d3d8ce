package httplimit

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
)

// A small RFC 8941 (Structured Field Values) parser for Lists, enough to
// check the syntax of the RateLimit-Policy and RateLimit fields strictly:
// items and inner lists, with parameters; bare items of every type.

type sfItem struct {
	Value  any // int64, float64 (decimal), sfString, sfToken, []byte, bool, []sfItem (inner list)
	Params []sfParam
}

type sfParam struct {
	Key   string
	Value any
}

type sfString string
type sfToken string

func (it sfItem) param(k string) (any, bool) {
	for _, p := range it.Params {
		if p.Key == k {
			return p.Value, true
		}
	}
	return nil, false
}

type sfParser struct {
	s string
	i int
}

func (p *sfParser) errorf(format string, args ...any) error {
	return fmt.Errorf("at %d in %q: %s", p.i, p.s, fmt.Sprintf(format, args...))
}

func (p *sfParser) peek() byte {
	if p.i < len(p.s) {
		return p.s[p.i]
	}
	return 0
}

func (p *sfParser) skipSP() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

func (p *sfParser) skipOWS() {
	for p.i < len(p.s) && (p.s[p.i] == ' ' || p.s[p.i] == '\t') {
		p.i++
	}
}

// parseSFList parses a List field value (RFC 8941 section 4.2.1).
func parseSFList(s string) ([]sfItem, error) {
	p := &sfParser{s: s}
	p.skipSP()
	var out []sfItem
	for p.i < len(p.s) {
		it, err := p.member()
		if err != nil {
			return nil, err
		}
		out = append(out, it)
		p.skipOWS()
		if p.i >= len(p.s) {
			return out, nil
		}
		if p.s[p.i] != ',' {
			return nil, p.errorf("expected ','")
		}
		p.i++
		p.skipOWS()
		if p.i >= len(p.s) {
			return nil, p.errorf("trailing comma")
		}
	}
	return out, nil
}

func (p *sfParser) member() (sfItem, error) {
	if p.peek() == '(' {
		p.i++
		var inner []sfItem
		for {
			p.skipSP()
			if p.peek() == ')' {
				p.i++
				params, err := p.params()
				return sfItem{Value: inner, Params: params}, err
			}
			it, err := p.item()
			if err != nil {
				return sfItem{}, err
			}
			inner = append(inner, it)
			if c := p.peek(); c != ' ' && c != ')' {
				return sfItem{}, p.errorf("expected ' ' or ')' in inner list")
			}
		}
	}
	return p.item()
}

func (p *sfParser) item() (sfItem, error) {
	v, err := p.bare()
	if err != nil {
		return sfItem{}, err
	}
	params, err := p.params()
	return sfItem{Value: v, Params: params}, err
}

func (p *sfParser) params() ([]sfParam, error) {
	var out []sfParam
	for p.peek() == ';' {
		p.i++
		p.skipSP()
		k, err := p.key()
		if err != nil {
			return nil, err
		}
		var v any = true
		if p.peek() == '=' {
			p.i++
			if v, err = p.bare(); err != nil {
				return nil, err
			}
		}
		out = append(out, sfParam{Key: k, Value: v})
	}
	return out, nil
}

func (p *sfParser) key() (string, error) {
	start := p.i
	c := p.peek()
	if !(c >= 'a' && c <= 'z') && c != '*' {
		return "", p.errorf("bad key start")
	}
	for p.i < len(p.s) {
		c := p.s[p.i]
		if (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || strings.IndexByte("_-.*", c) >= 0 {
			p.i++
			continue
		}
		break
	}
	return p.s[start:p.i], nil
}

func (p *sfParser) bare() (any, error) {
	c := p.peek()
	switch {
	case c == '-' || (c >= '0' && c <= '9'):
		return p.number()
	case c == '"':
		return p.str()
	case c == ':':
		end := strings.IndexByte(p.s[p.i+1:], ':')
		if end < 0 {
			return nil, p.errorf("unterminated byte sequence")
		}
		v := []byte(p.s[p.i+1 : p.i+1+end])
		p.i += end + 2
		return v, nil
	case c == '?':
		if p.i+1 < len(p.s) && (p.s[p.i+1] == '0' || p.s[p.i+1] == '1') {
			v := p.s[p.i+1] == '1'
			p.i += 2
			return v, nil
		}
		return nil, p.errorf("bad boolean")
	case (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '*':
		start := p.i
		for p.i < len(p.s) {
			c := p.s[p.i]
			if c > 0x20 && c < 0x7f && strings.IndexByte(`"(),;<=>?@[\]{}`, c) < 0 || c == ':' || c == '/' {
				p.i++
				continue
			}
			break
		}
		return sfToken(p.s[start:p.i]), nil
	}
	return nil, p.errorf("unexpected %q", c)
}

func (p *sfParser) number() (any, error) {
	start := p.i
	if p.peek() == '-' {
		p.i++
	}
	digits, dot := 0, -1
	for p.i < len(p.s) {
		c := p.s[p.i]
		if c >= '0' && c <= '9' {
			digits++
		} else if c == '.' && dot < 0 {
			if digits > 12 {
				return nil, p.errorf("decimal integer part too long")
			}
			dot = p.i
		} else {
			break
		}
		p.i++
	}
	lit := p.s[start:p.i]
	if digits == 0 {
		return nil, p.errorf("no digits")
	}
	if dot < 0 {
		if digits > 15 {
			return nil, p.errorf("integer too long")
		}
		return strconv.ParseInt(lit, 10, 64)
	}
	if frac := p.i - dot - 1; frac < 1 || frac > 3 {
		return nil, p.errorf("bad decimal fraction")
	}
	return strconv.ParseFloat(lit, 64)
}

func (p *sfParser) str() (any, error) {
	p.i++ // opening quote
	var b strings.Builder
	for p.i < len(p.s) {
		c := p.s[p.i]
		p.i++
		switch {
		case c == '\\':
			if p.i >= len(p.s) || (p.s[p.i] != '"' && p.s[p.i] != '\\') {
				return nil, p.errorf("bad escape")
			}
			b.WriteByte(p.s[p.i])
			p.i++
		case c == '"':
			return sfString(b.String()), nil
		case c < 0x20 || c > 0x7e:
			return nil, p.errorf("bad string character")
		default:
			b.WriteByte(c)
		}
	}
	return nil, p.errorf("unterminated string")
}

func TestSFParser(t *testing.T) {
	t.Parallel()
	good := map[string]int{
		`"a";q=1;w=2`:                       1,
		`"a";r=1;t=2, "b";r=3`:              2,
		`tok;x, ("a" 1);y=?0, :AQI=:;z=1.5`: 3,
		`"esc\"aped\\";q=10`:                1,
	}
	for in, n := range good {
		items, err := parseSFList(in)
		if err != nil || len(items) != n {
			t.Errorf("parseSFList(%q) = %d items, %v; want %d items", in, len(items), err, n)
		}
	}
	for _, in := range []string{`"a";q=`, `"a",`, `"a";Q=1`, `"unterminated`, `"a";q=1.2345`, `"a" "b"`, `"\x"`} {
		if _, err := parseSFList(in); err == nil {
			t.Errorf("parseSFList(%q) succeeded, want an error", in)
		}
	}
}
