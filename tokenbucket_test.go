package ratelimit

import (
	"testing"
	"time"

	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newTestTokenBucket(t *testing.T, capacity, refill int, per time.Duration) (*TokenBucket, *fakeclock.Mock) {
	t.Helper()
	mock := fakeclock.New(testStart)
	b, err := NewTokenBucket(Per(refill, per), capacity, WithClock(mock))
	require.NoError(t, err)
	return b, mock
}

// TestTokenBucketScript: capacity 5, refill 10 per second (one token per
// 100ms), every Decision field checked.
func TestTokenBucketScript(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	b, mock := newTestTokenBucket(t, 5, 10, time.Second)
	runSteps(t, b, mock, []step{
		{at: 0, n: 0, peek: true, want: wantAllow(5, 5, 0)},
		{at: 0, n: 1, want: wantAllow(5, 4, 100*ms)},
		{at: 0, n: 4, want: wantAllow(5, 0, 500*ms)},
		{at: 0, n: 1, want: wantDeny(5, 0, 100*ms, 500*ms)},
		{at: 0, n: 5, want: wantDeny(5, 0, 500*ms, 500*ms)},
		// 99ms refill 0.99 of a token: not enough.
		{at: 99 * ms, n: 1, want: wantDeny(5, 0, 1*ms, 401*ms)},
		// Exactly 100ms: exactly one.
		{at: 100 * ms, n: 1, want: wantAllow(5, 0, 500*ms)},
		{at: 100 * ms, n: 1, want: wantDeny(5, 0, 100*ms, 500*ms)},
		// 2.5 tokens at 350ms.
		{at: 350 * ms, n: 0, peek: true, want: wantAllow(5, 2, 250*ms)},
		{at: 350 * ms, n: 3, want: wantDeny(5, 2, 50*ms, 250*ms)},
		{at: 350 * ms, n: 3, peek: true, want: wantDeny(5, 2, 50*ms, 250*ms)},
		{at: 350 * ms, n: 2, peek: true, want: wantAllow(5, 0, 450*ms)},
		{at: 400 * ms, n: 3, want: wantAllow(5, 0, 500*ms)},
		// Full again 500ms later, and never above capacity.
		{at: 899 * ms, n: 0, peek: true, want: wantAllow(5, 4, 1*ms)},
		{at: 900 * ms, n: 0, peek: true, want: wantAllow(5, 5, 0)},
		{at: 900 * ms, n: 6, want: wantDeny(5, 5, RetryNever, 0)},
		{at: 900 * ms, n: 0, want: wantDeny(5, 5, RetryNever, 0)},
		{at: 900 * ms, n: -1, want: wantDeny(5, 5, RetryNever, 0)},
		{at: 10 * time.Second, n: 0, peek: true, want: wantAllow(5, 5, 0)},
		{at: 10 * time.Second, n: 5, want: wantAllow(5, 0, 500*ms)},
		{at: 10 * time.Second, n: 1, want: wantDeny(5, 0, 100*ms, 500*ms)},
		{at: 10*time.Second + 200*ms, n: 6, want: wantDeny(5, 2, RetryNever, 300*ms)},
		{at: 10*time.Second + 200*ms, n: 2, want: wantAllow(5, 0, 500*ms)},
	})
}

// TestTokenBucketExactRefill checks refill 10/s: after exactly 100ms
// exactly one more event, after 99.999999ms none, for 1000 intervals.
func TestTokenBucketExactRefill(t *testing.T) {
	t.Parallel()
	s := newTokenBucketSim(t, 1, 10, time.Second)
	const t0 = int64(1_699_999_200_000_000_007)
	require.True(t, s.allowN(t0, 1, true).Allowed)
	for k := int64(1); k <= 1000; k++ {
		at := t0 + k*int64(100*time.Millisecond)
		d := s.allowN(at-1, 1, true)
		require.Equalf(t, wantDeny(1, 0, 1, 1), d, "AllowN(1) 1ns before token %d = %+v", k, d)
		d = s.allowN(at, 1, true)
		require.Equalf(t, wantAllow(1, 0, 100*time.Millisecond), d, "AllowN(1) at token %d = %+v", k, d)
	}
}

// TestTokenBucketNoDrift: 3 tokens per second is 333,333,333.3ns per token.
// Token k of an hour arrives exactly at ceil(k*1e9/3) ns, never earlier,
// never later. (Capacity 2 so that the bucket is never full and no fraction
// of a token is lost to the cap.)
func TestTokenBucketNoDrift(t *testing.T) {
	t.Parallel()
	s := newTokenBucketSim(t, 2, 3, time.Second)
	const t0 = int64(1_699_999_200_000_000_000)
	d := s.allowN(t0, 2, true)
	require.Equal(t, wantAllow(2, 0, 666_666_667), d)
	d = s.allowN(t0, 1, true)
	require.Equal(t, wantDeny(2, 0, 333_333_334, 666_666_667), d)
	for k := int64(1); k <= 3*3600; k++ {
		at := t0 + (k*int64(time.Second)+2)/3
		d := s.allowN(at-1, 1, true)
		require.Falsef(t, d.Allowed, "AllowN(1) 1ns before token %d (at %d) = %+v", k, at-t0, d)
		require.Equalf(t, time.Duration(1), d.RetryAfter, "AllowN(1) 1ns before token %d = %+v", k, d)
		d = s.allowN(at, 1, true)
		require.Truef(t, d.Allowed, "AllowN(1) at token %d (at %d) = %+v", k, at-t0, d)
	}
}

// TestTokenBucketMock: the same exactness through the public API. With
// capacity 1 the bucket is full at 333,333,334ns and the 2/3ns of refill
// beyond a token is capped away, as capacity demands.
func TestTokenBucketMock(t *testing.T) {
	t.Parallel()
	b, mock := newTestTokenBucket(t, 1, 3, time.Second)
	require.True(t, b.Allow())
	mock.Add(333_333_333)
	assert.Equal(t, wantDeny(1, 0, 1, 1), b.AllowN(1))
	mock.Add(1)
	assert.Equal(t, wantAllow(1, 0, 333_333_334), b.AllowN(1))
	mock.Add(333_333_333)
	assert.Equal(t, wantDeny(1, 0, 1, 1), b.AllowN(1), "the capped fraction is not carried over")
	mock.Add(1)
	assert.Equal(t, wantAllow(1, 0, 333_333_334), b.AllowN(1))
}

// TestTokenBucketDeniedNotRecorded: after a flood of denials the bucket
// holds exactly what refill alone gave it.
func TestTokenBucketDeniedNotRecorded(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	b, mock := newTestTokenBucket(t, 5, 10, time.Second)
	var flood []step
	for at := time.Duration(0); at < 100*ms; at += 7 * ms {
		flood = append(flood, repeatSteps(50, step{at: at, n: 1, want: wantDeny(5, 0, 100*ms-at, 500*ms-at)})...)
		flood = append(flood, repeatSteps(50, step{at: at, n: 5, want: wantDeny(5, 0, 500*ms-at, 500*ms-at)})...)
	}
	runSteps(t, b, mock, concatSteps(
		[]step{{at: 0, n: 5, want: wantAllow(5, 0, 500*ms)}},
		flood,
		[]step{
			{at: 300 * ms, n: 0, peek: true, want: wantAllow(5, 3, 200*ms)},
			{at: 300 * ms, n: 3, want: wantAllow(5, 0, 500*ms)},
		},
	))
}

// TestTokenBucketSetRateKeepsTokens: changing the rate never mints tokens.
func TestTokenBucketSetRateKeepsTokens(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	b, mock := newTestTokenBucket(t, 5, 10, time.Second)
	require.True(t, b.AllowN(3).Allowed)

	require.NoError(t, b.SetRate(Per(10, time.Second), 100))
	assert.Equal(t, 100, b.Peek(0).Limit)
	assert.Equal(t, wantAllow(100, 2, 9800*ms), b.Peek(0), "2 tokens left, capacity raised to 100")
	mock.Add(100 * ms)
	assert.Equal(t, 3, b.Peek(0).Remaining, "100ms after raising the capacity")

	require.NoError(t, b.SetRate(Per(1, time.Hour), 100))
	assert.Equal(t, 3, b.Peek(0).Remaining, "after slowing the refill")

	require.NoError(t, b.SetRate(Per(10, time.Second), 1))
	assert.Equal(t, wantAllow(1, 1, 0), b.Peek(0), "capacity lowered to 1")
	require.NoError(t, b.SetRate(Per(10, time.Second), 5))
	assert.Equal(t, wantAllow(5, 1, 400*ms), b.Peek(0), "capacity raised back: the capped tokens are gone")
	mock.Add(400 * ms)
	assert.Equal(t, wantAllow(5, 5, 0), b.Peek(0))
	assert.Equal(t, wantDeny(5, 5, RetryNever, 0), b.AllowN(6))
}

// TestTokenBucketSetRateFractions: a fraction of a token carries over
// exactly when the scale changes (3/s to 10/s).
func TestTokenBucketSetRateFractions(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	b, mock := newTestTokenBucket(t, 5, 3, time.Second)
	require.True(t, b.AllowN(5).Allowed)
	mock.Add(500 * ms) // 1.5 tokens
	require.Equal(t, 1, b.Peek(0).Remaining)
	require.NoError(t, b.SetRate(Per(10, time.Second), 5))
	assert.Equal(t, wantAllow(5, 1, 350*ms), b.Peek(0), "1.5 tokens at 10/s")
	mock.Add(49 * ms)
	assert.Equal(t, 1, b.Peek(0).Remaining, "1.99 tokens")
	mock.Add(1 * ms)
	assert.Equal(t, wantAllow(5, 2, 300*ms), b.Peek(0), "2.0 tokens")
}

// TestTokenBucketIdleNeverAboveCapacity: a long idle period fills the
// bucket to capacity and no further.
func TestTokenBucketIdleNeverAboveCapacity(t *testing.T) {
	t.Parallel()
	b, mock := newTestTokenBucket(t, 3, 1000, time.Second)
	mock.Add(24 * time.Hour)
	assert.Equal(t, wantAllow(3, 0, 3*time.Millisecond), b.AllowN(3))
	assert.Equal(t, wantDeny(3, 0, time.Millisecond, 3*time.Millisecond), b.AllowN(1))
}
