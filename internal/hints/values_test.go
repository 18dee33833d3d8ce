package hints

import (
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// epoch is when the answers of the tests are received: 2026-01-01 UTC.
var epoch = time.Unix(1767225600, 0)

// unix returns epoch+d as Unix seconds, in decimal.
func unix(d time.Duration) string { return strconv.FormatInt(epoch.Add(d).Unix(), 10) }

// TestRetryAfter is httplimit's TestParseRetryAfter and the Retry-After
// values of its TestServerPauseEveryHeaderCombination, unchanged.
func TestRetryAfter(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		{"120", 120 * time.Second, true},
		{" 0 ", 0, true},
		{"7", 7 * time.Second, true},
		{epoch.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second, true},
		{"Thursday, 01-Jan-26 00:01:30 GMT", 90 * time.Second, true}, // RFC 850
		{"Thu Jan  1 00:01:30 2026", 90 * time.Second, true},         // asctime
		{epoch.Add(-time.Hour).Format(http.TimeFormat), 0, true},
		{"Fri, 31 Dec 9999 23:59:59 GMT", maxDuration, true},
		{"99999999999999999999999", maxDuration, true},
		{"99999999999999999999999999", maxDuration, true},
		{"1073741823", (MaxSeconds - 1) * time.Second, true},
		{"1073741824", maxDuration, true},
		{"", 0, false}, {"  ", 0, false}, {"-5", 0, false}, {"+5", 0, false}, {"1.5", 0, false},
		{"soon", 0, false}, {`"7"`, 0, false}, {"-3", 0, false}, {"1e3", 0, false}, {"NaN", 0, false},
		{"7 s", 0, false}, {"0x10", 0, false},
	} {
		got, ok := RetryAfter(c.in, epoch)
		assert.Equal(t, c.want, got, "RetryAfter(%q)", c.in)
		assert.Equal(t, c.ok, ok, "RetryAfter(%q)", c.in)
	}
}

// TestResetValue: httplimit's X-RateLimit-Reset cases, unchanged but for
// "12.5" (fractions are new), and the new readings: fractions rounded up
// to the millisecond and Unix milliseconds.
func TestResetValue(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in   string
		want time.Duration
		ok   bool
	}{
		// As httplimit.ParseXRateLimitReset read them.
		{"11", 11 * time.Second, true},
		{" 17 ", 17 * time.Second, true},
		{unix(13 * time.Second), 13 * time.Second, true},
		{unix(-13 * time.Second), 0, true},
		{"99999999999999999999", maxDuration, true},
		{"0", 0, true},
		{"883612799", 883612799 * time.Second, true}, // the largest delay in 2026: half of now
		{"883612800", 0, true},                       // the smallest Unix time then, 1998
		{"", 0, false}, {"-1", 0, false}, {"+1", 0, false}, {"1e9", 0, false}, {"NaN", 0, false},
		{"Infinity", 0, false}, {"0x10", 0, false}, {"١٧", 0, false}, {"17s", 0, false},
		// New: fractions, rounded up to the millisecond.
		{"12.5", 12500 * time.Millisecond, true},
		{"64.57", 64570 * time.Millisecond, true},
		{"64.5700", 64570 * time.Millisecond, true},
		{"64.5701", 64571 * time.Millisecond, true},
		{"0.0001", time.Millisecond, true},
		{"0." + strings.Repeat("0", 100) + "1", time.Millisecond, true},
		{"883612799.9999", 883612800 * time.Second, true},
		{unix(23*time.Second) + ".123", 23123 * time.Millisecond, true}, // Discord
		{unix(-time.Second) + ".5", 0, true},
		{"12.", 0, false}, {".5", 0, false}, {"1.2.3", 0, false}, {"1,5", 0, false}, {"1.-5", 0, false},
		{"1.5e3", 0, false},
		// Unix milliseconds from 500 times now up.
		{"883612799999", maxDuration, true}, // the year 29970 in seconds
		{"883612800000", 0, true},           // 1997 in milliseconds
		{unix(13*time.Second) + "000", 13 * time.Second, true},
		{unix(13*time.Second) + "250", 13250 * time.Millisecond, true},
		{unix(13*time.Second) + "000.1", 13001 * time.Millisecond, true},
		{unix(-13*time.Second) + "000", 0, true},
		{strings.Repeat("9", 40), maxDuration, true},
		{strings.Repeat("9", 40) + ".9", maxDuration, true},
	} {
		got, ok := ResetValue(c.in, epoch, epoch)
		assert.Equal(t, c.want, got, "ResetValue(%q)", c.in)
		assert.Equal(t, c.ok, ok, "ResetValue(%q)", c.in)
	}
	// Against a time between milliseconds, a Unix time's delay is exact.
	now := epoch.Add(300 * time.Microsecond)
	d, ok := ResetValue(unix(time.Second), now, now)
	assert.True(t, ok)
	assert.Equal(t, time.Second-300*time.Microsecond, d)
}

