package limitset

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// countFailures counts the outcomes >= 400.
func countFailures(outcome, _ int) int {
	if outcome >= 400 {
		return 1
	}
	return 0
}

func remainingOf(t *testing.T, k *ratelimit.Keyed, key string) int {
	t.Helper()
	d, err := k.Peek(context.Background(), key, 0)
	require.NoError(t, err)
	return d.Remaining
}

// TestCountReservesAndSettles: a limit counting by outcome comes between
// the rate limits charged up front and the concurrency limits; it is
// reserved at the request's cost and settled by Release at Count of the
// outcome and the cost reported in ctx, else the request's.
func TestCountReservesAndSettles(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	rate, fails, tokens := newKeyed(t, 10, mock), newKeyed(t, 5, mock), newKeyed(t, 100, mock)
	conc := newConc(t, 5)
	s, ev, _, _ := setup(t,
		Limit[*call]{Name: "conc", Key: byKey, Concurrency: conc},
		Limit[*call]{Name: "fails", Key: byUser, Limiter: fails, Count: countFailures},
		Limit[*call]{Name: "rate", Key: byKey, Limiter: rate},
		Limit[*call]{Name: "tokens", Key: byUser, Limiter: tokens, Count: func(_, cost int) int { return cost }},
	)
	ctx := context.Background()
	req := Request[*call]{R: &call{key: "k", user: "u"}, Ctx: ctx, N: 3}
	var v Verdict[*call]
	require.Equal(t, Admitted, s.Decide(&req, &v, false, nil))
	names := []string{}
	for _, c := range v.Charges() {
		names = append(names, c.Entry.Name)
	}
	assert.Equal(t, []string{"rate", "fails", "tokens", "conc"}, names)
	assert.True(t, v.Counts())
	assert.True(t, v.Holds())
	assert.Equal(t, "fails", v.Limit(), "the most restrictive: 2 of 5 left with 3 reserved")
	assert.Equal(t, 2, remainingOf(t, fails, "u"))
	assert.Equal(t, 97, remainingOf(t, tokens, "u"))
	assert.Equal(t, []string{"rate:allowed", "fails:allowed", "tokens:allowed", "conc:allowed"}, outcomes(ev.Take()))

	hctx := WithReportedCost(ctx)
	require.NoError(t, ReportCost("test", hctx, 40))
	s.Release(hctx, &v, 401)
	assert.False(t, v.Holds())
	assert.Equal(t, 4, remainingOf(t, fails, "u"), "one failure")
	assert.Equal(t, 60, remainingOf(t, tokens, "u"), "the 40 reported")
	assert.Equal(t, 7, remainingOf(t, rate, "k"), "charged up front, unchanged")
	assert.Equal(t, 0, conc.InFlight("k"))
	s.Release(hctx, &v, 401) // idempotent
	assert.Equal(t, 4, remainingOf(t, fails, "u"))

	require.Equal(t, Admitted, s.Decide(&req, &v, false, nil))
	s.Release(WithReportedCost(ctx), &v, 200)
	assert.Equal(t, 4, remainingOf(t, fails, "u"), "a success counts 0")
	assert.Equal(t, 57, remainingOf(t, tokens, "u"), "nothing reported: the request's cost")
}

// TestCountDeniedRollsBack: a counting limit that refuses gives back the
// rate limits charged up front and the reservations already held; a
// concurrency limit that refuses settles the reservations at 0.
func TestCountDeniedRollsBack(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	rate, tokens, fails := newKeyed(t, 10, mock), newKeyed(t, 100, mock), newKeyed(t, 1, mock)
	conc := newConc(t, 1)
	s, _, _, _ := setup(t,
		Limit[*call]{Name: "rate", Key: byKey, Limiter: rate},
		Limit[*call]{Name: "tokens", Key: byUser, Limiter: tokens, Count: func(_, cost int) int { return cost }},
		Limit[*call]{Name: "fails", Key: byUser, Limiter: fails, Count: countFailures},
		Limit[*call]{Name: "conc", Key: byKey, Concurrency: conc},
	)
	ctx := context.Background()
	var held Verdict[*call]
	require.Equal(t, Admitted, s.Decide(&Request[*call]{R: &call{key: "k", user: "u"}, Ctx: ctx, N: 1}, &held, false, nil))

	var v Verdict[*call]
	assert.Equal(t, Denied, s.Decide(&Request[*call]{R: &call{key: "k2", user: "u2"}, Ctx: ctx, N: 2}, &v, false, nil))
	assert.Equal(t, "fails", v.Limit(), "2 can never fit in 1")
	assert.False(t, v.Holds())
	assert.Equal(t, 10, remainingOf(t, rate, "k2"), "refunded")
	assert.Equal(t, 100, remainingOf(t, tokens, "u2"), "settled at 0")

	assert.Equal(t, Denied, s.Decide(&Request[*call]{R: &call{key: "k", user: "v"}, Ctx: ctx, N: 1}, &v, false, nil))
	assert.Equal(t, "conc", v.Limit())
	assert.Equal(t, 1, remainingOf(t, fails, "v"), "settled at 0")
	assert.Equal(t, 100, remainingOf(t, tokens, "v"))
	s.Release(ctx, &held, 200)
}

