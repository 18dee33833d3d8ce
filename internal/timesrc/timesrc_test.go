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
