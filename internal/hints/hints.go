// Package hints reads what a server says about its rate limits, in every
// dialect servers speak, from the header fields of an HTTP answer or the
// metadata of a gRPC one:
//
//   - Retry-After: delay-seconds or an HTTP date.
//   - The IETF RateLimit field of draft-ietf-httpapi-ratelimit-headers-08
//     and later, a List of Items such as `"burst";r=0;t=3` (r remaining,
//     t seconds until reset; the a and w of the editor's copy after -11
//     are read as r and t), with RateLimit-Policy `"burst";q=5;w=3`.
//   - Draft-07's RateLimit Dictionary, `limit=5, remaining=0, reset=3`,
//     with RateLimit-Policy `5;w=3`.
//   - Draft-06 and earlier: RateLimit-Limit, RateLimit-Remaining and
//     RateLimit-Reset, each its own field.
//   - The legacy X-RateLimit-Remaining and X-RateLimit-Reset (Unix seconds
//     or milliseconds, or a delay), X-RateLimit-Reset-After (Discord), and
//     the X-Rate-Limit-* spelling.
//   - The LLM APIs': OpenAI's x-ratelimit-{limit,remaining,reset}-{requests,tokens}
//     (the reset a duration, "6m0s"), also sent by Azure OpenAI, Groq and
//     other gateways, and Anthropic's
//     anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}
//     (the reset an RFC 3339 time). Their token quotas are Items of unit
//     Tokens; all their quotas refill continuously (Item.Refills).
//
// Every dialect present in an answer contributes: none is preferred, and
// the caller treats each [Item] as a constraint of its own, the binding one
// winning. Servers may be wrong or hostile: nothing here panics, a value
// that is not what its dialect allows is dropped, numbers saturate rather
// than overflow, and the work per answer is bounded (the first 4 KiB of a
// field line, [MaxItems] members of a field).
package hints

import (
	"math"
	"net/http"
	"time"
)

// MaxItems is the most Items and Policies an answer gives, and the most
// members read of one field: later ones are ignored.
const MaxItems = 8

// MaxSeconds is where every duration read saturates (2^30 seconds, about
// 34 years), so that no arithmetic on it overflows.
const MaxSeconds = 1 << 30

// maxDuration is MaxSeconds as a duration.
const maxDuration = MaxSeconds * time.Second

// maxLine is how much of a field line is read: a member that does not end
// within it is dropped, a single value that does not is invalid.
const maxLine = 4 << 10

// Item is one quota the server reports on: Remaining units (of Unit) are
// left now, and the quota is restored Reset from when the answer was
// received. Remaining is -1 when the answer did not say (a reset without
// a remaining count, which tells only when to come back after a refusal),
// and is otherwise at least 0. Reset is within [0, MaxSeconds] seconds; 0
// means now (a reset time already past).
type Item struct {
	// Remaining is how many units the quota still admits, or -1 if the
	// answer did not say.
	Remaining int64
	// Reset is how long from the answer until the quota is restored.
	Reset time.Duration
	// Unit is what the quota counts: Requests, or (the LLM dialects'
	// token fields) Tokens.
	Unit Unit
	// Limit is the quota's own limit, stated beside it (the LLM
	// dialects), at least Remaining; 0 when the answer states none for it
	// (the other dialects state one for all: Hints.Limit).
	Limit int64
	// Refills reports that the quota refills continuously, Limit less
	// Remaining over Reset, as a token bucket whose reset is the time
	// until it is full: the LLM dialects, whose providers document their
	// limits so. The other dialects may be fixed windows, which restore
	// nothing before their reset.
	Refills bool
}

// Policy is one quota policy a server advertises: Quota units per Window.
// Quota is positive; Window is within (0, MaxSeconds] seconds.
type Policy struct {
	// Quota is how many units a window admits.
	Quota int64
	// Window is the length of the window.
	Window time.Duration
}

