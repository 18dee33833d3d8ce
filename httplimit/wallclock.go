package httplimit

import (
	"sync/atomic"
	"time"
)

// wallClock reads the wall time as a base read with time.Now plus the
// monotonic time elapsed since, re-reading the base every resyncEvery. A
// monotonic reading costs about half of time.Now, and X-RateLimit-Reset
// needs whole seconds only; re-reading bounds the drift from wall-clock
// steps (NTP) to that interval.
type wallClock struct {
	base atomic.Pointer[time.Time] // carries a monotonic reading
}

const resyncEvery = time.Second

// unixNano returns the current wall time in Unix nanoseconds.
func (c *wallClock) unixNano() int64 {
	b := c.base.Load()
	if b != nil {
		if d := time.Since(*b); d >= 0 && d < resyncEvery {
			return b.UnixNano() + int64(d)
		}
	}
	now := time.Now()
	c.base.Store(&now)
	return now.UnixNano()
}
