package timesrc

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

type fixedClock struct{ now time.Time }

func (c *fixedClock) Now() time.Time                       { return c.now }
func (c *fixedClock) After(time.Duration) <-chan time.Time { return nil }

// TestNowFromReusesTheRealClockReading: on the real clock NowFrom(t) is the
// time t, on the Unix scale; on another clock it reads that clock and
// ignores t.
func TestNowFromReusesTheRealClockReading(t *testing.T) {
	t.Parallel()
	rc := New(nil)
	at := time.Now().Add(time.Hour)
	assert.Equal(t, rc.baseUnix+int64(at.Sub(rc.base)), rc.NowFrom(at))
	assert.InDelta(t, at.UnixNano(), rc.NowFrom(at), float64(time.Millisecond))

	start := time.Unix(1_700_000_000, 0)
	c := &fixedClock{now: start}
	fake := New(c)
	c.now = start.Add(time.Second)
	assert.Equal(t, start.Add(time.Second).UnixNano(), fake.NowFrom(time.Now()), "a fake clock's time, not the argument")
	assert.Equal(t, fake.Now(), fake.NowFrom(time.Time{}))
}
