package hints

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// header returns the getter of an HTTP header holding the given name and
// value pairs, each pair one line (added in order).
func header(kv ...string) func(string) []string {
	h := http.Header{}
	for i := 0; i+1 < len(kv); i += 2 {
		h.Add(kv[i], kv[i+1])
	}
	return h.Values
}

// metadata returns a getter that behaves as gRPC's metadata.MD.Get: keys
// are stored lowercase and the name asked for is lowercased.
func metadata(kv ...string) func(string) []string {
	md := map[string][]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		k := strings.ToLower(kv[i])
		md[k] = append(md[k], kv[i+1])
	}
	return func(name string) []string { return md[strings.ToLower(name)] }
}

// want is what Parse should return, as slices.
type want struct {
	items    []Item
	policies []Policy
	retry    time.Duration
	hasRetry bool
}

// items returns the items of remaining, reset pairs: items(0, 3*s, 5, 0).
func items(rt ...any) []Item {
	var is []Item
	for i := 0; i+1 < len(rt); i += 2 {
		is = append(is, Item{Remaining: int64(rt[i].(int)), Reset: duration(rt[i+1])})
	}
	return is
}

// policies returns the policies of quota, window pairs.
func policies(qw ...any) []Policy {
	var ps []Policy
	for i := 0; i+1 < len(qw); i += 2 {
		ps = append(ps, Policy{Quota: int64(qw[i].(int)), Window: duration(qw[i+1])})
	}
	return ps
}

// duration is d, a time.Duration or the untyped constant 0.
func duration(d any) time.Duration {
	if d == 0 {
		return 0
	}
	return d.(time.Duration)
}

func check(t *testing.T, h Hints, w want, msgAndArgs ...any) {
	t.Helper()
	var gotItems []Item
	if h.NItems > 0 {
		gotItems = h.Items[:h.NItems]
	}
	var gotPolicies []Policy
	if h.NPolicies > 0 {
		gotPolicies = h.Policies[:h.NPolicies]
	}
	assert.Equal(t, w.items, gotItems, msgAndArgs...)
	assert.Equal(t, w.policies, gotPolicies, msgAndArgs...)
	assert.Equal(t, w.hasRetry, h.HasRetryAfter, msgAndArgs...)
	assert.Equal(t, w.retry, h.RetryAfter, msgAndArgs...)
	for i := h.NItems; i < MaxItems; i++ {
		assert.Zero(t, h.Items[i], msgAndArgs...)
	}
	for i := h.NPolicies; i < MaxItems; i++ {
		assert.Zero(t, h.Policies[i], msgAndArgs...)
	}
}

const s = time.Second

type parseCase struct {
	name   string
	fields []string // name, value pairs; a name repeated is another line
	want   want
}

func runCases(t *testing.T, cases []parseCase) {
	t.Helper()
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			check(t, Parse(header(c.fields...), epoch), c.want, "HTTP %q", c.fields)
			check(t, Parse(metadata(c.fields...), epoch), c.want, "metadata %q", c.fields)
		})
	}
}

