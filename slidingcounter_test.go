package ratelimit

import (
	"testing"
	"time"

	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newTestSlidingCounter(t *testing.T, limit int, window time.Duration) (*SlidingCounter, *fakeclock.Mock) {
	t.Helper()
	mock := fakeclock.New(testStart)
	c, err := NewSlidingCounter(limit, window, WithClock(mock))
	require.NoError(t, err)
	return c, mock
}

// TestSlidingCounterScript: limit 10 per 1s, every Decision field checked.
func TestSlidingCounterScript(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	c, mock := newTestSlidingCounter(t, 10, time.Second)
	runSteps(t, c, mock, []step{
		{at: 0, n: 0, peek: true, want: wantAllow(10, 10, 0)},
		{at: 0, n: 10, want: wantAllow(10, 0, 2*time.Second)},
		// Next window at 10% is 9 of the 10: one fits at 1100ms.
		{at: 500 * ms, n: 1, want: wantDeny(10, 0, 600*ms, 1500*ms)},
		{at: 1100*ms - 1, n: 1, want: wantDeny(10, 0, 1, 900*ms+1)},
		// 25% into the next window the estimate is 7.5: 2 remain, not 3.
		{at: 1250 * ms, n: 0, peek: true, want: wantAllow(10, 2, 750*ms)},
		{at: 1250 * ms, n: 3, want: wantDeny(10, 2, 50*ms, 750*ms)},
		{at: 1300*ms - 1, n: 3, peek: true, want: wantDeny(10, 2, 1, 700*ms+1)},
		{at: 1300 * ms, n: 3, want: wantAllow(10, 0, 1700*ms)},
		{at: 1300 * ms, n: 1, want: wantDeny(10, 0, 100*ms, 1700*ms)},
		{at: 1500 * ms, n: 0, peek: true, want: wantAllow(10, 2, 1500*ms)},
		// Window 2: the previous count is 3.
		{at: 2000 * ms, n: 0, peek: true, want: wantAllow(10, 7, time.Second)},
		{at: 2500 * ms, n: 0, peek: true, want: wantAllow(10, 8, 500*ms)},
		// 9 fit once 3*(1-e) <= 1: e >= 2/3, at 2,666,666,667ns.
		{at: 2500 * ms, n: 9, want: wantDeny(10, 8, 166_666_667, 500*ms)},
		{at: 2_666_666_666, n: 9, peek: true, want: wantDeny(10, 8, 1, 333_333_334)},
		{at: 2_666_666_667, n: 9, peek: true, want: wantAllow(10, 0, 1_333_333_333)},
		{at: 3000 * ms, n: 0, peek: true, want: wantAllow(10, 10, 0)},
		{at: 3000 * ms, n: 11, want: wantDeny(10, 10, RetryNever, 0)},
		{at: 3000 * ms, n: 0, want: wantDeny(10, 10, RetryNever, 0)},
		{at: 3000 * ms, n: -1, want: wantDeny(10, 10, RetryNever, 0)},
	})
}

// TestSlidingCounterWeightedEstimate: with 10 events in the previous
// window, Remaining = 10 - ceil(10 x (1 - elapsed/window)): the estimate is
// never floored (flooring would over-admit).
func TestSlidingCounterWeightedEstimate(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	tests := []struct {
		at   time.Duration
		want Decision
	}{
		{1000 * ms, wantAllow(10, 0, time.Second)},
		{1000*ms + 1, wantAllow(10, 0, time.Second-1)},
		{1099 * ms, wantAllow(10, 0, 901*ms)},
		{1100 * ms, wantAllow(10, 1, 900*ms)},
		{1250 * ms, wantAllow(10, 2, 750*ms)}, // estimate 7.5
		{1299 * ms, wantAllow(10, 2, 701*ms)}, // 7.01
		{1300 * ms, wantAllow(10, 3, 700*ms)}, // 7
		{1500 * ms, wantAllow(10, 5, 500*ms)},
		{1990 * ms, wantAllow(10, 9, 10*ms)}, // 0.1 still counts as 1
		{2000*ms - 1, wantAllow(10, 9, 1)},
		{2000 * ms, wantAllow(10, 10, 0)},
	}
	c, mock := newTestSlidingCounter(t, 10, time.Second)
	require.True(t, c.AllowN(10).Allowed)
	for _, tt := range tests {
		mock.Set(testStart.Add(tt.at))
		got := c.Peek(0)
		assert.Equalf(t, tt.want, got, "Peek(0) at %v = %+v, want %+v", tt.at, got, tt.want)
	}

	// Previous and current counts together: prev 6, then 4 at the start of
	// the next window.
	c2, mock2 := newTestSlidingCounter(t, 10, time.Second)
	runSteps(t, c2, mock2, []step{
		{at: 0, n: 6, want: wantAllow(10, 4, 2*time.Second)},
		{at: 1000 * ms, n: 4, want: wantAllow(10, 0, 2*time.Second)},
		{at: 1500 * ms, n: 0, peek: true, want: wantAllow(10, 3, 1500*ms)},     // 3 + 4
		{at: 1750 * ms, n: 0, peek: true, want: wantAllow(10, 4, 1250*ms)},     // 1.5 + 4
		{at: 2000 * ms, n: 0, peek: true, want: wantAllow(10, 6, time.Second)}, // 4 + 0
	})
}

// TestSlidingCounterDeniedNotRecorded: a flood of denials leaves the
// counts as the admitted events set them.
func TestSlidingCounterDeniedNotRecorded(t *testing.T) {
	t.Parallel()
	const ms = time.Millisecond
	c, mock := newTestSlidingCounter(t, 10, time.Second)
	require.True(t, c.AllowN(10).Allowed)
	for at := time.Duration(0); at < 1100*ms; at += 61 * ms {
		mock.Set(testStart.Add(at))
		for range 30 {
			d := c.AllowN(1)
			require.Falsef(t, d.Allowed, "AllowN(1) at %v = %+v", at, d)
			require.Positivef(t, d.RetryAfter, "AllowN(1) at %v = %+v", at, d)
		}
	}
	runSteps(t, c, mock, []step{
		{at: 1250 * ms, n: 0, peek: true, want: wantAllow(10, 2, 750*ms)},
		{at: 2000 * ms, n: 0, peek: true, want: wantAllow(10, 10, 0)},
	})
}

// TestSlidingCounterSetLimitKeepsCounts: the counts carry over.
func TestSlidingCounterSetLimitKeepsCounts(t *testing.T) {
	t.Parallel()
	c, mock := newTestSlidingCounter(t, 10, time.Second)
	require.True(t, c.AllowN(5).Allowed)
	require.NoError(t, c.SetLimit(100))
	assert.Equal(t, 100, c.Peek(0).Limit)
	assert.Equal(t, wantAllow(100, 95, 2*time.Second), c.Peek(0))
	require.NoError(t, c.SetLimit(3))
	// 5 counted, limit 3: one more fits once 5 x (1-e) + 1 <= 3 in the
	// next window, at e = 60%.
	d := c.AllowN(1)
	assert.Equal(t, wantDeny(3, 0, 1600*time.Millisecond, 2*time.Second), d)
	mock.Add(d.RetryAfter - 1)
	assert.False(t, c.Peek(1).Allowed)
	mock.Add(1)
	assert.Equal(t, wantAllow(3, 0, 1400*time.Millisecond), c.AllowN(1))
}

// evenTraffic offers a sliding counter one event every window/rate for 20
// windows from testStart+phase, and returns its denials, the denials an
// exact sliding window over the admitted events had room for, and the most
// admitted events in any window.
func evenTraffic(t *testing.T, limit int, rate float64, phase time.Duration) (denied, wrongDenied, maxInWindow int) {
	t.Helper()
	const w = time.Second
	mock := fakeclock.NewManual(testStart.Add(phase))
	sc, err := NewSlidingCounter(limit, w, WithClock(mock))
	require.NoError(t, err)
	period := time.Duration(float64(w) / rate)
	var admitted []time.Time
	oldest := 0 // the oldest admitted event still in the window ending now
	for range int(20 * rate) {
		mock.Add(period)
		now := mock.Now()
		for oldest < len(admitted) && now.Sub(admitted[oldest]) >= w {
			oldest++
		}
		inWindow := len(admitted) - oldest
		if sc.Allow() {
			admitted = append(admitted, now)
			inWindow++
		} else {
			denied++
			if inWindow < limit {
				wrongDenied++
			}
		}
		maxInWindow = max(maxInWindow, inWindow)
	}
	return denied, wrongDenied, maxInWindow
}

// TestSlidingCounterEvenTraffic checks what the docs claim for evenly
// spread traffic: at a rate 3 or more events per window below the limit
// every event is admitted, as an exact window would; at 1.01 x the limit
// the estimate errs both ways, admitting more than the limit in some
// window (at most 2% more) and denying events an exact window had room for.
func TestSlidingCounterEvenTraffic(t *testing.T) {
	t.Parallel()
	for _, limit := range []int{4, 10, 100, 1000} {
		for ph := range 10 {
			phase := time.Duration(ph) * 7919 * time.Microsecond
			denied, _, _ := evenTraffic(t, limit, float64(limit-3), phase)
			assert.Zerof(t, denied, "limit %d, %d events a window, phase %v: denials", limit, limit-3, phase)
		}
	}
	for _, limit := range []int{100, 1000} {
		_, wrong, most := evenTraffic(t, limit, 1.01*float64(limit), 123457*time.Microsecond)
		assert.Greater(t, most, limit, "limit %d at 1.01x: most events in a window", limit)
		assert.LessOrEqual(t, float64(most), 1.02*float64(limit), "limit %d at 1.01x: most events in a window", limit)
		assert.Positive(t, wrong, "limit %d at 1.01x: denials an exact window had room for", limit)
	}
}
