package hints

import (
	"math"
	"strconv"
	"strings"
	"testing"
	"time"
)

// FuzzParse: no answer panics Parse, and every answer gives hints within
// bounds: Remaining at least -1, Reset and RetryAfter within [0,
// MaxSeconds], every Policy a positive quota over a window within (0,
// MaxSeconds], at most MaxItems of each. A newline in a value splits it
// into field lines. Parse reads the same through an HTTP header and
// through gRPC-style metadata.
func FuzzParse(f *testing.F) {
	type seed struct{ ra, rl, pol, lim, rem, reset, xrem, xreset, xafter string }
	for _, sd := range []seed{
		{"3", `"5-in-3sec"; r=0; t=3; pk=:ZmFrZQ==:`, `"5-in-3sec"; q=5; w=3; pk=:ZmFrZQ==:`, "5", "0", "3", "0", unix(3 * s), "2.5"},
		{"", "limit=5, remaining=0, reset=3", "5;w=3", "5, 5;w=3", "", "", "", "", ""},
		{epoch.Add(time.Minute).Format("Mon, 02 Jan 2006 15:04:05 GMT"), `"burst";r=0;t=3, "daily";r=40;t=8000` + "\n" + `default;a=50;w=30`,
			`"burst";q=5;w=3, "daily";q=1000;w=86400`, "", "59", unix(60 * s), "4987", unix(30*time.Minute) + ".123", "64.57"},
		{"-1", `"a,b;r=9";r=-1;t=3, "\"";r=0;t=99999999999999999999, ?1;r=0`, `0;w=0, "x";q=1e3;w=NaN`, "+5", "x", "1e9", "0;x", "1767225600000.5", "-0.5"},
		{strings.Repeat("9", 5000), `"` + strings.Repeat(",", 5000), strings.Repeat("1;w=1,", 20), "", strings.Repeat("1", 30), "0.0000001", "", "99999999999999999999.999", "."},
		{"", strings.Repeat(`"a";r=0;t=1,`, 12) + "\n\n\n", "", "", "", "", "", "", ""},
		{"2026-01-01T00:00:03Z", "", "", "150000", "149984", "6m0s", "59", "2026-01-01T00:01:00.5+01:00", "1m30.5s"},
		{"", "", "", "-1", "-1", "0", "0", "0", "0s"},
	} {
		f.Add(sd.ra, sd.rl, sd.pol, sd.lim, sd.rem, sd.reset, sd.xrem, sd.xreset, sd.xafter, int64(0))
	}
	f.Fuzz(func(t *testing.T, ra, rl, pol, lim, rem, reset, xrem, xreset, xafter string, nowSecs int64) {
		var kv []string
		for _, f := range []struct{ name, v string }{
			{"Retry-After", ra}, {"RateLimit", rl}, {"RateLimit-Policy", pol}, {"RateLimit-Limit", lim},
			{"RateLimit-Remaining", rem}, {"RateLimit-Reset", reset}, {"X-RateLimit-Remaining", xrem},
			{"X-RateLimit-Reset", xreset}, {"X-RateLimit-Reset-After", xafter},
			{"X-Rate-Limit-Remaining", xrem}, {"X-Rate-Limit-Reset", xafter},
			{"X-Ratelimit-Limit-Tokens", lim}, {"X-Ratelimit-Remaining-Tokens", rem}, {"X-Ratelimit-Reset-Tokens", reset},
			{"X-Ratelimit-Remaining-Requests", xrem}, {"X-Ratelimit-Reset-Requests", xafter},
			{"Anthropic-Ratelimit-Tokens-Limit", lim}, {"Anthropic-Ratelimit-Tokens-Remaining", xrem},
			{"Anthropic-Ratelimit-Tokens-Reset", xreset}, {"Anthropic-Ratelimit-Requests-Remaining", rem},
			{"Anthropic-Ratelimit-Requests-Reset", ra},
		} {
			if f.v == "" {
				continue
			}
			for _, line := range strings.Split(f.v, "\n") {
				kv = append(kv, f.name, line)
			}
		}
		now := epoch.Add(time.Duration(nowSecs%(1<<36)) * time.Second)
		h := Parse(header(kv...), now)
		if h.NItems < 0 || h.NItems > MaxItems || h.NPolicies < 0 || h.NPolicies > MaxItems {
			t.Fatalf("%d items, %d policies", h.NItems, h.NPolicies)
		}
		for _, it := range h.Items[:h.NItems] {
			if it.Remaining < -1 || it.Reset < 0 || it.Reset > maxDuration || it.Unit > Tokens ||
				it.Limit < 0 || (it.Limit > 0 && it.Remaining > it.Limit) || (it.Unit == Tokens && it.Remaining < 0) {
				t.Fatalf("item %+v of %q", it, kv)
			}
		}
		for _, p := range h.Policies[:h.NPolicies] {
			if p.Quota <= 0 || p.Window <= 0 || p.Window > maxDuration {
				t.Fatalf("policy %+v of %q", p, kv)
			}
		}
		if h.RetryAfter < 0 || h.RetryAfter > maxDuration || (!h.HasRetryAfter && h.RetryAfter != 0) {
			t.Fatalf("retry after %v, %v of %q", h.RetryAfter, h.HasRetryAfter, kv)
		}
		if md := Parse(metadata(kv...), now); md != h {
			t.Fatalf("metadata %+v, header %+v of %q", md, h, kv)
		}
		for _, v := range []string{ra, rl, pol, rem, reset, xreset, xafter} {
			if d, ok := ResetValue(v, now, now); ok && (d < 0 || d > maxDuration) {
				t.Fatalf("ResetValue(%q) = %v", v, d)
			}
			if d, ok := RetryAfter(v, now); ok && (d < 0 || d > maxDuration) {
				t.Fatalf("RetryAfter(%q) = %v", v, d)
			}
			if d, ok := ExhaustedReset(strings.Split(v, "\n")); ok && (d < 0 || d > maxDuration) {
				t.Fatalf("ExhaustedReset(%q) = %v", v, d)
			}
		}
	})
}

