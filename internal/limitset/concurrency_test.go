package limitset

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

func newConc(t *testing.T, limit int) *ratelimit.Concurrency {
	t.Helper()
	c, err := ratelimit.NewConcurrency(limit)
	require.NoError(t, err)
	return c
}

// TestConcurrencyAllOrNothing: with two concurrency limits and a rate
// limit, the second concurrency limit's denial releases the first's
// permit and refunds the rate limit; an admitted request holds a permit
// in each until Release, which is idempotent and reported once per limit.
func TestConcurrencyAllOrNothing(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	rate := newKeyed(t, 10, mock)
	wide, narrow := newConc(t, 5), newConc(t, 1)
	var obs events
	s, err := New(Config{Pkg: "test", Observer: &obs, Clock: mock}, []Limit[*call]{
		{Name: "wide", Key: byKey, Concurrency: wide},
		{Name: "rate", Key: byKey, Limiter: rate},
		{Name: "narrow", Key: byUser, Concurrency: narrow},
	})
	require.NoError(t, err)
	ctx := context.Background()

	req := Request[*call]{R: &call{key: "k", user: "u"}, Ctx: ctx, N: 1}
	var held Verdict[*call]
	require.Equal(t, Admitted, s.Decide(&req, &held, false, nil))
	require.True(t, held.Holds())
	assert.Equal(t, 1, wide.InFlight("k"))
	assert.Equal(t, 1, narrow.InFlight("u"))
	assert.Equal(t, "narrow", held.Limit(), "the most restrictive: r=0")
	assert.True(t, held.Concurrent())
	names := []string{}
	for _, c := range held.Charges() {
		names = append(names, c.Entry.Name)
	}
	assert.Equal(t, []string{"rate", "wide", "narrow"}, names, "rate limits first, then concurrency limits")
	obs.Take()

	var v Verdict[*call]
	require.Equal(t, Denied, s.Decide(&req, &v, false, nil))
	assert.False(t, v.Holds())
	assert.Equal(t, "narrow", v.Limit())
	assert.Equal(t, 1, wide.InFlight("k"), "the wide limit's permit of the denied request is released")
	d, err := rate.Peek(ctx, "k", 0)
	require.NoError(t, err)
	assert.Equal(t, 9, d.Remaining, "the rate limit is refunded")
	got := obs.Take()
	require.Len(t, got, 1, "only the refusal is reported: %v", got)
	assert.Equal(t, ratelimit.OutcomeDenied, got[0].Outcome)
	assert.Equal(t, "narrow", got[0].Name)

	s.Release(ctx, &held, 0)
	s.Release(ctx, &held, 0) // idempotent
	assert.False(t, held.Holds())
	assert.Equal(t, 0, wide.InFlight("k"))
	assert.Equal(t, 0, narrow.InFlight("u"))
	got = obs.Take()
	require.Len(t, got, 2)
	for _, e := range got {
		assert.Equal(t, ratelimit.OutcomeReleased, e.Outcome)
		assert.Equal(t, ratelimit.ConcurrencyAlgorithm, e.Algorithm)
		assert.Equal(t, 1, e.N)
	}
}

// canceledConc fails with the caller's context done, having admitted.
type canceledConc struct{ *ratelimit.Concurrency }

func (c canceledConc) TryAcquire(ctx context.Context, key string, n int) (ratelimit.Permit, ratelimit.Decision, error) {
	p, d, _ := c.Concurrency.TryAcquire(ctx, key, n)
	return p, d, errors.New("ratelimit: the caller went away")
}

// TestConcurrencyCanceled: a request whose context ended while its permit
// was being acquired is Canceled: nothing held, the rate limits refunded.
func TestConcurrencyCanceled(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	rate := newKeyed(t, 10, mock)
	conc := newConc(t, 2)
	s, err := New(Config{Pkg: "test", Clock: mock}, []Limit[*call]{
		{Name: "rate", Key: byKey, Limiter: rate},
		{Name: "conc", Key: byKey, Concurrency: canceledConc{conc}},
	})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var v Verdict[*call]
	assert.Equal(t, Canceled, s.Decide(&Request[*call]{R: &call{key: "k"}, Ctx: ctx, N: 1}, &v, false, nil))
	assert.False(t, v.Holds())
	assert.Equal(t, 0, conc.InFlight("k"))
	d, err := rate.Peek(context.Background(), "k", 0)
	require.NoError(t, err)
	assert.Equal(t, 10, d.Remaining)
}

// TestConcurrencyFields: a concurrency limit's fields carry its quota
// unit and no time: no w, no t, no X-RateLimit-Reset, no Retry-After when
// full (one when blocked).
func TestConcurrencyFields(t *testing.T) {
	t.Parallel()
	conc := newConc(t, 1)
	s, err := New(Config{Pkg: "test"}, []Limit[*call]{{Name: "c", Key: byKey, Concurrency: conc}})
	require.NoError(t, err)
	req := Request[*call]{R: &call{key: "k"}, Ctx: context.Background(), N: 1}
	var held, v Verdict[*call]
	require.Equal(t, Admitted, s.Decide(&req, &held, false, nil))
	h := map[string][]string{}
	s.WriteFields(h, &HTTPNames, AllFields, &held)
	assert.Equal(t, map[string][]string{
		"X-Ratelimit-Limit": {"1"}, "X-Ratelimit-Remaining": {"0"},
		"Ratelimit-Policy": {`"c";q=1;qu="concurrent-requests"`}, "Ratelimit": {`"c";r=0`},
	}, h)
	require.Equal(t, Denied, s.Decide(&req, &v, false, nil))
	h = map[string][]string{}
	s.WriteFields(h, &GRPCNames, AllFields, &v)
	assert.Equal(t, map[string][]string{
		"x-ratelimit-limit": {"1"}, "x-ratelimit-remaining": {"0"},
		"ratelimit-policy": {`"c";q=1;qu="concurrent-requests"`}, "ratelimit": {`"c";r=0`},
	}, h)
	s.Release(context.Background(), &held, 0)
}
