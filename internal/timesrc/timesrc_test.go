package timesrc

import (
	"testing"
	"time"

	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
)

// TestNowTimed: on the real clock NowTimed's time is the mark, and Since
// measures real time from it; on another clock the time is that clock's
// and Since still measures real time.
func TestNowTimed(t *testing.T) {
	t.Parallel()
	rc := New(nil)
	before := time.Now()
	now, _ := rc.NowTimed()
	assert.InDelta(t, before.UnixNano(), now, float64(time.Second))
	time.Sleep(time.Millisecond)
	now2, mark2 := rc.NowTimed()
	assert.GreaterOrEqual(t, rc.Since(now, time.Time{}), time.Millisecond)
	assert.GreaterOrEqual(t, rc.Since(now2, mark2), time.Duration(0))

	start := time.Unix(1_700_000_000, 0)
	c := fakeclock.NewManual(start)
	fake := New(c)
	c.Set(start.Add(time.Hour))
	now, mark := fake.NowTimed()
	assert.Equal(t, start.Add(time.Hour).UnixNano(), now, "the fake clock's time")
	time.Sleep(time.Millisecond)
	assert.GreaterOrEqual(t, fake.Since(now, mark), time.Millisecond, "real time, though the fake stood still")
	assert.Less(t, fake.Since(now, mark), time.Hour)
}

// TestNewBaseSplit: time.Now reads the wall clock and then the monotonic
// clock, and a thread the OS deschedules between the two (seen on a
// loaded 2-CPU machine: about 1 in 150,000 readings over 100µs apart, up
// to 117ms) returns a reading whose monotonic part is late. A Source based
// on such a reading would run behind the wall clock by that gap for its
// whole life; New must base it on a reading whose parts agree. The first
// reading here is split by 300µs (its wall time from one moment, its
// monotonic time from 300µs later), the others are real.
func TestNewBaseSplit(t *testing.T) {
	t.Parallel()
	const gap = 300 * time.Microsecond
	calls := 0
	s := newReal(func() (int64, time.Time) {
		calls++
		if calls == 1 {
			r := time.Now()
			return r.UnixNano(), r.Add(gap)
		}
		return readReal()
	})
	// Bracketed by wall readings: a preemption between them only widens
	// the bracket. An unsplit base reads at most the few ns between its
	// two parts behind; allow 10µs.
	before := time.Now().UnixNano()
	now := s.Now()
	after := time.Now().UnixNano()
	assert.GreaterOrEqual(t, now, before-int64(10*time.Microsecond), "the Source runs %v behind the wall clock", time.Duration(before-now))
	assert.LessOrEqual(t, now, after+int64(10*time.Microsecond))
}
