package adapter

import (
	"errors"
	"testing"

	"github.com/rlkit/ratelimit"
)

type opt interface{ set(*[]int) error }

type optFunc func(*[]int) error

func (f optFunc) set(s *[]int) error { return f(s) }

// TestApply: options apply in order, a nil one is skipped, and the first
// error stops the loop.
func TestApply(t *testing.T) {
	t.Parallel()
	var got []int
	add := func(n int) opt { return optFunc(func(s *[]int) error { *s = append(*s, n); return nil }) }
	bad := errors.New("bad")
	fail := optFunc(func(*[]int) error { return bad })
	err := Apply([]opt{add(1), nil, add(2), fail, add(3)}, func(o opt) error { return o.set(&got) })
	if !errors.Is(err, bad) || len(got) != 2 || got[0] != 1 || got[1] != 2 {
		t.Fatalf("Apply = %v, applied %v; want bad after 1, 2", err, got)
	}
}

// TestConfigError: the error matches ratelimit.ErrInvalidConfig and names
// the detail.
func TestConfigError(t *testing.T) {
	t.Parallel()
	err := ConfigError("httplimit.WithX must be positive, got %d", -1)
	if !errors.Is(err, ratelimit.ErrInvalidConfig) || err.Error() != "ratelimit: invalid configuration: httplimit.WithX must be positive, got -1" {
		t.Fatalf("ConfigError = %q", err)
	}
}
