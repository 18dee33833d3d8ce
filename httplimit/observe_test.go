package httplimit

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// tierOfKey reads the tier from the API key: "free-..." or "pro-...", else
// a tier no limiter holds.
func tierOfKey(_ context.Context, key string) string {
	tier, _, _ := strings.Cut(key, "-")
	return tier
}

// TestObserverNamesEveryDecision: the middleware's observer hears every
// decision it takes for its limits, each Event named by the Limit, the
// name its RateLimit fields carry: metrics and headers name a limit alike.
// Before, the decisions went only to each limiter's own observer, under
// the limiter's WithName ("api-free") or "" without one, and the middleware
// labelled shadow denials by marking the context for the limiters to read.
// Real server on loopback; the limiters have no observer of their own.
func TestObserverNamesEveryDecision(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	free, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(2, time.Minute), ratelimit.WithClock(mock), ratelimit.WithName("api-free"))
	require.NoError(t, err)
	pro := newKeyed(t, ratelimit.TokenBucketPolicy(ratelimit.Per(10, time.Minute), 10), mock)
	tiers, err := ratelimit.NewTiered(tierOfKey, map[string]ratelimit.KeyedLimiter{"free": free, "pro": pro})
	require.NoError(t, err)
	next := newKeyed(t, ratelimit.SlidingLogPolicy(1, time.Minute), mock)
	var obs events
	mw := newMW(t, []Limit{
		{Name: "api", Key: KeyByHeader("X-API-Key"), Limiter: tiers},
		{Name: "next", Key: KeyByHeader("X-API-Key"), Limiter: next, Shadow: true},
	}, WithClock(mock), WithObserver(&obs))
	srv := loopback(t, mw.Handler(okHandler))

	ev := func(limit string, alg ratelimit.Algorithm, o ratelimit.Outcome) ratelimit.Event {
		return ratelimit.Event{Name: limit, Algorithm: alg, Home: ratelimit.HomeKeyed, Outcome: o, N: 1}
	}
	fw, tb, sl := ratelimit.FixedWindowAlgorithm, ratelimit.TokenBucketAlgorithm, ratelimit.SlidingLogAlgorithm
	for i, c := range []struct {
		key  string
		code int
		want []ratelimit.Event
	}{
		{"free-a", 200, []ratelimit.Event{ev("api", fw, ratelimit.OutcomeAllowed), ev("next", sl, ratelimit.OutcomeAllowed)}},
		{"free-a", 200, []ratelimit.Event{ev("api", fw, ratelimit.OutcomeAllowed), ev("next", sl, ratelimit.OutcomeShadow)}},
		{"free-a", 429, []ratelimit.Event{ev("api", fw, ratelimit.OutcomeDenied)}},
		{"pro-b", 200, []ratelimit.Event{ev("api", tb, ratelimit.OutcomeAllowed), ev("next", sl, ratelimit.OutcomeAllowed)}},
	} {
		a := get(t, srv, "X-API-Key", c.key)
		require.Equal(t, c.code, a.code, "request %d", i)
		assert.True(t, strings.HasPrefix(a.header.Get("RateLimit"), `"api";`), "request %d: RateLimit %q", i, a.header.Get("RateLimit"))
		got := obs.Take()
		for j := range got {
			assert.NotZero(t, got[j].Decision.Limit, "request %d, event %d: no Decision", i, j)
			got[j].Decision, got[j].Latency = ratelimit.Decision{}, 0
		}
		assert.Equal(t, c.want, got, "request %d (%s)", i, c.key)
	}
}

// TestOneObserverPerDecision: a limiter that reports to an observer of its
// own (ratelimit.WithObserver, for itself or one of its tiers) behind a
// middleware that has one too would have each decision counted twice: New
// refuses it, saying so. A limiter's own observer alone still works; it
// sees its decisions as the limiter makes them, shadow denials as plain
// denials (no limiter reads a mark of the middleware's any more).
func TestOneObserverPerDecision(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	var own events
	observed, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(1, time.Minute), ratelimit.WithClock(mock), ratelimit.WithObserver(&own))
	require.NoError(t, err)
	tiers, err := ratelimit.NewTiered(tierOfKey, map[string]ratelimit.KeyedLimiter{"free": observed, "pro": newKeyed(t, ratelimit.FixedWindowPolicy(5, time.Minute), mock)})
	require.NoError(t, err)
	for name, l := range map[string]ratelimit.KeyedLimiter{"keyed": observed, "tier": tiers} {
		_, err := New([]Limit{{Name: "api", Key: KeyByHeader("X-API-Key"), Limiter: l}}, WithObserver(&events{}))
		require.Error(t, err, name)
		assert.True(t, errors.Is(err, ratelimit.ErrInvalidConfig), "%v", err)
		assert.Contains(t, err.Error(), `httplimit.Limit.Limiter of limit "api"`, name)
		assert.Contains(t, err.Error(), "counted twice", name)
	}

	mw := newMW(t, []Limit{{Name: "api", Key: KeyByHeader("X-API-Key"), Limiter: observed, Shadow: true}}, WithClock(mock))
	srv := loopback(t, mw.Handler(okHandler))
	for range 2 {
		require.Equal(t, 200, get(t, srv, "X-API-Key", "free-a").code)
	}
	var outcomes []ratelimit.Outcome
	for _, e := range own.Take() {
		outcomes = append(outcomes, e.Outcome)
	}
	assert.Equal(t, []ratelimit.Outcome{ratelimit.OutcomeAllowed, ratelimit.OutcomeDenied}, outcomes,
		"the limiter's own observer: what the limiter decided")
}

