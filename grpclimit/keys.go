package grpclimit

import (
	"context"
	"reflect"
	"strings"

	"github.com/rlkit/ratelimit/internal/limitset"
	"google.golang.org/grpc/metadata"
)

// KeyFunc picks the key a call is charged under in one [Limit], such as an
// API key, a client address, a user ID or the method. method is the call's
// full method name, "/pkg.Service/Method". It reports ok == false when the
// limit does not apply to the call (no API key, not the limited method):
// the call is then not charged in that limit.
//
// Keys are compared as strings. Each Limit should have a limiter of its own
// (or, on Redis, a key prefix of its own), so keys of different limits never
// collide. A KeyFunc must be safe for concurrent use.
type KeyFunc func(ctx context.Context, method string) (key string, ok bool)

// KeyByMethod keys calls by their full method name, such as
// "/pkg.Service/Method", so that each method has its own quota shared by
// every client. It allocates nothing.
func KeyByMethod() KeyFunc {
	return func(_ context.Context, method string) (string, bool) {
		return method, true
	}
}

// KeyByService keys calls by their service, such as "pkg.Service" for the
// method "/pkg.Service/Method". A method name without a service (not of the
// form "/service/method") is not charged. It allocates nothing.
func KeyByService() KeyFunc {
	return func(_ context.Context, method string) (string, bool) {
		return serviceOf(method)
	}
}

// serviceOf returns the service of a full method name.
func serviceOf(method string) (string, bool) {
	method = strings.TrimPrefix(method, "/")
	i := strings.LastIndexByte(method, '/')
	if i <= 0 {
		return "", false
	}
	return method[:i], true
}

// KeyByMetadata keys calls by the first non-empty value of the named
// incoming metadata (a request header), such as "x-api-key". The name is
// matched as gRPC stores metadata keys, in lower case. Calls without it are
// not charged.
//
// Metadata is whatever the client says it is: a client that can invent
// values can spread its calls over as many keys as it likes. Key by
// metadata only once its value has been authenticated (an API key checked
// by an earlier interceptor), or add a limit keyed by peer ([KeyByIP]) as
// well.
func KeyByMetadata(name string) KeyFunc {
	if name == "" {
		return invalidKey
	}
	name = strings.ToLower(name)
	return func(ctx context.Context, _ string) (string, bool) {
		for _, v := range metadata.ValueFromIncomingContext(ctx, name) {
			if v != "" {
				return v, true
			}
		}
		return "", false
	}
}

// KeyByUser keys calls by the user that user finds in the call's context
// (set by an authentication interceptor that runs earlier). Calls for which
// user reports false, or an empty ID, are not charged.
func KeyByUser(user func(ctx context.Context) (id string, ok bool)) KeyFunc {
	if user == nil {
		return invalidKey
	}
	return func(ctx context.Context, _ string) (string, bool) {
		id, ok := user(ctx)
		if !ok || id == "" {
			return "", false
		}
		return id, true
	}
}

// When applies key only to calls for which match reports true, such as
// [IsMethod]("/pkg.Auth/Login").
func When(match func(ctx context.Context, method string) bool, key KeyFunc) KeyFunc {
	if match != nil && reflect.ValueOf(match).Pointer() == invalidMatchPC {
		return invalidMethodKey
	}
	if match == nil || isInvalid(key) {
		return invalidOf(key)
	}
	return func(ctx context.Context, method string) (string, bool) {
		if !match(ctx, method) {
			return "", false
		}
		return key(ctx, method)
	}
}

// IsMethod reports whether a call is to the method fullMethod, written as
// gRPC names it: "/pkg.Service/Method". It allocates nothing. A name no
// call can have (not of the form "/service/method") is a configuration
// error that [New] reports (through [When], [FirstOf] and [Combine]).
func IsMethod(fullMethod string) func(ctx context.Context, method string) bool {
	if svc, ok := serviceOf(fullMethod); !ok || !strings.HasPrefix(fullMethod, "/") || strings.Contains(svc, "/") ||
		len(fullMethod) == len(svc)+2 {
		return invalidMatch
	}
	return func(_ context.Context, method string) bool {
		return method == fullMethod
	}
}

