package fakeclock

import (
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

var start = time.Unix(1_000_000, 0)

// TestAnnouncesTimers: each After is announced with its duration, and the
// mock fires it when time reaches it.
func TestAnnouncesTimers(t *testing.T) {
	c := NewAnnouncing(start)
	assert.Equal(t, start, c.Now())
	c.None(t)
	ch := c.After(3 * time.Second)
	assert.Equal(t, 3*time.Second, c.Next(t))
	c.None(t)
	c.Add(2 * time.Second)
	select {
	case at := <-ch:
		t.Fatalf("the timer of 3s fired at %v, after 2s", at)
	default:
	}
	c.Add(time.Second)
	assert.Equal(t, start.Add(3*time.Second), <-ch)
	c.Set(start.Add(time.Hour))
	assert.Equal(t, start.Add(time.Hour), c.Now())
}

// TestNewDoesNotAnnounce: a Mock made by New starts timers without
// announcing them (nothing fills up when no test reads), and fires them.
func TestNewDoesNotAnnounce(t *testing.T) {
	c := New(start)
	assert.Nil(t, c.Timers)
	var chs []<-chan time.Time
	for range 2 * announced {
		chs = append(chs, c.After(time.Second))
	}
	c.Add(time.Second)
	for _, ch := range chs {
		assert.Equal(t, start.Add(time.Second), <-ch)
	}
}

// raceTimers has waiters goroutines start, each in many rounds, a timer
// due at once (After(0)) and read its channel once, while another goroutine
// keeps moving time. It reports whether all of them ended within failSafe
// (false: the mock hung) and how many timers fired twice.
func raceTimers(after func(time.Duration) <-chan time.Time, add func(time.Duration), waiters, rounds int) (finished bool, twice int) {
	const failSafe = 20 * time.Second
	var n atomic.Int64
	stop := make(chan struct{})
	var mover, all sync.WaitGroup
	mover.Add(1)
	go func() {
		defer mover.Done()
		for {
			select {
			case <-stop:
				return
			default:
				add(time.Nanosecond)
			}
		}
	}()
	for range waiters {
		all.Add(1)
		go func() {
			defer all.Done()
			for range rounds {
				ch := after(0)
				<-ch
				select {
				case <-ch:
					n.Add(1)
				default:
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { all.Wait(); close(stop); mover.Wait(); close(done) }()
	select {
	case <-done:
		return true, int(n.Load())
	case <-time.After(failSafe):
		return false, 0
	}
}

// TestTimerFiresOnceWhileTimeMoves: timers started while another
// goroutine moves time fire exactly once, and the mock never hangs. On a
// bare *clock.Mock (v1.3.5) the same rounds hang: a timer fired twice
// blocks on its full channel while holding the mock's lock.
func TestTimerFiresOnceWhileTimeMoves(t *testing.T) {
	c := New(start)
	finished, twice := raceTimers(c.After, c.Add, 8, 100)
	require.True(t, finished, "the mock hung")
	assert.Zero(t, twice, "timers fired twice")
}

// TestManual: Manual moves only when told, and its After answers at once
// without moving it.
func TestManual(t *testing.T) {
	c := NewManual(start)
	assert.Equal(t, start, c.Now())
	c.Add(time.Second)
	assert.Equal(t, start.Add(time.Second), c.Now())
	c.Set(start)
	assert.Equal(t, start, c.Now())
	assert.Equal(t, start.Add(time.Minute), <-c.After(time.Minute))
	assert.Equal(t, start, c.Now(), "After moved a manual clock")
}

// TestInstant: on an instant clock every wait ends at once, having moved
// the time by its length.
func TestInstant(t *testing.T) {
	c := NewInstant(start)
	assert.Equal(t, start.Add(time.Minute), <-c.After(time.Minute))
	assert.Equal(t, start.Add(time.Minute), c.Now())
	assert.Equal(t, start.Add(time.Minute), <-c.After(0))
	assert.Equal(t, start.Add(time.Minute), <-c.After(-time.Second))
	assert.Equal(t, start.Add(time.Minute), c.Now())
}
