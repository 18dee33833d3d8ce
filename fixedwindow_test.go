package ratelimit

import (
	"testing"
	"time"

	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newTestFixedWindow(t *testing.T, limit int, window time.Duration) (*FixedWindow, *fakeclock.Mock) {
	t.Helper()
	mock := fakeclock.New(testStart)
	w, err := NewFixedWindow(limit, window, WithClock(mock))
	require.NoError(t, err)
	return w, mock
}

// TestFixedWindowScript: limit 3 per 1s window, every Decision field
// checked.
func TestFixedWindowScript(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	w, mock := newTestFixedWindow(t, 3, time.Second)
	runSteps(t, w, mock, []step{
		{at: 0, n: 0, peek: true, want: wantAllow(3, 3, 0)},
		{at: 0, n: 1, want: wantAllow(3, 2, time.Second)},
		{at: 500 * ms, n: 2, want: wantAllow(3, 0, 500*ms)},
		{at: 500 * ms, n: 1, want: wantDeny(3, 0, 500*ms, 500*ms)},
		{at: 500 * ms, n: 3, want: wantDeny(3, 0, 500*ms, 500*ms)},
		{at: time.Second - 1, n: 1, want: wantDeny(3, 0, 1, 1)},
		{at: time.Second, n: 1, want: wantAllow(3, 2, time.Second)},
		{at: 1500 * ms, n: 0, peek: true, want: wantAllow(3, 2, 500*ms)},
		{at: 1500 * ms, n: 3, want: wantDeny(3, 2, 500*ms, 500*ms)},
		{at: 1500 * ms, n: 3, peek: true, want: wantDeny(3, 2, 500*ms, 500*ms)},
		{at: 1500 * ms, n: 2, peek: true, want: wantAllow(3, 0, 500*ms)},
		{at: 3 * time.Second, n: 0, peek: true, want: wantAllow(3, 3, 0)},
		{at: 3 * time.Second, n: 4, want: wantDeny(3, 3, RetryNever, 0)},
		{at: 3 * time.Second, n: 0, want: wantDeny(3, 3, RetryNever, 0)},
		{at: 3 * time.Second, n: -2, want: wantDeny(3, 3, RetryNever, 0)},
		{at: 3*time.Second + 250*ms, n: 3, want: wantAllow(3, 0, 750*ms)},
	})
}

// TestFixedWindowBoundaryBurst shows the documented weakness: limit events
// just before a window boundary and limit more just after, 2x limit within
// 1ms.
func TestFixedWindowBoundaryBurst(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	w, mock := newTestFixedWindow(t, 5, time.Second)
	runSteps(t, w, mock, concatSteps(
		[]step{
			{at: 999 * ms, n: 1, want: wantAllow(5, 4, 1*ms)},
			{at: 999 * ms, n: 1, want: wantAllow(5, 3, 1*ms)},
			{at: 999 * ms, n: 3, want: wantAllow(5, 0, 1*ms)},
			{at: 999 * ms, n: 1, want: wantDeny(5, 0, 1*ms, 1*ms)},
		},
		repeatSteps(1, step{at: 1000 * ms, n: 5, want: wantAllow(5, 0, time.Second)}),
		[]step{{at: 1000 * ms, n: 1, want: wantDeny(5, 0, time.Second, time.Second)}},
	))

	// The same through Allow: 10 admitted in [999ms, 1000ms].
	w2, mock2 := newTestFixedWindow(t, 5, time.Second)
	admitted := 0
	for _, at := range []time.Duration{999 * ms, 1000 * ms} {
		mock2.Set(testStart.Add(at))
		for range 20 {
			if w2.Allow() {
				admitted++
			}
		}
	}
	assert.Equal(t, 10, admitted, "events admitted within 1ms across a window boundary (2x limit)")
}

// TestFixedWindowAlignedToEpoch: windows start at multiples of the window
// since the Unix epoch, not when the limiter was made.
func TestFixedWindowAlignedToEpoch(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	mock := fakeclock.New(testStart)
	mock.Set(testStart.Add(300 * ms))
	w, err := NewFixedWindow(3, time.Second, WithClock(mock))
	require.NoError(t, err)
	runSteps(t, w, mock, []step{
		{at: 300 * ms, n: 3, want: wantAllow(3, 0, 700*ms)},
		{at: 999 * ms, n: 1, want: wantDeny(3, 0, 1*ms, 1*ms)},
		{at: 1000 * ms, n: 0, peek: true, want: wantAllow(3, 3, 0)},
	})

	// A one-minute window starts on the minute, from any creation time.
	mock2 := fakeclock.New(time.Date(2024, 5, 6, 7, 8, 9, 10, time.UTC))
	m, err := NewFixedWindow(1, time.Minute, WithClock(mock2))
	require.NoError(t, err)
	d := m.AllowN(1)
	assert.Equal(t, wantAllow(1, 0, 51*time.Second-10), d)
}

// TestFixedWindowDeniedNotRecorded: a flood of denials does not count:
// raising the limit afterwards makes room exactly as if they never
// happened, and the next window starts empty.
func TestFixedWindowDeniedNotRecorded(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	w, mock := newTestFixedWindow(t, 3, time.Second)
	var flood []step
	for at := time.Duration(0); at < time.Second; at += 97 * ms {
		flood = append(flood, repeatSteps(50, step{at: at, n: 1, want: wantDeny(3, 0, time.Second-at, time.Second-at)})...)
		flood = append(flood, repeatSteps(10, step{at: at, n: 3, want: wantDeny(3, 0, time.Second-at, time.Second-at)})...)
	}
	runSteps(t, w, mock, concatSteps(
		[]step{{at: 0, n: 3, want: wantAllow(3, 0, time.Second)}},
		flood,
	))
	require.NoError(t, w.SetLimit(5))
	runSteps(t, w, mock, []step{
		{at: 990 * ms, n: 0, peek: true, want: wantAllow(5, 2, 10*ms)},
		{at: 1000 * ms, n: 0, peek: true, want: wantAllow(5, 5, 0)},
	})
}

// TestFixedWindowSetLimitKeepsCount: events counted in the current window
// count against the new limit.
func TestFixedWindowSetLimitKeepsCount(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	w, mock := newTestFixedWindow(t, 5, time.Second)
	mock.Add(200 * ms)
	require.True(t, w.AllowN(3).Allowed)
	require.NoError(t, w.SetLimit(100))
	assert.Equal(t, 100, w.Peek(0).Limit)
	assert.Equal(t, wantAllow(100, 97, 800*ms), w.Peek(0))
	require.NoError(t, w.SetLimit(2))
	assert.Equal(t, 2, w.Peek(0).Limit)
	assert.Equal(t, wantDeny(2, 0, 800*ms, 800*ms), w.AllowN(1), "3 counted, limit lowered to 2")
	assert.Equal(t, 0, w.Peek(0).Remaining)
	mock.Add(800 * ms)
	assert.Equal(t, wantAllow(2, 1, time.Second), w.AllowN(1), "next window")
}
