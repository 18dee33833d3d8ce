// Package report paces the error reports of the packages in this
// repository: where they go (WithLogger) and how often (at most one per
// interval, the others counted and their number passed with the next).
package report

import (
	"log/slog"
	"sync/atomic"
	"time"
)

// Logger is where reports go, as a WithLogger option sets it. The zero
// Logger means slog.Default(), read at each report so that a later
// slog.SetDefault counts.
type Logger struct {
	l   *slog.Logger
	set bool
}

// To returns the Logger of WithLogger(l): l, or no reports when l is nil.
func To(l *slog.Logger) Logger { return Logger{l: l, set: true} }

// Get returns the logger to report to now, nil when reports are off.
func (x Logger) Get() *slog.Logger {
	if !x.set {
		return slog.Default()
	}
	return x.l
}

// Throttle lets through at most one report per interval and counts the
// others. The zero Throttle is ready to use and safe for concurrent use.
type Throttle struct {
	last       atomic.Int64 // clock reading of the last report; 0: none yet
	suppressed atomic.Int64 // reports left out since the last one
}

// Admit reports whether a report at now (in nanoseconds on any clock) may
// be made, at most one per every (every <= 0: all of them), and if so how
// many were left out since the last report. A report that is not admitted
// is counted.
func (t *Throttle) Admit(now int64, every time.Duration) (suppressed int64, ok bool) {
	if every > 0 {
		last := t.last.Load()
		if (last != 0 && now-last < int64(every)) || !t.last.CompareAndSwap(last, now) {
			t.suppressed.Add(1)
			return 0, false
		}
	} else {
		t.last.Store(now)
	}
	return t.suppressed.Swap(0), true
}

// Skip counts a report left out without asking, such as a failure the
// caller never reports on its own.
func (t *Throttle) Skip() { t.suppressed.Add(1) }
