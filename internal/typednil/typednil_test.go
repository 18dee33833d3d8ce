package typednil

import (
	"io"
	"testing"
)

type impl struct{}

func (*impl) Read([]byte) (int, error) { return 0, io.EOF }

func TestIs(t *testing.T) {
	var nilPtr *impl
	var nilReader io.Reader
	var nilFunc func()
	var nilMap map[string]int
	for _, c := range []struct {
		name string
		v    any
		want bool
	}{
		{"nil", nil, true},
		{"nil interface", nilReader, true},
		{"typed nil pointer", io.Reader(nilPtr), true},
		{"nil func", nilFunc, true},
		{"nil map", nilMap, true},
		{"pointer", &impl{}, false},
		{"func", func() {}, false},
		{"int", 0, false},
		{"string", "", false},
	} {
		if got := Is(c.v); got != c.want {
			t.Errorf("Is(%s) = %v, want %v", c.name, got, c.want)
		}
	}
}
