package limitset

import (
	"strconv"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rlkit/ratelimit"
)

// FieldSet selects the rate-limit fields to write (httplimit.HeaderSet
// and grpclimit's set convert to it).
type FieldSet uint8

// The field sets; Retry-After is written on every denial that can be
// retried, whatever the set.
const (
	// XRateLimitFields are X-RateLimit-Limit, X-RateLimit-Remaining and
	// X-RateLimit-Reset.
	XRateLimitFields FieldSet = 1 << iota
	// IETFFields are RateLimit-Policy and RateLimit.
	IETFFields
	// NoFields is no rate-limit field.
	NoFields FieldSet = 0
	// AllFields is both sets.
	AllFields = XRateLimitFields | IETFFields
)

// FieldNames are the keys the fields are stored under.
type FieldNames struct {
	XLimit, XRemaining, XReset, Policy, RateLimit, RetryAfter string
}

// HTTPNames are the canonical http.Header keys; GRPCNames gRPC metadata's
// lower-case keys ("x-ratelimit-limit", "ratelimit-policy", "ratelimit",
// "retry-after", ...).
var (
	HTTPNames = FieldNames{"X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset", "Ratelimit-Policy", "Ratelimit", "Retry-After"}
	GRPCNames = FieldNames{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "ratelimit-policy", "ratelimit", "retry-after"}
)

// WriteFields sets on h the fields of set for v's Decision (as the
// middleware writes them: X-RateLimit-Reset in Unix seconds rounded up,
// RateLimit-Policy with the limit's window at the Set's clock now,
// Retry-After on a retryable denial), under names. A concurrency limit's
// fields have no time in them: RateLimit-Policy has qu="concurrent-requests"
// and no w, RateLimit no t, X-RateLimit-Reset is left out, and
// Retry-After is sent only for a blocked key (RetryAfter > 0): nobody
// knows when a holder will end. A Failed verdict
// writes only Retry-After. A shadow limit's denial is reported as an
// admission. It does nothing when v.From < 0, and for a shadow limit's
// Decision unless Decide was called with shadowFields. Beyond cached
// constant values it allocates one block holding the []string backing
// array and the formatted values (only the array when every value is
// cached, such as a Remaining below 1024 and an X-RateLimit-Reset shared
// with the previous request, with XRateLimitFields; two allocations for
// values too long for the block, such as a long limit name).
func (s *Set[R]) WriteFields(h map[string][]string, names *FieldNames, set FieldSet, v *Verdict[R]) {
	if v.From < 0 || (v.From >= v.Enforced && !v.shadowFields) {
		return
	}
	if v.Failed {
		set = NoFields // no quota was measured: only Retry-After
	}
	c := &v.Charges()[v.From]
	st := fieldState{d: v.Dec, name: c.Entry.sfName, consts: &c.Entry.consts, conc: c.Entry.Concurrency != nil}
	if v.From >= v.Enforced && !st.d.Allowed { // reported, not enforced
		st.d.Allowed, st.d.RetryAfter = true, 0
	}
	st.now = s.ts.Now()
	if set&IETFFields != 0 {
		st.window = c.window(st.now)
	}
	writeFields(h, names, set, &st)
}

// WriteDecision sets on h the fields of set for d, as WriteFields does
// for a limit named name (valid by ValidName) with the given window (0:
// unknown), at now (Unix nanoseconds). It caches nothing: WriteFields is
// the one for serving; this one is for tests and one-off answers.
func WriteDecision(h map[string][]string, names *FieldNames, set FieldSet, d ratelimit.Decision, name string, window time.Duration, now int64) {
	writeFields(h, names, set, &fieldState{d: d, name: appendSFString(nil, name), window: window, now: now, consts: new(constCache)})
}

// quotaUnit is the RateLimit-Policy quota unit of a concurrency limit, as
// the IETF draft names it.
const quotaUnit = `;qu="concurrent-requests"`

// ceilSeconds returns d in whole seconds, rounded up; d >= 0.
func ceilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second != 0 {
		s++
	}
	return s
}

// RetryAfterSeconds returns the Retry-After value, in seconds, for a
// denied Decision: RetryAfter rounded up to a whole second, and at least
// 1. It returns 0 for an admitted Decision and for one that can never
// succeed (ratelimit.RetryNever).
func RetryAfterSeconds(d ratelimit.Decision) int64 {
	if d.Allowed || d.RetryAfter == ratelimit.RetryNever {
		return 0
	}
	return max(ceilSeconds(d.RetryAfter), 1)
}

