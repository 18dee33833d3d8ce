package hints

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestParseLLMDialects: real-looking header sets of the LLM APIs give
// items of their units with their own limits; the garbage some gateways
// send gives none.
func TestParseLLMDialects(t *testing.T) {
	date := epoch.Format(http.TimeFormat)
	at := func(d time.Duration) string { return epoch.Add(d).UTC().Format(time.RFC3339) }
	req := func(rem, limit int64, reset time.Duration) Item {
		return Item{Remaining: rem, Reset: reset, Unit: Requests, Limit: limit, Refills: true}
	}
	tok := func(rem, limit int64, reset time.Duration) Item {
		return Item{Remaining: rem, Reset: reset, Unit: Tokens, Limit: limit, Refills: true}
	}
	for _, tc := range []struct {
		name string
		kv   []string
		want []Item
	}{
		{"openai", []string{ // the sample of OpenAI's rate-limits guide
			"x-ratelimit-limit-requests", "60", "x-ratelimit-limit-tokens", "150000",
			"x-ratelimit-remaining-requests", "59", "x-ratelimit-remaining-tokens", "149984",
			"x-ratelimit-reset-requests", "1s", "x-ratelimit-reset-tokens", "6m0s",
		}, []Item{req(59, 60, time.Second), tok(149984, 150000, 6*time.Minute)}},
		{"groq", []string{ // Groq's sample: fractions, and a 429's retry-after
			"retry-after", "2",
			"x-ratelimit-limit-requests", "14400", "x-ratelimit-limit-tokens", "18000",
			"x-ratelimit-remaining-requests", "14370", "x-ratelimit-remaining-tokens", "17997",
			"x-ratelimit-reset-requests", "2m59.56s", "x-ratelimit-reset-tokens", "7.66s",
		}, []Item{req(14370, 14400, 2*time.Minute+59560*time.Millisecond), tok(17997, 18000, 7660*time.Millisecond)}},
		{"openai-ms-and-hours", []string{
			"x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "12ms",
			"x-ratelimit-limit-tokens", "2000000", "x-ratelimit-remaining-tokens", "1999000", "x-ratelimit-reset-tokens", "1h1m30.5s",
		}, []Item{req(0, 0, 12*time.Millisecond), tok(1999000, 2000000, time.Hour+90500*time.Millisecond)}},
		{"openai-bare-seconds", []string{ // an Azure deployment's plain seconds
			"x-ratelimit-limit-tokens", "1000", "x-ratelimit-remaining-tokens", "10", "x-ratelimit-reset-tokens", "60",
		}, []Item{tok(10, 1000, time.Minute)}},
		{"azure-garbage", []string{ // Azure OpenAI's Responses API
			"x-ratelimit-limit-tokens", "-1", "x-ratelimit-remaining-tokens", "-1", "x-ratelimit-reset-tokens", "0",
			"x-ratelimit-limit-requests", "0", "x-ratelimit-remaining-requests", "0", "x-ratelimit-reset-requests", "0s",
		}, nil},
		{"remaining-above-limit", []string{
			"x-ratelimit-limit-tokens", "100", "x-ratelimit-remaining-tokens", "101", "x-ratelimit-reset-tokens", "1s",
		}, nil},
		{"bad-durations", []string{
			"x-ratelimit-remaining-requests", "5", "x-ratelimit-reset-requests", "-1s",
			"x-ratelimit-remaining-tokens", "5", "x-ratelimit-reset-tokens", "99999999999h",
		}, nil},
		{"no-reset", []string{"x-ratelimit-limit-tokens", "100", "x-ratelimit-remaining-tokens", "50"}, nil},
		{"anthropic", []string{ // a Messages API answer
			"date", date,
			"anthropic-ratelimit-requests-limit", "50", "anthropic-ratelimit-requests-remaining", "49",
			"anthropic-ratelimit-requests-reset", at(2 * time.Second),
			"anthropic-ratelimit-tokens-limit", "40000", "anthropic-ratelimit-tokens-remaining", "39000",
			"anthropic-ratelimit-tokens-reset", at(2 * time.Second),
			"anthropic-ratelimit-input-tokens-limit", "40000", "anthropic-ratelimit-input-tokens-remaining", "39000",
			"anthropic-ratelimit-input-tokens-reset", at(2 * time.Second),
			"anthropic-ratelimit-output-tokens-limit", "8000", "anthropic-ratelimit-output-tokens-remaining", "8000",
			"anthropic-ratelimit-output-tokens-reset", at(0),
		}, []Item{req(49, 50, 2*time.Second), tok(38500, 40000, 2*time.Second), tok(38500, 40000, 2*time.Second), tok(7500, 8000, 0)}},
		{"anthropic-429", []string{
			"date", date, "retry-after", "14",
			"anthropic-ratelimit-tokens-limit", "40000", "anthropic-ratelimit-tokens-remaining", "0",
			"anthropic-ratelimit-tokens-reset", epoch.Add(14 * time.Second).In(time.FixedZone("", -5*3600)).Format(time.RFC3339Nano),
		}, []Item{tok(0, 40000, 14*time.Second)}},
		{"anthropic-fraction-and-past", []string{
			"date", date,
			"anthropic-ratelimit-requests-remaining", "3", "anthropic-ratelimit-requests-reset", epoch.Add(1500 * time.Millisecond).Format(time.RFC3339Nano),
			"anthropic-ratelimit-tokens-remaining", "3", "anthropic-ratelimit-tokens-reset", at(-time.Minute),
		}, []Item{req(3, 0, 1500*time.Millisecond), tok(0, 0, 0)}}, // 3 rounded: 0 at least
		{"anthropic-rounded-above-limit", []string{ // 8,500 left of 8,500, rounded to 9,000
			"date", date,
			"anthropic-ratelimit-output-tokens-limit", "8500", "anthropic-ratelimit-output-tokens-remaining", "9000",
			"anthropic-ratelimit-output-tokens-reset", at(0),
			"anthropic-ratelimit-tokens-limit", "8500", "anthropic-ratelimit-tokens-remaining", "10000",
			"anthropic-ratelimit-tokens-reset", at(0),
		}, []Item{tok(8500, 8500, 0)}},
		{"anthropic-garbage", []string{
			"anthropic-ratelimit-requests-limit", "-1", "anthropic-ratelimit-requests-remaining", "0",
			"anthropic-ratelimit-requests-reset", at(time.Second),
			"anthropic-ratelimit-tokens-remaining", "10", "anthropic-ratelimit-tokens-reset", "2026-02-30T00:00:00Z",
			"anthropic-ratelimit-input-tokens-remaining", "10", "anthropic-ratelimit-input-tokens-reset", "6m0s",
			"anthropic-ratelimit-output-tokens-remaining", "10", "anthropic-ratelimit-output-tokens-reset", "1767225600",
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for name, get := range map[string]func(string) []string{"header": header(tc.kv...), "metadata": metadata(tc.kv...)} {
				h := Parse(get, epoch.Add(300*time.Millisecond)) // received a little after its Date
				assert.Equal(t, tc.want, append([]Item(nil), h.Items[:h.NItems]...), name)
				assert.Zero(t, h.Limit, "%s: the LLM limits are the items' own", name)
			}
		})
	}
}

