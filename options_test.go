package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOptionNotApplicableIsConfigError: an option given to a constructor it
// does not apply to is a configuration error naming the option and the
// constructor, not silently ignored.
func TestOptionNotApplicableIsConfigError(t *testing.T) {
	t.Parallel()
	k, err := NewKeyed(FixedWindowPolicy(1, time.Second))
	require.NoError(t, err)
	tiers := map[string]KeyedLimiter{"free": k}
	tierOf := func(context.Context, string) string { return "free" }
	for _, tc := range []struct {
		name, option, ctor string
		call               func() error
	}{
		{"maxkeys/tokenbucket", "ratelimit.WithMaxKeys", "ratelimit.NewTokenBucket", func() error {
			_, err := NewTokenBucket(Per(1, time.Second), 1, WithMaxKeys(10))
			return err
		}},
		{"maxkeys/policy", "ratelimit.WithMaxKeys", "ratelimit.NewSlidingLog", func() error {
			_, err := SlidingLogPolicy(1, time.Second).NewLimiter(WithMaxKeys(10))
			return err
		}},
		{"defaulttier/keyed", "ratelimit.WithDefaultTier", "ratelimit.NewKeyed", func() error {
			_, err := NewKeyed(FixedWindowPolicy(1, time.Second), WithDefaultTier("free"))
			return err
		}},
		{"defaulttier/fixedwindow", "ratelimit.WithDefaultTier", "ratelimit.NewFixedWindow", func() error {
			_, err := NewFixedWindow(1, time.Second, WithDefaultTier("free"))
			return err
		}},
		{"clock/tiered", "ratelimit.WithClock", "ratelimit.NewTiered", func() error {
			_, err := NewTiered(tierOf, tiers, WithClock(fakeclock.NewManual(testStart)))
			return err
		}},
		{"maxkeys/tiered", "ratelimit.WithMaxKeys", "ratelimit.NewTiered", func() error {
			_, err := NewTiered(tierOf, tiers, WithMaxKeys(3))
			return err
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := tc.call()
			require.ErrorIs(t, err, ErrInvalidConfig)
			assert.Equal(t, "ratelimit: invalid configuration: "+tc.option+" does not apply to "+tc.ctor, err.Error())
		})
	}
}
