package ratelimit

import (
	"fmt"
	"math"
	"time"

	"github.com/rlkit/ratelimit/internal/calendar"
)

// CalendarUnit is the length of a calendar quota's period.
type CalendarUnit uint8

// The calendar units. The zero CalendarUnit is invalid.
const (
	Daily CalendarUnit = iota + 1
	Weekly
	Monthly
	Yearly
)

// Calendar says where the periods of a calendar quota start: every day,
// week, month or year at a reset time on the wall clock of a time zone,
// such as Calendar{Unit: Daily, Location: newYork} (every day at midnight
// in New York) or Calendar{Unit: Monthly, MonthDay: 15, Hour: 9} (on the
// 15th of every month at 09:00 UTC). The zero Calendar is invalid: Unit
// must be set.
//
// Periods follow the zone's wall clock, daylight saving time included
// (the rules are in [Quota]'s documentation): a day is 23 or 25 hours long
// on the days the clocks change, and months and years have their real
// lengths.
type Calendar struct {
	// Unit is the length of a period: Daily, Weekly, Monthly or Yearly.
	Unit CalendarUnit
	// Location is the IANA time zone whose wall clock defines the periods,
	// such as the one time.LoadLocation("America/New_York") returns. Nil
	// means UTC. Package redislimit knows the zone by its name, and refuses
	// one whose name does not say its rules (unnamed, "Local", or named
	// after a zone of the zone database with other rules).
	Location *time.Location
	// Hour and Minute are the reset time: the local time of day at which
	// every period starts (0-23 and 0-59; midnight by default).
	Hour, Minute int
	// WeekStart is the day weekly periods start on (Sunday by default).
	// Other units ignore it, but it must be a valid day.
	WeekStart time.Weekday
	// MonthDay is the day of the month monthly periods start on, 1-31; 0
	// means 1. A month with fewer days starts its period on its last day:
	// with MonthDay 31 the period starts on February 28 (29 in a leap
	// year), April 30, and so on. Other units ignore it, but it must be in
	// 0-31.
	MonthDay int
}

// String describes c, such as "daily at 00:00 UTC", "weekly on Monday at
// 09:30 Europe/Paris" or "monthly on day 15 at 00:00 UTC".
func (c Calendar) String() string {
	loc := "UTC"
	if c.Location != nil {
		loc = c.Location.String()
	}
	at := fmt.Sprintf("at %02d:%02d %s", c.Hour, c.Minute, loc)
	switch c.Unit {
	case Daily:
		return "daily " + at
	case Weekly:
		return fmt.Sprintf("weekly on %v %s", c.WeekStart, at)
	case Monthly:
		return fmt.Sprintf("monthly on day %d %s", max(c.MonthDay, 1), at)
	case Yearly:
		return "yearly on January 1 " + at
	}
	return fmt.Sprintf("CalendarUnit(%d) %s", uint8(c.Unit), at)
}

// String returns "daily", "weekly", "monthly" or "yearly".
func (u CalendarUnit) String() string {
	switch u {
	case Daily:
		return "daily"
	case Weekly:
		return "weekly"
	case Monthly:
		return "monthly"
	case Yearly:
		return "yearly"
	}
	return fmt.Sprintf("CalendarUnit(%d)", uint8(u))
}

// calendarName returns how an error names the calendar the caller gave
// under the name period: the Policy field for a Policy.
func calendarName(period string) string {
	if period == policyParams.period {
		return "ratelimit.Policy.Calendar"
	}
	return period
}

// spec validates c, which the caller calls name (such as
// "ratelimit.NewQuota cal"), and returns it normalized, with its
// internal/calendar Spec.
func (c Calendar) spec(name string) (Calendar, calendar.Spec, error) {
	name = calendarName(name)
	if c.Location == nil {
		c.Location = time.UTC
	}
	if c.Unit < Daily || c.Unit > Yearly {
		return c, calendar.Spec{}, configError("%s: ratelimit.Calendar.Unit must be Daily, Weekly, Monthly or Yearly, got %v", name, c.Unit)
	}
	if c.MonthDay < 0 || c.MonthDay > 31 {
		return c, calendar.Spec{}, configError("%s: ratelimit.Calendar.MonthDay must be 1-31 (or 0, meaning 1), got %d", name, c.MonthDay)
	}
	if c.MonthDay == 0 {
		c.MonthDay = 1
	}
	s := calendar.Spec{
		Unit:      calendar.Unit(c.Unit), // the same values, in the same order
		Loc:       c.Location,
		Hour:      c.Hour,
		Minute:    c.Minute,
		WeekStart: c.WeekStart,
		MonthDay:  c.MonthDay,
	}
	if err := s.Validate(); err != nil {
		// Validate names the Spec field, whose name is the Calendar's.
		return c, calendar.Spec{}, configError("%s: ratelimit.Calendar.%v", name, err)
	}
	return c, s, nil
}

// nominal returns the usual length of c's periods: 24 hours, 7 days, 30
// days or 365 days, whatever the zone and the date. [Calendar.windowAt]
// has the real length of a given period, which [Policy.WindowAt] reports.
func (c Calendar) nominal() time.Duration {
	const day = 24 * time.Hour
	switch c.Unit {
	case Daily:
		return day
	case Weekly:
		return 7 * day
	case Monthly:
		return 30 * day
	case Yearly:
		return 365 * day
	}
	return 0
}

// windowAt returns the exact length of c's period containing t, such as
// 23 hours on the day the clocks spring forward, or 29 days for February
// of a leap year; the nominal length when c is invalid.
func (c Calendar) windowAt(t time.Time) time.Duration {
	start, end, err := c.Period(t)
	if err != nil {
		return c.nominal()
	}
	return end.Sub(start)
}

// Period returns the period of c containing t: the instant it started
// (inclusive) and the instant it ends (exclusive), in c's Location, such
// as midnight to midnight of t's day in New York for a daily calendar
// there. A quota of c admits again from end. It returns an error wrapping
// [ErrInvalidConfig] when c is invalid.
func (c Calendar) Period(t time.Time) (start, end time.Time, err error) {
	_, spec, err := c.spec("ratelimit.Calendar.Period")
	if err != nil {
		return time.Time{}, time.Time{}, err
	}
	start, end = spec.Period(t)
	return start, end, nil
}

// unixNanoClamped returns t in Unix ns, saturated at the ends of int64.
func unixNanoClamped(t time.Time) int64 {
	switch {
	case t.Before(time.Unix(0, math.MinInt64)):
		return math.MinInt64
	case t.After(time.Unix(0, math.MaxInt64)):
		return math.MaxInt64
	}
	return t.UnixNano()
}
