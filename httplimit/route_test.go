package httplimit

import (
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// routeLayout is one place a middleware can sit relative to the service's
// muxes. build returns the server's root handler, given the middleware
// and the service's own mux (the one its routes are registered on).
type routeLayout struct {
	name   string
	prefix string // the path prefix clients send before the service's routes
	build  func(mw *Middleware, api *http.ServeMux, routes map[string]http.Handler) http.Handler
}

var routeLayouts = []routeLayout{
	{"outer mux routes / to the middleware", "", func(mw *Middleware, api *http.ServeMux, routes map[string]http.Handler) http.Handler {
		for p, h := range routes {
			api.Handle(p, h)
		}
		outer := http.NewServeMux()
		outer.Handle("/", mw.Handler(api))
		return outer
	}},
	{"outer mux and StripPrefix in front of a sub-router", "/api", func(mw *Middleware, api *http.ServeMux, routes map[string]http.Handler) http.Handler {
		for p, h := range routes {
			api.Handle(p, h)
		}
		outer := http.NewServeMux()
		outer.Handle("/api/", http.StripPrefix("/api", mw.Handler(api)))
		return outer
	}},
	{"middleware wraps the whole mux", "", func(mw *Middleware, api *http.ServeMux, routes map[string]http.Handler) http.Handler {
		for p, h := range routes {
			api.Handle(p, h)
		}
		return mw.Handler(api)
	}},
	{"middleware inside the mux, around each handler", "", func(mw *Middleware, api *http.ServeMux, routes map[string]http.Handler) http.Handler {
		for p, h := range routes {
			api.Handle(p, mw.Handler(h))
		}
		return api
	}},
	{"inside a sub-router behind an outer mux", "", func(mw *Middleware, api *http.ServeMux, routes map[string]http.Handler) http.Handler {
		for p, h := range routes {
			api.Handle(p, mw.Handler(h))
		}
		outer := http.NewServeMux()
		outer.Handle("/", api)
		return outer
	}},
}

// TestRouteLimitsInEveryLayout: a route limit applies wherever the
// middleware sits. Behind an outer ServeMux routing "/" to the middleware
// (the common layout with sub-routers) r.Pattern is "/", and IsRoute,
// IsRoute and KeyByRoute given the mux used to compare routes with it: 3 POSTs to
// a 1-a-minute login limit all got 200, with nothing said anywhere, and
// KeyByRoute keyed every route "/", one quota for the whole service.
// Real server on loopback.
func TestRouteLimitsInEveryLayout(t *testing.T) {
	t.Parallel()
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") })
	routes := map[string]http.Handler{"POST /login": ok, "GET /items/{id}": ok, "/": ok}
	type step struct {
		method, path string
		want         int
	}
	for _, layout := range routeLayouts {
		for _, key := range []struct {
			name  string
			key   func(api *http.ServeMux) KeyFunc
			steps []step
		}{
			{"When(IsRoute)", func(*http.ServeMux) KeyFunc { return When(IsRoute("POST /login"), KeyByIP()) },
				[]step{{"POST", "/login", 200}, {"GET", "/items/1", 200}, {"POST", "/login", 429}, {"POST", "/login", 429}, {"GET", "/items/1", 200}}},
			{"When(IsRoute(mux))", func(api *http.ServeMux) KeyFunc { return When(IsRoute("POST /login", api), KeyByIP()) },
				[]step{{"POST", "/login", 200}, {"GET", "/items/1", 200}, {"POST", "/login", 429}, {"POST", "/login", 429}, {"GET", "/items/1", 200}}},
			{"KeyByRoute(mux)", func(api *http.ServeMux) KeyFunc { return KeyByRoute(api) },
				// One quota per pattern: /items/1 and /items/2 share one.
				[]step{{"POST", "/login", 200}, {"GET", "/items/1", 200}, {"POST", "/login", 429}, {"GET", "/items/2", 429}, {"GET", "/other", 200}}},
			{"KeyByRoute", func(*http.ServeMux) KeyFunc { return KeyByRoute() },
				// One quota per route: never one for the whole service.
				[]step{{"POST", "/login", 200}, {"GET", "/items/1", 200}, {"POST", "/login", 429}, {"GET", "/other", 200}, {"GET", "/other", 429}}},
		} {
			t.Run(layout.name+"/"+key.name, func(t *testing.T) {
				t.Parallel()
				api := http.NewServeMux()
				lim := newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Minute), fakeclock.New(epoch))
				mw := newMW(t, []Limit{{Name: "route", Key: key.key(api), Limiter: lim}})
				srv := httptest.NewServer(layout.build(mw, api, routes))
				t.Cleanup(srv.Close)
				for i, s := range key.steps {
					req, err := http.NewRequest(s.method, srv.URL+layout.prefix+s.path, strings.NewReader("user=a"))
					require.NoError(t, err)
					resp, err := srv.Client().Do(req)
					require.NoError(t, err)
					_ = resp.Body.Close()
					assert.Equal(t, s.want, resp.StatusCode, "step %d: %s %s", i, s.method, s.path)
				}
			})
		}
	}
}