// TestParseLLMBesideLegacy: X-RateLimit-Remaining (a legacy request
// count) and OpenAI's x-ratelimit-remaining-requests are different
// fields, read apart.
func TestParseLLMBesideLegacy(t *testing.T) {
	h := Parse(header("X-RateLimit-Limit", "10", "X-RateLimit-Remaining", "4", "X-RateLimit-Reset", "30",
		"x-ratelimit-remaining-tokens", "7", "x-ratelimit-reset-tokens", "30s"), epoch)
	require.Equal(t, 2, h.NItems)
	assert.Equal(t, Item{Remaining: 4, Reset: 30 * time.Second}, h.Items[0])
	assert.Equal(t, Item{Remaining: 7, Reset: 30 * time.Second, Unit: Tokens, Refills: true}, h.Items[1])
	assert.Equal(t, int64(10), h.Limit)
}

func TestGoDuration(t *testing.T) {
	for v, want := range map[string]time.Duration{
		"6m0s": 6 * time.Minute, "12ms": 12 * time.Millisecond, "1s": time.Second, "1m30.5s": 90500 * time.Millisecond,
		"0s": 0, "0": 0, "7.66": 7660 * time.Millisecond, "1h": time.Hour, "1.5h": 90 * time.Minute, "250us": 250 * time.Microsecond,
		"3µs": 3 * time.Microsecond, "9ns": 9, ".5s": 500 * time.Millisecond, "1.0000000001s": time.Second,
	} {
		got, ok := goDuration(v)
		assert.True(t, ok, v)
		assert.Equal(t, want, got, v)
	}
	for _, v := range []string{"", "-1", "-1s", "+1s", "s", "1x", "1.s", "1..5s", "1e3s", "1 s", "9999999999999h", "1073741825s", "nan"} {
		_, ok := goDuration(v)
		assert.False(t, ok, v)
	}
}