// FuzzParseWritten: what a correct server writes, in every dialect, Parse
// reads back exactly, whatever the policy name (written as an RFC 8941
// String, with its quotes and backslashes escaped) and the whitespace
// around members and parameters.
func FuzzParseWritten(f *testing.F) {
	f.Add(`5-in-3sec`, uint64(0), uint64(3), uint64(5), " ")
	f.Add(`a,b;r=9;t=9"\`, uint64(1<<63), uint64(1<<40), uint64(1), "\t")
	f.Add(``, uint64(7), uint64(0), uint64(1<<62), "")
	f.Fuzz(func(t *testing.T, name string, r, secs, quota uint64, ows string) {
		if strings.Trim(ows, " \t") != "" || len(name)+len(ows) > 1000 {
			return // the line must stay within the 4 KiB read
		}
		for i := 0; i < len(name); i++ {
			if name[i] < 0x20 || name[i] > 0x7e {
				return
			}
		}
		str := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(name) + `"`
		rs, ts, qs := strconv.FormatUint(r, 10), strconv.FormatUint(secs, 10), strconv.FormatUint(quota, 10)
		rem := int64(min(r, math.MaxInt64))
		reset := time.Duration(min(secs, MaxSeconds)) * time.Second
		q := int64(min(quota, math.MaxInt64))
		sep := ows + ";" + ows
		comma := ows + "," + ows
		got := Parse(header(
			"RateLimit", ows+str+sep+"r="+rs+sep+"t="+ts+sep+"pk=:ZmFrZQ==:"+comma+str+sep+"a="+rs+sep+"w="+ts+ows,
			"RateLimit", "limit="+qs+comma+"remaining="+rs+comma+"reset="+ts,
			"RateLimit-Policy", str+sep+"q="+qs+sep+"w="+ts+sep+`qu="requests"`+comma+qs+sep+"w="+ts,
			"RateLimit-Remaining", rs, "RateLimit-Reset", ts,
		), epoch)
		want := Hints{NItems: 4, HasRetryAfter: false}
		for i := range 3 {
			want.Items[i] = Item{Remaining: rem, Reset: reset}
		}
		// Draft-06's reset is a delay only below half of now.
		want.Items[3] = Item{Remaining: rem, Reset: reset}
		if delays, _ := thresholds(epoch); secs >= uint64(delays) {
			want.Items[3].Reset, _ = ResetValue(ts, epoch, epoch)
		}
		want.Limit = q // draft-07's limit and both policies state it; 0 is no limit
		if quota > 0 && secs > 0 {
			want.NPolicies = 2
			want.Policies[0] = Policy{Quota: q, Window: reset}
			want.Policies[1] = want.Policies[0]
		}
		if got != want {
			t.Fatalf("got  %+v\nwant %+v", got, want)
		}
	})
}
