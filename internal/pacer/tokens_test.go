package pacer

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit/internal/hints"
)

// tokItem is a quota of tokens: r left of limit, full again in reset.
func tokItem(r, limit int64, reset time.Duration) Item {
	return Item{Remaining: r, Reset: reset, Unit: hints.Tokens, Limit: limit}
}

// reqItem is a quota of requests with its own limit.
func reqItem(r, limit int64, reset time.Duration) Item {
	return Item{Remaining: r, Reset: reset, Unit: hints.Requests, Limit: limit}
}

// nowTokens acquires a send of key estimated at tokens, failing if it has
// to wait.
func (f *fixture) nowTokens(key string, tokens int64) Ticket {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	tk, err := f.p.AcquireTokens(ctx, &f.src, key, tokens, errPause)
	require.NoError(f.t, err, "AcquireTokens(%q, %d) must not wait", key, tokens)
	f.clk.None(f.t)
	return tk
}

// afterTokens acquires a send of key estimated at tokens in a goroutine
// and checks that it waits exactly want before the ticket is granted.
func (f *fixture) afterTokens(key string, tokens int64, want time.Duration) Ticket {
	f.t.Helper()
	got := make(chan Ticket, 1)
	go func() {
		tk, err := f.p.AcquireTokens(context.Background(), &f.src, key, tokens, errPause)
		assert.NoError(f.t, err)
		got <- tk
	}()
	var waited time.Duration
	for waited < want {
		d := f.clk.Next(f.t)
		waited += d
		f.clk.Add(d)
	}
	assert.Equal(f.t, want, waited, "wait of %q for %d tokens", key, tokens)
	return <-got
}

// TestTokensBoundSendsByEstimate: a quota of tokens lets a send go only
// when what is left, less the estimates in flight, covers its estimate;
// the reset gives back what the bucket restores, less the tokens in
// flight.
func TestTokensBoundSendsByEstimate(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig())
	f.done(f.nowTokens("k", 400), false, answer(reqItem(59, 60, time.Second), tokItem(600, 1000, time.Minute)))
	a := f.nowTokens("k", 400) // 600 left: 200 once it is counted
	assert.Equal(t, time.Minute, f.p.PausedForTokens("k", f.clk.Now(), 300), "300 do not fit in 200")
	assert.Zero(t, f.p.PausedForTokens("k", f.clk.Now(), 200), "200 do")
	assert.Zero(t, f.p.PausedFor("k", f.clk.Now()), "a send without an estimate needs one token")
	// At the reset the bucket is full but for what a may have taken.
	b := f.afterTokens("k", 600, time.Minute)
	assert.Equal(t, time.Minute, f.p.PausedForTokens("k", f.clk.Now(), 1), "a's 400 and b's 600 hold the whole limit")
	f.done(a, false, nil)
	f.done(b, false, nil)
}

// TestTokensLearnTheCharge: the answer's remaining count, the server's
// own accounting, replaces the estimates of the sends it counted: an
// estimate of 500 charged 100 leaves room for 900 more.
func TestTokensLearnTheCharge(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig())
	a := f.nowTokens("k", 500)
	b := f.nowTokens("k", 500)                                  // nothing known yet: both go
	f.done(a, false, answer(tokItem(900, 1000, 6*time.Second))) // a cost 100; b's 500 is still out
	assert.Equal(t, 6*time.Second, f.p.PausedForTokens("k", f.clk.Now(), 401))
	assert.Zero(t, f.p.PausedForTokens("k", f.clk.Now(), 400))
	// b cost 100; but the server may have counted a after b, so a's
	// estimate is taken from what b's answer reports.
	f.done(b, false, answer(tokItem(800, 1000, 12*time.Second)))
	assert.Zero(t, f.p.PausedForTokens("k", f.clk.Now(), 300))
	assert.Equal(t, 12*time.Second, f.p.PausedForTokens("k", f.clk.Now(), 301))
	// Alone, a send learns its charge exactly: 50 of an estimate of 300.
	f.done(f.nowTokens("k", 300), false, answer(tokItem(750, 1000, 15*time.Second)))
	assert.Zero(t, f.p.PausedForTokens("k", f.clk.Now(), 750))
	assert.Equal(t, 15*time.Second, f.p.PausedForTokens("k", f.clk.Now(), 751))
}

// TestTokensAnswersInAnyOrder: an answer that comes back late reports
// what was left before the sends answered since: their estimates are
// subtracted, so it frees nothing they took.
func TestTokensAnswersInAnyOrder(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig())
	f.done(f.nowTokens("k", 1), false, answer(tokItem(1000, 1000, time.Second)))
	a := f.nowTokens("k", 300)
	b := f.nowTokens("k", 300)
	f.done(b, false, answer(tokItem(400, 1000, time.Minute))) // the server counted a, then b
	f.done(a, false, answer(tokItem(700, 1000, time.Minute))) // a's answer, late: b answered since
	assert.Zero(t, f.p.PausedForTokens("k", f.clk.Now(), 400))
	assert.Equal(t, time.Minute, f.p.PausedForTokens("k", f.clk.Now(), 401), "b's 300 are not freed")
}

