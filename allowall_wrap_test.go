package ratelimit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// namespaced is a user's wrapper around *Keyed that rewrites keys: the
// promoted methods of the embedded *Keyed must not make AllowAll treat it
// as a *Keyed (the review of issue 25 found that this panicked).
type namespaced struct {
	*Keyed
	ns string
}

func (w namespaced) AllowN(ctx context.Context, key string, n int) (Decision, error) {
	return w.Keyed.AllowN(ctx, w.ns+key, n)
}

// meteredTiered is a user's wrapper around *Tiered that counts its calls:
// AllowAll and MoveKey must charge through it, not past it to a tier.
type meteredTiered struct {
	*Tiered
	calls *int
}

func (w meteredTiered) AllowN(ctx context.Context, key string, n int) (Decision, error) {
	*w.calls++
	return w.Tiered.AllowN(ctx, key, n)
}

// TestAllowAllThroughWrappers: a limiter that embeds *Keyed or *Tiered is
// decided through its own AllowN, as any KeyedLimiter is.
func TestAllowAllThroughWrappers(t *testing.T) {
	ctx := context.Background()
	k, err := NewKeyed(FixedWindowPolicy(5, time.Minute))
	require.NoError(t, err)

	md, err := AllowAll(ctx, 1, Dimension{Name: "a", Limiter: namespaced{k, "ns:"}, Key: "k"})
	require.NoError(t, err)
	assert.True(t, md.Allowed)
	assert.Equal(t, 4, must(k.Peek(ctx, "ns:k", 0)).Remaining, "charged under the wrapper's key")
	assert.Equal(t, 5, must(k.Peek(ctx, "k", 0)).Remaining, "not under the caller's key")

	md, err = AllowAll(ctx, 1,
		Dimension{Name: "a", Limiter: namespaced{k, "ns:"}, Key: "k"},
		Dimension{Name: "b", Limiter: k, Key: "k"})
	require.NoError(t, err)
	assert.True(t, md.Allowed)
	assert.Equal(t, 3, must(k.Peek(ctx, "ns:k", 0)).Remaining)
	assert.Equal(t, 4, must(k.Peek(ctx, "k", 0)).Remaining)

	tl, err := NewTiered(func(context.Context, string) string { return "a" }, map[string]KeyedLimiter{"a": k})
	require.NoError(t, err)
	calls := 0
	md, err = AllowAll(ctx, 1, Dimension{Name: "t", Limiter: meteredTiered{tl, &calls}, Key: "k"})
	require.NoError(t, err)
	assert.True(t, md.Allowed)
	assert.Equal(t, 1, calls, "the wrapper's AllowN decided")
	assert.Equal(t, 3, must(k.Peek(ctx, "k", 0)).Remaining)
}
