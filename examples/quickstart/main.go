// Command quickstart plays one bursty traffic pattern through the five
// algorithms of package ratelimit, each limiting to 10 events per second,
// and prints side by side how many events each admitted in every second,
// and the most each admitted in any one-second span.
//
// Time is simulated with a mock clock, so the run is instant and the output
// is the same every time:
//
//	go run ./examples/quickstart
package main

import (
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/rlkit/ratelimit"
)

// The traffic: arrival times of requests, relative to the start.
func traffic() []time.Duration {
	var ts []time.Duration
	at := func(t time.Duration, n int) { // n requests at t
		for range n {
			ts = append(ts, t)
		}
	}
	// Second 0: a steady trickle of 5 per second.
	for i := range 5 {
		at(time.Duration(i)*200*time.Millisecond, 1)
	}
	// A burst of 15 just before the boundary at 2s, another just after.
	at(1950*time.Millisecond, 15)
	at(2050*time.Millisecond, 15)
	// Seconds 3 to 6: a flood of 30 per second, evenly spread.
	for i := range 120 {
		at(3*time.Second+time.Duration(i)*time.Second/30, 1)
	}
	slices.Sort(ts)
	return ts
}

func main() {
	const limit = 10
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) // aligned to a second
	mock := clock.NewMock()
	mock.Set(start)

	names := []string{"tokenbucket", "leakybucket", "fixedwindow", "slidinglog", "slidingcounter"}
	limiters := make([]ratelimit.Limiter, len(names))
	for i, p := range []ratelimit.Policy{
		ratelimit.TokenBucketPolicy(ratelimit.Per(limit, time.Second), limit),
		ratelimit.LeakyBucketPolicy(limit, time.Second/limit),
		ratelimit.FixedWindowPolicy(limit, time.Second),
		ratelimit.SlidingLogPolicy(limit, time.Second),
		ratelimit.SlidingCounterPolicy(limit, time.Second),
	} {
		l, err := p.NewLimiter(ratelimit.WithClock(mock))
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		limiters[i] = l
	}

	const seconds = 8
	offered := make([]int, seconds)
	admitted := make([][]int, len(names)) // per algorithm, per second
	times := make([][]time.Duration, len(names))
	for i := range admitted {
		admitted[i] = make([]int, seconds)
	}
	for _, t := range traffic() {
		mock.Set(start.Add(t))
		sec := int(t / time.Second)
		offered[sec]++
		for i, l := range limiters {
			if l.Allow() {
				admitted[i][sec]++
				times[i] = append(times[i], t)
			}
		}
	}

	fmt.Printf("Each limiter allows %d events per second. Events admitted per second:\n\n", limit)
	fmt.Printf("%-8s %8s", "second", "offered")
	for _, n := range names {
		fmt.Printf(" %15s", n)
	}
	fmt.Println()
	for s := range seconds {
		fmt.Printf("%-8d %8d", s, offered[s])
		for i := range names {
			fmt.Printf(" %15d", admitted[i][s])
		}
		fmt.Println()
	}
	fmt.Printf("%-8s %8d", "total", len(traffic()))
	for i := range names {
		fmt.Printf(" %15d", len(times[i]))
	}
	fmt.Printf("\n%-17s", "max in any 1s")
	for i := range names {
		fmt.Printf(" %15d", maxInWindow(times[i], time.Second))
	}
	fmt.Println()
	fmt.Println(`
The bursts at 1.95s and 2.05s are 100ms apart: the fixed window admits both
(20 events within 100ms, twice its limit), the sliding log never admits more
than 10 in any second, and the sliding counter stays close to it. The token
bucket and the leaky bucket's meter start the flood with a full burst of
capacity on top of the refill (19 in one second), then hold it to exactly
10 per second.`)
}

// maxInWindow returns the most times in any half-open span of length w.
func maxInWindow(ts []time.Duration, w time.Duration) int {
	best, j := 0, 0
	for i := range ts {
		for ts[i]-ts[j] >= w {
			j++
		}
		best = max(best, i-j+1)
	}
	return best
}