// TestParseDialects: every dialect as real servers send it.
func TestParseDialects(t *testing.T) {
	t.Parallel()
	runCases(t, []parseCase{
		{"none", nil, want{}},
		{"unrelated fields", []string{"Content-Type", "text/plain", "X-RateLimit-Limit", "60"}, want{}},
		{"retry-after seconds", []string{"Retry-After", "120"}, want{retry: 120 * s, hasRetry: true}},
		{"retry-after date", []string{"Retry-After", epoch.Add(90 * s).Format(http.TimeFormat)}, want{retry: 90 * s, hasRetry: true}},
		{"retry-after past date", []string{"Retry-After", epoch.Add(-time.Hour).Format(http.TimeFormat)}, want{hasRetry: true}},
		{"retry-after first line", []string{"Retry-After", "3", "Retry-After", "9"}, want{retry: 3 * s, hasRetry: true}},
		// express-rate-limit, limit 5 per 3 s, fifth request.
		{"express draft-6", []string{
			"RateLimit-Policy", "5;w=3", "RateLimit-Limit", "5", "RateLimit-Remaining", "0", "RateLimit-Reset", "3",
		}, want{items: items(0, 3*s), policies: policies(5, 3*s)}},
		{"express draft-7", []string{
			"RateLimit-Policy", "5;w=3", "RateLimit", "limit=5, remaining=0, reset=3",
		}, want{items: items(0, 3*s), policies: policies(5, 3*s)}},
		{"express draft-8", []string{
			"RateLimit-Policy", `"5-in-3sec"; q=5; w=3; pk=:ZmFrZQ==:`, "RateLimit", `"5-in-3sec"; r=0; t=3; pk=:ZmFrZQ==:`,
		}, want{items: items(0, 3*s), policies: policies(5, 3*s)}},
		{"express draft-8 stacked limiters", []string{
			"RateLimit-Policy", `"5-in-3sec"; q=5; w=3; pk=:MTJjYTE3YjQ5YWYy:`, "RateLimit-Policy", `"100-in-1hr"; q=100; w=3600; pk=:MTJjYTE3YjQ5YWYy:`,
			"RateLimit", `"5-in-3sec"; r=0; t=3`, "RateLimit", `"100-in-1hr"; r=57; t=1800`,
		}, want{items: items(0, 3*s, 57, 1800*s), policies: policies(5, 3*s, 100, 3600*s)}},
		{"express legacy", []string{
			"X-RateLimit-Limit", "5", "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", unix(3 * s),
		}, want{items: items(0, 3*s)}},
		// The drafts' own examples.
		{"draft-06 policies", []string{
			"RateLimit-Limit", "100", "RateLimit-Remaining", "50", "RateLimit-Reset", "50",
			"RateLimit-Policy", "10;w=1, 50;w=60, 1000;w=3600, 5000;w=86400",
		}, want{items: items(50, 50*s), policies: policies(10, 1*s, 50, 60*s, 1000, 3600*s, 5000, 86400*s)}},
		{"draft-03 policies in RateLimit-Limit", []string{
			"RateLimit-Limit", "5, 5;w=3, 100;w=60", "RateLimit-Remaining", "2", "RateLimit-Reset", "1",
		}, want{items: items(2, 1*s), policies: policies(5, 3*s, 100, 60*s)}},
		{"draft-07 without remaining", []string{"RateLimit", "limit=100, reset=5"}, want{items: items(-1, 5*s)}},
		{"draft-08 policies", []string{
			"RateLimit-Policy", `"burst";q=100;w=60,"daily";q=1000;w=86400`, "RateLimit", `"default";r=50;t=30`,
		}, want{items: items(50, 30*s), policies: policies(100, 60*s, 1000, 86400*s)}},
		{"draft-09 quota unit and partition key", []string{
			"RateLimit-Policy", `"peruser";q=65535;qu="content-bytes";w=10;pk=:sdfjLJUOUH==:`,
			"RateLimit", `"peruser";r=999;t=7;pk=:dHJpYWwxMjEzMjM=:`,
		}, want{items: items(999, 7*s), policies: policies(65535, 10*s)}},
		{"draft-10", []string{
			"RateLimit-Policy", `"hour";q=1000;w=3600, "day";q=5000;w=86400`, "RateLimit", `"day";r=100;t=36000`,
		}, want{items: items(100, 36000*s), policies: policies(1000, 3600*s, 5000, 86400*s)}},
		{"draft-11 429", []string{"Retry-After", "5", "RateLimit", `"default";r=0;t=5`},
			want{items: items(0, 5*s), retry: 5 * s, hasRetry: true}},
		{"several items in one line", []string{"RateLimit", `"burst";r=0;t=3, "daily";r=40;t=8000`},
			want{items: items(0, 3*s, 40, 8000*s)}},
		// The renames proposed after draft-11: a for r, w for t, Token ids.
		{"renamed parameters", []string{
			"RateLimit-Policy", `burst;q=100;w=60,"daily";q=1000;w=86400`, "RateLimit", `default;a=50;w=30`,
		}, want{items: items(50, 30*s), policies: policies(100, 60*s, 1000, 86400*s)}},
		{"renamed, cost and partition key", []string{"RateLimit", `"api";a=99;w=60;c=1;pk=:R0VUH2FsaWNl:`},
			want{items: items(99, 60*s)}},
		{"old and new names: smaller remaining, later reset", []string{"RateLimit", `"x";r=5;a=3;t=10;w=20, "y";r=1;a=4;t=30;w=2`},
			want{items: items(3, 20*s, 1, 30*s)}},
		{"old and new names mixed", []string{"RateLimit", `"x";a=5;t=10, "y";r=6;w=11`},
			want{items: items(5, 10*s, 6, 11*s)}},
		// Vendors.
		{"GitHub", []string{
			"X-RateLimit-Limit", "60", "X-RateLimit-Remaining", "0", "X-RateLimit-Used", "60",
			"X-RateLimit-Reset", unix(30 * time.Minute), "X-RateLimit-Resource", "core",
		}, want{items: items(0, 30*time.Minute)}},
		{"GitHub, reset past", []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", unix(-5 * s)},
			want{items: items(0, 0)}},
		{"Twitter", []string{
			"X-Rate-Limit-Limit", "15", "X-Rate-Limit-Remaining", "14", "X-Rate-Limit-Reset", unix(15 * time.Minute),
		}, want{items: items(14, 15*time.Minute)}},
		{"Discord", []string{
			"X-RateLimit-Limit", "5", "X-RateLimit-Remaining", "0",
			"X-RateLimit-Reset", unix(64*s) + ".570", "X-RateLimit-Reset-After", "64.57",
			"X-RateLimit-Bucket", "abcd1234",
		}, want{items: items(0, 64570*time.Millisecond)}},
		{"Discord, the later reset", []string{
			"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", unix(64 * s), "X-RateLimit-Reset-After", "70.5",
		}, want{items: items(0, 70500*time.Millisecond)}},
		{"Discord, reset-after alone", []string{"X-RateLimit-Remaining", "3", "X-RateLimit-Reset-After", "1.2345"},
			want{items: items(3, 1235*time.Millisecond)}},
		{"Discord, reset-after invalid, reset valid", []string{
			"X-RateLimit-Remaining", "3", "X-RateLimit-Reset", "4", "X-RateLimit-Reset-After", "x",
		}, want{items: items(3, 4*s)}},
		{"GitLab epoch reset", []string{
			"RateLimit-Limit", "60", "RateLimit-Remaining", "59", "RateLimit-Reset", unix(60 * s),
			"RateLimit-ResetTime", epoch.Add(60 * s).Format(http.TimeFormat), "RateLimit-Observed", "1",
		}, want{items: items(59, 60*s)}},
		{"Unix milliseconds", []string{"X-Rate-Limit-Remaining", "0", "X-Rate-Limit-Reset", unix(2*s) + "500"},
			want{items: items(0, 2500*time.Millisecond)}},
		{"reset without remaining", []string{"X-RateLimit-Reset", "17"}, want{items: items(-1, 17*s)}},
		{"draft-6 reset without remaining", []string{"RateLimit-Reset", "4"}, want{items: items(-1, 4*s)}},
		{"draft-6 parameters ignored", []string{"RateLimit-Remaining", "7;x=1", "RateLimit-Reset", "4 ; y"},
			want{items: items(7, 4*s)}},
		{"draft-6 fractional reset", []string{"RateLimit-Remaining", "7", "RateLimit-Reset", "0.25"},
			want{items: items(7, 250*time.Millisecond)}},
		{"OWS around single values", []string{"X-RateLimit-Remaining", " 2\t", "X-RateLimit-Reset", "\t9 "},
			want{items: items(2, 9*s)}},
		// Every dialect at once: every item kept, in dialect order.
		{"mixed dialects", []string{
			"Retry-After", "4",
			"RateLimit", `"burst";r=0;t=3, limit=100, remaining=10, reset=60`,
			"RateLimit", `"daily";r=40;t=8000`,
			"RateLimit-Policy", `"burst";q=5;w=3, 100;w=60`,
			"RateLimit-Remaining", "1", "RateLimit-Reset", "2",
			"X-RateLimit-Remaining", "3", "X-RateLimit-Reset", unix(5 * s),
			"X-Rate-Limit-Remaining", "6", "X-Rate-Limit-Reset", "7",
		}, want{
			items:    items(0, 3*s, 40, 8000*s, 10, 60*s, 1, 2*s, 3, 5*s, 6, 7*s),
			policies: policies(5, 3*s, 100, 60*s),
			retry:    4 * s, hasRetry: true,
		}},
	})
}

