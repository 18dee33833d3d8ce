// Package calendar computes the periods of calendar quotas: days, weeks,
// months and years as a time zone's wall clock defines them, starting at a
// reset time of day. The in-memory quota of package ratelimit and the Redis
// quota of package redislimit (through ratelimit.Calendar.Period) both take
// their boundaries from here, which is what keeps their decisions
// identical.
//
// A period starts at the instant the zone's wall clock reads the reset time
// on the period's first day. Two rules cover the reset times that daylight
// saving time makes odd:
//
//   - A reset time that does not exist that day (it falls in the hour the
//     clocks skip in spring) happens at the end of the gap: the instant the
//     clocks jump forward, which is the first instant of that day at or
//     after the reset time.
//   - A reset time that occurs twice that day (it falls in the hour the
//     clocks repeat in autumn) happens at its first occurrence.
//
// So a day is 23 hours long on the day the clocks spring forward and 25 on
// the day they fall back, and months and years have their real lengths.
package calendar

import (
	"fmt"
	"time"
)

// Unit is the length of a calendar period.
type Unit uint8

// The units. The zero Unit is invalid.
const (
	Day Unit = iota + 1
	Week
	Month
	Year
)

// String returns "day", "week", "month" or "year".
func (u Unit) String() string {
	switch u {
	case Day:
		return "day"
	case Week:
		return "week"
	case Month:
		return "month"
	case Year:
		return "year"
	}
	return fmt.Sprintf("Unit(%d)", uint8(u))
}

// Spec says where periods start.
type Spec struct {
	Unit Unit
	// Loc is the zone whose wall clock defines the periods; never nil.
	Loc *time.Location
	// Hour and Minute are the reset time of day, 0-23 and 0-59.
	Hour, Minute int
	// WeekStart is the first day of a week (Week only).
	WeekStart time.Weekday
	// MonthDay is the day of the month a month starts on, 1-31 (Month
	// only); in a shorter month the period starts on its last day.
	MonthDay int
}

// Validate reports what is wrong with s, or nil: a *FieldError naming the
// field as a Spec field, which callers rename.
func (s Spec) Validate() error {
	switch {
	case s.Unit < Day || s.Unit > Year:
		return &FieldError{"Unit", fmt.Sprintf("must be Day, Week, Month or Year, got %v", s.Unit)}
	case s.Loc == nil:
		return &FieldError{"Location", "must not be nil"}
	case s.Hour < 0 || s.Hour > 23:
		return &FieldError{"Hour", fmt.Sprintf("must be 0-23, got %d", s.Hour)}
	case s.Minute < 0 || s.Minute > 59:
		return &FieldError{"Minute", fmt.Sprintf("must be 0-59, got %d", s.Minute)}
	case s.WeekStart < time.Sunday || s.WeekStart > time.Saturday:
		return &FieldError{"WeekStart", fmt.Sprintf("must be a day of the week, got %d", int(s.WeekStart))}
	case s.MonthDay < 1 || s.MonthDay > 31:
		return &FieldError{"MonthDay", fmt.Sprintf("must be 1-31, got %d", s.MonthDay)}
	}
	return nil
}

// FieldError is the error of [Spec.Validate]: which field is wrong, and
// how.
type FieldError struct {
	// Field is the Spec field's name, such as "Hour".
	Field string
	// Problem says what is wrong, such as "must be 0-23, got 24".
	Problem string
}

// Error returns the field and the problem, such as "Hour must be 0-23, got
// 24".
func (e *FieldError) Error() string { return e.Field + " " + e.Problem }

// Period returns the period containing t: its start (inclusive) and end
// (exclusive), in s.Loc. s must be valid.
func (s Spec) Period(t time.Time) (start, end time.Time) {
	y, m, d := s.firstDay(t.In(s.Loc))
	start = s.boundary(y, m, d)
	// Before the reset time of its first day (or its start pushed later by
	// a gap): the period began one step earlier.
	for t.Before(start) {
		y, m, d = s.step(y, m, d, -1)
		start = s.boundary(y, m, d)
	}
	return start, s.after(start)
}

