package httplimit

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestKeyHelpersRefuseNil: a key helper given a nil function, an empty
// header name or no keys used to pass New and panic on every request (or,
// for FirstOf(), never charge anything). New now refuses it, and a broken
// key that New cannot see (inside a KeyFunc of the caller's own) keys every
// request alike: limited together, never a panic, never uncharged.
func TestKeyHelpersRefuseNil(t *testing.T) {
	ip := KeyByIP()
	broken := map[string]KeyFunc{
		"KeyByUser(nil)":          KeyByUser(nil),
		`KeyByHeader("")`:         KeyByHeader(""),
		"KeyByRoute(nil)":         KeyByRoute(nil),
		"KeyByRoute(mux, mux)":    KeyByRoute(http.NewServeMux(), http.NewServeMux()),
		"When(nil, ip)":           When(nil, ip),
		"When(IsRoute, nil)":      When(IsRoute("GET /"), nil),
		"When(IsRoute(nil mux))":  When(IsRoute("GET /", nil), ip),
		"When(IsRoute(2 muxes))":  When(IsRoute("GET /", http.NewServeMux(), http.NewServeMux()), ip),
		"FirstOf(nil)":            FirstOf(nil),
		"FirstOf()":               FirstOf(),
		"Combine(nil, ip)":        Combine(nil, ip),
		"Combine()":               Combine(),
		"Combine(KeyByUser(nil))": Combine(ip, KeyByUser(nil)),
		"FirstOf(When(nil, ip))":  FirstOf(When(nil, ip)),
	}
	for name, k := range broken {
		t.Run(name, func(t *testing.T) {
			lim := newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Minute), nil)
			_, err := New([]Limit{{Name: "u", Key: k, Limiter: lim}})
			require.Error(t, err, "New accepted a Limit whose key helper was given nothing to key by")
			assert.True(t, errors.Is(err, ratelimit.ErrInvalidConfig), "%v", err)
			assert.Contains(t, err.Error(), `ratelimit: invalid configuration: httplimit.Limit.Key of limit "u"`)

			hidden := func(r *http.Request) (string, bool) { return k(r) }
			mw, err := New([]Limit{{Name: "u", Key: hidden, Limiter: lim}})
			require.NoError(t, err)
			h := mw.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
			codes := make([]int, 2)
			for i := range codes {
				w := httptest.NewRecorder()
				require.NotPanics(t, func() { h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil)) })
				codes[i] = w.Code
			}
			assert.Equal(t, []int{200, 429}, codes, "a broken key must limit every request together")
		})
	}
}

// TestKeyByHeaderFirstNonEmpty: a request carrying an empty X-API-Key
// line before the real one used to go uncharged (the first value was
// empty), while an authentication layer reading any non-empty value let
// it in. The key is the first non-empty value, as in grpclimit.
func TestKeyByHeaderFirstNonEmpty(t *testing.T) {
	r := httptest.NewRequest("GET", "/", nil)
	r.Header.Add("X-API-Key", "")
	r.Header.Add("X-API-Key", "secret")
	k, ok := KeyByHeader("X-API-Key")(r)
	assert.Equal(t, "secret", k)
	assert.True(t, ok)
}

// TestTransportRefusesTypedNilAndInvalidKeys: a typed nil limiter used to
// be taken for "no limiter" (every request sent unlimited), and a key
// helper given nothing to key by went unnoticed. Both are configuration
// errors.
func TestTransportRefusesTypedNilAndInvalidKeys(t *testing.T) {
	var tb *ratelimit.TokenBucket
	_, err := NewTransport(nil, tb)
	require.Error(t, err, "NewTransport(typed nil)")
	assert.True(t, errors.Is(err, ratelimit.ErrInvalidConfig), "%v", err)
	assert.Contains(t, err.Error(), "httplimit.NewTransport: the limiter is a nil *ratelimit.TokenBucket")

	_, err = NewTransport(nil, nil)
	assert.NoError(t, err, "an untyped nil limiter is documented: obey the server alone")

	lim := newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Minute), nil)
	_, err = NewKeyedTransport(nil, lim, KeyByUser(nil))
	require.Error(t, err, "NewKeyedTransport(KeyByUser(nil))")
	assert.True(t, errors.Is(err, ratelimit.ErrInvalidConfig), "%v", err)
}
