package httplimit

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit"
)

// A priority function that panics (after the limits admitted the request,
// before the Adaptive was asked) gives back what the limits admitted: a
// concurrency permit is not leaked, so the key is not refused for good.
func TestAdaptivePriorityPanicReleasesLimits(t *testing.T) {
	t.Parallel()
	conc := newConc(t, 1)
	ad := fixedAdaptive(t, 10)
	mw := newMW(t, []Limit{{Name: "c", Key: KeyByHeader("X-API-Key"), Concurrency: conc}},
		WithAdaptive(ad, func(r *http.Request) ratelimit.Priority {
			if r.Header.Get("X-Panic") != "" {
				panic("priority bug")
			}
			return ratelimit.PriorityDefault
		}))
	h := mw.Handler(http.HandlerFunc(okHandler))
	serve := func(panics bool) (code int) {
		req := httptest.NewRequest("GET", "/", nil)
		req.Header.Set("X-API-Key", "k")
		if panics {
			req.Header.Set("X-Panic", "1")
		}
		rec := httptest.NewRecorder()
		defer func() {
			if v := recover(); v != nil {
				code = -1
			}
		}()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	require.Equal(t, -1, serve(true), "the priority function's panic goes on up")
	assert.Equal(t, http.StatusOK, serve(false), "the key's one permit is free again")
	assert.Equal(t, 0, ad.InFlight())
}
