package httplimit

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

type userKey struct{}

func userFrom(ctx context.Context) (string, bool) {
	u, ok := ctx.Value(userKey{}).(string)
	return u, ok
}

func TestKeyFuncs(t *testing.T) {
	t.Parallel()
	withUser := func(r *http.Request, u string) *http.Request {
		return r.WithContext(context.WithValue(r.Context(), userKey{}, u))
	}
	req := func(method, target string, hdr ...string) *http.Request {
		r := httptest.NewRequest(method, target, nil)
		r.RemoteAddr = "203.0.113.7:1"
		for i := 0; i+1 < len(hdr); i += 2 {
			r.Header.Set(hdr[i], hdr[i+1])
		}
		return r
	}
	// A request as the mux hands it on, with its pattern (Go 1.23+).
	var patterned *http.Request
	pm := http.NewServeMux()
	pm.HandleFunc("POST /login", func(_ http.ResponseWriter, r *http.Request) { patterned = r })
	pm.ServeHTTP(httptest.NewRecorder(), req("POST", "/login"))

	mux := http.NewServeMux()
	mux.HandleFunc("GET /items/{id}", func(http.ResponseWriter, *http.Request) {})

	cases := []struct {
		name   string
		key    KeyFunc
		r      *http.Request
		want   string
		wantOK bool
	}{
		{"api key", KeyByHeader("X-API-Key"), req("GET", "/", "X-API-Key", "k1"), "k1", true},
		{"api key absent", KeyByHeader("X-API-Key"), req("GET", "/"), "", false},
		{"header", KeyByHeader("x-tenant"), req("GET", "/", "X-Tenant", "acme"), "acme", true},
		{"ip", KeyByIP(), req("GET", "/"), "203.0.113.7", true},
		{"user", KeyByUser(userFrom), withUser(req("GET", "/"), "alice"), "alice", true},
		{"anonymous", KeyByUser(userFrom), req("GET", "/"), "", false},
		{"route pattern", KeyByRoute(), patterned, "POST /login", true},
		{"route method path", KeyByRoute(), req("GET", "/a/b?x=1"), "GET /a/b", true},
		{"mux route", KeyByRoute(mux), req("GET", "/items/42"), "GET /items/{id}", true},
		{"mux no route", KeyByRoute(mux), req("GET", "/nope"), "", true},
		{"combine", Combine(KeyByUser(userFrom), KeyByRoute()), withUser(patterned, "alice"), "alice|POST /login", true},
		{"combine escapes", Combine(KeyByUser(userFrom), KeyByRoute()), withUser(patterned, `a|b\`), `a\|b\\|POST /login`, true},
		{"combine needs all", Combine(KeyByUser(userFrom), KeyByRoute()), patterned, "", false},
		{"first of: api key", FirstOf(KeyByHeader("X-API-Key"), KeyByIP()), req("GET", "/", "X-API-Key", "k1"), "k1", true},
		{"first of: ip", FirstOf(KeyByHeader("X-API-Key"), KeyByIP()), req("GET", "/"), "203.0.113.7", true},
		{"first of: none", FirstOf(KeyByHeader("X-API-Key")), req("GET", "/"), "", false},
		{"when route", When(IsRoute("POST /login"), KeyByIP()), req("POST", "/login"), "203.0.113.7", true},
		{"when pattern", When(IsRoute("POST /login"), KeyByIP()), patterned, "203.0.113.7", true},
		{"when other method", When(IsRoute("POST /login"), KeyByIP()), req("GET", "/login"), "", false},
		{"when any method", When(IsRoute("/login"), KeyByIP()), req("GET", "/login"), "203.0.113.7", true},
	}
	for _, c := range cases {
		got, ok := c.key(c.r)
		if got != c.want || ok != c.wantOK {
			t.Errorf("%s: key = %q, %v; want %q, %v", c.name, got, ok, c.want, c.wantOK)
		}
	}
	// Combine is unambiguous: parts that differ give keys that differ.
	a := Combine(KeyByHeader("A"), KeyByHeader("B"))
	k1, _ := a(req("GET", "/", "A", `x|`, "B", "y"))
	k2, _ := a(req("GET", "/", "A", "x", "B", "|y"))
	if k1 == k2 {
		t.Errorf("Combine collides: %q", k1)
	}
}