func TestRFC3339(t *testing.T) {
	for v, want := range map[string]time.Time{
		"2026-12-02T14:25:00Z":                   time.Date(2026, 12, 2, 14, 25, 0, 0, time.UTC),
		"2026-12-02t14:25:00.5z":                 time.Date(2026, 12, 2, 14, 25, 0, 5e8, time.UTC),
		"2026-12-02 14:25:00+01:00":              time.Date(2026, 12, 2, 13, 25, 0, 0, time.UTC),
		"2026-12-02T14:25:00.123456789123-00:30": time.Date(2026, 12, 2, 14, 55, 0, 123456789, time.UTC),
	} {
		got, ok := rfc3339(v)
		require.True(t, ok, v)
		assert.True(t, want.Equal(got), "%s: %v, want %v", v, got, want)
	}
	for _, v := range []string{"", "2026-12-02", "2026-12-02T14:25:00", "2026-13-02T14:25:00Z", "2026-02-30T00:00:00Z",
		"2026-12-02T24:00:00Z", "2026-12-02T14:25:00.Z", "2026-12-02T14:25:00+1:00", "2026-12-02T14:25:00Zjunk", "-026-12-02T14:25:00Z"} {
		_, ok := rfc3339(v)
		assert.False(t, ok, v)
	}
}

// TestParseLLMAllocatesNothing: the LLM dialects allocate nothing either.
func TestParseLLMAllocatesNothing(t *testing.T) {
	h := http.Header{}
	for _, kv := range [][2]string{
		{"Date", epoch.Format(http.TimeFormat)},
		{"X-Ratelimit-Limit-Requests", "60"}, {"X-Ratelimit-Remaining-Requests", "59"}, {"X-Ratelimit-Reset-Requests", "1s"},
		{"X-Ratelimit-Limit-Tokens", "150000"}, {"X-Ratelimit-Remaining-Tokens", "149984"}, {"X-Ratelimit-Reset-Tokens", "6m0s"},
		{"Anthropic-Ratelimit-Tokens-Limit", "40000"}, {"Anthropic-Ratelimit-Tokens-Remaining", "39000"},
		{"Anthropic-Ratelimit-Tokens-Reset", epoch.Add(time.Second).Format(time.RFC3339)},
		{"Anthropic-Ratelimit-Requests-Remaining", "1"}, {"Anthropic-Ratelimit-Requests-Reset", "garbage"},
	} {
		h.Add(kv[0], kv[1])
	}
	get := exactGetter(h)
	require.Equal(t, 3, Parse(get, epoch).NItems)
	if n := testing.AllocsPerRun(100, func() { Parse(get, epoch) }); n != 0 {
		t.Errorf("Parse allocates %v times", n)
	}
}