// TestTokensEstimateAboveLimit: an estimate above the limit waits for the
// quota to be full, no more: it never waits forever.
func TestTokensEstimateAboveLimit(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig())
	f.done(f.nowTokens("k", 10), false, answer(tokItem(990, 1000, 3*time.Second)))
	f.done(f.afterTokens("k", 5000, 3*time.Second), false, nil)
}

// TestTokensWithoutEstimate: a send without an estimate waits only for
// a quota of tokens reported spent; both budgets bind at once.
func TestTokensWithoutEstimate(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig())
	out := f.done(f.now("k"), false, answer(reqItem(5, 60, time.Second), tokItem(0, 1000, 4*time.Second)))
	assert.Equal(t, Outcome{Pause: 4 * time.Second}, out)
	f.done(f.after("k", 4*time.Second), false, answer(reqItem(0, 60, 2*time.Second), tokItem(900, 1000, time.Second)))
	f.after("k", 2*time.Second) // now the requests bind
}

// TestTokensLostKeepCharge: a send that gets no answer keeps its estimate
// counted against the answers that come later.
func TestTokensLostKeepCharge(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig())
	f.done(f.nowTokens("k", 1), false, answer(tokItem(1000, 1000, time.Second)))
	a := f.nowTokens("k", 300)
	b := f.nowTokens("k", 300)
	f.p.Lost(a)
	f.done(b, false, answer(tokItem(700, 1000, time.Minute))) // the server may have counted a after b
	assert.Zero(t, f.p.PausedForTokens("k", f.clk.Now(), 400))
	assert.Equal(t, time.Minute, f.p.PausedForTokens("k", f.clk.Now(), 401))
	assert.Zero(t, f.p.InFlight())
}

// TestTokensRefillContinuously: a quota that refills (the LLM dialects'
// token buckets, whose reset is the time until full) gains its limit less
// what was left over the reset, continuously: a send waits only for the
// tokens it needs, not for the whole reset, and never for more than the
// limit less the tokens in flight.
func TestTokensRefillContinuously(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig())
	refill := func(r, limit int64, reset time.Duration) Item {
		it := tokItem(r, limit, reset)
		it.Refills = true
		return it
	}
	f.done(f.nowTokens("k", 1000), false, answer(refill(0, 1000, 10*time.Second)))
	assert.Equal(t, time.Second, f.p.PausedForTokens("k", f.clk.Now(), 100), "100 of 1000 come in a tenth of the 10 s")
	a := f.afterTokens("k", 100, time.Second)
	assert.Equal(t, 4*time.Second, f.p.PausedForTokens("k", f.clk.Now(), 400), "a took the 100 that had come in: 500 more, at 5 s")
	b := f.afterTokens("k", 900, 9*time.Second)
	// a's 100 and b's 900 in flight hold the whole limit: until their
	// answers tell, the next waits a whole reset more (b went at the first).
	assert.Equal(t, 10*time.Second, f.p.PausedForTokens("k", f.clk.Now(), 1))
	f.done(a, false, answer(refill(900, 1000, time.Second)))
	f.done(b, false, answer(refill(900, 1000, time.Second))) // b's true charge was small
	// a may have been counted after b: 800 now, and 100 a second.
	assert.Zero(t, f.p.PausedForTokens("k", f.clk.Now(), 800))
	assert.Equal(t, 500*time.Millisecond, f.p.PausedForTokens("k", f.clk.Now(), 850))
}

// TestRefusalKeepsRefillingQuota: a refusal's Retry-After (when the
// refused send could go) pauses the key, but does not cut short a quota
// that refills: the next send, estimated above what the bucket holds
// when the pause ends, waits until its estimate has come in. (Before,
// the quota's reset was capped at the Retry-After, then dropped, and the
// probe went on no budget at all: refused.)
func TestRefusalKeepsRefillingQuota(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig())
	bucket := tokItem(100, 1000, 54*time.Second) // 900 in over 54 s: 1 every 60 ms
	bucket.Refills = true
	h := answer(bucket)
	h.RetryAfter, h.HasRetryAfter = 2*time.Second, true
	out := f.done(f.nowTokens("k", 300), true, h)
	assert.Equal(t, 2*time.Second, out.Pause)
	// 500 - 100 = 400 more: 24 s.
	f.done(f.afterTokens("k", 500, 24*time.Second), false, nil)
}
