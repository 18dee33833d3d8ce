package calendar

import (
	"testing"
	"time"
)

func zone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatalf("LoadLocation(%q): %v", name, err)
	}
	return loc
}

func at(loc *time.Location, s string) time.Time {
	t, err := time.ParseInLocation("2006-01-02 15:04", s, loc)
	if err != nil {
		panic(err)
	}
	return t
}

func TestPeriods(t *testing.T) {
	ny := zone(t, "America/New_York")
	syd := zone(t, "Australia/Sydney")
	utc := time.UTC
	for _, tc := range []struct {
		name       string
		spec       Spec
		t          time.Time
		start, end time.Time
		length     time.Duration
	}{
		{"day utc", Spec{Unit: Day, Loc: utc, MonthDay: 1}, at(utc, "2026-06-10 12:00"), at(utc, "2026-06-10 00:00"), at(utc, "2026-06-11 00:00"), 24 * time.Hour},
		{"day before reset", Spec{Unit: Day, Loc: utc, Hour: 6, MonthDay: 1}, at(utc, "2026-06-10 05:59"), at(utc, "2026-06-09 06:00"), at(utc, "2026-06-10 06:00"), 24 * time.Hour},
		{"ny spring forward day is 23h", Spec{Unit: Day, Loc: ny, MonthDay: 1}, at(ny, "2026-03-08 12:00"), at(ny, "2026-03-08 00:00"), at(ny, "2026-03-09 00:00"), 23 * time.Hour},
		{"ny fall back day is 25h", Spec{Unit: Day, Loc: ny, MonthDay: 1}, at(ny, "2026-11-01 12:00"), at(ny, "2026-11-01 00:00"), at(ny, "2026-11-02 00:00"), 25 * time.Hour},
		// 02:30 does not exist on 2026-03-08 in New York: the day starts at
		// 03:00 EDT, the end of the gap.
		{"ny reset in gap", Spec{Unit: Day, Loc: ny, Hour: 2, Minute: 30, MonthDay: 1}, at(ny, "2026-03-08 12:00"), time.Date(2026, 3, 8, 7, 0, 0, 0, utc), time.Date(2026, 3, 9, 6, 30, 0, 0, utc), 23*time.Hour + 30*time.Minute},
		// 01:30 occurs twice on 2026-11-01: the first one (EDT, 05:30 UTC).
		{"ny reset repeated", Spec{Unit: Day, Loc: ny, Hour: 1, Minute: 30, MonthDay: 1}, at(ny, "2026-11-01 12:00"), time.Date(2026, 11, 1, 5, 30, 0, 0, utc), time.Date(2026, 11, 2, 6, 30, 0, 0, utc), 25 * time.Hour},
		{"sydney fall back day is 25h", Spec{Unit: Day, Loc: syd, MonthDay: 1}, at(syd, "2026-04-05 12:00"), at(syd, "2026-04-05 00:00"), at(syd, "2026-04-06 00:00"), 25 * time.Hour},
		{"sydney spring forward day is 23h", Spec{Unit: Day, Loc: syd, MonthDay: 1}, at(syd, "2026-10-04 12:00"), at(syd, "2026-10-04 00:00"), at(syd, "2026-10-05 00:00"), 23 * time.Hour},
		{"sydney reset in gap", Spec{Unit: Day, Loc: syd, Hour: 2, Minute: 15, MonthDay: 1}, at(syd, "2026-10-04 12:00"), time.Date(2026, 10, 3, 16, 0, 0, 0, utc), time.Date(2026, 10, 4, 15, 15, 0, 0, utc), 23*time.Hour + 15*time.Minute},
		{"sydney reset repeated", Spec{Unit: Day, Loc: syd, Hour: 2, Minute: 15, MonthDay: 1}, at(syd, "2026-04-05 12:00"), time.Date(2026, 4, 4, 15, 15, 0, 0, utc), time.Date(2026, 4, 5, 16, 15, 0, 0, utc), 25 * time.Hour},
		{"week monday", Spec{Unit: Week, Loc: utc, WeekStart: time.Monday, MonthDay: 1}, at(utc, "2026-12-06 23:00"), at(utc, "2026-11-30 00:00"), at(utc, "2026-12-07 00:00"), 7 * 24 * time.Hour},
		{"week across year", Spec{Unit: Week, Loc: utc, WeekStart: time.Sunday, MonthDay: 1}, at(utc, "2027-01-01 10:00"), at(utc, "2026-12-27 00:00"), at(utc, "2027-01-03 00:00"), 7 * 24 * time.Hour},
		{"month february leap", Spec{Unit: Month, Loc: utc, MonthDay: 1}, at(utc, "2028-02-29 23:59"), at(utc, "2028-02-01 00:00"), at(utc, "2028-03-01 00:00"), 29 * 24 * time.Hour},
		{"month day 31 in february", Spec{Unit: Month, Loc: utc, MonthDay: 31}, at(utc, "2027-03-15 00:00"), at(utc, "2027-02-28 00:00"), at(utc, "2027-03-31 00:00"), 31 * 24 * time.Hour},
		{"month day 30 leap feb", Spec{Unit: Month, Loc: utc, MonthDay: 30}, at(utc, "2028-02-29 12:00"), at(utc, "2028-02-29 00:00"), at(utc, "2028-03-30 00:00"), 30 * 24 * time.Hour},
		{"month ny with dst", Spec{Unit: Month, Loc: ny, MonthDay: 1}, at(ny, "2026-03-31 23:59"), at(ny, "2026-03-01 00:00"), at(ny, "2026-04-01 00:00"), 31*24*time.Hour - time.Hour},
		{"year leap", Spec{Unit: Year, Loc: utc, MonthDay: 1}, at(utc, "2028-12-31 23:59"), at(utc, "2028-01-01 00:00"), at(utc, "2029-01-01 00:00"), 366 * 24 * time.Hour},
		{"year before reset", Spec{Unit: Year, Loc: utc, Hour: 9, MonthDay: 1}, at(utc, "2027-01-01 08:59"), at(utc, "2026-01-01 09:00"), at(utc, "2027-01-01 09:00"), 365 * 24 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.spec.Validate(); err != nil {
				t.Fatal(err)
			}
			start, end := tc.spec.Period(tc.t)
			if !start.Equal(tc.start) || !end.Equal(tc.end) {
				t.Fatalf("Period(%v) = [%v, %v), want [%v, %v)", tc.t, start, end, tc.start, tc.end)
			}
			if got := end.Sub(start); got != tc.length {
				t.Fatalf("length %v, want %v", got, tc.length)
			}
			// Every instant of the period maps to it: its first and last.
			for _, u := range []time.Time{start, end.Add(-time.Nanosecond)} {
				if s, e := tc.spec.Period(u); !s.Equal(start) || !e.Equal(end) {
					t.Fatalf("Period(%v) = [%v, %v), want [%v, %v)", u, s, e, start, end)
				}
			}
			if s, _ := tc.spec.Period(end); !s.Equal(end) {
				t.Fatalf("Period(end) starts at %v, want %v", s, end)
			}
		})
	}
}

