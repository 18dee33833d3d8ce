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
// header, such as KeyByHeader("X-API-Key"). Requests without one are not
// charged.
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

// KeyByRoute keys requests by their route.
//
// Without mux, the route is the method and path the middleware sees
// ("POST /login"; HEAD requests are keyed as GET, since the mux serves them
// with the GET handler and they share its quota), or, when the middleware
// runs inside an [http.ServeMux] (wrapping the handlers registered on it)
// and the mux matched an exact pattern such as "GET /items/{id}", that
// pattern (r.Pattern, from Go 1.23 on), so that /items/1 and /items/2 share
// a quota. A subtree pattern ("/", "/static/", "/files/{path...}") names a
// prefix, not a route, and is what an outer mux routing a prefix to a
// sub-router sets: requests it matched are keyed by method and path, as
// without a mux. Keying by raw path gives each distinct URL its own key;
// the limiter's key cap ([ratelimit.WithMaxKeys]) bounds the memory that
// costs.
//
// Given a mux, the route is the pattern mux routes the request to, as
// registered (such as "GET /items/{id}"), asking mux for every request
// (r.Pattern is whatever mux ran last, such as an outer mux's "/"), so it
// works wherever the middleware sits: around mux, inside it, or behind an
// outer mux or [http.StripPrefix] that hands mux the request. Requests
// mux has no pattern for are keyed "" (one shared key for all of them).
// A nil mux, or more than one, is a configuration error that [New]
// reports.
func KeyByRoute(mux ...*http.ServeMux) KeyFunc {
	if len(mux) > 0 {
		if len(mux) > 1 || mux[0] == nil {
			return invalidKey
		}
		m := mux[0]
		return func(r *http.Request) (string, bool) {
			_, pattern := m.Handler(r)
			return pattern, true
		}
	}
	return func(r *http.Request) (string, bool) {
		if p := routePattern(r); p != "" && !subtreePattern(p) {
			return p, true
		}
		method := r.Method
		if method == http.MethodHead {
			method = http.MethodGet // the mux serves HEAD with GET handlers
		}
		return method + " " + r.URL.Path, true
	}
}

// subtreePattern reports whether the ServeMux pattern p matches a whole
// subtree of paths: it ends in "/" or in a "{name...}" wildcard.
func subtreePattern(p string) bool {
	return strings.HasSuffix(p, "/") || strings.HasSuffix(p, "...}")
}

// When applies key only to requests for which match reports true, such as
// [IsRoute]("POST /login").
func When(match func(r *http.Request) bool, key KeyFunc) KeyFunc {
	if match != nil && reflect.ValueOf(match).Pointer() == invalidRouteMatchPC {
		return invalidRouteKey
	}
	if match == nil || reflect.ValueOf(match).Pointer() == invalidMatchPC || isInvalid(key) {
		return invalidOf(key)
	}
	return func(r *http.Request) (string, bool) {
		if !match(r) {
			return "", false
		}
		return key(r)
	}
}

// IsRoute reports whether a request is for route.
//
// Without mux, route is written like a ServeMux pattern without wildcards
// or host: "POST /login", "GET /report" or "/health". It matches the method
// and path the middleware sees (r.URL.Path, after any [http.StripPrefix]
// in front of it), as [http.ServeMux] would route them, wherever the
// middleware sits: a GET route matches HEAD requests too (the mux serves
// HEAD with the GET handler), a route without a method matches every
// method, and a path ending in "/" matches the whole subtree below it. It
// never reads r.Pattern, which is whatever mux ran last (an outer mux
// routing "/" to a sub-router sets "/"). It cannot see that a more specific
// pattern of the service's mux would take a request first, so such
// requests are matched too (charged, never let through); for an exact
// answer, and for patterns with wildcards, pass the mux. It allocates
// nothing. A route it could never match is a configuration error that
// [New] reports (through [When], [FirstOf] and [Combine]): one without a
// path starting with "/", with a host, with wildcards, with a method in
// lower case (methods are case-sensitive, and clients send "POST"), or
// that ServeMux would refuse.
//
// Given a mux, IsRoute reports whether mux routes the request to the
// pattern route, exactly as registered (such as "GET /report" or
// "GET /items/{id}"). It asks mux for every request, so HEAD requests
// served by a GET pattern, subtrees and precedence all count as mux
// decides, wherever the middleware sits: around mux, inside it, or behind
// an outer mux or [http.StripPrefix] that hands mux the request. A route
// that ServeMux would refuse to register, or that is spelled otherwise than
// ServeMux patterns are written (a method in lower case, such as
// "post /login", or more than one space after it, such as
// "POST  /login": compared with the pattern as registered, it would never
// match), is a configuration error that [New] reports, and so are a nil
// mux and more than one. A valid route that mux does not have (say
// "POST /login/" for "POST /login") cannot be told apart from one
// registered later: it matches nothing.
func IsRoute(route string, mux ...*http.ServeMux) func(r *http.Request) bool {
	if len(mux) > 0 {
		return isMuxRoute(route, mux)
	}
	method, path, ok := parseRoute(route)
	if !ok {
		return invalidRouteMatch
	}
	subtree := strings.HasSuffix(path, "/")
	return func(r *http.Request) bool {
		if method != "" && r.Method != method && (method != http.MethodGet || r.Method != http.MethodHead) {
			return false
		}
		if subtree {
			return strings.HasPrefix(r.URL.Path, path)
		}
		return r.URL.Path == path
	}
}