// Hints is what one answer says about the server's rate limits. The
// first NItems of Items and the first NPolicies of Policies are valid, in
// the order the answer gave them, dialect by dialect (RateLimit, then
// RateLimit-Remaining/-Reset, then X-RateLimit-*, then X-Rate-Limit-*;
// RateLimit-Policy, then RateLimit-Limit).
type Hints struct {
	// Items are the quotas the answer reports on.
	Items [MaxItems]Item
	// NItems is how many of Items are valid.
	NItems int
	// Policies are the quota policies the answer advertises.
	Policies [MaxItems]Policy
	// NPolicies is how many of Policies are valid.
	NPolicies int
	// RetryAfter is the answer's Retry-After, within [0, MaxSeconds]
	// seconds, when HasRetryAfter.
	RetryAfter time.Duration
	// HasRetryAfter reports whether the answer has a valid Retry-After.
	HasRetryAfter bool
	// Limit is the smallest quota any field of the answer states (a
	// policy's q, draft-07's limit, RateLimit-Limit, X-RateLimit-Limit),
	// whether or not it names a window; 0 when none does. The LLM
	// dialects' limits are not among them: each is its Item's Limit. A quota's reset
	// gives back Limit less the Remaining the answer reported.
	Limit int64
}

// Field names, in Go's canonical case (as textproto.CanonicalMIMEHeaderKey
// writes them), so that http.Header.Values looks them up without
// allocating; gRPC metadata getters compare names case-insensitively.
const (
	fieldRetryAfter       = "Retry-After"
	fieldRateLimit        = "Ratelimit"
	fieldRateLimitPolicy  = "Ratelimit-Policy"
	fieldRateLimitLimit   = "Ratelimit-Limit"
	fieldRateLimitRemain  = "Ratelimit-Remaining"
	fieldRateLimitReset   = "Ratelimit-Reset"
	fieldXRemaining       = "X-Ratelimit-Remaining"
	fieldXReset           = "X-Ratelimit-Reset"
	fieldXResetAfter      = "X-Ratelimit-Reset-After"
	fieldXHyphenRemaining = "X-Rate-Limit-Remaining"
	fieldXHyphenReset     = "X-Rate-Limit-Reset"
	fieldXLimit           = "X-Ratelimit-Limit"
	fieldXHyphenLimit     = "X-Rate-Limit-Limit"
	fieldDate             = "Date"
	// noField is the name of no field: a dialect without it.
	noField = ""
)

// Fields are the names Parse asks its getter for, so that a getter over
// lower-case keys (gRPC metadata) can map them once, ahead of time.
var Fields = [...]string{fieldRetryAfter, fieldRateLimit, fieldRateLimitPolicy, fieldRateLimitLimit,
	fieldRateLimitRemain, fieldRateLimitReset, fieldXRemaining, fieldXReset, fieldXResetAfter,
	fieldXHyphenRemaining, fieldXHyphenReset, fieldXLimit, fieldXHyphenLimit, fieldDate}

// Whether the parameters of a single-valued field are cut off before its
// value is read.
const (
	draft6Params = true  // draft-06 fields are Items whose parameters are ignored: "0;x" is 0
	legacyParams = false // X-RateLimit-* values are bare: "0;x" is invalid
)

