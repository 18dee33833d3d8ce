// Package ratelimit provides rate limiters for Go services: five algorithms
// and a calendar quota behind one [Limiter] interface, each exact to the
// last event, safe for concurrent use and driven by an injectable [Clock]
// so that tests run on deterministic time.
//
// # Choosing an algorithm
//
//   - [TokenBucket]: a steady rate with bursts up to a capacity. The usual
//     choice for API quotas and outbound clients. 16 bytes of state.
//   - [LeakyBucket]: a steady rate with no bursts on the way out. AllowN
//     meters (admits while the bucket has room), WaitN shapes (releases
//     callers one per interval, first come first served).
//   - [FixedWindow]: at most limit events per window aligned to the Unix
//     epoch. Cheapest and easiest to explain, but up to 2x the limit can pass
//     in a short span across a window boundary.
//   - [SlidingLog]: exact: at most limit events in any interval of length
//     window. Memory grows with use up to limit timestamps.
//   - [SlidingCounter]: a weighted mix of the current and previous fixed
//     windows, with constant memory. An estimate: it admits evenly spread
//     traffic that stays 3 events per window below the limit, but near the
//     limit it errs both ways even on even traffic, and its worst case on
//     adversarial traffic approaches 2x the limit.
//   - [Quota]: at most limit events per calendar day, week, month or year
//     in a time zone (10,000 a day in America/New_York, 200,000 a calendar
//     month), with real day and month lengths across daylight saving time.
//     A quota is a budget, not a rate: stack it on a short-window limit
//     with [AllowAll] (10/s and 10,000/day, all or nothing).
//
// All limiters count only admitted events: a denied request never consumes
// quota, so a flood cannot lock a client out for longer than its own
// admitted traffic would.
//
// # Time
//
// Limiters read the time once per decision from their [Clock] (the real
// clock unless [WithClock] is given) and measure durations on the monotonic
// clock, so a wall-clock step neither mints nor destroys quota. Windows are
// aligned to the Unix epoch using the wall time read when the limiter was
// created plus monotonic time since.
//
// # Observing decisions
//
// [WithObserver] makes a limiter report every decision (allowed, denied,
// refused with an error) to an [Observer], with the limiter's name
// ([WithName]), its algorithm, where it keeps its state and the decision's
// latency, but never the key. Package otellimit turns these reports into
// OpenTelemetry metrics.
//
// # Testing
//
// Code that uses a limiter can be tested on fake time in two ways.
//
// Give the limiter a fake [Clock] with [WithClock]. A Clock is two methods,
// Now and After, so a fake takes a few lines (a *clock.Mock from
// github.com/benbjohnson/clock is one as it is):
//
//	type fakeClock struct{ now time.Time } // guard it with a mutex if goroutines share it
//
//	func (c *fakeClock) Now() time.Time { return c.now }
//	func (c *fakeClock) After(d time.Duration) <-chan time.Time {
//		c.now = c.now.Add(d) // every wait ends at once, and time moves on
//		ch := make(chan time.Time, 1)
//		ch <- c.now
//		return ch
//	}
//
//	limiter, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(10), 5,
//		ratelimit.WithClock(&fakeClock{now: time.Unix(0, 0)}))
//
// Or, with Go 1.25 or later, use no WithClock at all and run the test in a
// testing/synctest bubble: a limiter built inside the bubble reads the
// bubble's fake time through the time package, and its Wait sleeps on it:
//
//	func TestWorker(t *testing.T) {
//		synctest.Test(t, func(t *testing.T) {
//			limiter, _ := ratelimit.NewTokenBucket(ratelimit.PerHour(1), 1)
//			limiter.Allow()
//			start := time.Now()
//			_ = limiter.Wait(context.Background()) // returns at once in real time
//			fmt.Println(time.Since(start))          // 1h0m0s of fake time
//		})
//	}
//
// TestExampleSynctest in this package's example_synctest_test.go is that
// tutorial as a runnable test (an Example cannot call synctest.Test, which
// needs a *testing.T).
package ratelimit

import (
	"context"
	"errors"
	"math"
	"time"

	"github.com/rlkit/ratelimit/internal/errs"
)