// TestParseHostile: values that are not what their dialect allows are
// dropped, one member or item at a time; huge ones saturate.
func TestParseHostile(t *testing.T) {
	t.Parallel()
	maxRem := int(math.MaxInt64)
	huge := "99999999999999999999999"
	cases := []parseCase{
		// Numbers.
		{"negative", []string{"RateLimit", `"a";r=-1;t=3, "b";r=1;t=-3, "c";r=1;t=3`}, want{items: items(1, 3*s)}},
		{"signs", []string{"RateLimit", `"a";r=+1;t=3, "b";r=1;t=+3`}, want{}},
		{"exponent", []string{"RateLimit", `"a";r=1e3;t=3, "b";r=1;t=3e0`}, want{}},
		{"decimal", []string{"RateLimit", `"a";r=1.0;t=3, "b";r=1;t=3.5`}, want{}},
		{"NaN and infinity", []string{"RateLimit", `"a";r=NaN;t=3, "b";r=1;t=Inf, "c";r=1;t=infinity`}, want{}},
		{"hex", []string{"RateLimit", `"a";r=0x10;t=3`}, want{}},
		{"non-ASCII digits", []string{"RateLimit", `"a";r=١;t=3`}, want{}},
		{"string value", []string{"RateLimit", `"a";r="0";t=3`}, want{}},
		{"boolean value", []string{"RateLimit", `"a";r;t=3, "b";r=?0;t=3`}, want{}},
		{"empty value", []string{"RateLimit", `"a";r=;t=3`}, want{}},
		{"huge numbers saturate", []string{"RateLimit", `"a";r=` + huge + `;t=` + huge},
			want{items: []Item{{Remaining: math.MaxInt64, Reset: maxDuration}}}},
		{"huge policy saturates", []string{"RateLimit-Policy", `"a";q=` + huge + `;w=` + huge + `, ` + huge + `;w=1`},
			want{policies: policies(maxRem, maxDuration, maxRem, 1*s)}},
		{"leading zeros", []string{"RateLimit", `"a";r=007;t=0003`}, want{items: items(7, 3*s)}},
		{"zero reset kept", []string{"RateLimit", `"a";r=0;t=0`}, want{items: items(0, 0)}},
		// Parameters.
		{"missing r or t", []string{"RateLimit", `"a";t=3, "b";r=0, "c"`}, want{}},
		{"uppercase keys", []string{"RateLimit", `"a";R=0;T=3, "b";r=0;T=3`}, want{}},
		{"repeated: last wins", []string{"RateLimit", `"a";r=5;r=0;t=9;t=3`}, want{items: items(0, 3*s)}},
		{"repeated: last valid wins", []string{"RateLimit", `"a";r=x;r=0;t=3`}, want{items: items(0, 3*s)}},
		{"repeated: last invalid drops", []string{"RateLimit", `"a";r=0;r=x;t=3`}, want{}},
		{"unknown parameters ignored", []string{"RateLimit", `"a";r=0;zz="x,y;z";pk=:Zm9v:;qu="requests";t=3;q=9`},
			want{items: items(0, 3*s)}},
		{"OWS", []string{"RateLimit", " \t\"a\" ; r = 0 ;\tt=3 \t,\t \"b\";r=1;t=2  "}, want{items: items(0, 3*s, 1, 2*s)}},
		{"empty parameters", []string{"RateLimit", `"a";;r=0;;t=3;`}, want{items: items(0, 3*s)}},
		// Bare items.
		{"quoted comma and semicolon", []string{"RateLimit", `"a,b;r=9;t=9";r=0;t=3, "c";r=1;t=2`},
			want{items: items(0, 3*s, 1, 2*s)}},
		{"escaped quote", []string{"RateLimit", `"a\",r=9;t=9\\";r=0;t=3, "b";r=1;t=2`},
			want{items: items(0, 3*s, 1, 2*s)}},
		{"quoted equals is not a dictionary", []string{"RateLimit", `"reset=9";r=0;t=3`}, want{items: items(0, 3*s)}},
		{"unterminated quote swallows the rest", []string{"RateLimit", `"b";r=1;t=2, "oops;r=0;t=1, "c";r=3;t=4`},
			want{items: items(1, 2*s)}},
		{"bad escape", []string{"RateLimit", `"a\x";r=0;t=3`}, want{}},
		{"control character in string", []string{"RateLimit", "\"a\x01\";r=0;t=3"}, want{}},
		{"text after string", []string{"RateLimit", `"a"b;r=0;t=3`}, want{}},
		{"integer id", []string{"RateLimit", `5;r=0;t=3`}, want{}},
		{"no id", []string{"RateLimit", `;r=0;t=3`}, want{}},
		{"byte sequence id", []string{"RateLimit", `:Zm9v:;r=0;t=3`}, want{}},
		{"boolean id", []string{"RateLimit", `?1;r=0;t=3`}, want{}},
		{"bad token", []string{"RateLimit", `a@b;r=0;t=3, -a;r=0;t=3`}, want{}},
		{"token ids", []string{"RateLimit", `*a;r=0;t=3, a/b:c.d;r=1;t=2`}, want{items: items(0, 3*s, 1, 2*s)}},
		{"empty members", []string{"RateLimit", `,, "a";r=0;t=3 ,`}, want{items: items(0, 3*s)}},
		// Draft-07 Dictionary.
		{"dictionary negative", []string{"RateLimit", "limit=5, remaining=-1, reset=3"}, want{}},
		{"dictionary bad limit", []string{"RateLimit", "limit=x, remaining=0, reset=3"}, want{}},
		{"dictionary no reset", []string{"RateLimit", "limit=5, remaining=0"}, want{}},
		{"dictionary uppercase", []string{"RateLimit", "LIMIT=5, REMAINING=0, RESET=3"}, want{}},
		{"dictionary last wins", []string{"RateLimit", "limit=5, remaining=4, reset=3, reset=9", "RateLimit", "remaining=0"},
			want{items: items(0, 9*s)}},
		{"dictionary member parameters ignored", []string{"RateLimit", "remaining=1;x=2, reset=3;y"}, want{items: items(1, 3*s)}},
		{"dictionary boolean", []string{"RateLimit", "remaining, reset=3"}, want{items: items(-1, 3*s)}},
		{"dictionary unknown keys", []string{"RateLimit", `policy="a,b", reset=3, x=y`}, want{items: items(-1, 3*s)}},
		// Policies.
		{"policy zero quota or window", []string{"RateLimit-Policy", `"a";q=0;w=3, "b";q=5;w=0, 0;w=3, 5;w=0`}, want{}},
		{"policy missing quota or window", []string{"RateLimit-Policy", `"a";w=3, "b";q=5, 5`}, want{}},
		{"policy bad numbers", []string{"RateLimit-Policy", `"a";q=-5;w=3, "b";q=5;w=3.0, 5;w=x, -5;w=3, 5.0;w=3`}, want{}},
		{"policy integer id beats q", []string{"RateLimit-Policy", `5;q=9;w=3`}, want{policies: policies(5, 3*s)}},
		{"policy last wins", []string{"RateLimit-Policy", `"a";q=1;w=1;q=5;w=3`}, want{policies: policies(5, 3*s)}},
		{"policy bad id", []string{"RateLimit-Policy", `q=5;w=3, ;q=5;w=3, :Zm9v:;q=5;w=3`}, want{}},
		// Single values.
		{"remaining unreadable drops the item", []string{"X-RateLimit-Remaining", "lots", "X-RateLimit-Reset", "9"}, want{}},
		{"remaining negative", []string{"X-RateLimit-Remaining", "-1", "X-RateLimit-Reset", "9"}, want{}},
		{"remaining without reset", []string{"X-RateLimit-Remaining", "3"}, want{}},
		{"remaining with bad reset", []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "-9"}, want{}},
		{"legacy parameters are not", []string{"X-RateLimit-Remaining", "0;x", "X-RateLimit-Reset", "9"}, want{}},
		{"legacy list is not", []string{"X-RateLimit-Remaining", "0, 1", "X-RateLimit-Reset", "9"}, want{}},
		{"legacy first line", []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Remaining", "x", "X-RateLimit-Reset", "9"},
			want{items: items(0, 9*s)}},
		{"empty remaining is absent", []string{"X-RateLimit-Remaining", " ", "X-RateLimit-Reset", "9"}, want{items: items(-1, 9*s)}},
		{"reset exponent", []string{"X-RateLimit-Reset", "1e9"}, want{}},
		{"reset NaN", []string{"X-RateLimit-Reset", "NaN", "X-RateLimit-Reset-After", "Infinity"}, want{}},
		{"reset-after negative", []string{"X-RateLimit-Reset-After", "-1.5"}, want{}},
		{"reset-after huge", []string{"X-RateLimit-Reset-After", huge + ".5"}, want{items: items(-1, maxDuration)}},
		{"reset-after is not an epoch", []string{"X-RateLimit-Reset-After", unix(0)}, want{items: items(-1, maxDuration)}},
		{"huge remaining", []string{"X-RateLimit-Remaining", huge, "X-RateLimit-Reset", huge},
			want{items: []Item{{Remaining: math.MaxInt64, Reset: maxDuration}}}},
		{"retry-after garbage", []string{"Retry-After", "-5", "RateLimit", `"a";r=0;t=3`}, want{items: items(0, 3*s)}},
		{"retry-after fraction", []string{"Retry-After", "1.5"}, want{}},
		{"retry-after huge", []string{"Retry-After", huge}, want{retry: maxDuration, hasRetry: true}},
	}
	for _, v := range []string{"-1", "+1", "1e3", "NaN", "0x1", "1.5", "1,5", "١", "abc", `"1"`} {
		cases = append(cases, parseCase{"draft-6 remaining " + v, []string{"RateLimit-Remaining", v, "RateLimit-Reset", "3"}, want{}})
	}
	runCases(t, cases)
}

