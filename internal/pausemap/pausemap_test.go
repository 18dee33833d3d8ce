package pausemap

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit/internal/timerclock"
	"github.com/rlkit/ratelimit/internal/timesrc"
)

var errPause = errors.New("ratelimit: test pause sentinel")

func TestPauseExtendsNeverShortens(t *testing.T) {
	t.Parallel()
	var m Map
	now := time.Unix(1000, 0)
	assert.True(t, m.Until("a").IsZero(), "Until of a key never paused")
	m.Pause("a", now, 0)
	m.Pause("a", now, -time.Second)
	assert.True(t, m.Until("a").IsZero(), "Until after non-positive pauses")
	m.Pause("a", now, 10*time.Second)
	m.Pause("a", now, 5*time.Second)
	assert.Equal(t, now.Add(10*time.Second), m.Until("a"), "a shorter pause must not shorten a longer one")
	m.Pause("a", now, 20*time.Second)
	assert.Equal(t, now.Add(20*time.Second), m.Until("a"))
	assert.True(t, m.Until("b").IsZero(), "another key is not paused")
	m.Pause("b", now, 30*time.Second)
	assert.Equal(t, now.Add(30*time.Second), m.Latest())
}

func TestLeft(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	for _, tc := range []struct {
		until time.Time
		want  time.Duration
	}{
		{time.Time{}, 0},
		{now.Add(-time.Second), 0},
		{now, 0},
		{now.Add(3 * time.Second), 3 * time.Second},
	} {
		assert.Equal(t, tc.want, Left(tc.until, now), "Left(%v, now)", tc.until)
	}
}

// TestSweep: once SweepAbove keys are held, a new key drops the ended
// pauses, and never a pause still running.
func TestSweep(t *testing.T) {
	t.Parallel()
	var m Map
	now := time.Unix(1000, 0)
	for i := range SweepAbove {
		d := time.Second
		if i == 0 {
			d = time.Hour
		}
		m.Pause(fmt.Sprint(i), now, d)
	}
	later := now.Add(time.Minute)
	m.Pause("new", later, time.Second)
	m.mu.Lock()
	n := len(m.pauses)
	m.mu.Unlock()
	assert.Equal(t, 2, n, "held keys after the sweep: the running pause of key 0 and the new key")
	assert.Equal(t, now.Add(time.Hour), m.Until("0"), "a running pause must survive the sweep")
}

func TestWait(t *testing.T) {
	t.Parallel()
	tc := timerclock.New(time.Unix(1_000_000, 0))
	src := timesrc.New(tc)
	var m Map
	ctx := context.Background()
	require.NoError(t, m.Wait(ctx, &src, "k", errPause), "Wait on a key never paused")

	m.Pause("k", tc.Now(), 10*time.Second)
	done := make(chan error, 1)
	go func() { done <- m.Wait(ctx, &src, "k", errPause) }()
	assert.Equal(t, 10*time.Second, tc.Next(t))
	m.Pause("k", tc.Now(), 20*time.Second) // extended while waiting
	tc.Add(10 * time.Second)
	assert.Equal(t, 10*time.Second, tc.Next(t), "Wait must wait for the rest of the extended pause")
	select {
	case err := <-done:
		t.Fatalf("Wait returned %v before the extended pause ended", err)
	default:
	}
	assert.False(t, m.Idle(), "a map holding a pause")
	tc.Add(10 * time.Second)
	require.NoError(t, <-done)
	assert.True(t, m.Idle(), "a pause waited out is dropped")
	assert.True(t, m.Until("k").IsZero())
}

// TestForgetKeepsNewerPause: a pause found ended is dropped only if no
// newer pause replaced it meanwhile.
func TestForgetKeepsNewerPause(t *testing.T) {
	t.Parallel()
	var m Map
	now := time.Unix(1000, 0)
	m.Pause("k", now, time.Second)
	ended := m.Until("k")
	m.Pause("k", now, time.Hour)
	m.forget("k", ended)
	assert.Equal(t, now.Add(time.Hour), m.Until("k"))
	assert.False(t, m.Idle())
	m.forget("k", now.Add(time.Hour))
	assert.True(t, m.Idle())
}

func TestWaitDeadline(t *testing.T) {
	t.Parallel()
	tc := timerclock.New(time.Unix(1_000_000, 0))
	src := timesrc.New(tc)
	var m Map
	m.Pause("k", tc.Now(), time.Hour)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err := m.Wait(ctx, &src, "k", errPause)
	require.Error(t, err)
	assert.ErrorIs(t, err, errPause)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Empty(t, tc.Timers, "a refused wait must not sleep")

	canceled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	assert.ErrorIs(t, m.Wait(canceled, &src, "other", errPause), context.Canceled, "Wait with a done ctx and no pause")
	assert.ErrorIs(t, m.Wait(canceled, &src, "k", errPause), context.Canceled, "Wait with a done ctx and a pause")
}

func TestConcurrent(t *testing.T) {
	t.Parallel()
	var m Map
	now := time.Unix(1000, 0)
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				k := fmt.Sprint(g*1000 + i%100)
				m.Pause(k, now.Add(time.Duration(i)*time.Millisecond), time.Second)
				_ = m.Until(k)
				_ = m.Latest()
			}
		}()
	}
	wg.Wait()
	assert.False(t, m.Latest().IsZero())
}