// Parse reads the rate-limit fields of one answer, received at now. get
// returns all the lines of a field by name, such as http.Header.Values or
// metadata.MD.Get: it is called with the names in [Fields], in Go's
// canonical case ("Ratelimit-Remaining"), so it must compare names
// case-insensitively, as both do. now is what Unix times and HTTP dates are
// read against; whether a reset value is a Unix time or a delay is told by
// the answer's Date (an HTTP date, its first line) when it has a valid
// one, else by now (gRPC metadata has no Date), so that a server and a
// client on a clock of any year, such as a testing/synctest bubble's in
// 2000, read each other.
//
// The rules, dialect by dialect:
//
//   - Retry-After (its first line), as [RetryAfter] reads it.
//   - RateLimit: each member of the List (every line, at most MaxItems
//     members) whose first part holds a top-level '=' before any ';' is a
//     member of a draft-07 Dictionary; the others are draft-08 Items. An
//     Item is a String or Token with parameters r and t (or a and w, the
//     names proposed after draft-11), non-negative integers both required:
//     Item{r, t seconds}. When both names of one are given, the smaller
//     remaining and the later reset are kept. The Dictionary members of
//     the field make one item: reset required, remaining optional (-1 when
//     absent), limit checked when present.
//   - RateLimit-Policy and RateLimit-Limit: each member `"name";q=Q;w=W`
//     (draft-08 on) or `Q;w=W` (draft-06 and -07, and the policies older
//     drafts listed in RateLimit-Limit) with Q > 0 and W > 0 is
//     Policy{Q, W seconds}; a member without a window (RateLimit-Limit's
//     leading quota) gives none, but its quota counts for Limit.
//   - X-RateLimit-Limit and X-Rate-Limit-Limit (first line): Limit only.
//   - RateLimit-Remaining and RateLimit-Reset (draft-06, parameters
//     ignored), X-RateLimit-Remaining with X-RateLimit-Reset and
//     X-RateLimit-Reset-After, X-Rate-Limit-Remaining with
//     X-Rate-Limit-Reset: their first lines make one item each. Resets are
//     read as [ResetValue] reads them (Reset-After, always a delay, as
//     seconds with an optional fraction); of two valid resets the later is
//     kept. A remaining count that is present but unreadable, or one
//     without a valid reset, drops the item; a reset without a remaining
//     count gives Remaining -1.
//   - The LLM dialects, quota by quota (OpenAI's requests and tokens,
//     Anthropic's requests, tokens, input-tokens and output-tokens, in that
//     order), each the first lines of its three fields: an item of its
//     unit when the remaining count and the reset are valid and the limit,
//     if given, is positive and at least the remaining count; anything
//     else (the -1 and 0 some gateways send) gives no item, never a pause
//     or a burst. OpenAI's reset is a duration as Go prints one ("6m0s",
//     "12ms", "1m30.5s"; h, m, s, ms, us, ns) or bare seconds ("7.66");
//     Anthropic's an RFC 3339 time, read against the answer's Date (else
//     now), a time past giving 0. A reset beyond MaxSeconds drops the
//     quota. Input and output tokens are counted as Tokens. Anthropic
//     rounds its remaining token counts to the nearest thousand: 500 less
//     is read (at least 0), the least the true count may be.
//
// Numbers are unsigned decimal digits: signs, exponents and other text
// make a value invalid, and a member or parameter with an invalid value is
// dropped; parameters repeated take the last value. Counts saturate at
// math.MaxInt64 and durations at MaxSeconds. Parameter and Dictionary keys
// are lowercase, as RFC 8941 spells them; whitespace around members,
// parameters, keys and values is allowed. Commas and semicolons inside
// quoted strings split nothing.
//
// Parse allocates nothing itself.
func Parse(get func(name string) []string, now time.Time) Hints {
	var h Hints
	ref := now
	if v, st := single(get(fieldDate), legacyParams); st == present {
		if d, err := http.ParseTime(v); err == nil {
			ref = d
		}
	}
	if v, st := single(get(fieldRetryAfter), legacyParams); st == present {
		h.RetryAfter, h.HasRetryAfter = RetryAfter(v, now)
	}
	h.readRateLimit(get(fieldRateLimit))
	h.readPolicies(get(fieldRateLimitPolicy))
	h.readPolicies(get(fieldRateLimitLimit))
	h.readPair(get, fieldRateLimitRemain, fieldRateLimitReset, noField, draft6Params, now, ref)
	h.readPair(get, fieldXRemaining, fieldXReset, fieldXResetAfter, legacyParams, now, ref)
	h.readPair(get, fieldXHyphenRemaining, fieldXHyphenReset, noField, legacyParams, now, ref)
	for _, q := range llmQuotas {
		h.readLLM(get, q, ref)
	}
	for _, f := range [...]string{fieldXLimit, fieldXHyphenLimit} {
		if v, st := single(get(f), legacyParams); st == present {
			if n, ok := uintValue(v, math.MaxInt64); ok {
				h.noteLimit(n)
			}
		}
	}
	return h
}

// noteLimit keeps the smallest positive quota stated.
func (h *Hints) noteLimit(q int64) {
	if q > 0 && (h.Limit == 0 || q < h.Limit) {
		h.Limit = q
	}
}

func (h *Hints) addItem(remaining int64, reset time.Duration) {
	h.add(Item{Remaining: remaining, Reset: reset})
}

func (h *Hints) add(it Item) {
	if h.NItems < MaxItems {
		h.Items[h.NItems] = it
		h.NItems++
	}
}

func (h *Hints) addPolicy(quota int64, window time.Duration) {
	if h.NPolicies < MaxItems {
		h.Policies[h.NPolicies] = Policy{Quota: quota, Window: window}
		h.NPolicies++
	}
}
