package hints

import (
	"math"
	"time"
)

// Unit is what an [Item] counts.
type Unit uint8

const (
	// Requests is the unit of the quotas that count requests, one each:
	// every dialect but the LLM APIs' token fields.
	Requests Unit = iota
	// Tokens is the unit of the quotas that count the tokens an LLM API
	// charges (x-ratelimit-*-tokens, anthropic-ratelimit-*tokens-*).
	Tokens
)

// The fields of the LLM APIs, in Go's canonical case. OpenAI's (also
// sent by Groq, Azure OpenAI and other gateways):
// x-ratelimit-{limit,remaining,reset}-{requests,tokens}, the reset a
// duration such as "6m0s"; Anthropic's:
// anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset},
// the reset an RFC 3339 time.
const (
	fieldOALimitRequests  = "X-Ratelimit-Limit-Requests"
	fieldOARemainRequests = "X-Ratelimit-Remaining-Requests"
	fieldOAResetRequests  = "X-Ratelimit-Reset-Requests"
	fieldOALimitTokens    = "X-Ratelimit-Limit-Tokens"
	fieldOARemainTokens   = "X-Ratelimit-Remaining-Tokens"
	fieldOAResetTokens    = "X-Ratelimit-Reset-Tokens"

	fieldAnLimitRequests = "Anthropic-Ratelimit-Requests-Limit"
	fieldAnRemainRequest = "Anthropic-Ratelimit-Requests-Remaining"
	fieldAnResetRequests = "Anthropic-Ratelimit-Requests-Reset"
	fieldAnLimitTokens   = "Anthropic-Ratelimit-Tokens-Limit"
	fieldAnRemainTokens  = "Anthropic-Ratelimit-Tokens-Remaining"
	fieldAnResetTokens   = "Anthropic-Ratelimit-Tokens-Reset"
	fieldAnLimitInput    = "Anthropic-Ratelimit-Input-Tokens-Limit"
	fieldAnRemainInput   = "Anthropic-Ratelimit-Input-Tokens-Remaining"
	fieldAnResetInput    = "Anthropic-Ratelimit-Input-Tokens-Reset"
	fieldAnLimitOutput   = "Anthropic-Ratelimit-Output-Tokens-Limit"
	fieldAnRemainOutput  = "Anthropic-Ratelimit-Output-Tokens-Remaining"
	fieldAnResetOutput   = "Anthropic-Ratelimit-Output-Tokens-Reset"
)

// llmQuota names the three fields of one quota of an LLM dialect.
type llmQuota struct {
	limit, remaining, reset string
	unit                    Unit
	rfc3339                 bool  // the reset is an RFC 3339 time, else a duration
	rounding                int64 // the remaining count is rounded to the nearest 2·rounding
}

// anthropicRounding is half the unit Anthropic rounds its remaining token
// counts to ("rounded to the nearest thousand"): the count read is the
// least the true one may be.
const anthropicRounding = 500

// llmQuotas are the quotas of the LLM dialects, in the order Parse reads
// them.
var llmQuotas = [...]llmQuota{
	{fieldOALimitRequests, fieldOARemainRequests, fieldOAResetRequests, Requests, false, 0},
	{fieldOALimitTokens, fieldOARemainTokens, fieldOAResetTokens, Tokens, false, 0},
	{fieldAnLimitRequests, fieldAnRemainRequest, fieldAnResetRequests, Requests, true, 0},
	{fieldAnLimitTokens, fieldAnRemainTokens, fieldAnResetTokens, Tokens, true, anthropicRounding},
	{fieldAnLimitInput, fieldAnRemainInput, fieldAnResetInput, Tokens, true, anthropicRounding},
	{fieldAnLimitOutput, fieldAnRemainOutput, fieldAnResetOutput, Tokens, true, anthropicRounding},
}

// readLLM reads one quota of an LLM dialect: an item of q.unit when the
// remaining count and the reset are both valid, and the limit, when
// given, is positive and at least the remaining count. Anything else
// drops the quota (gateways send -1 and 0 for quotas they do not know).
// A remaining count the provider rounds is read as the least it may be.
func (h *Hints) readLLM(get func(string) []string, q llmQuota, ref time.Time) {
	rv, rs := single(get(q.remaining), legacyParams)
	if rs != present {
		return // the usual case, for every quota an answer does not report: one lookup
	}
	tv, ts := single(get(q.reset), legacyParams)
	lv, ls := single(get(q.limit), legacyParams)
	if ts != present || ls == invalid {
		return
	}
	rem, ok := uintValue(rv, math.MaxInt64)
	if !ok {
		return
	}
	rem = max(rem-q.rounding, 0)
	var limit int64
	if ls == present {
		if limit, ok = uintValue(lv, math.MaxInt64); !ok || limit == 0 || rem > limit {
			return
		}
	}
	var reset time.Duration
	if q.rfc3339 {
		at, ok := rfc3339(tv)
		if !ok {
			return
		}
		if reset = at.Sub(ref); reset < 0 {
			reset = 0 // a reset already past: restored now
		}
	} else if reset, ok = goDuration(tv); !ok {
		return
	}
	if reset > maxDuration {
		return // absurd: no quota resets decades from now
	}
	h.add(Item{Remaining: rem, Reset: reset, Unit: q.unit, Limit: limit, Refills: true})
}