// TestParseBounds: at most MaxItems items, policies and members per field;
// at most the first 4 KiB of a field line, and no member or value that
// runs past them.
func TestParseBounds(t *testing.T) {
	t.Parallel()
	var many, manyPolicies []string
	var wantItems []Item
	var wantPolicies []Policy
	for i := range 12 {
		many = append(many, `"p`+itoa(i)+`";r=`+itoa(i)+`;t=`+itoa(i+1))
		manyPolicies = append(manyPolicies, itoa(i+1)+`;w=`+itoa(i+1))
		if i < MaxItems {
			wantItems = append(wantItems, Item{Remaining: int64(i), Reset: time.Duration(i+1) * s})
			wantPolicies = append(wantPolicies, Policy{Quota: int64(i + 1), Window: time.Duration(i+1) * s})
		}
	}
	eight := strings.Join(many[:MaxItems], ", ")
	// cutAt pads a line with one valid member so that what follows starts
	// at byte n.
	cutAt := func(n int) string {
		head := `"`
		tail := `";r=1;t=1, `
		return head + strings.Repeat("x", n-len(head)-len(tail)) + tail
	}
	long := func(v string) string { return strings.Repeat("0", maxLine-len(v)+1) + v } // maxLine+1 bytes
	runCases(t, []parseCase{
		{"items truncated", []string{"RateLimit", strings.Join(many, ", ")}, want{items: wantItems}},
		{"items truncated across lines", append(interleave("RateLimit", many), "RateLimit-Policy", strings.Join(manyPolicies, ", ")),
			want{items: wantItems, policies: wantPolicies}},
		{"items full before other dialects", []string{"RateLimit", eight, "X-RateLimit-Remaining", "0", "X-RateLimit-Reset", "5"},
			want{items: wantItems}},
		{"members bounded", []string{"RateLimit", `x, x, x, x, x, x, x, x, "a";r=0;t=3`}, want{}},
		{"members bounded across lines", append(interleave("RateLimit", []string{"x,", "x,", "x,", "x,"}), "RateLimit", `"a";r=0;t=3`),
			want{}},
		{"empty lines count", append(interleave("RateLimit", make([]string, MaxItems)), "RateLimit", `"a";r=0;t=3`), want{}},
		{"dictionary members count", []string{"RateLimit", `x=1, x=1, x=1, x=1, x=1, x=1, x=1, x=1, reset=3`}, want{}},
		{"line read to 4 KiB", []string{"RateLimit", cutAt(maxLine-len(`"b";r=0;t=3`)) + `"b";r=0;t=3`},
			want{items: items(1, 1*s, 0, 3*s)}},
		{"member past 4 KiB dropped", []string{"RateLimit", cutAt(maxLine-len(`"b";r=0;t=3`)) + `"b";r=0;t=30`},
			want{items: items(1, 1*s)}},
		{"member past 4 KiB dropped, next line read", []string{"RateLimit", cutAt(maxLine-3) + `"b";r=0;t=3`, "RateLimit", `"c";r=2;t=2`},
			want{items: items(1, 1*s, 2, 2*s)}},
		{"quoted member past 4 KiB dropped", []string{"RateLimit", `"a";r=0;t=3, "` + strings.Repeat(",", 5000) + `";r=0;t=4`},
			want{items: items(0, 3*s)}},
		{"policy past 4 KiB dropped", []string{"RateLimit-Policy", cutAt(maxLine-len(`5;w=3`)) + `5;w=30`},
			want{}},
		{"retry-after of 4 KiB", []string{"Retry-After", long("7")[1:]}, want{retry: 7 * s, hasRetry: true}},
		{"retry-after past 4 KiB", []string{"Retry-After", long("7")}, want{}},
		{"remaining past 4 KiB drops the item", []string{"X-RateLimit-Remaining", long("0"), "X-RateLimit-Reset", "5"}, want{}},
		{"reset past 4 KiB", []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", long("5")}, want{}},
		{"reset past 4 KiB, reset-after read", []string{"X-RateLimit-Reset", long("5"), "X-RateLimit-Reset-After", "2"},
			want{items: items(-1, 2*s)}},
	})
}

func itoa(i int) string { return strconv.Itoa(i) }

// interleave returns name, values[0], name, values[1], ...
func interleave(name string, values []string) []string {
	var kv []string
	for _, v := range values {
		kv = append(kv, name, v)
	}
	return kv
}

// TestParseAllocatesNothing: beyond what the getter does, Parse allocates
// nothing, for every dialect.
func TestParseAllocatesNothing(t *testing.T) {
	h := http.Header{}
	for _, kv := range [][2]string{
		{"Retry-After", "3"},
		{"RateLimit-Policy", `"5-in-3sec"; q=5; w=3; pk=:ZmFrZQ==:`},
		{"RateLimit", `"5-in-3sec"; r=0; t=3; pk=:ZmFrZQ==:`},
		{"RateLimit", `limit=5, remaining=0, reset=3`},
		{"RateLimit-Limit", "5, 5;w=3"},
		{"RateLimit-Remaining", "0"},
		{"RateLimit-Reset", "3"},
		{"X-RateLimit-Remaining", "0"},
		{"X-RateLimit-Reset", unix(3 * s)},
		{"X-RateLimit-Reset-After", "2.5"},
		{"X-Rate-Limit-Remaining", "0"},
		{"X-Rate-Limit-Reset", unix(3*s) + "000"},
	} {
		h.Add(kv[0], kv[1])
	}
	get := exactGetter(h)
	got := Parse(get, epoch)
	require.Equal(t, 5, got.NItems)
	require.Equal(t, 2, got.NPolicies)
	require.True(t, got.HasRetryAfter)
	if n := testing.AllocsPerRun(100, func() { Parse(get, epoch) }); n != 0 {
		t.Errorf("Parse allocates %v times", n)
	}
	h.Set("Retry-After", epoch.Add(time.Minute).Format(http.TimeFormat))
	if n := testing.AllocsPerRun(100, func() { Parse(get, epoch) }); n != 0 {
		t.Errorf("Parse of an HTTP date allocates %v times", n)
	}
	h.Set("Date", epoch.Format(http.TimeFormat))
	if n := testing.AllocsPerRun(100, func() { Parse(get, epoch) }); n != 0 {
		t.Errorf("Parse with a Date allocates %v times", n)
	}
}

// TestParseTellsEpochByDate: a reset value is told a Unix time or a delay
// by the answer's Date when it has one, else by now; the delay is always
// measured from now. A server whose clock is in 2000 (a testing/synctest
// bubble) writes X-RateLimit-Reset below 1e9, which a fixed threshold
// read as a delay of 30 years.
func TestParseTellsEpochByDate(t *testing.T) {
	t.Parallel()
	y2k := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	y2100 := time.Date(2100, 1, 1, 0, 0, 0, 0, time.UTC)
	reset := strconv.FormatInt(y2k.Unix()+3, 10) // 946684803
	for _, tc := range []struct {
		name string
		now  time.Time
		date string
		want time.Duration
	}{
		{"no Date, now in 2000", y2k, "", 3 * time.Second},
		{"Date in 2000, now in 2000", y2k, y2k.Format(http.TimeFormat), 3 * time.Second},
		{"Date in 2000, now a second later", y2k.Add(time.Second), y2k.Format(http.TimeFormat), 2 * time.Second},
		{"no Date, now in 2026: a Unix time, past", epoch, "", 0},
		{"no Date, now in 2100: a delay", y2100, "", 946684803 * time.Second},
		{"Date in 2000, now in 2100: a Unix time, past", y2100, y2k.Format(http.TimeFormat), 0},
		{"unreadable Date, now in 2000", y2k, "yesterday", 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			kv := []string{"X-RateLimit-Remaining", "0", "X-RateLimit-Reset", reset}
			if tc.date != "" {
				kv = append(kv, "Date", tc.date)
			}
			h := Parse(header(kv...), tc.now)
			require.Equal(t, 1, h.NItems)
			assert.Equal(t, tc.want, h.Items[0].Reset)
			m := Parse(metadata(kv...), tc.now) // gRPC metadata: no Date, unless a server sends one
			assert.Equal(t, h, m)
		})
	}
}

