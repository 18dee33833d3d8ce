package ratelimit

import (
	"strconv"
	"time"
)

// Rate is a number of events per span of time, such as 10 per second: the
// refill rate of a token bucket. Write one with [Per], such as
// Per(100, time.Minute). A Rate is its own type so that a token bucket's
// rate and capacity cannot be swapped without the compiler noticing.
type Rate struct {
	// Events is how many events the rate allows every Per.
	Events int
	// Per is the span of time over which Events are allowed.
	Per time.Duration
}

// Per returns the rate of events every d, such as Per(3, time.Second).
func Per(events int, d time.Duration) Rate { return Rate{Events: events, Per: d} }

// String returns the rate as events/span, such as "10/1s".
func (r Rate) String() string { return strconv.Itoa(r.Events) + "/" + r.Per.String() }
