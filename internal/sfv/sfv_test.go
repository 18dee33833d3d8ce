package sfv

import "testing"

func TestCut(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		s             string
		before, after string
		found         bool
	}{
		{`a;b`, `a`, `b`, true},
		{`"a;b";c`, `"a;b"`, `c`, true},
		{`"a\";b";c`, `"a\";b"`, `c`, true},
		{`"open;`, `"open;`, ``, false},
		{``, ``, ``, false},
		{`abc`, `abc`, ``, false},
	} {
		b, a, f := Cut(c.s, ';')
		if b != c.before || a != c.after || f != c.found {
			t.Errorf("Cut(%q) = %q, %q, %v; want %q, %q, %v", c.s, b, a, f, c.before, c.after, c.found)
		}
	}
}

func TestLastElement(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		s  string
		at int
		ok bool
	}{
		{`a, b`, 2, true},
		{`a, "b,c"`, 2, true},
		{`a, "b\",c"`, 2, true},
		{`abc`, 0, true},
		{`x", b`, 3, true},
		{`a, "x`, 0, false},
	} {
		at, ok := LastElement(c.s)
		if at != c.at || ok != c.ok {
			t.Errorf("LastElement(%q) = %d, %v; want %d, %v", c.s, at, ok, c.at, c.ok)
		}
	}
}
