package limitset

import (
	"context"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// TestFieldNames: HTTPNames are http.Header's canonical keys, GRPCNames
// their lower-case forms (gRPC metadata keys are lower case).
func TestFieldNames(t *testing.T) {
	t.Parallel()
	h, g := HTTPNames, GRPCNames
	hs := []string{h.XLimit, h.XRemaining, h.XReset, h.Policy, h.RateLimit, h.RetryAfter}
	gs := []string{g.XLimit, g.XRemaining, g.XReset, g.Policy, g.RateLimit, g.RetryAfter}
	for i, name := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset", "RateLimit-Policy", "RateLimit", "Retry-After"} {
		assert.Equal(t, http.CanonicalHeaderKey(name), hs[i])
		assert.Equal(t, strings.ToLower(name), gs[i])
	}
}

// TestWriteFieldsExact: the values for an admission, a denial and a
// denial that can never succeed, under both sets of names: the same
// values, the names of each.
func TestWriteFieldsExact(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch) // epoch: 2026-01-01 00:00:00.3 UTC
	s, _, _, _ := setup(t, Limit[*call]{Name: "api", Key: byKey, Limiter: newKeyed(t, 2, mock)})
	unix := strconv.FormatInt(epoch.Unix()+60, 10) // the window ends at 00:01:00
	admitted := map[string][]string{
		"x-ratelimit-limit": {"2"}, "x-ratelimit-remaining": {"1"}, "x-ratelimit-reset": {unix},
		"ratelimit-policy": {`"api";q=2;w=60`}, "ratelimit": {`"api";r=1;t=60`},
	}
	denied := map[string][]string{
		"x-ratelimit-limit": {"2"}, "x-ratelimit-remaining": {"0"}, "x-ratelimit-reset": {unix},
		"ratelimit-policy": {`"api";q=2;w=60`}, "ratelimit": {`"api";r=0;t=60`}, "retry-after": {"60"},
	}
	for i, step := range []struct {
		key  string
		want map[string][]string
	}{{"a", admitted}, {"b", admitted}, {"b", nil}, {"b", denied}} {
		o, v := decide(s, &call{key: step.key})
		want := step.want
		if want == nil {
			continue
		}
		g := map[string][]string{}
		s.WriteFields(g, &GRPCNames, AllFields, v)
		assert.Equal(t, want, g, "request %d (%v), gRPC names", i, o)
		h := http.Header{}
		s.WriteFields(h, &HTTPNames, AllFields, v)
		for k, vals := range want {
			assert.Equal(t, vals, h.Values(k), "request %d, HTTP %s", i, k)
		}
		assert.Len(t, h, len(want))
	}

	x := map[string][]string{}
	_, v := decide(s, &call{key: "k9"})
	s.WriteFields(x, &GRPCNames, XRateLimitFields, v)
	assert.Equal(t, []string{"x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"}, keys(x))
	ietf := map[string][]string{}
	s.WriteFields(ietf, &GRPCNames, IETFFields, v)
	assert.Equal(t, []string{"ratelimit", "ratelimit-policy"}, keys(ietf))
	none := map[string][]string{}
	s.WriteFields(none, &GRPCNames, NoFields, v)
	assert.Empty(t, none)
	v.From = -1
	s.WriteFields(none, &GRPCNames, AllFields, v)
	assert.Empty(t, none, "no Decision")
}