// parseRoute splits an [IsRoute] route (without a mux) into its method ("" for any) and
// path, and reports whether IsRoute can match it.
func parseRoute(route string) (method, path string, ok bool) {
	if route != strings.TrimSpace(route) || !validMuxPattern(route) {
		return "", "", false
	}
	path = route
	if i := strings.IndexAny(route, " \t"); i >= 0 {
		method, path = route[:i], strings.TrimLeft(route[i+1:], " \t")
		if strings.ToUpper(method) != method {
			return "", "", false
		}
	}
	if !strings.HasPrefix(path, "/") || strings.ContainsAny(path, "{}") {
		return "", "", false
	}
	return method, path, true
}

// validMuxPattern reports whether [http.ServeMux] accepts pattern (it
// panics on a pattern it cannot parse).
func validMuxPattern(pattern string) (ok bool) {
	defer func() {
		if recover() != nil {
			ok = false
		}
	}()
	http.NewServeMux().Handle(pattern, http.NotFoundHandler())
	return true
}

// isMuxRoute is [IsRoute] given a mux.
func isMuxRoute(route string, mux []*http.ServeMux) func(r *http.Request) bool {
	if len(mux) != 1 || mux[0] == nil {
		return invalidMatch
	}
	if !validMuxPattern(route) || !canonicalRoute(route) {
		return invalidRouteMatch
	}
	m := mux[0]
	return func(r *http.Request) bool {
		_, pattern := m.Handler(r)
		return pattern == route
	}
}

// canonicalRoute reports whether route is spelled as ServeMux patterns
// usually are: no space around it, the method (if any) in upper case and
// one space after it. Registered in another spelling, a route would still
// be one ServeMux accepts, but IsRoute given a mux compares spellings.
func canonicalRoute(route string) bool {
	if route != strings.TrimSpace(route) || strings.ContainsAny(route, "\t") {
		return false
	}
	method, rest, found := strings.Cut(route, " ")
	if !found {
		return true
	}
	return method == strings.ToUpper(method) && !strings.HasPrefix(rest, " ")
}

// FirstOf keys a request by the first of keys that applies to it, such as
// the API key if there is one and else the client address.
func FirstOf(keys ...KeyFunc) KeyFunc {
	if anyInvalid(keys) {
		return invalidOf(keys...)
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
		return invalidOf(keys...)
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
// by: a nil function or mux (or more than one mux), an empty header name, no keys at all. [New]
// refuses a Limit whose Key is one (When, FirstOf and Combine pass it up),
// so the mistake shows at start-up rather than as a panic on every
// request. Hidden from New inside a KeyFunc of the caller's own, it keys
// every request alike: they are limited together, never let through
// uncharged.
func invalidKey(*http.Request) (string, bool) { return "", true }

// invalidMatch is what IsRoute returns for a nil mux (or more than one): it matches every
// request (charged, never let through), and When turns it into invalidKey.
func invalidMatch(*http.Request) bool { return true }

// invalidRouteKey and invalidRouteMatch are invalidKey and invalidMatch
// for a route that IsRoute could never match, so that New
// names the problem.
func invalidRouteKey(*http.Request) (string, bool) { return "", true }
func invalidRouteMatch(*http.Request) bool         { return true }

var (
	invalidKeyPC        = reflect.ValueOf(invalidKey).Pointer()
	invalidRouteKeyPC   = reflect.ValueOf(invalidRouteKey).Pointer()
	invalidMatchPC      = reflect.ValueOf(invalidMatch).Pointer()
	invalidRouteMatchPC = reflect.ValueOf(invalidRouteMatch).Pointer()
)

// isInvalid reports whether k is nil, [invalidKey] or [invalidRouteKey].
func isInvalid(k KeyFunc) bool {
	if k == nil {
		return true
	}
	pc := reflect.ValueOf(k).Pointer()
	return pc == invalidKeyPC || pc == invalidRouteKeyPC
}

// isInvalidRoute reports whether k is [invalidRouteKey].
func isInvalidRoute(k KeyFunc) bool {
	return k != nil && reflect.ValueOf(k).Pointer() == invalidRouteKeyPC
}

// invalidOf returns the invalid key a helper built of keys passes up:
// invalidRouteKey when one of keys is, else invalidKey.
func invalidOf(keys ...KeyFunc) KeyFunc {
	for _, k := range keys {
		if isInvalidRoute(k) {
			return invalidRouteKey
		}
	}
	return invalidKey
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
