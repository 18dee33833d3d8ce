package ratelimit

import (
	"time"
)

// Clock is the source of time for a limiter: the two things limiters ask
// of time, in the shape of the time package, so that any fake can
// implement it in a few lines. *clock.Mock from
// github.com/benbjohnson/clock satisfies it as it is, and so does the
// value clock.New returns.
//
// Without WithClock a limiter uses the time package directly, which also
// makes it run on the fake time of a testing/synctest bubble.
type Clock interface {
	// Now returns the current time. Limiters measure durations as
	// differences of Now values, so a clock whose times carry a monotonic
	// reading (as time.Now's do) is immune to wall-clock steps.
	Now() time.Time
	// After returns a channel that receives the time once d has passed on
	// this clock, as time.After does. A waiter that gives up early stops
	// listening, so the clock must not block sending on the channel: give
	// it a buffer of one, as time.After does.
	After(d time.Duration) <-chan time.Time
}