// TestResetValueAnyYear: a clock of any year reads delays, Unix seconds and
// Unix milliseconds of its own time as what they are: testing/synctest's
// bubble in 2000 (its Unix seconds are below the 1e9 that was the fixed
// threshold), 2003, 2026, 2400, and the mock clock's default of 1970,
// where a Unix time in seconds is its own delay (a Unix time in
// milliseconds cannot be told from seconds there). The readings are told
// apart by ref (the answer's Date), the delay measured from now.
func TestResetValueAnyYear(t *testing.T) {
	t.Parallel()
	for _, now := range []time.Time{
		time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC), // synctest
		time.Unix(0, 0), // clock.NewMock()
		time.Date(2003, 6, 1, 0, 0, 0, 0, time.UTC),
		epoch,
		time.Date(2400, 1, 1, 0, 0, 0, 0, time.UTC),
	} {
		in3 := now.Add(3 * time.Second)
		cases := []struct {
			in   string
			want time.Duration
		}{
			{"0", 0}, {"3", 3 * time.Second}, {"3600", time.Hour}, {"86400.5", 86400500 * time.Millisecond},
			{strconv.FormatInt(in3.Unix(), 10), 3 * time.Second},
			{strconv.FormatInt(in3.Unix(), 10) + ".25", 3250 * time.Millisecond},
		}
		if now.Unix() > 0 {
			cases = append(cases, struct {
				in   string
				want time.Duration
			}{strconv.FormatInt(in3.UnixMilli(), 10), 3 * time.Second}, struct {
				in   string
				want time.Duration
			}{strconv.FormatInt(now.Add(-time.Hour).Unix(), 10), 0})
		}
		for _, c := range cases {
			got, ok := ResetValue(c.in, now, now)
			assert.True(t, ok, "ResetValue(%q) at %v", c.in, now)
			assert.Equal(t, c.want, got, "ResetValue(%q) at %v", c.in, now)
		}
		if now.Unix() > 0 {
			// Told by a Date an hour ahead of now (a skewed client): read
			// as a Unix time by the Date, the delay measured from now.
			date := now.Add(time.Hour)
			got, _ := ResetValue(strconv.FormatInt(date.Add(3*time.Second).Unix(), 10), now, date)
			assert.Equal(t, time.Hour+3*time.Second, got, "Unix seconds by the Date, at %v", now)
		}
	}
}

// TestExhaustedReset is httplimit's ParseRateLimitReset cases (its
// TestParseRetryAfter and TestServerPauseEveryHeaderCombination),
// unchanged, with the quirks of that reading pinned down.
func TestExhaustedReset(t *testing.T) {
	t.Parallel()
	pad := `"pad` + strings.Repeat("x", 5000) + `";r=1;t=1, `
	for _, c := range []struct {
		in   []string
		want time.Duration
		ok   bool
	}{
		{[]string{`"a";r=0;t=17`}, 17 * time.Second, true},
		{[]string{`"a;t=99";r=0;t=2`}, 2 * time.Second, true},
		{[]string{`"a";r=1;t=9`, `"b";r=0;t=4`}, 4 * time.Second, true},
		{[]string{`"a";r=1`, `"b";t=4`}, 0, false}, // no r: not known to be exhausted
		{[]string{`"a";r=1`}, 0, false},
		{[]string{`"a";t=-1`}, 0, false},
		{[]string{`"burst";r=0;t=5, "daily";r=4000;t=80000`}, 5 * time.Second, true},
		{[]string{`"daily";r=4000;t=80000`}, 0, false},
		{[]string{`"a";t=50`}, 0, false},
		{[]string{`"a";r=0;t=99999999999999999999`}, maxDuration, true},
		{[]string{`"a;r=0;t=3";r=1;t=4`}, 0, false},
		{[]string{`garbage;;;,,"`}, 0, false},
		{[]string{`"a";r=0;t=5, "b";r=0;t=7, "c";r=3;t=900`}, 7 * time.Second, true},
		{nil, 0, false},
		{[]string{""}, 0, false},
		// Quirks kept: the item's value is not checked, parameters are
		// trimmed but not their keys or values apart, the last r and t
		// win, every member of every line is read, however long.
		{[]string{`5;r=0;t=3`}, 3 * time.Second, true},
		{[]string{`;r=0;t=3`}, 3 * time.Second, true},
		{[]string{`"a"; r=0; t=3 `}, 3 * time.Second, true},
		{[]string{`"a";r = 0;t=3`}, 0, false},
		{[]string{`"a";r=0;t=3;t=x`}, 0, false},
		{[]string{`"a";r=1;r=0;t=3`}, 3 * time.Second, true},
		{[]string{`"a";r=0;t=1.5`}, 0, false},
		{[]string{`"a";R=0;T=3`}, 0, false},
		{[]string{pad + `"b";r=0;t=6`}, 6 * time.Second, true},
		{[]string{strings.Repeat(`"a";r=1;t=1,`, 20) + `"b";r=0;t=8`}, 8 * time.Second, true},
	} {
		got, ok := ExhaustedReset(c.in)
		assert.Equal(t, c.want, got, "ExhaustedReset(%q)", c.in)
		assert.Equal(t, c.ok, ok, "ExhaustedReset(%q)", c.in)
	}
}