// Limiter is implemented by every limiter in this package.
type Limiter interface {
	// Allow reports whether one event may happen now. It is shorthand for
	// AllowN(1).Allowed.
	Allow() bool
	// AllowN reports whether n events may happen now, and consumes them if
	// so: all n or nothing. It never blocks.
	AllowN(n int) Decision
	// Wait is shorthand for WaitN(ctx, 1).
	Wait(ctx context.Context) error
	// WaitN blocks until n events are admitted or ctx is done. It returns an
	// error at once when n can never be admitted, or when the wait would
	// outlast ctx's deadline.
	WaitN(ctx context.Context, n int) error
	// Peek reports the Decision AllowN(n) would return now, without
	// consuming anything. Peek(0) reports the current quota.
	Peek(n int) Decision
}

// Compile-time checks that every limiter implements Limiter.
var (
	_ Limiter = (*TokenBucket)(nil)
	_ Limiter = (*LeakyBucket)(nil)
	_ Limiter = (*FixedWindow)(nil)
	_ Limiter = (*SlidingLog)(nil)
	_ Limiter = (*SlidingCounter)(nil)
)

// RetryNever is the RetryAfter of a [Decision] for a request that can never
// be admitted: n is greater than the limiter's capacity or limit, or n <= 0.
// Callers should treat it as "do not retry" rather than as a duration. It
// also comes, with an error, from a limiter that cannot decide because of
// its own configuration ([ErrUnknownTier], [ErrInvalidConfig]): that is no
// fault of the request, so check the error first (the servers of packages
// httplimit and grpclimit answer it as their own failure, 500 or
// Internal, never as "do not retry").
const RetryNever = time.Duration(math.MaxInt64)

// Decision is the outcome of one AllowN call (or, from Peek, of one that
// would be made now).
type Decision struct {
	// Allowed reports whether the n events were admitted (and consumed).
	Allowed bool
	// Limit is the capacity (token and leaky bucket) or the number of events
	// allowed per window (window algorithms).
	Limit int
	// Remaining is how many more single events would be admitted right now,
	// after this decision. It is never negative.
	Remaining int
	// RetryAfter is 0 when Allowed. When denied, it is how long to wait
	// before the same request can succeed if no other traffic arrives:
	// exact for every algorithm but SlidingCounter, where it is an estimate
	// that is never 0. It is RetryNever when the request can never succeed.
	RetryAfter time.Duration
	// ResetAfter is how long until the limiter is back to its full quota
	// (Remaining == Limit) if no other traffic arrives; 0 when it is full.
	ResetAfter time.Duration
}

var (
	// ErrInvalidConfig is wrapped by every constructor error; the message
	// names the offending argument.
	ErrInvalidConfig = errors.New("ratelimit: invalid configuration")
	// ErrInvalidN is returned by WaitN when n <= 0.
	ErrInvalidN = errors.New("ratelimit: n must be positive")
	// ErrExceedsLimit is returned by WaitN when n is greater than the
	// limiter's capacity or limit, so that no wait can ever admit it.
	ErrExceedsLimit = errors.New("ratelimit: n exceeds the limit")
	// ErrQueueFull is returned by LeakyBucket.WaitN when the queue has no
	// room for n more events: the caller is refused at once, not queued.
	ErrQueueFull = errors.New("ratelimit: queue is full")
	// ErrDeadline is returned by WaitN, without waiting, when the wait
	// would outlast the context's deadline. The error also matches
	// context.DeadlineExceeded with errors.Is.
	ErrDeadline = errors.New("ratelimit: wait would exceed context deadline")
)

// errNilContext is returned by the methods that take a context when given
// a nil one.
var errNilContext = errors.New("ratelimit: nil context")

// configError reports a bad constructor argument or option. The detail
// names it as package.Name, as in "ratelimit.WithMaxKeys must be positive,
// got -1".
func configError(format string, args ...any) error {
	return errs.Config(ErrInvalidConfig, format, args...)
}

// nError reports a WaitN call with an n that no wait can admit under limit.
func nError(n int, limit int64) error { return errs.N(ErrInvalidN, ErrExceedsLimit, n, limit) }