func keys(m map[string][]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sortStrings(ks)
	return ks
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

// TestWriteDecisionNever: a denial that can never succeed has no
// Retry-After, and a t that says when the quota resets, as every answer's
// does; an admission's large Remaining is formatted once for both fields.
func TestWriteDecisionNever(t *testing.T) {
	t.Parallel()
	now := epoch.UnixNano()
	h := map[string][]string{}
	WriteDecision(h, &GRPCNames, AllFields, ratelimit.Decision{Limit: 5, RetryAfter: ratelimit.RetryNever}, `we"ird`, 0, now)
	assert.Equal(t, map[string][]string{
		"x-ratelimit-limit": {"5"}, "x-ratelimit-remaining": {"0"}, "x-ratelimit-reset": {strconv.FormatInt(epoch.Unix()+1, 10)},
		"ratelimit-policy": {`"we\"ird";q=5`}, "ratelimit": {`"we\"ird";r=0;t=0`},
	}, h)
	h = map[string][]string{}
	WriteDecision(h, &HTTPNames, AllFields, ratelimit.Decision{Allowed: true, Limit: 5000, Remaining: 4321, ResetAfter: 1500 * time.Millisecond}, "big", time.Hour, now)
	assert.Equal(t, []string{"4321"}, h["X-Ratelimit-Remaining"])
	assert.Equal(t, []string{`"big";r=4321;t=2`}, h["Ratelimit"])
	assert.Equal(t, []string{`"big";q=5000;w=3600`}, h["Ratelimit-Policy"])
}

func TestRetryAfterSeconds(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		d    ratelimit.Decision
		want int64
	}{
		{ratelimit.Decision{Allowed: true, RetryAfter: time.Second}, 0},
		{ratelimit.Decision{RetryAfter: ratelimit.RetryNever}, 0},
		{ratelimit.Decision{}, 1},
		{ratelimit.Decision{RetryAfter: time.Nanosecond}, 1},
		{ratelimit.Decision{RetryAfter: time.Second}, 1},
		{ratelimit.Decision{RetryAfter: time.Second + time.Nanosecond}, 2},
		{ratelimit.Decision{RetryAfter: 16*time.Second + 200*time.Millisecond}, 17},
	} {
		assert.Equal(t, c.want, RetryAfterSeconds(c.d), "RetryAfterSeconds(%+v)", c.d)
	}
}

func TestValidName(t *testing.T) {
	t.Parallel()
	assert.True(t, ValidName(`a "b" \c ~`))
	assert.True(t, ValidName(""))
	for _, bad := range []string{"a\tb", "é", "a\x7f"} {
		assert.False(t, ValidName(bad), "%q", bad)
	}
}

// TestWriteFieldsAllocs pins WriteFields' allocations: one block holding
// the []string backing array and the formatted values (the array alone
// when every value is cached, as with fixed's Remaining of 99; a Remaining
// of 1<<30 must be formatted).
func TestWriteFieldsAllocs(t *testing.T) {
	for _, c := range []struct {
		lim  ratelimit.KeyedLimiter
		set  FieldSet
		want float64
	}{
		{fixed{}, AllFields, 1}, {fixed{}, XRateLimitFields, 1}, {fixed{}, NoFields, 0},
		{bigRemaining{}, AllFields, 1}, {bigRemaining{}, XRateLimitFields, 1},
	} {
		s, err := New(Config{Pkg: "testlimit"}, []Limit[*call]{{Name: "a", Key: byKey, Limiter: c.lim, Window: time.Minute}})
		require.NoError(t, err)
		var v Verdict[*call]
		require.Equal(t, Admitted, s.Decide(&Request[*call]{R: &call{key: "k"}, Ctx: context.Background(), N: 1}, &v, false, nil))
		h := map[string][]string{}
		s.WriteFields(h, &GRPCNames, c.set, &v)
		got := testing.AllocsPerRun(200, func() {
			clear(h)
			s.WriteFields(h, &GRPCNames, c.set, &v)
		})
		assert.LessOrEqual(t, got, c.want, "%T, set %#x", c.lim, c.set)
	}
}

// bigRemaining admits with a Remaining too large for the cached strings.
type bigRemaining struct{ fixed }

func (bigRemaining) AllowN(context.Context, string, int) (ratelimit.Decision, error) {
	return ratelimit.Decision{Allowed: true, Limit: 1 << 31, Remaining: 1 << 30, ResetAfter: time.Minute}, nil
}

func TestSmallIntStrings(t *testing.T) {
	t.Parallel()
	for i := range smallInts {
		if got := smallIntString(i); got != strconv.Itoa(i) {
			t.Fatalf("smallIntString(%d) = %q", i, got)
		}
	}
}