// IsService reports whether a call is to a method of service, such as
// "pkg.Service" (a leading "/" is ignored). It allocates nothing. An empty
// name, or one holding a "/", is a configuration error that [New] reports
// (through [When], [FirstOf] and [Combine]).
func IsService(service string) func(ctx context.Context, method string) bool {
	service = strings.TrimPrefix(service, "/")
	if service == "" || strings.Contains(service, "/") {
		return invalidMatch
	}
	return func(_ context.Context, method string) bool {
		s, ok := serviceOf(method)
		return ok && s == service
	}
}

// FirstOf keys a call by the first of keys that applies to it, such as the
// API key if there is one and else the peer address.
func FirstOf(keys ...KeyFunc) KeyFunc {
	if anyInvalid(keys) {
		return invalidOf(keys...)
	}
	keys = append([]KeyFunc(nil), keys...)
	return func(ctx context.Context, method string) (string, bool) {
		for _, k := range keys {
			if s, ok := k(ctx, method); ok {
				return s, true
			}
		}
		return "", false
	}
}

// Combine keys a call by all of keys together, such as user and method, so
// that each combination has its own quota. It applies only when each of
// keys applies. The parts are joined with '|', and a '|' or '\' inside a
// part is escaped with '\', so distinct combinations never share a key (the
// same keys as httplimit's Combine).
func Combine(keys ...KeyFunc) KeyFunc {
	if anyInvalid(keys) {
		return invalidOf(keys...)
	}
	keys = append([]KeyFunc(nil), keys...)
	return func(ctx context.Context, method string) (string, bool) {
		var b strings.Builder
		for i, k := range keys {
			s, ok := k(ctx, method)
			if !ok {
				return "", false
			}
			limitset.AppendKeyPart(&b, i, s)
		}
		return b.String(), true
	}
}

// invalidKey is what a key helper returns when it is given nothing to key
// by: a nil function, an empty metadata name, no keys at all. [New] refuses
// a Limit whose Key is one (When, FirstOf and Combine pass it up), so the
// mistake shows at start-up, not as a panic on the first call, which would
// take the whole server down. Hidden from New inside a KeyFunc of the
// caller's own, it keys every call alike: they are limited together, never
// let through uncharged.
func invalidKey(context.Context, string) (string, bool) { return "", true }

// invalidMatch is what IsMethod and IsService return for a name no call
// can have: it matches every call (charged, never let through), and When
// turns it into invalidMethodKey, which New names.
func invalidMatch(context.Context, string) bool { return true }

// invalidMethodKey is invalidKey for a method or service no call can have.
func invalidMethodKey(context.Context, string) (string, bool) { return "", true }

var (
	invalidKeyPC       = reflect.ValueOf(invalidKey).Pointer()
	invalidMethodKeyPC = reflect.ValueOf(invalidMethodKey).Pointer()
	invalidMatchPC     = reflect.ValueOf(invalidMatch).Pointer()
)

// isInvalid reports whether k is nil, [invalidKey] or [invalidMethodKey].
func isInvalid(k KeyFunc) bool {
	if k == nil {
		return true
	}
	pc := reflect.ValueOf(k).Pointer()
	return pc == invalidKeyPC || pc == invalidMethodKeyPC
}

// isInvalidMethod reports whether k is [invalidMethodKey].
func isInvalidMethod(k KeyFunc) bool {
	return k != nil && reflect.ValueOf(k).Pointer() == invalidMethodKeyPC
}

// invalidOf returns the invalid key a helper built of keys passes up:
// invalidMethodKey when one of keys is, else invalidKey.
func invalidOf(keys ...KeyFunc) KeyFunc {
	for _, k := range keys {
		if isInvalidMethod(k) {
			return invalidMethodKey
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