// TestPeriodsTile walks two years hour by hour in zones of both
// hemispheres and checks that periods tile time: each period ends where
// the next starts, and every instant lies in the period reported for it.
func TestPeriodsTile(t *testing.T) {
	for _, name := range []string{"America/New_York", "Australia/Sydney", "Europe/London", "Asia/Kolkata", "Australia/Lord_Howe"} {
		loc := zone(t, name)
		for _, spec := range []Spec{
			{Unit: Day, Loc: loc, MonthDay: 1},
			{Unit: Day, Loc: loc, Hour: 2, Minute: 30, MonthDay: 1},
			{Unit: Day, Loc: loc, Hour: 1, Minute: 45, MonthDay: 1},
			{Unit: Week, Loc: loc, Hour: 2, WeekStart: time.Sunday, MonthDay: 1},
			{Unit: Month, Loc: loc, Hour: 2, Minute: 30, MonthDay: 31},
			{Unit: Year, Loc: loc, MonthDay: 1},
		} {
			u := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			stop := u.AddDate(2, 0, 0)
			_, prevEnd := spec.Period(u)
			for ; u.Before(stop); u = u.Add(53 * time.Minute) {
				s, e := spec.Period(u)
				if u.Before(s) || !u.Before(e) {
					t.Fatalf("%s %+v: %v not in its period [%v, %v)", name, spec, u, s, e)
				}
				if !s.Equal(prevEnd) && s.After(prevEnd) {
					t.Fatalf("%s %+v: gap between %v and %v", name, spec, prevEnd, s)
				}
				prevEnd = e
			}
		}
	}
}

func TestValidate(t *testing.T) {
	for _, s := range []Spec{
		{Unit: 0, Loc: time.UTC, MonthDay: 1},
		{Unit: Day, MonthDay: 1},
		{Unit: Day, Loc: time.UTC, Hour: 24, MonthDay: 1},
		{Unit: Day, Loc: time.UTC, Minute: -1, MonthDay: 1},
		{Unit: Week, Loc: time.UTC, WeekStart: 7, MonthDay: 1},
		{Unit: Month, Loc: time.UTC, MonthDay: 32},
		{Unit: Month, Loc: time.UTC},
	} {
		if s.Validate() == nil {
			t.Errorf("Validate(%+v) = nil, want an error", s)
		}
	}
}