// FuzzRetryAfter: both forms of Retry-After read as what they say, within
// [0, MaxSeconds]; anything else within that or not at all (httplimit's
// FuzzRetryAfter).
func FuzzRetryAfter(f *testing.F) {
	f.Add(uint64(7), int64(9), "7")
	f.Add(uint64(1<<63), int64(-1<<40), "Fri, 31 Dec 9999 23:59:59 GMT")
	f.Add(uint64(0), int64(1<<40), "Thu Jan  1 00:01:30 2026")
	f.Fuzz(func(t *testing.T, secs uint64, offset int64, raw string) {
		d, ok := RetryAfter(strconv.FormatUint(secs, 10), epoch)
		if want := time.Duration(min(secs, MaxSeconds)) * time.Second; !ok || d != want {
			t.Fatalf("RetryAfter(%d) = %v, %v; want %v", secs, d, ok, want)
		}
		offset %= 1 << 36 // dates from 1 to 4000 AD
		at := epoch.Add(time.Duration(offset) * time.Second)
		if at.Year() >= 1 && at.Year() <= 9999 {
			s := at.UTC().Format(http.TimeFormat)
			d, ok = RetryAfter(s, epoch)
			if want := clampDuration(at.Sub(epoch)); !ok || d != want {
				t.Fatalf("RetryAfter(%s) = %v, %v; want %v", s, d, ok, want)
			}
		}
		if d, ok := RetryAfter(raw, epoch); ok && (d < 0 || d > maxDuration) {
			t.Fatalf("RetryAfter(%q) = %v", raw, d)
		}
	})
}

// FuzzResetValue: delays, Unix seconds and Unix milliseconds, whole or
// with a fraction, read as what they mean, within [0, MaxSeconds];
// anything else within that or not at all.
func FuzzResetValue(f *testing.F) {
	f.Add(uint64(11), uint16(0), "11")
	f.Add(uint64(epoch.Unix()+13), uint16(123), "1767225613.123")
	f.Add(uint64(epoch.UnixMilli()+13), uint16(999), "1767225613000")
	f.Add(uint64(1<<63), uint16(1), "99999999999999999999999")
	f.Fuzz(func(t *testing.T, v uint64, frac uint16, raw string) {
		ms := int64(frac % 1000)
		s := strconv.FormatUint(v, 10)
		if ms != 0 {
			s += "." + strconv.FormatInt(1000+ms, 10)[1:] // three digits
		}
		d, ok := ResetValue(s, epoch, epoch)
		w := int64(min(v, maxWhole))
		secs, millis := thresholds(epoch)
		var want time.Duration
		switch {
		case v < uint64(secs):
			want = time.Duration(w)*time.Second + time.Duration(ms)*time.Millisecond
		case v < uint64(millis):
			want = clampDuration(time.Unix(w, ms*1e6).Sub(epoch))
		default:
			at := time.UnixMilli(w)
			if ms != 0 {
				at = at.Add(time.Millisecond)
			}
			want = clampDuration(at.Sub(epoch))
		}
		if !ok || d != want {
			t.Fatalf("ResetValue(%s) = %v, %v; want %v", s, d, ok, want)
		}
		if d, ok := ResetValue(raw, epoch, epoch); ok && (d < 0 || d > maxDuration) {
			t.Fatalf("ResetValue(%q) = %v", raw, d)
		}
	})
}
