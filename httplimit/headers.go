package httplimit

import (
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/rlkit/ratelimit"
)

// Header field names written by the [Middleware] and read by the
// [Transport]. net/http canonicalizes names (X-RateLimit-Limit travels as
// X-Ratelimit-Limit); field names are case-insensitive, so both spellings
// work with http.Header's Get.
const (
	// HeaderXRateLimitLimit carries the quota of the most restrictive limit.
	HeaderXRateLimitLimit = "X-RateLimit-Limit"
	// HeaderXRateLimitRemaining carries how many requests that limit still
	// admits now.
	HeaderXRateLimitRemaining = "X-RateLimit-Remaining"
	// HeaderXRateLimitReset carries the Unix time, in whole seconds rounded
	// up, at which that limit's quota is full again.
	HeaderXRateLimitReset = "X-RateLimit-Reset"
	// HeaderRateLimitPolicy is the IETF quota policy field:
	// "name";q=<quota>;w=<window seconds>.
	HeaderRateLimitPolicy = "RateLimit-Policy"
	// HeaderRateLimit is the IETF service limit field:
	// "name";r=<remaining>;t=<seconds>.
	HeaderRateLimit = "RateLimit"
	// HeaderRetryAfter is the standard Retry-After field, in delay-seconds.
	HeaderRetryAfter = "Retry-After"
	// HeaderAPIKey is the header [KeyByAPIKey] reads.
	HeaderAPIKey = "X-API-Key"
)

// Canonical map keys, so that the hot path assigns to the header map
// directly instead of canonicalizing on every request.
var (
	keyXLimit     = http.CanonicalHeaderKey(HeaderXRateLimitLimit)
	keyXRemaining = http.CanonicalHeaderKey(HeaderXRateLimitRemaining)
	keyXReset     = http.CanonicalHeaderKey(HeaderXRateLimitReset)
	keyPolicy     = http.CanonicalHeaderKey(HeaderRateLimitPolicy)
	keyRateLimit  = http.CanonicalHeaderKey(HeaderRateLimit)
	keyRetryAfter = http.CanonicalHeaderKey(HeaderRetryAfter)
	keyCType      = "Content-Type"
	keyNoSniff    = "X-Content-Type-Options"
)

// HeaderSet selects which rate-limit fields the [Middleware] writes.
type HeaderSet uint8

// The header sets. Retry-After is always sent on a denial that can be
// retried, whatever the set.
const (
	// XRateLimitHeaders are X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset.
	XRateLimitHeaders HeaderSet = 1 << iota
	// IETFHeaders are RateLimit-Policy and RateLimit.
	IETFHeaders
	// NoHeaders sends no rate-limit fields.
	NoHeaders HeaderSet = 0
	// AllHeaders sends both sets; it is the default.
	AllHeaders = XRateLimitHeaders | IETFHeaders
)

// ceilSeconds returns d in whole seconds, rounded up; d >= 0.
func ceilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// RetryAfterSeconds returns the Retry-After value, in seconds, for a denied
// Decision: RetryAfter rounded up to a whole second, and at least 1, so
// that a client waiting that long never retries too early. It returns 0 for
// an admitted Decision and for one that can never succeed
// ([ratelimit.RetryNever]).
func RetryAfterSeconds(d ratelimit.Decision) int64 {
	if d.Allowed || d.RetryAfter == ratelimit.RetryNever {
		return 0
	}
	return max(ceilSeconds(d.RetryAfter), 1)
}

// checkPolicyName reports whether name can be sent as an RFC 8941 String:
// printable ASCII only.
func checkPolicyName(name string) error {
	for i := 0; i < len(name); i++ {
		if c := name[i]; c < 0x20 || c > 0x7e {
			return configError("httplimit.Limit.Name must be printable ASCII, got %q", name)
		}
	}
	return nil
}

// appendSFString appends s as an RFC 8941 String ("..." with \ and "
// escaped). s has been checked by checkPolicyName.
func appendSFString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '"' || c == '\\' {
			b = append(b, '\\')
		}
		b = append(b, s[i])
	}
	return append(b, '"')
}

// headerState is what the rate-limit fields are computed from.
type headerState struct {
	d      ratelimit.Decision
	name   []byte        // the policy name, already an RFC 8941 String
	window time.Duration // the limit's window; 0 if unknown
	now    int64         // Unix nanoseconds
	consts *constCache   // the limit's cache of constant values
}

// constValues are the field values that depend only on a limit's quota and
// window, not on the request: X-RateLimit-Limit and RateLimit-Policy.
// Strings are immutable, so responses can share them safely.
type constValues struct {
	limit  int
	window time.Duration
	xLimit string
	policy string
}

// constCache remembers the constant values of a limit for a few quotas (a
// tiered limit has one per tier).
type constCache struct {
	slots [4]atomic.Pointer[constValues]
	// reset is the latest X-RateLimit-Reset value formatted: requests in
	// one window (and a token bucket's clients, mostly) share it.
	reset atomic.Pointer[resetValue]
}

type resetValue struct {
	secs int64
	s    string
}

// resetString returns secs formatted, from the cache when it holds secs.
// It caches a new value only when it is later than the cached one, so the
// cache changes at most about once a second however clients interleave.
func (c *constCache) resetString(secs int64) string {
	v := c.reset.Load()
	if v != nil && v.secs == secs {
		return v.s
	}
	s := strconv.FormatInt(secs, 10)
	if v == nil || secs > v.secs {
		c.reset.Store(&resetValue{secs: secs, s: s})
	}
	return s
}