// exactGetter returns a getter of h that allocates nothing: it maps the
// names Parse asks for to their canonical form with a switch.
func exactGetter(h http.Header) func(string) []string {
	return func(name string) []string {
		switch name {
		case "RateLimit":
			return h["Ratelimit"]
		case "RateLimit-Policy":
			return h["Ratelimit-Policy"]
		case "RateLimit-Limit":
			return h["Ratelimit-Limit"]
		case "RateLimit-Remaining":
			return h["Ratelimit-Remaining"]
		case "RateLimit-Reset":
			return h["Ratelimit-Reset"]
		case "X-RateLimit-Remaining":
			return h["X-Ratelimit-Remaining"]
		case "X-RateLimit-Reset":
			return h["X-Ratelimit-Reset"]
		case "X-RateLimit-Reset-After":
			return h["X-Ratelimit-Reset-After"]
		}
		return h[name] // already canonical
	}
}

// BenchmarkParse: a typical draft-08 answer and a typical X-RateLimit one,
// read through http.Header.Values (which canonicalizes, and so allocates,
// the names Parse asks for) and through a getter that allocates nothing.
func BenchmarkParse(b *testing.B) {
	for _, bc := range []struct {
		name string
		h    http.Header
	}{
		{"draft8", http.Header{
			"Ratelimit-Policy": {`"burst";q=100;w=60, "daily";q=1000;w=86400`},
			"Ratelimit":        {`"burst";r=0;t=17, "daily";r=400;t=8000`},
			"Retry-After":      {"17"},
		}},
		{"xratelimit", http.Header{
			"X-Ratelimit-Limit":     {"5000"},
			"X-Ratelimit-Remaining": {"4987"},
			"X-Ratelimit-Reset":     {unix(30 * time.Minute)},
			"X-Ratelimit-Used":      {"13"},
		}},
	} {
		for _, g := range []struct {
			name string
			get  func(string) []string
		}{{"header", bc.h.Values}, {"exact", exactGetter(bc.h)}} {
			b.Run(bc.name+"/"+g.name, func(b *testing.B) {
				b.ReportAllocs()
				n := 0
				for range b.N {
					n += Parse(g.get, epoch).NItems
				}
				if n == 0 {
					b.Fatal("no items")
				}
			})
		}
	}
}