// wrapped hides a limiter behind a KeyedLimiter of its own, as a caller's
// decorator would: the middleware cannot see that it holds a Tiered.
type wrapped struct{ ratelimit.KeyedLimiter }

// TestMisconfiguredLimitIs500: a key whose tier has no limiter is the
// server's misconfiguration, not the client's fault: 500, no Retry-After,
// no "do not retry", nothing charged in the other limits, the error
// reported to the observer (OutcomeError) and the log, once. It used to be
// answered 429 "it can never succeed, do not retry", so an obedient client
// stopped for good. Through every path: the one limit, several limits, a
// Tiered behind a wrapper, and a shadow limit (served, and reported).
func TestMisconfiguredLimitIs500(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	newTiers := func() *ratelimit.Tiered {
		tiers, err := ratelimit.NewTiered(tierOfKey, map[string]ratelimit.KeyedLimiter{"free": newKeyed(t, ratelimit.FixedWindowPolicy(5, time.Minute), mock)})
		require.NoError(t, err)
		return tiers
	}
	for _, c := range []struct {
		name   string
		limits func(other ratelimit.KeyedLimiter) []Limit
		code   int
	}{
		{"one limit", func(ratelimit.KeyedLimiter) []Limit {
			return []Limit{{Name: "plan", Key: KeyByHeader("X-API-Key"), Limiter: newTiers()}}
		}, 500},
		{"two limits", func(other ratelimit.KeyedLimiter) []Limit {
			return []Limit{{Name: "ip", Key: KeyByIP(), Limiter: other}, {Name: "plan", Key: KeyByHeader("X-API-Key"), Limiter: newTiers()}}
		}, 500},
		{"wrapped tiers", func(other ratelimit.KeyedLimiter) []Limit {
			return []Limit{{Name: "ip", Key: KeyByIP(), Limiter: other}, {Name: "plan", Key: KeyByHeader("X-API-Key"), Limiter: wrapped{newTiers()}}}
		}, 500},
		{"wrapped tiers alone", func(ratelimit.KeyedLimiter) []Limit {
			return []Limit{{Name: "plan", Key: KeyByHeader("X-API-Key"), Limiter: wrapped{newTiers()}}}
		}, 500},
		{"shadow", func(other ratelimit.KeyedLimiter) []Limit {
			return []Limit{{Name: "ip", Key: KeyByIP(), Limiter: other}, {Name: "plan", Key: KeyByHeader("X-API-Key"), Limiter: newTiers(), Shadow: true}}
		}, 200},
	} {
		t.Run(c.name, func(t *testing.T) {
			other := newKeyed(t, ratelimit.FixedWindowPolicy(5, time.Minute), mock)
			var obs events
			rec, logger := newLogRecorder()
			srv := loopback(t, newMW(t, c.limits(other), WithClock(mock), WithObserver(&obs), WithLogger(logger)).Handler(okHandler))
			a := get(t, srv, "X-API-Key", "gold-a")
			require.Equal(t, c.code, a.code, "body %q", a.body)
			if c.code == 500 {
				assert.Empty(t, a.header.Get("Retry-After"))
				assert.Empty(t, a.header.Get("RateLimit"))
				var body map[string]any
				require.NoError(t, json.Unmarshal([]byte(a.body), &body), a.body)
				assert.Equal(t, "Internal Server Error", body["error"])
				assert.NotContains(t, a.body, "retry")
				assert.NotContains(t, a.body, "gold", "the body names no tier")
				assert.Equal(t, 5, remaining(t, other, "127.0.0.1"), "a request answered 500 is charged nowhere")
			}
			var errEvents []ratelimit.Event
			for _, e := range obs.Take() {
				if e.Outcome == ratelimit.OutcomeError {
					errEvents = append(errEvents, e)
				}
			}
			if assert.Len(t, errEvents, 1, "error Events") {
				assert.Equal(t, "plan", errEvents[0].Name)
				assert.ErrorIs(t, errEvents[0].Err, ratelimit.ErrUnknownTier)
			}
			recs := rec.records()
			if assert.Len(t, recs, 1, "log lines") {
				assert.Equal(t, "plan", recs[0]["limit"])
				assert.ErrorIs(t, recs[0]["error"].(error), ratelimit.ErrUnknownTier)
			}
		})
	}
}