// TestInvalidRoutesRefused: a route IsRoute can never match (no path, a
// path not starting with "/", a lower-case method, which no client sends,
// wildcards, which only a mux can match, a host) and, in IsRoute given a mux, a
// pattern ServeMux would refuse, are configuration errors at New, not a
// limit silently off.
func TestInvalidRoutesRefused(t *testing.T) {
	t.Parallel()
	mux := http.NewServeMux()
	for _, route := range []string{"", "POST", "POST ", " POST /login", "login", "POST login", "post /login", "POST /items/{id}",
		"example.com/login", "GET\t/x{"} {
		for name, k := range map[string]KeyFunc{
			"When(IsRoute)":             When(IsRoute(route), KeyByIP()),
			"FirstOf(When(IsRoute))":    FirstOf(When(IsRoute(route), KeyByIP())),
			"Combine(When(IsRoute), …)": Combine(KeyByIP(), When(IsRoute(route), KeyByIP())),
		} {
			_, err := New([]Limit{{Name: "login", Key: k, Limiter: newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Minute), nil)}})
			require.Error(t, err, "%s with route %q", name, route)
			assert.True(t, errors.Is(err, ratelimit.ErrInvalidConfig), "%v", err)
			assert.Contains(t, err.Error(), `httplimit.Limit.Key of limit "login"`)
			assert.Contains(t, err.Error(), "route", "%s with route %q: %v", name, route, err)
		}
	}
	// Spellings ServeMux accepts but that IsRoute given a mux, which compares the
	// pattern as registered, would never match: they used to pass New and
	// leave the limit off (3 POSTs under a 1-a-minute limit all 200).
	misspelled := []string{"post /login", "POST  /login", "GET\t/tab", " POST /login"}
	for _, route := range append([]string{"", "POST", "login", "GET /{x", "GET /{x}/{x}"}, misspelled...) {
		_, err := New([]Limit{{Name: "login", Key: When(IsRoute(route, mux), KeyByIP()), Limiter: newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Minute), nil)}})
		require.Error(t, err, "IsRoute(%q, mux)", route)
		assert.Contains(t, err.Error(), "route", "IsRoute(%q, mux): %v", route, err)
	}
	for _, route := range []string{"POST /login", "/", "/static/", "GET /report", "PROPFIND /dav/", "M-SEARCH /", "GET\t/tab", "GET /a /b"} {
		_, err := New([]Limit{{Name: "login", Key: When(IsRoute(route), KeyByIP()), Limiter: newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Minute), nil)}})
		assert.NoError(t, err, "IsRoute(%q)", route)
	}
	for _, route := range []string{"POST /login", "GET /items/{id}", "example.com/", "/files/{path...}"} {
		_, err := New([]Limit{{Name: "login", Key: When(IsRoute(route, mux), KeyByIP()), Limiter: newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Minute), nil)}})
		assert.NoError(t, err, "IsRoute(%q, mux)", route)
	}
}