// fieldState is what the rate-limit fields are computed from.
type fieldState struct {
	d      ratelimit.Decision
	name   []byte        // the policy name, already an RFC 8941 String
	window time.Duration // the limit's window; 0 if unknown
	now    int64         // Unix nanoseconds
	consts *constCache   // the limit's cache of constant values
	conc   bool          // a concurrency limit's Decision
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

// get returns the constant values for quota limit and window, of a
// concurrency limit when conc (a cache serves one limit, of one kind).
func (c *constCache) get(name []byte, limit int, window time.Duration, conc bool) *constValues {
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
	if conc {
		b = append(b, quotaUnit...)
	}
	v.policy = string(b)
	slot.Store(v)
	return v
}

// fieldList collects the fields writeFields sets: field i gets keys[i]
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

// writeFields sets the fields of set on h for s, under names. Beyond the
// cached constant values, it allocates one block (store) holding the
// request's formatted values and the array backing every []string.
func writeFields(h map[string][]string, names *FieldNames, set FieldSet, s *fieldState) {
	d := &s.d
	retry := RetryAfterSeconds(*d) // 0 unless a denial that can be retried
	if s.conc && d.RetryAfter <= 0 {
		retry = 0 // full, not blocked: no one knows when a holder ends
	}
	var f fieldList
	var arr [128]byte
	b := arr[:0]
	if set != NoFields {
		consts := s.consts.get(s.name, d.Limit, s.window, s.conc)
		if set&XRateLimitFields != 0 {
			b = f.appendXRateLimit(b, names, s, consts)
		}
		if set&IETFFields != 0 {
			b = f.appendIETF(b, names, s, consts)
		}
	}
	if retry > 0 {
		b = strconv.AppendInt(b, retry, 10)
		f.addValue(names.RetryAfter, len(b))
	}
	if f.k > 0 {
		f.store(h, b)
	}
}

// appendXRateLimit adds X-RateLimit-Limit, -Remaining and -Reset to f,
// appending the values it formats to b.
func (f *fieldList) appendXRateLimit(b []byte, names *FieldNames, s *fieldState, consts *constValues) []byte {
	d := &s.d
	f.addFixed(names.XLimit, consts.xLimit)
	if d.Remaining >= 0 && d.Remaining < smallInts {
		f.addFixed(names.XRemaining, smallIntString(d.Remaining))
	} else {
		f.remS = len(b)
		b = strconv.AppendInt(b, int64(d.Remaining), 10)
		f.remE = len(b)
		f.addValue(names.XRemaining, len(b))
	}
	if s.conc {
		return b // no reset: permits come back when their holders end
	}
	// Reset: when the quota is full again, in Unix seconds rounded up.
	reset := s.now + int64(d.ResetAfter)
	secs := reset / int64(time.Second)
	if reset%int64(time.Second) > 0 {
		secs++
	}
	f.addFixed(names.XReset, s.consts.resetString(secs))
	return b
}

// appendIETF adds RateLimit-Policy and RateLimit to f, appending the
// RateLimit value to b.
func (f *fieldList) appendIETF(b []byte, names *FieldNames, s *fieldState, consts *constValues) []byte {
	d := &s.d
	f.addFixed(names.Policy, consts.policy)
	b = append(b, s.name...)
	b = append(b, ";r="...)
	if f.remE > 0 { // formatted for X-RateLimit-Remaining
		b = append(b, b[f.remS:f.remE]...)
	} else {
		b = strconv.AppendInt(b, int64(d.Remaining), 10)
	}
	// t is the draft's one meaning on every answer, admission or denial:
	// the seconds until the quota resets (is full again), the instant
	// X-RateLimit-Reset names; when a denied request can succeed is
	// Retry-After's to say.
	if !s.conc {
		b = append(b, ";t="...)
		b = strconv.AppendInt(b, ceilSeconds(d.ResetAfter), 10)
	}
	f.addValue(names.RateLimit, len(b))
	return b
}

// store sets f's fields on h, the formatted values sliced from one string
// holding b. The string and the []string backing array share one
// allocation when they fit a fieldBlock: the string's bytes are copied
// into the block's text and never written again, so the string is as
// immutable as any. Otherwise they are allocated apart.
func (f *fieldList) store(h map[string][]string, b []byte) {
	var vals []string
	var all string
	switch {
	case len(b) == 0: // every value cached
		vals = make([]string, f.k)
	case f.k <= len(fieldBlock3{}.vals) && len(b) <= len(fieldBlock3{}.text):
		blk := new(fieldBlock3)
		all, vals = inBlock(blk.text[:], blk.vals[:f.k], b)
	case f.k <= len(fieldBlock5{}.vals) && len(b) <= len(fieldBlock5{}.text):
		blk := new(fieldBlock5)
		all, vals = inBlock(blk.text[:], blk.vals[:f.k], b)
	case f.k <= len(fieldBlock6{}.vals) && len(b) <= len(fieldBlock6{}.text):
		blk := new(fieldBlock6)
		all, vals = inBlock(blk.text[:], blk.vals[:f.k], b)
	default:
		all = string(b)
		vals = make([]string, f.k)
	}
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

// inBlock copies b into text, a block's, and returns it as a string with
// vals, the same block's: the string is never written again.
func inBlock(text []byte, vals []string, b []byte) (string, []string) {
	return unsafe.String(&text[0], copy(text, b)), vals
}

// fieldBlock3, fieldBlock5 and fieldBlock6 hold the values of up to 3, 5
// and 6 fields and the text of the formatted ones in one allocation of 64,
// 128 and 144 bytes (size classes of the allocator, no larger than the two
// allocations they replace in the usual cases, as the garbage collector's
// pace follows bytes, not allocations). 3 are the X-RateLimit fields,
// whose one formatted value, Remaining, has at most 16 digits (limits are
// at most 2^53); 5 add the IETF fields; 6 add Retry-After to them.
type (
	fieldBlock3 struct {
		vals [3]string
		text [16]byte
	}
	fieldBlock5 struct {
		vals [5]string
		text [48]byte
	}
	fieldBlock6 struct {
		vals [6]string
		text [48]byte
	}
)

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
