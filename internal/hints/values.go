package hints

import (
	"net/http"
	"strings"
	"time"

	"github.com/rlkit/ratelimit/internal/sfv"
)

// thresholds returns where the readings of a reset value change, told by
// the time ref the answer was made at (its Date, or when it was received),
// so that a clock of any year reads every dialect: below secs (half of ref
// as Unix seconds: 28 years as a delay in 2026, 1998 as a Unix time) a
// value is a delay in seconds; below millis (500 times ref, or times
// 2^30 for a ref before 2004: the year 29,900 in seconds, 1997 in
// milliseconds) a Unix time in seconds; from it up a Unix time in
// milliseconds. A ref at or before 1970 reads every value below millis as
// a Unix time in seconds, which is then the delay itself.
func thresholds(ref time.Time) (secs, millis int64) {
	u := ref.Unix()
	return u / 2, max(u, MaxSeconds) * 500
}

// maxWhole is where the whole part of a reset value saturates: as a Unix
// time in milliseconds it is in the year 37648, beyond MaxSeconds from any
// time a server answers, and it is above every threshold of a year before
// 37648.
const maxWhole = 1 << 50

// RetryAfter reads a Retry-After value: delay-seconds ("120") or an HTTP
// date ("Wed, 21 Oct 2026 07:28:00 GMT", or another form http.ParseTime
// accepts) read against now. A date in the past gives 0; either form
// saturates at MaxSeconds. It reports false for an empty or malformed
// value (such as "-5" or "1.5"). Space around the value is ignored.
func RetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if isDigit(v[0]) {
		s, ok := uintValue(v, MaxSeconds)
		return time.Duration(s) * time.Second, ok
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return clampDuration(at.Sub(now)), true
}

// ResetValue reads a reset value as servers write X-RateLimit-Reset, from
// now: decimal seconds, perhaps with a fraction ("17", "64.57",
// "1470173023.123"), whose whole part tells what they count, by the time
// ref the answer was made at (its Date, else now): below half of ref as
// Unix seconds it is a delay; from there to below 500 times that (or 500
// times 2^30, for a ref before 2004) a Unix time in seconds (as GitHub
// sends); from there up a Unix time in milliseconds. A fraction finer
// than the millisecond is rounded up to one. A Unix time in the past
// gives 0; every reading saturates at MaxSeconds. It reports false for an
// empty or malformed value (signs, exponents, anything but digits and one
// '.' between digits). Space around the value is ignored.
func ResetValue(v string, now, ref time.Time) (time.Duration, bool) {
	whole, ms, ok := fixed(strings.TrimSpace(v))
	if !ok {
		return 0, false
	}
	secs, millis := thresholds(ref)
	var at time.Time
	switch {
	case whole < secs:
		return clampDuration(time.Duration(whole)*time.Second + time.Duration(ms)*time.Millisecond), true
	case whole < millis:
		at = time.Unix(whole, ms*int64(time.Millisecond))
	default:
		at = time.UnixMilli(whole)
		if ms > 0 { // a fraction of a millisecond, rounded up
			at = at.Add(time.Millisecond)
		}
	}
	return clampDuration(at.Sub(now)), true
}

// delayValue reads a delay in decimal seconds, perhaps with a fraction
// ("64.57", as X-RateLimit-Reset-After has it), rounded up to the
// millisecond and saturating at MaxSeconds.
func delayValue(v string) (time.Duration, bool) {
	whole, ms, ok := fixed(v)
	if !ok {
		return 0, false
	}
	if whole >= MaxSeconds {
		return maxDuration, true
	}
	return clampDuration(time.Duration(whole)*time.Second + time.Duration(ms)*time.Millisecond), true
}

// ExhaustedReset returns how long until the quota a RateLimit field
// describes is available again: the largest t parameter (whole seconds)
// among the exhausted items (r=0) of field lines such as
// `"burst";r=0;t=17, "daily";r=4000;t=80000`, saturating at MaxSeconds.
// Items with quota left, or without a valid r, are not waited for, however
// distant their t. It reports false when no exhausted item has a valid t.
//
// Unlike [Parse], it reads every member of every line whole, whatever the
// item's value (the policy name), and only r and t.
func ExhaustedReset(lines []string) (time.Duration, bool) {
	var best time.Duration
	found := false
	for _, line := range lines {
		for rest, more := line, true; more; {
			var item string
			item, rest, more = sfv.Cut(rest, ',')
			var t time.Duration
			hasT, exhausted := false, false
			_, params, hasParams := sfv.Cut(item, ';') // skip the item's value (the policy name)
			for hasParams {
				var p string
				p, params, hasParams = sfv.Cut(params, ';')
				k, v, ok := strings.Cut(strings.TrimSpace(p), "=")
				if !ok {
					continue
				}
				switch k {
				case "t":
					s, ok := uintValue(v, MaxSeconds)
					t, hasT = time.Duration(s)*time.Second, ok
				case "r":
					r, ok := uintValue(v, MaxSeconds)
					exhausted = ok && r == 0
				}
			}
			if hasT && exhausted {
				best = max(best, t)
				found = true
			}
		}
	}
	return best, found
}

// uintValue reads a non-empty string of decimal digits, saturating at
// limit (at most math.MaxInt64).
func uintValue(v string, limit int64) (int64, bool) {
	if v == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !isDigit(c) {
			return 0, false
		}
		if n < limit {
			d := int64(c - '0')
			if n > (limit-d)/10 {
				n = limit
			} else {
				n = n*10 + d
			}
		}
	}
	return n, true
}

// fixed reads decimal digits with an optional fraction, "12" or "12.345":
// the whole part saturating at maxWhole, and the fraction in milliseconds,
// rounded up (so within [0, 1000]).
func fixed(v string) (whole, ms int64, ok bool) {
	w, f, hasFrac := strings.Cut(v, ".")
	if whole, ok = uintValue(w, maxWhole); !ok {
		return 0, 0, false
	}
	if !hasFrac {
		return whole, 0, true
	}
	if f == "" {
		return 0, 0, false
	}
	for i := 0; i < len(f); i++ {
		if !isDigit(f[i]) {
			return 0, 0, false
		}
	}
	for i := 0; i < 3; i++ {
		ms *= 10
		if i < len(f) {
			ms += int64(f[i] - '0')
		}
	}
	if len(f) > 3 && strings.TrimRight(f[3:], "0") != "" {
		ms++ // a fraction of a millisecond left: rounded up
	}
	return whole, ms, true
}

// clampDuration bounds d to [0, MaxSeconds].
func clampDuration(d time.Duration) time.Duration {
	return min(max(d, 0), maxDuration)
}
