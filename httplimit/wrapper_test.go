package httplimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit"
)

// prefixed is a user's wrapper around *ratelimit.Keyed that rewrites
// keys; metered wraps a *ratelimit.Tiered and counts its decisions.
type prefixed struct {
	*ratelimit.Keyed
	prefix string
}

func (w prefixed) AllowN(ctx context.Context, key string, n int) (ratelimit.Decision, error) {
	return w.Keyed.AllowN(ctx, w.prefix+key, n)
}

type metered struct {
	*ratelimit.Tiered
	calls *int
}

func (w metered) AllowN(ctx context.Context, key string, n int) (ratelimit.Decision, error) {
	*w.calls++
	return w.Tiered.AllowN(ctx, key, n)
}

// TestMiddlewareThroughWrappers: a limiter that embeds *Keyed or *Tiered
// is served through its own AllowN (the review of issue 25 found that a
// *Keyed wrapper panicked on every request and a *Tiered wrapper was
// charged past).
func TestMiddlewareThroughWrappers(t *testing.T) {
	ctx := context.Background()
	k, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(5, time.Minute))
	require.NoError(t, err)
	tl, err := ratelimit.NewTiered(func(context.Context, string) string { return "a" }, map[string]ratelimit.KeyedLimiter{"a": k})
	require.NoError(t, err)
	calls := 0
	byUser := KeyByHeader("X-User")
	for _, limits := range [][]Limit{
		{{Name: "one", Key: byUser, Limiter: prefixed{k, "p:"}}},
		{{Name: "one", Key: byUser, Limiter: prefixed{k, "p:"}}, {Name: "two", Key: byUser, Limiter: metered{tl, &calls}}},
	} {
		h := newMW(t, limits).Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.Header.Set("X-User", "u")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		assert.Equal(t, http.StatusOK, w.Code)
	}
	assert.Equal(t, 3, must(k.Peek(ctx, "p:u", 0)).Remaining, "charged twice under the wrapper's key")
	assert.Equal(t, 4, must(k.Peek(ctx, "u", 0)).Remaining, "charged once through the Tiered wrapper")
	assert.Equal(t, 1, calls, "the Tiered wrapper's AllowN decided")
}
