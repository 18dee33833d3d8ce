package httplimit

import (
	"context"
	"net/http"
	"reflect"
	"strings"

	"github.com/rlkit/ratelimit/internal/limitset"
)

// KeyFunc picks the key a request is charged under in one [Limit], such as
// an API key, a client address or a user ID. It reports ok == false when
// the limit does not apply to the request (no API key, not the limited
// route): the request is then not charged in that limit.
//
// Keys are compared as strings. Each Limit should have a limiter of its own
// (or, on Redis, a key prefix of its own), so keys of different limits never
// collide. A KeyFunc must be safe for concurrent use.
type KeyFunc func(r *http.Request) (key string, ok bool)

// KeyByHeader keys requests by the first non-empty value of the named
// header. Requests without one are not charged.
//
// A header is whatever the client says it is: a client that can invent
// values can spread its traffic over as many keys as it likes. Key by a
// header only once its value has been authenticated (an API key checked by
// an earlier middleware), or add a limit keyed by client address as well.
func KeyByHeader(name string) KeyFunc {
	if name == "" {
		return invalidKey
	}
	name = http.CanonicalHeaderKey(name)
	return func(r *http.Request) (string, bool) {
		for _, v := range r.Header[name] {
			if v != "" {
				return v, true
			}
		}
		return "", false
	}
}

// KeyByAPIKey keys requests by the X-API-Key header ([HeaderAPIKey]); see
// [KeyByHeader].
func KeyByAPIKey() KeyFunc { return KeyByHeader(HeaderAPIKey) }

// KeyByIP keys requests by the client's address taken from RemoteAddr,
// IPv4 addresses one by one and IPv6 addresses grouped by /64 network. It
// ignores forwarded headers; behind a reverse proxy use an [IPResolver]
// that trusts it. Equivalent to the Key method of an IPResolver created with
// no options.
func KeyByIP() KeyFunc { return defaultResolver.Key }

var defaultResolver, _ = NewIPResolver()

// KeyByUser keys requests by the user that user finds in the request's
// context (set by an authentication middleware that runs earlier).
// Requests for which user reports false (anonymous) are not charged.
func KeyByUser(user func(ctx context.Context) (id string, ok bool)) KeyFunc {
	if user == nil {
		return invalidKey
	}
	return func(r *http.Request) (string, bool) {
		id, ok := user(r.Context())
		if !ok || id == "" {
			return "", false
		}
		return id, true
	}
}

// KeyByRoute keys requests by their route: the pattern that
// [http.ServeMux] matched (r.Pattern, such as "POST /login", from Go 1.23
// on), or else the method and path ("POST /login"; HEAD requests are keyed
// as GET, since the mux serves them with the GET handler and they share its
// quota). The
// pattern is set only when the middleware runs inside the mux, that is
// when it wraps the handlers registered on it; a middleware wrapping the
// whole mux should use [KeyByMuxRoute].
//
// Keying by raw path gives each distinct URL its own key; the limiter's key
// cap ([ratelimit.WithMaxKeys]) bounds the memory that costs.
func KeyByRoute() KeyFunc {
	return func(r *http.Request) (string, bool) {
		if routePattern(r) != "" {
			return routePattern(r), true
		}
		method := r.Method
		if method == http.MethodHead {
			method = http.MethodGet // the mux serves HEAD with GET handlers
		}
		return method + " " + r.URL.Path, true
	}
}

// KeyByMuxRoute keys requests by the pattern mux would route them to, for
// a middleware that wraps the whole mux (and so runs before the mux sets
// r.Pattern). Requests the mux has no pattern for are keyed "" (one shared
// key for all of them).
func KeyByMuxRoute(mux *http.ServeMux) KeyFunc {
	if mux == nil {
		return invalidKey
	}
	return func(r *http.Request) (string, bool) {
		if routePattern(r) != "" {
			return routePattern(r), true
		}
		_, pattern := mux.Handler(r)
		return pattern, true
	}
}

// When applies key only to requests for which match reports true, such as
// [IsRoute]("POST /login").
func When(match func(r *http.Request) bool, key KeyFunc) KeyFunc {
	if match == nil || reflect.ValueOf(match).Pointer() == invalidMatchPC || isInvalid(key) {
		return invalidKey
	}
	return func(r *http.Request) (string, bool) {
		if !match(r) {
			return "", false
		}
		return key(r)
	}
}

