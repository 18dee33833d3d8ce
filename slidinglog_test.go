package ratelimit

import (
	"testing"
	"time"

	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newTestSlidingLog(t *testing.T, limit int, window time.Duration) (*SlidingLog, *fakeclock.Mock) {
	t.Helper()
	mock := fakeclock.New(testStart)
	l, err := NewSlidingLog(limit, window, WithClock(mock))
	require.NoError(t, err)
	return l, mock
}

// TestSlidingLogScript: limit 3 in any 1s, every Decision field checked.
func TestSlidingLogScript(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	l, mock := newTestSlidingLog(t, 3, time.Second)
	runSteps(t, l, mock, []step{
		{at: 0, n: 0, peek: true, want: wantAllow(3, 3, 0)},
		{at: 0, n: 1, want: wantAllow(3, 2, time.Second)},
		{at: 200 * ms, n: 1, want: wantAllow(3, 1, time.Second)},
		{at: 400 * ms, n: 0, peek: true, want: wantAllow(3, 1, 800*ms)},
		// 2 more need the entry at 0 to expire, at 1000ms.
		{at: 400 * ms, n: 2, want: wantDeny(3, 1, 600*ms, 800*ms)},
		{at: 400 * ms, n: 2, peek: true, want: wantDeny(3, 1, 600*ms, 800*ms)},
		{at: 400 * ms, n: 1, want: wantAllow(3, 0, time.Second)},
		{at: 999 * ms, n: 1, want: wantDeny(3, 0, 1*ms, 401*ms)},
		// An entry is kept while ts > now - window.
		{at: time.Second - 1, n: 1, want: wantDeny(3, 0, 1, 400*ms+1)},
		{at: time.Second, n: 1, want: wantAllow(3, 0, time.Second)},
		{at: time.Second, n: 1, want: wantDeny(3, 0, 200*ms, time.Second)},
		{at: time.Second, n: 3, want: wantDeny(3, 0, time.Second, time.Second)},
		{at: 1200 * ms, n: 0, peek: true, want: wantAllow(3, 1, 800*ms)},
		{at: 2 * time.Second, n: 0, peek: true, want: wantAllow(3, 3, 0)},
		{at: 2 * time.Second, n: 4, want: wantDeny(3, 3, RetryNever, 0)},
		{at: 2 * time.Second, n: 0, want: wantDeny(3, 3, RetryNever, 0)},
		{at: 2 * time.Second, n: -1, want: wantDeny(3, 3, RetryNever, 0)},
	})
}

// TestSlidingLogNoBoundaryBurst: the pattern that passes 2x limit through a
// fixed window (TestFixedWindowBoundaryBurst) is denied by the sliding log.
func TestSlidingLogNoBoundaryBurst(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	l, mock := newTestSlidingLog(t, 5, time.Second)
	runSteps(t, l, mock, []step{
		{at: 999 * ms, n: 1, want: wantAllow(5, 4, time.Second)},
		{at: 999 * ms, n: 1, want: wantAllow(5, 3, time.Second)},
		{at: 999 * ms, n: 3, want: wantAllow(5, 0, time.Second)},
		{at: 999 * ms, n: 1, want: wantDeny(5, 0, time.Second, time.Second)},
		{at: 1000 * ms, n: 5, want: wantDeny(5, 0, 999*ms, 999*ms)},
		{at: 1000 * ms, n: 1, want: wantDeny(5, 0, 999*ms, 999*ms)},
		{at: 1998 * ms, n: 1, want: wantDeny(5, 0, 1*ms, 1*ms)},
		{at: 1999 * ms, n: 5, want: wantAllow(5, 0, time.Second)},
	})

	l2, mock2 := newTestSlidingLog(t, 5, time.Second)
	admitted := 0
	for _, at := range []time.Duration{999 * ms, 1000 * ms} {
		mock2.Set(testStart.Add(at))
		for range 20 {
			if l2.Allow() {
				admitted++
			}
		}
	}
	assert.Equal(t, 5, admitted, "events admitted within 1ms across a window boundary")
}

// TestSlidingLogDeniedNotRecorded: a flood of denials leaves no entries.
func TestSlidingLogDeniedNotRecorded(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	l, mock := newTestSlidingLog(t, 3, time.Second)
	var flood []step
	for at := 100 * ms; at < time.Second; at += 83 * ms {
		// The entry at 0 leaves at 1000ms, the two at 100ms at 1100ms.
		flood = append(flood, repeatSteps(30, step{at: at, n: 1, want: wantDeny(3, 0, time.Second-at, 1100*ms-at)})...)
		flood = append(flood, repeatSteps(10, step{at: at, n: 2, want: wantDeny(3, 0, 1100*ms-at, 1100*ms-at)})...)
	}
	runSteps(t, l, mock, concatSteps(
		[]step{
			{at: 0, n: 1, want: wantAllow(3, 2, time.Second)},
			{at: 100 * ms, n: 2, want: wantAllow(3, 0, time.Second)},
		},
		flood,
		[]step{
			{at: 1000 * ms, n: 0, peek: true, want: wantAllow(3, 1, 100*ms)},
			{at: 1100 * ms, n: 0, peek: true, want: wantAllow(3, 3, 0)},
		},
	))
	assert.Equal(t, 0, l.c.st.log.Len(), "log entries after the flood expired")
}

// TestSlidingLogMemoryGrowsOnDemand: no limit-sized buffer up front, events
// at the same nanosecond share an entry, and the buffer never outgrows
// the limit.
func TestSlidingLogMemoryGrowsOnDemand(t *testing.T) {
	t.Parallel()
	l, mock := newTestSlidingLog(t, 1_000_000, time.Minute)
	assert.Equal(t, 0, l.c.st.log.Cap(), "buffer of a fresh log")
	for range 10 {
		require.True(t, l.Allow())
	}
	assert.Equal(t, 1, l.c.st.log.Len(), "entries for 10 events at one instant")
	assert.Equal(t, 1, l.c.st.log.Cap(), "buffer after one instant")
	for range 4 {
		mock.Add(time.Millisecond)
		require.True(t, l.Allow())
	}
	assert.Equal(t, 5, l.c.st.log.Len())
	assert.Equal(t, 8, l.c.st.log.Cap(), "buffer doubles")
	mock.Add(time.Minute)
	require.True(t, l.Allow())
	assert.Equal(t, 1, l.c.st.log.Len(), "expired entries are dropped")
	assert.LessOrEqual(t, l.c.st.log.Cap(), 4, "buffer shrinks when mostly empty")

	small, mock2 := newTestSlidingLog(t, 3, time.Minute)
	for range 3 {
		require.True(t, small.Allow())
		mock2.Add(time.Millisecond)
	}
	require.False(t, small.Allow())
	assert.Equal(t, 3, small.c.st.log.Cap(), "buffer of a full log with limit 3")
}

// TestSlidingLogSetLimitKeepsLog: events in the log count against a new
// limit.
func TestSlidingLogSetLimitKeepsLog(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	l, mock := newTestSlidingLog(t, 5, time.Second)
	runSteps(t, l, mock, []step{
		{at: 0, n: 1, want: wantAllow(5, 4, time.Second)},
		{at: 100 * ms, n: 1, want: wantAllow(5, 3, time.Second)},
		{at: 200 * ms, n: 1, want: wantAllow(5, 2, time.Second)},
	})
	require.NoError(t, l.SetLimit(100))
	assert.Equal(t, 100, l.Peek(0).Limit)
	assert.Equal(t, wantAllow(100, 97, time.Second), l.Peek(0))
	require.NoError(t, l.SetLimit(2))
	assert.Equal(t, 2, l.Peek(0).Limit)
	// 3 in the log, limit 2: one more needs two entries gone (the one at
	// 100ms leaves at 1100ms).
	assert.Equal(t, wantDeny(2, 0, 900*ms, time.Second), l.AllowN(1))
	mock.Add(900 * ms)
	assert.Equal(t, wantAllow(2, 0, time.Second), l.AllowN(1))
}

// TestSlidingLogSlotsAfterDrain: a log filled to its limit of 1,000
// distinct timestamps and drained to 126 holds at most 4 slots per entry
// (the ring halves when a quarter full), as the README's memory figure says.
func TestSlidingLogSlotsAfterDrain(t *testing.T) {
	t.Parallel()
	l, mock := newTestSlidingLog(t, 1000, time.Second)
	for range 1000 {
		require.True(t, l.Allow())
		mock.Add(time.Millisecond)
	}
	require.Equal(t, 1000, l.c.st.log.Len())
	// Now the oldest is 1000ms old: advance so that 126 remain.
	mock.Add(873 * time.Millisecond)
	l.Peek(0)
	require.Equal(t, 126, l.c.st.log.Len(), "entries left")
	assert.LessOrEqual(t, l.c.st.log.Cap(), 4*126, "slots for 126 entries")
	for l.c.st.log.Len() > 1 {
		mock.Add(time.Millisecond)
		l.Peek(0)
		n, c := l.c.st.log.Len(), l.c.st.log.Cap()
		require.LessOrEqualf(t, c, max(4*n, 1), "slots for %d entries", n)
	}
}
