package errs

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

var errSentinel = errors.New("ratelimit: invalid configuration")

func TestConfigNamesTheArgumentAndMatchesTheSentinel(t *testing.T) {
	err := Config(errSentinel, "%s must be positive, got %d", "ratelimit.WithMaxKeys", -1)
	assert.EqualError(t, err, "ratelimit: invalid configuration: ratelimit.WithMaxKeys must be positive, got -1")
	assert.ErrorIs(t, err, errSentinel)
}

func TestDeadlineMatchesBothSentinels(t *testing.T) {
	sentinel := errors.New("ratelimit: wait would exceed context deadline")
	err := Deadline(sentinel, 1500*time.Millisecond)
	assert.EqualError(t, err, "ratelimit: wait would exceed context deadline (needs 1.5s)")
	assert.ErrorIs(t, err, sentinel)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestNewMatchesEverySentinel(t *testing.T) {
	a, b := errors.New("a"), errors.New("b")
	err := New("ratelimit: both", a, b)
	assert.EqualError(t, err, "ratelimit: both")
	assert.ErrorIs(t, err, a)
	assert.ErrorIs(t, err, b)
	assert.NotErrorIs(t, err, errSentinel)
}

func TestGCD(t *testing.T) {
	for _, c := range []struct{ a, b, want int64 }{{12, 18, 6}, {7, 13, 1}, {10, 1_000_000_000, 10}, {5, 5, 5}} {
		assert.Equal(t, c.want, GCD(c.a, c.b), "GCD(%d, %d)", c.a, c.b)
	}
}

func TestNNamesTheProblem(t *testing.T) {
	invalid, exceeds := errors.New("ratelimit: n must be positive"), errors.New("ratelimit: n exceeds the limit")
	err := N(invalid, exceeds, 0, 5)
	assert.EqualError(t, err, "ratelimit: n must be positive, got n=0")
	assert.ErrorIs(t, err, invalid)
	err = N(invalid, exceeds, 6, 5)
	assert.EqualError(t, err, "ratelimit: n=6 exceeds the limit 5")
	assert.ErrorIs(t, err, exceeds)
	assert.NotErrorIs(t, err, invalid)
}

// TestEachDimension: every Dimension of a joined tree is found, in order,
// with its index; its message and sentinels are the wrapped error's.
func TestEachDimension(t *testing.T) {
	a, b := errors.New("a"), errors.New("b")
	assert.Nil(t, AtDimension(0, true, nil))
	err := errors.Join(AtDimension(2, true, a), nil, fmt.Errorf("wrapped: %w", AtDimension(0, false, b)))
	var got []string
	assert.True(t, EachDimension(err, func(d *Dimension) { got = append(got, fmt.Sprintf("%d %v %v", d.Index, d.Allowed, d.Err)) }))
	assert.Equal(t, []string{"2 true a", "0 false b"}, got)
	assert.ErrorIs(t, err, a)
	assert.ErrorIs(t, err, b)
	assert.Equal(t, "a", AtDimension(1, false, a).Error())
	assert.False(t, EachDimension(a, func(*Dimension) { t.Error("found one in a plain error") }))
	assert.False(t, EachDimension(nil, func(*Dimension) {}))
}