// TestParseLimit: Limit is the smallest quota any field states, with or
// without a window; 0 when none does, or when every one is invalid.
func TestParseLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		kv   []string
		want int64
	}{
		{"none", []string{"RateLimit", `"a";r=1;t=2`}, 0},
		{"draft-8 policy", []string{"RateLimit-Policy", `"a";q=5;w=3, "b";q=100;w=60`}, 5},
		{"draft-7 limit", []string{"RateLimit", "limit=7, remaining=1, reset=2"}, 7},
		{"draft-6 limit without window", []string{"RateLimit-Limit", "9"}, 9},
		{"x-ratelimit", []string{"X-RateLimit-Limit", "5000", "X-RateLimit-Remaining", "1", "X-RateLimit-Reset", "10"}, 5000},
		{"x-rate-limit", []string{"X-Rate-Limit-Limit", "15"}, 15},
		{"smallest of all", []string{"X-RateLimit-Limit", "50", "RateLimit-Policy", "40;w=1", "RateLimit", "limit=30, reset=1"}, 30},
		{"zero and garbage ignored", []string{"X-RateLimit-Limit", "0", "RateLimit-Policy", `"a";q=-1;w=1, "b";q=x`, "RateLimit-Limit", "abc"}, 0},
		{"saturates", []string{"X-RateLimit-Limit", "99999999999999999999999"}, math.MaxInt64},
	} {
		h := Parse(header(tc.kv...), epoch)
		assert.Equal(t, tc.want, h.Limit, tc.name)
	}
}