// TestWriteDecisionAgainstReference compares the fields, which the
// middleware writes through caches, small-number strings and one shared
// block per request, with the same fields formatted plainly, one value at
// a time, for random decisions of every kind, names of every length and
// every field set: the shortcuts never change a value.
func TestWriteDecisionAgainstReference(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(14, 1))
	pick := func(vals ...int64) int64 { return vals[rng.IntN(len(vals))] }
	caches := map[string]*constCache{} // one per limit name
	for i := range 20000 {
		limit := int(pick(1, 5, 1023, 1024, 1<<30, 1<<53, rng.Int64N(1<<40)+1))
		remaining := int(pick(0, 1, 1023, 1024, int64(limit), 1<<53, rng.Int64N(int64(limit))))
		d := ratelimit.Decision{Limit: limit, Remaining: remaining,
			ResetAfter: time.Duration(pick(0, 1, int64(time.Second), rng.Int64N(1<<62)))}
		switch rng.IntN(3) {
		case 0:
			d.Allowed = true
		case 1:
			d.RetryAfter = time.Duration(pick(0, 1, int64(time.Second), int64(time.Second)+1, rng.Int64N(1<<62)))
		default:
			d.RetryAfter = ratelimit.RetryNever
		}
		quoted := strings.Repeat(`a"\`, 3)
		name := quoted[:rng.IntN(len(quoted)+1)] + strings.Repeat("n", int(pick(0, 1, 7, 40, 130)))
		window := time.Duration(pick(0, 1, int64(time.Second), int64(time.Hour)+1, rng.Int64N(int64(100*365*24*time.Hour))))
		now := pick(0, 1, epoch.UnixNano(), rng.Int64N(1<<62))
		set := FieldSet(rng.IntN(4))
		got := map[string][]string{}
		if rng.IntN(2) == 0 {
			WriteDecision(got, &GRPCNames, set, d, name, window, now)
		} else { // through a limit's caches, kept across cases, as WriteFields
			c := caches[name]
			if c == nil {
				c = new(constCache)
				caches[name] = c
			}
			writeFields(got, &GRPCNames, set, &fieldState{d: d, name: appendSFString(nil, name), window: window, now: now, consts: c})
		}
		if want := referenceFields(set, d, name, window, now); !assert.Equalf(t, want, got, "case %d: %+v %q w=%v now=%d set %d", i, d, name, window, now, set) {
			return
		}
	}
}

// referenceFields formats the fields one by one, with strconv and string
// concatenation, from their definitions.
func referenceFields(set FieldSet, d ratelimit.Decision, name string, window time.Duration, now int64) map[string][]string {
	h := map[string][]string{}
	never := !d.Allowed && d.RetryAfter == ratelimit.RetryNever
	retry := ""
	if !d.Allowed && !never {
		secs := int64(d.RetryAfter / time.Second)
		if d.RetryAfter%time.Second != 0 {
			secs++
		}
		retry = strconv.FormatInt(max(secs, 1), 10)
	}
	ceil := func(ns int64) string {
		s := ns / int64(time.Second)
		if ns%int64(time.Second) > 0 {
			s++
		}
		return strconv.FormatInt(s, 10)
	}
	sf := `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`).Replace(name) + `"`
	if set&XRateLimitFields != 0 {
		h["x-ratelimit-limit"] = []string{strconv.Itoa(d.Limit)}
		h["x-ratelimit-remaining"] = []string{strconv.Itoa(d.Remaining)}
		h["x-ratelimit-reset"] = []string{ceil(now + int64(d.ResetAfter))}
	}
	if set&IETFFields != 0 {
		policy := sf + ";q=" + strconv.Itoa(d.Limit)
		if window > 0 {
			policy += ";w=" + ceil(int64(window))
		}
		h["ratelimit-policy"] = []string{policy}
		// t: the seconds until the quota resets, on every answer.
		h["ratelimit"] = []string{sf + ";r=" + strconv.Itoa(d.Remaining) + ";t=" + ceil(int64(d.ResetAfter))}
	}
	if retry != "" {
		h["retry-after"] = []string{retry}
	}
	return h
}
