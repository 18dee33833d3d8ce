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
// # How many at once
//
// A rate limit bounds how often work starts; [Concurrency] bounds how much
// of it is in flight: at most N permits held per key (20 requests in
// progress per customer), taken by TryAcquire or Acquire and given back by
// [Permit.Release]. Package redislimit holds the same limit across
// processes, with permits that expire unless renewed. See
// docs/concurrency.md.
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
//	limiter, err := ratelimit.NewTokenBucket(ratelimit.Per(10, time.Second), 5,
//		ratelimit.WithClock(&fakeClock{now: time.Unix(0, 0)}))
//
// Or, with Go 1.25 or later, use no WithClock at all and run the test in a
// testing/synctest bubble: a limiter built inside the bubble reads the
// bubble's fake time through the time package, and its Wait sleeps on it:
//
//	func TestWorker(t *testing.T) {
//		synctest.Test(t, func(t *testing.T) {
//			limiter, _ := ratelimit.NewTokenBucket(ratelimit.Per(1, time.Hour), 1)
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