// IsRoute reports whether a request is for route, written like a
// ServeMux pattern without wildcards: "POST /login", "GET /report" or
// "/health". It compares route with r.Pattern when the mux has set it.
// Otherwise it matches as [http.ServeMux] would route the request: a GET
// route matches HEAD requests too (the mux serves HEAD with the GET
// handler), a route without a method matches every method, and a path
// ending in "/" matches the whole subtree below it. Without the mux it
// cannot see that a more specific pattern would take a request first, so
// such requests are matched too (charged, never let through); for an exact
// answer use [IsMuxRoute]. It allocates nothing.
func IsRoute(route string) func(r *http.Request) bool {
	method, path, hasMethod := strings.Cut(route, " ")
	if !hasMethod {
		method, path = "", route
	}
	subtree := strings.HasSuffix(path, "/")
	return func(r *http.Request) bool {
		if routePattern(r) != "" {
			return routePattern(r) == route
		}
		if method != "" && r.Method != method && (method != http.MethodGet || r.Method != http.MethodHead) {
			return false
		}
		if subtree {
			return strings.HasPrefix(r.URL.Path, path)
		}
		return r.URL.Path == path
	}
}

// IsMuxRoute reports whether mux routes a request to the pattern route,
// exactly as registered (such as "GET /report" or "GET /items/{id}"), for
// a middleware that wraps the whole mux. It asks mux, so HEAD requests
// served by a GET pattern, subtrees and precedence all count as the mux
// decides.
func IsMuxRoute(mux *http.ServeMux, route string) func(r *http.Request) bool {
	if mux == nil {
		return invalidMatch
	}
	return func(r *http.Request) bool {
		if routePattern(r) != "" {
			return routePattern(r) == route
		}
		_, pattern := mux.Handler(r)
		return pattern == route
	}
}

// FirstOf keys a request by the first of keys that applies to it, such as
// the API key if there is one and else the client address.
func FirstOf(keys ...KeyFunc) KeyFunc {
	if anyInvalid(keys) {
		return invalidKey
	}
	keys = append([]KeyFunc(nil), keys...)
	return func(r *http.Request) (string, bool) {
		for _, k := range keys {
			if s, ok := k(r); ok {
				return s, true
			}
		}
		return "", false
	}
}

// Combine keys a request by all of keys together, such as user and route,
// so that each combination has its own quota. It applies only when each of
// keys applies. The parts are joined with '|', and a '|' or '\' inside a
// part is escaped with '\', so distinct combinations never share a key.
func Combine(keys ...KeyFunc) KeyFunc {
	if anyInvalid(keys) {
		return invalidKey
	}
	keys = append([]KeyFunc(nil), keys...)
	return func(r *http.Request) (string, bool) {
		var b strings.Builder
		for i, k := range keys {
			s, ok := k(r)
			if !ok {
				return "", false
			}
			limitset.AppendKeyPart(&b, i, s)
		}
		return b.String(), true
	}
}

// invalidKey is what a key helper returns when it is given nothing to key
// by: a nil function or mux, an empty header name, no keys at all. [New]
// refuses a Limit whose Key is one (When, FirstOf and Combine pass it up),
// so the mistake shows at start-up rather than as a panic on every
// request. Hidden from New inside a KeyFunc of the caller's own, it keys
// every request alike: they are limited together, never let through
// uncharged.
func invalidKey(*http.Request) (string, bool) { return "", true }

// invalidMatch is what IsMuxRoute returns for a nil mux: it matches every
// request (charged, never let through), and When turns it into invalidKey.
func invalidMatch(*http.Request) bool { return true }

var (
	invalidKeyPC   = reflect.ValueOf(invalidKey).Pointer()
	invalidMatchPC = reflect.ValueOf(invalidMatch).Pointer()
)

// isInvalid reports whether k is nil or [invalidKey].
func isInvalid(k KeyFunc) bool {
	return k == nil || reflect.ValueOf(k).Pointer() == invalidKeyPC
}

// anyInvalid reports whether keys is empty or holds an invalid KeyFunc.
func anyInvalid(keys []KeyFunc) bool {
	if len(keys) == 0 {
		return true
	}
	for _, k := range keys {
		if isInvalid(k) {
			return true
		}
	}
	return false
}