// get returns the constant values for quota limit and window.
func (c *constCache) get(name []byte, limit int, window time.Duration) *constValues {
	slot := &c.slots[uint(limit)%uint(len(c.slots))]
	if v := slot.Load(); v != nil && v.limit == limit && v.window == window {
		return v
	}
	v := &constValues{limit: limit, window: window, xLimit: strconv.Itoa(limit)}
	b := append(append([]byte(nil), name...), ";q="...)
	b = strconv.AppendInt(b, int64(limit), 10)
	if window > 0 {
		b = append(b, ";w="...)
		b = strconv.AppendInt(b, ceilSeconds(window), 10)
	}
	v.policy = string(b)
	slot.Store(v)
	return v
}

// fieldList collects the fields writeHeaders sets: field i gets keys[i]
// and, unless fixed[i] is set, the bytes of the request's value buffer
// from the previous field's end up to ends[i].
type fieldList struct {
	keys  [6]string
	fixed [6]string
	ends  [6]int
	k     int
	// Remaining's digits in the value buffer, to copy rather than format
	// twice; remE == 0 when not formatted.
	remS, remE int
}

// addFixed adds a field whose value is the shared string v.
func (f *fieldList) addFixed(key, v string) {
	f.keys[f.k], f.fixed[f.k] = key, v
	f.k++
}

// addValue adds a field whose value ends at end in the value buffer.
func (f *fieldList) addValue(key string, end int) {
	f.keys[f.k], f.ends[f.k] = key, end
	f.k++
}

// writeHeaders sets the fields of set on h for s. Beyond the cached
// constant values, it allocates one string holding the request's values
// and one array backing every []string.
func writeHeaders(h http.Header, set HeaderSet, s *headerState) {
	d := &s.d
	never := !d.Allowed && d.RetryAfter == ratelimit.RetryNever
	var retry int64
	if !d.Allowed && !never {
		retry = RetryAfterSeconds(*d)
	}
	if s.consts == nil {
		s.consts = new(constCache)
	}
	var f fieldList
	var arr [128]byte
	b := arr[:0]
	if set != NoHeaders {
		consts := s.consts.get(s.name, d.Limit, s.window)
		if set&XRateLimitHeaders != 0 {
			b = f.appendXRateLimit(b, s, consts)
		}
		if set&IETFHeaders != 0 {
			b = f.appendIETF(b, s, consts, never, retry)
		}
	}
	if retry > 0 {
		b = strconv.AppendInt(b, retry, 10)
		f.addValue(keyRetryAfter, len(b))
	}
	if f.k > 0 {
		f.store(h, b)
	}
}

// appendXRateLimit adds X-RateLimit-Limit, -Remaining and -Reset to f,
// appending the values it formats to b.
func (f *fieldList) appendXRateLimit(b []byte, s *headerState, consts *constValues) []byte {
	d := &s.d
	f.addFixed(keyXLimit, consts.xLimit)
	if d.Remaining >= 0 && d.Remaining < smallInts {
		f.addFixed(keyXRemaining, smallIntString(d.Remaining))
	} else {
		f.remS = len(b)
		b = strconv.AppendInt(b, int64(d.Remaining), 10)
		f.remE = len(b)
		f.addValue(keyXRemaining, len(b))
	}
	// Reset: when the quota is full again, in Unix seconds rounded up.
	reset := s.now + int64(d.ResetAfter)
	secs := reset / int64(time.Second)
	if reset%int64(time.Second) > 0 {
		secs++
	}
	f.addFixed(keyXReset, s.consts.resetString(secs))
	return b
}

// appendIETF adds RateLimit-Policy and RateLimit to f, appending the
// RateLimit value to b.
func (f *fieldList) appendIETF(b []byte, s *headerState, consts *constValues, never bool, retry int64) []byte {
	d := &s.d
	f.addFixed(keyPolicy, consts.policy)
	b = append(b, s.name...)
	b = append(b, ";r="...)
	if f.remE > 0 { // formatted for X-RateLimit-Remaining
		b = append(b, b[f.remS:f.remE]...)
	} else {
		b = strconv.AppendInt(b, int64(d.Remaining), 10)
	}
	switch {
	case d.Allowed:
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, ceilSeconds(d.ResetAfter), 10)
	case !never:
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, retry, 10)
	}
	f.addValue(keyRateLimit, len(b))
	return b
}

// store sets f's fields on h, the formatted values sliced from one string
// of b.
func (f *fieldList) store(h http.Header, b []byte) {
	all := string(b)
	vals := make([]string, f.k)
	start := 0
	for i := 0; i < f.k; i++ {
		if f.fixed[i] != "" {
			vals[i] = f.fixed[i]
		} else {
			vals[i] = all[start:f.ends[i]]
			start = f.ends[i]
		}
		h[f.keys[i]] = vals[i : i+1 : i+1]
	}
}

// smallInts is how many small numbers have ready-made strings: Remaining
// is usually below it, and then costs no formatting and no allocation.
const smallInts = 1024

var (
	smallIntDigits string                // "0123...10231023"
	smallIntEnds   [smallInts + 1]uint16 // number i is digits[ends[i]:ends[i+1]]
)

func init() {
	b := make([]byte, 0, 4*smallInts)
	for i := 0; i < smallInts; i++ {
		smallIntEnds[i] = uint16(len(b))
		b = strconv.AppendInt(b, int64(i), 10)
	}
	smallIntEnds[smallInts] = uint16(len(b))
	smallIntDigits = string(b)
}

// smallIntString returns i in decimal for 0 <= i < smallInts.
func smallIntString(i int) string {
	return smallIntDigits[smallIntEnds[i]:smallIntEnds[i+1]]
}