// firstDay returns the first day of the period that local's date lies in,
// if that period's reset time has already passed.
func (s Spec) firstDay(local time.Time) (int, time.Month, int) {
	y, m, d := local.Date()
	switch s.Unit {
	case Week:
		y, m, d = norm(y, m, d-(int(local.Weekday())-int(s.WeekStart)+7)%7)
	case Month:
		d = min(s.MonthDay, daysIn(y, m))
		if local.Day() < d {
			// Before this month's start day: the period began last month.
			y, m = prevMonth(y, m)
			d = min(s.MonthDay, daysIn(y, m))
		}
	case Year:
		m, d = time.January, 1
	}
	return y, m, d
}

// after returns the start of the period after the one starting at b: the
// first boundary later than b. It starts from the period of b's local date
// rather than stepping from b's own first day, because a gap can push a
// period's start into the next day: in Pacific/Apia, which skipped
// 2011-12-30, a reset at 23:30 on that day happens at the end of the gap,
// 00:00 on December 31, and the next period starts at 23:30 the same day.
func (s Spec) after(b time.Time) time.Time {
	y, m, d := s.firstDay(b.In(s.Loc))
	next := s.boundary(y, m, d)
	for !next.After(b) {
		y, m, d = s.step(y, m, d, 1)
		next = s.boundary(y, m, d)
	}
	return next
}

// step returns the first day of the period n (1 or -1) periods after the
// one whose first day is y-m-d.
func (s Spec) step(y int, m time.Month, d int, n int) (int, time.Month, int) {
	switch s.Unit {
	case Day:
		return norm(y, m, d+n)
	case Week:
		return norm(y, m, d+7*n)
	case Month:
		if n > 0 {
			y, m = nextMonth(y, m)
		} else {
			y, m = prevMonth(y, m)
		}
		return y, m, min(s.MonthDay, daysIn(y, m))
	}
	return y + n, time.January, 1
}

// boundary returns the instant the period whose first day is y-m-d starts:
// when the wall clock in s.Loc reads that day at the reset time; the end
// of the gap when that time is skipped, its first occurrence when it is
// repeated.
func (s Spec) boundary(y int, m time.Month, d int) time.Time {
	hh, mm, loc := s.Hour, s.Minute, s.Loc
	want := time.Date(y, m, d, hh, mm, 0, 0, time.UTC)
	t := time.Date(y, m, d, hh, mm, 0, 0, loc)
	if got := wall(t); !got.Equal(want) {
		// Skipped: time.Date placed it on one side of the gap.
		zs, ze := t.ZoneBounds()
		if got.After(want) {
			return zs // t is past the gap, whose end starts t's zone period
		}
		return ze.In(loc)
	}
	// Repeated: an earlier instant under the previous offset may read the
	// same wall clock.
	zs, _ := t.ZoneBounds()
	if zs.IsZero() {
		return t
	}
	_, prevOff := zs.Add(-time.Nanosecond).Zone()
	if _, off := t.Zone(); prevOff == off {
		return t
	}
	u := want.Add(-time.Duration(prevOff) * time.Second).In(loc)
	if u.Before(zs) && wall(u).Equal(want) {
		return u
	}
	return t
}

// wall returns t's wall clock reading as a UTC time, for comparisons.
func wall(t time.Time) time.Time {
	y, m, d := t.Date()
	hh, mm, ss := t.Clock()
	return time.Date(y, m, d, hh, mm, ss, t.Nanosecond(), time.UTC)
}

// norm normalizes a date whose day may lie outside its month.
func norm(y int, m time.Month, d int) (int, time.Month, int) {
	t := time.Date(y, m, d, 12, 0, 0, 0, time.UTC)
	return t.Date()
}

// daysIn returns the number of days of month m of year y.
func daysIn(y int, m time.Month) int {
	return time.Date(y, m+1, 0, 12, 0, 0, 0, time.UTC).Day()
}

func nextMonth(y int, m time.Month) (int, time.Month) {
	if m == time.December {
		return y + 1, time.January
	}
	return y, m + 1
}

func prevMonth(y int, m time.Month) (int, time.Month) {
	if m == time.January {
		return y - 1, time.December
	}
	return y, m - 1
}