// goDuration reads a reset as OpenAI writes it: a sequence of decimal
// numbers, each with an optional fraction and a unit (h, m, s, ms, us or
// µs, ns), as Go's time.Duration prints them ("6m0s", "12ms", "1m30.5s",
// "2m59.56s"), or bare decimal seconds ("60", "7.66", as some gateways
// send). It reports false for anything else (signs, an empty number, an
// unknown unit) and for a duration beyond MaxSeconds.
func goDuration(v string) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if last := v[len(v)-1]; isDigit(last) {
		whole, ms, ok := fixed(v)
		if !ok || whole >= MaxSeconds {
			return 0, false
		}
		return time.Duration(whole)*time.Second + time.Duration(ms)*time.Millisecond, true
	}
	var total time.Duration
	for v != "" {
		i := 0
		for i < len(v) && isDigit(v[i]) {
			i++
		}
		whole, frac := v[:i], ""
		v = v[i:]
		if v != "" && v[0] == '.' {
			j := 1
			for j < len(v) && isDigit(v[j]) {
				j++
			}
			frac, v = v[1:j], v[j:]
			if frac == "" {
				return 0, false
			}
		}
		if whole == "" && frac == "" {
			return 0, false
		}
		j := 0
		for j < len(v) && !isDigit(v[j]) && v[j] != '.' {
			j++
		}
		var u time.Duration
		switch v[:j] {
		case "h":
			u = time.Hour
		case "m":
			u = time.Minute
		case "s":
			u = time.Second
		case "ms":
			u = time.Millisecond
		case "us", "µs", "μs":
			u = time.Microsecond
		case "ns":
			u = time.Nanosecond
		default:
			return 0, false
		}
		v = v[j:]
		n := int64(0)
		if whole != "" {
			var ok bool
			if n, ok = uintValue(whole, math.MaxInt64); !ok {
				return 0, false
			}
		}
		if n > int64(maxDuration/u) {
			return 0, false
		}
		d := time.Duration(n) * u
		for k, scale := 0, u; k < len(frac); k++ {
			scale /= 10 // digits finer than a nanosecond add nothing
			d += time.Duration(frac[k]-'0') * scale
		}
		if total += d; total > maxDuration {
			return 0, false
		}
	}
	return total, true
}

// rfc3339 reads an RFC 3339 date-time, "2026-12-02T14:25:00Z" (or with a
// fraction of a second, or an offset such as "+01:00"; a lowercase t or z
// and a space for the T are accepted, as RFC 3339 allows). It allocates
// nothing.
func rfc3339(v string) (time.Time, bool) {
	if len(v) < len("2006-01-02T15:04:05Z") || v[4] != '-' || v[7] != '-' || v[13] != ':' || v[16] != ':' {
		return time.Time{}, false
	}
	if c := v[10]; c != 'T' && c != 't' && c != ' ' {
		return time.Time{}, false
	}
	num := func(s string) int {
		n, ok := uintValue(s, math.MaxInt64)
		if !ok {
			return -1
		}
		return int(n)
	}
	year, month, day := num(v[0:4]), num(v[5:7]), num(v[8:10])
	hour, minute, sec := num(v[11:13]), num(v[14:16]), num(v[17:19])
	if year < 0 || month < 1 || month > 12 || day < 1 || day > 31 || hour < 0 || hour > 23 ||
		minute < 0 || minute > 59 || sec < 0 || sec > 60 {
		return time.Time{}, false
	}
	rest := v[19:]
	var nsec int
	if rest != "" && rest[0] == '.' {
		i := 1
		for i < len(rest) && isDigit(rest[i]) {
			if i <= 9 {
				nsec = nsec*10 + int(rest[i]-'0')
			}
			i++
		}
		if i == 1 {
			return time.Time{}, false
		}
		for k := i; k <= 9; k++ {
			nsec *= 10
		}
		rest = rest[i:]
	}
	var offset int
	switch {
	case rest == "Z" || rest == "z":
	case len(rest) == 6 && (rest[0] == '+' || rest[0] == '-') && rest[3] == ':':
		oh, om := num(rest[1:3]), num(rest[4:6])
		if oh < 0 || oh > 23 || om < 0 || om > 59 {
			return time.Time{}, false
		}
		offset = (oh*60 + om) * 60
		if rest[0] == '-' {
			offset = -offset
		}
	default:
		return time.Time{}, false
	}
	t := time.Date(year, time.Month(month), day, hour, minute, sec, nsec, time.UTC)
	if t.Day() != day {
		return time.Time{}, false // February 30th and the like
	}
	return t.Add(-time.Duration(offset) * time.Second), true
}
