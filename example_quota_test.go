package ratelimit_test

import (
	"context"
	"fmt"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/rlkit/ratelimit"
)

// A daily quota of 10,000 requests where the day is a calendar day in New
// York. On 2026-03-08 the clocks spring forward, so that day is 23 hours
// long, and RetryAfter points exactly at the next local midnight.
func ExampleNewQuota() {
	newYork, err := time.LoadLocation("America/New_York")
	if err != nil {
		panic(err)
	}
	mock := clock.NewMock()
	mock.Set(time.Date(2026, 3, 8, 20, 0, 0, 0, newYork)) // 8 pm, 4 hours before midnight

	daily := ratelimit.Calendar{Unit: ratelimit.Daily, Location: newYork}
	q, err := ratelimit.NewQuota(10_000, daily, ratelimit.WithClock(mock))
	if err != nil {
		panic(err)
	}
	fmt.Println(ratelimit.QuotaPolicy(10_000, daily))
	fmt.Println(ratelimit.QuotaPolicy(10_000, daily).WindowAt(mock.Now()))

	d := q.AllowN(9_999)
	fmt.Println(d.Allowed, d.Remaining, d.ResetAfter)
	d = q.AllowN(2)
	fmt.Println(d.Allowed, d.Remaining, d.RetryAfter)

	mock.Add(d.RetryAfter) // midnight in New York
	d = q.AllowN(2)
	fmt.Println(d.Allowed, d.Remaining, d.ResetAfter)
	// Output:
	// quota(limit=10000, daily at 00:00 America/New_York)
	// 23h0m0s
	// true 1 4h0m0s
	// false 1 4h0m0s
	// true 9998 24h0m0s
}

// A request that must pass 10 per second, 10,000 per day and 200,000 per
// calendar month, all or nothing: a request one limit denies is charged to
// none of them.
func ExampleAllowAll_quota() {
	mock := clock.NewMock()
	mock.Set(time.Date(2026, 1, 31, 23, 59, 59, 0, time.UTC))
	perSecond, _ := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(10, time.Second), 10), ratelimit.WithClock(mock))
	daily, _ := ratelimit.NewKeyed(ratelimit.QuotaPolicy(10_000, ratelimit.Calendar{Unit: ratelimit.Daily}), ratelimit.WithClock(mock))
	monthly, _ := ratelimit.NewKeyed(ratelimit.QuotaPolicy(200_000, ratelimit.Calendar{Unit: ratelimit.Monthly}), ratelimit.WithClock(mock))
	dims := []ratelimit.Dimension{
		{Name: "second", Limiter: perSecond, Key: "customer-42"},
		{Name: "day", Limiter: daily, Key: "customer-42"},
		{Name: "month", Limiter: monthly, Key: "customer-42"},
	}
	ctx := context.Background()

	md, _ := ratelimit.AllowAll(ctx, 8, dims...)
	fmt.Println(md.Allowed, dims[md.Index].Name, md.Remaining)
	md, _ = ratelimit.AllowAll(ctx, 8, dims...) // the token bucket has 2 left
	fmt.Println(md.Allowed, dims[md.Index].Name, md.RetryAfter)
	d, _ := monthly.Peek(ctx, "customer-42", 0)
	fmt.Println(d.Remaining, d.ResetAfter) // charged once: 1s left in January
	// Output:
	// true second 2
	// false second 600ms
	// 199992 1s
}

// Period tells when the period of a calendar containing a time starts and
// ends: here the month of a monthly quota that resets on the 31st, which
// in February falls on its last day.
func ExampleCalendar_Period() {
	cal := ratelimit.Calendar{Unit: ratelimit.Monthly, MonthDay: 31, Hour: 9}
	start, end, err := cal.Period(time.Date(2028, 3, 15, 12, 0, 0, 0, time.UTC))
	if err != nil {
		panic(err)
	}
	fmt.Println(start.Format(time.DateTime), "to", end.Format(time.DateTime))

	_, _, err = ratelimit.Calendar{Unit: ratelimit.Daily, Hour: 24}.Period(time.Now())
	fmt.Println(err)
	// Output:
	// 2028-02-29 09:00:00 to 2028-03-31 09:00:00
	// ratelimit: invalid configuration: ratelimit.Calendar.Period: ratelimit.Calendar.Hour must be 0-23, got 24
}