// TestCountShadowAndBadCount: a shadow counting limit reserves and
// settles without refusing; a negative count is reported and leaves the
// estimate charged.
func TestCountShadowAndBadCount(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	shadow, bad := newKeyed(t, 1, mock), newKeyed(t, 10, mock)
	s, ev, rec, _ := setup(t,
		Limit[*call]{Name: "bad", Key: byKey, Limiter: bad, Count: func(int, int) int { return -1 }},
		Limit[*call]{Name: "shadow", Key: byKey, Limiter: shadow, Count: countFailures, Shadow: true},
	)
	ctx := context.Background()
	req := Request[*call]{R: &call{key: "k"}, Ctx: ctx, N: 1}
	var a, b Verdict[*call]
	require.Equal(t, Admitted, s.Decide(&req, &a, false, nil))
	require.Equal(t, Admitted, s.Decide(&req, &b, false, nil), "the shadow limit denies, and does not refuse")
	assert.Contains(t, outcomes(ev.Take()), "shadow:shadow")
	assert.Equal(t, 0, remainingOf(t, shadow, "k"))
	s.Release(ctx, &a, 200)
	assert.Equal(t, 1, remainingOf(t, shadow, "k"), "the shadow reservation settled at 0")
	assert.Equal(t, 8, remainingOf(t, bad, "k"), "a negative count changes nothing")
	require.NotEmpty(t, rec.msgs)
	assert.Equal(t, "ratelimit: limiter error", rec.msgs[len(rec.msgs)-1])
	s.Release(ctx, &b, 200)
}

// TestCountConfigErrors: Count needs a rate limiter that can reserve.
func TestCountConfigErrors(t *testing.T) {
	t.Parallel()
	log, err := ratelimit.NewKeyed(ratelimit.SlidingLogPolicy(5, 60e9))
	require.NoError(t, err)
	for name, l := range map[string]Limit[*call]{
		"sliding log":    {Name: "x", Key: byKey, Limiter: log, Count: countFailures},
		"not a Reserver": {Name: "x", Key: byKey, Limiter: struct{ ratelimit.KeyedLimiter }{log}, Count: countFailures},
		"concurrency":    {Name: "x", Key: byKey, Concurrency: newConc(t, 1), Count: countFailures},
	} {
		_, err := New(Config{Pkg: "testlimit"}, []Limit[*call]{l})
		assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig, name)
		assert.ErrorContains(t, err, `testlimit.Limit.`, name)
	}
}

// TestCountWaitCanceled: a request a counting limit refuses while another
// holds a reservation of its key waits; when its context ends meanwhile
// it is Canceled, charged nowhere.
func TestCountWaitCanceled(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	rate, fails := newKeyed(t, 10, mock), newKeyed(t, 1, mock)
	s, _, _, _ := setup(t,
		Limit[*call]{Name: "rate", Key: byKey, Limiter: rate},
		Limit[*call]{Name: "fails", Key: byUser, Limiter: fails, Count: countFailures},
	)
	var held Verdict[*call]
	require.Equal(t, Admitted, s.Decide(&Request[*call]{R: &call{key: "a", user: "u"}, Ctx: context.Background(), N: 1}, &held, false, nil))

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Outcome, 1)
	go func() {
		var v Verdict[*call]
		done <- s.Decide(&Request[*call]{R: &call{key: "b", user: "u"}, Ctx: ctx, N: 1}, &v, false, nil)
	}()
	cancel()
	assert.Equal(t, Canceled, <-done)
	assert.Equal(t, 10, remainingOf(t, rate, "b"), "refunded")
	s.Release(context.Background(), &held, 200)
	assert.Equal(t, 1, remainingOf(t, fails, "u"))
}
