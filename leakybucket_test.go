package ratelimit

import (
	"testing"
	"time"

	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newTestLeakyBucket(t *testing.T, capacity int, leakEvery time.Duration) (*LeakyBucket, *fakeclock.Mock) {
	t.Helper()
	mock := fakeclock.New(testStart)
	b, err := NewLeakyBucket(capacity, leakEvery, WithClock(mock))
	require.NoError(t, err)
	return b, mock
}

// TestLeakyBucketScript: the meter with capacity 3, one event leaking
// every 100ms, every Decision field checked.
func TestLeakyBucketScript(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	b, mock := newTestLeakyBucket(t, 3, 100*ms)
	runSteps(t, b, mock, []step{
		{at: 0, n: 0, peek: true, want: wantAllow(3, 3, 0)},
		{at: 0, n: 1, want: wantAllow(3, 2, 100*ms)},
		{at: 0, n: 2, want: wantAllow(3, 0, 300*ms)},
		{at: 0, n: 1, want: wantDeny(3, 0, 100*ms, 300*ms)},
		{at: 0, n: 3, want: wantDeny(3, 0, 300*ms, 300*ms)},
		{at: 99 * ms, n: 1, want: wantDeny(3, 0, 1*ms, 201*ms)},
		{at: 100 * ms, n: 1, want: wantAllow(3, 0, 300*ms)},
		{at: 100 * ms, n: 1, want: wantDeny(3, 0, 100*ms, 300*ms)},
		{at: 250 * ms, n: 0, peek: true, want: wantAllow(3, 1, 150*ms)},
		{at: 250 * ms, n: 2, want: wantDeny(3, 1, 50*ms, 150*ms)},
		{at: 250 * ms, n: 2, peek: true, want: wantDeny(3, 1, 50*ms, 150*ms)},
		{at: 250 * ms, n: 1, want: wantAllow(3, 0, 250*ms)},
		{at: 499 * ms, n: 0, peek: true, want: wantAllow(3, 2, 1*ms)},
		{at: 500 * ms, n: 0, peek: true, want: wantAllow(3, 3, 0)},
		{at: 550 * ms, n: 4, want: wantDeny(3, 3, RetryNever, 0)},
		{at: 550 * ms, n: 0, want: wantDeny(3, 3, RetryNever, 0)},
		{at: 550 * ms, n: -7, want: wantDeny(3, 3, RetryNever, 0)},
		{at: time.Hour, n: 3, want: wantAllow(3, 0, 300*ms)},
	})
}

// TestLeakyBucketDrainsOnePerInterval: a full bucket's level drops by
// exactly one event every leakEvery, not a nanosecond sooner.
func TestLeakyBucketDrainsOnePerInterval(t *testing.T) {
	t.Parallel()
	const every = 70 * time.Millisecond
	b, mock := newTestLeakyBucket(t, 4, every)
	steps := []step{{at: 0, n: 4, want: wantAllow(4, 0, 4*every)}}
	for k := 1; k <= 4; k++ {
		at := time.Duration(k) * every
		steps = append(steps,
			step{at: at - 1, n: 0, peek: true, want: wantAllow(4, k-1, 4*every-at+1)},
			step{at: at, n: 0, peek: true, want: wantAllow(4, k, 4*every-at)},
		)
	}
	runSteps(t, b, mock, steps)

	// Saturated through decide: one event per leakEvery, for 1000 of them.
	s := newLeakyBucketSim(t, 4, every)
	const t0 = int64(1_699_999_200_000_000_123)
	require.True(t, s.allowN(t0, 4, true).Allowed)
	for k := int64(1); k <= 1000; k++ {
		at := t0 + k*int64(every)
		d := s.allowN(at-1, 1, true)
		require.Equalf(t, wantDeny(4, 0, 1, 3*every+1), d, "AllowN(1) 1ns before leak %d = %+v", k, d)
		d = s.allowN(at, 1, true)
		require.Equalf(t, wantAllow(4, 0, 4*every), d, "AllowN(1) at leak %d = %+v", k, d)
	}
}

// TestLeakyBucketDeniedNotRecorded: a flood of denials leaves the level
// exactly where the admitted events put it.
func TestLeakyBucketDeniedNotRecorded(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	b, mock := newTestLeakyBucket(t, 3, 100*ms)
	var flood []step
	for at := time.Duration(0); at < 100*ms; at += 9 * ms {
		flood = append(flood, repeatSteps(40, step{at: at, n: 1, want: wantDeny(3, 0, 100*ms-at, 300*ms-at)})...)
		flood = append(flood, repeatSteps(40, step{at: at, n: 3, want: wantDeny(3, 0, 300*ms-at, 300*ms-at)})...)
	}
	runSteps(t, b, mock, concatSteps(
		[]step{{at: 0, n: 3, want: wantAllow(3, 0, 300*ms)}},
		flood,
		[]step{
			{at: 200 * ms, n: 0, peek: true, want: wantAllow(3, 2, 100*ms)},
			{at: 200 * ms, n: 2, want: wantAllow(3, 0, 300*ms)},
		},
	))
}

// TestLeakyBucketSetRateKeepsLevel: the events in the bucket stay in it.
func TestLeakyBucketSetRateKeepsLevel(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	b, mock := newTestLeakyBucket(t, 3, 100*ms)
	require.True(t, b.AllowN(2).Allowed)

	require.NoError(t, b.SetRate(100, 100*ms))
	assert.Equal(t, 100, b.Peek(0).Limit)
	assert.Equal(t, wantAllow(100, 98, 200*ms), b.Peek(0), "2 events in, capacity raised to 100")

	require.NoError(t, b.SetRate(100, time.Second))
	assert.Equal(t, wantAllow(100, 98, 2*time.Second), b.Peek(0), "2 events now drain at 1/s")

	require.NoError(t, b.SetRate(1, time.Second))
	d := b.AllowN(1)
	assert.Equal(t, wantDeny(1, 0, 2*time.Second, 2*time.Second), d, "2 events in a bucket of 1")

	require.NoError(t, b.SetRate(3, 100*ms))
	assert.Equal(t, wantAllow(3, 1, 200*ms), b.Peek(0), "back to 3 at 100ms: still 2 events in")

	// A fraction of an event keeps its size: 1.5 events at 100ms is 1.5
	// events at 1s.
	mock.Add(50 * ms)
	require.NoError(t, b.SetRate(3, time.Second))
	assert.Equal(t, wantAllow(3, 1, 1500*ms), b.Peek(0))
	mock.Add(1500 * ms)
	assert.Equal(t, wantAllow(3, 3, 0), b.Peek(0))
}