// TestPeriodSkippedDay: Pacific/Apia skipped 2011-12-30 (23:59:59 -10 on
// the 29th was followed by 00:00 +14 on the 31st). A daily reset at 23:30
// on the missing day happens at the end of the gap, 00:00 on the 31st, and
// the next day starts at 23:30 on the 31st: the period in between is 23.5
// hours, and no two periods overlap.
func TestPeriodSkippedDay(t *testing.T) {
	apia := zone(t, "Pacific/Apia")
	spec := Spec{Unit: Day, Loc: apia, Hour: 23, Minute: 30, MonthDay: 1}
	endOfGap := time.Date(2011, 12, 30, 10, 0, 0, 0, time.UTC) // 00:00 +14 on the 31st
	next := time.Date(2011, 12, 31, 9, 30, 0, 0, time.UTC)     // 23:30 +14 on the 31st
	for _, u := range []time.Time{endOfGap, endOfGap.Add(15 * time.Minute), next.Add(-time.Nanosecond)} {
		s, e := spec.Period(u)
		if !s.Equal(endOfGap) || !e.Equal(next) {
			t.Errorf("Period(%v) = [%v, %v), want [%v, %v)", u.UTC(), s.UTC(), e.UTC(), endOfGap, next)
		}
	}
	if s, _ := spec.Period(endOfGap.Add(-time.Nanosecond)); !s.Before(endOfGap) {
		t.Errorf("Period(1ns before the gap's end) starts at %v, want before %v", s.UTC(), endOfGap)
	}
}

// TestPeriodsTileOddZones is TestPeriodsTile over zones whose clocks do
// unusual things: a skipped day (Apia, 2011), changes at midnight (Sao
// Paulo, Havana, Santiago), DST suspended for Ramadan (Casablanca), a
// two-hour change (Troll), a permanent offset change (Moscow, 2011 and
// 2014). Each period must follow the previous one exactly.
func TestPeriodsTileOddZones(t *testing.T) {
	t.Parallel()
	for _, z := range []struct {
		name string
		year int
	}{
		{"Pacific/Apia", 2011}, {"America/Sao_Paulo", 2017}, {"America/Havana", 2019},
		{"America/Santiago", 2019}, {"Africa/Casablanca", 2019}, {"Antarctica/Troll", 2020},
		{"Europe/Moscow", 2011}, {"Europe/Moscow", 2014},
	} {
		loc := zone(t, z.name)
		for _, spec := range []Spec{
			{Unit: Day, Loc: loc, MonthDay: 1},
			{Unit: Day, Loc: loc, Hour: 23, Minute: 30, MonthDay: 1},
			{Unit: Day, Loc: loc, Hour: 1, MonthDay: 1},
			{Unit: Week, Loc: loc, WeekStart: time.Saturday, Hour: 23, MonthDay: 1},
			{Unit: Month, Loc: loc, MonthDay: 30},
		} {
			u := time.Date(z.year, 1, 1, 0, 0, 0, 0, time.UTC)
			stop := u.AddDate(1, 0, 0)
			ps, pe := spec.Period(u)
			for ; u.Before(stop); u = u.Add(53 * time.Minute) {
				s, e := spec.Period(u)
				if u.Before(s) || !u.Before(e) {
					t.Fatalf("%s %+v: %v not in its period [%v, %v)", z.name, spec, u, s, e)
				}
				if !(s.Equal(ps) && e.Equal(pe)) {
					// A new period: the ones the step jumped over (such as a
					// 30-minute one before Apia's skipped day) lead to it.
					q := pe
					for q.Before(s) {
						qs, qe := spec.Period(q)
						if !qs.Equal(q) || !qe.After(q) {
							t.Fatalf("%s %+v: Period(%v) = [%v, %v), want a period starting there", z.name, spec, q, qs, qe)
						}
						q = qe
					}
					if !q.Equal(s) {
						t.Fatalf("%s %+v: at %v period [%v, %v) does not follow [%v, %v)", z.name, spec, u, s, e, ps, pe)
					}
				}
				ps, pe = s, e
			}
		}
	}
}

func TestValidateNamesTheField(t *testing.T) {
	err := Spec{Unit: Day, Loc: time.UTC, Hour: 24, MonthDay: 1}.Validate()
	fe, ok := err.(*FieldError)
	if !ok || fe.Field != "Hour" || err.Error() != "Hour must be 0-23, got 24" {
		t.Fatalf("Validate = %#v (%v), want a *FieldError for Hour", err, err)
	}
}
