// Package fakeclock is the fake time of the repository's tests: a
// [clock.Mock] from github.com/benbjohnson/clock made safe to share between
// a waiter and the test that moves time ([Mock]), optionally announcing
// every timer started on it, and a manual clock without the mock's sleeps
// for long simulated timelines ([Manual]).
//
// Tests that need real timers of the runtime use testing/synctest instead.
package fakeclock

import (
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
)

// patience is how long Next waits for a timer before failing the test.
const patience = 10 * time.Second

// announced is how many announced timers a Mock holds unread.
const announced = 256

// Mock is a *clock.Mock on which starting a timer and moving time are
// serialized.
//
// clock.Mock (v1.3.5) fires a due timer from both Timer (After) and Add or
// Set without holding its lock in between, so an After racing an Add can
// fire one timer twice; the second send on the timer's channel (of one
// slot) then blocks forever while holding the mock's lock, and every
// goroutine reading the clock hangs. Mock holds its own lock around both.
//
// Like clock.Mock, Add and Set sleep a millisecond after moving time, to
// let the goroutines woken run: use [Manual] where nothing waits and
// timelines are long.
type Mock struct {
	*clock.Mock

	// Timers receives the duration of each timer started with After, in
	// order, on a Mock made by NewAnnouncing (nil on one made by New); it
	// holds up to 256 unread.
	Timers chan time.Duration

	mu sync.Mutex // held while a timer starts or time moves
}

// New returns a Mock set to start.
func New(start time.Time) *Mock {
	m := clock.NewMock()
	m.Set(start)
	return &Mock{Mock: m}
}

// NewAnnouncing returns a Mock set to start that announces each timer
// started with After on its Timers channel, so that a test knows when the
// code under test has begun to wait, and for how long, and can then move
// time deterministically.
func NewAnnouncing(start time.Time) *Mock {
	m := New(start)
	m.Timers = make(chan time.Duration, announced)
	return m
}

// After starts a timer on the mock (and announces its duration on Timers,
// if m announces).
func (m *Mock) After(d time.Duration) <-chan time.Time {
	return m.Timer(d).C
}

// Timer starts a timer on the mock (and announces its duration on Timers,
// if m announces).
func (m *Mock) Timer(d time.Duration) *clock.Timer {
	m.mu.Lock()
	t := m.Mock.Timer(d)
	m.mu.Unlock()
	if m.Timers != nil {
		m.Timers <- d
	}
	return t
}

// Add moves the mock's time on by d, firing the timers due.
func (m *Mock) Add(d time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.Mock.Add(d)
}

// Set moves the mock's time to t, firing the timers due.
func (m *Mock) Set(t time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.Mock.Set(t)
}

// Next returns the duration of the next timer started on m, failing t if
// none starts within a few seconds, or if m does not announce its timers.
func (m *Mock) Next(t testing.TB) time.Duration {
	t.Helper()
	if m.Timers == nil {
		t.Fatal("fakeclock: Next on a Mock that does not announce its timers (use NewAnnouncing)")
	}
	select {
	case d := <-m.Timers:
		return d
	case <-time.After(patience):
		t.Fatalf("fakeclock: no timer started within %v", patience)
		return 0
	}
}

// None fails t if a timer has been started on m and not read, or if m
// does not announce its timers.
func (m *Mock) None(t testing.TB) {
	t.Helper()
	if m.Timers == nil {
		t.Fatal("fakeclock: None on a Mock that does not announce its timers (use NewAnnouncing)")
	}
	select {
	case d := <-m.Timers:
		t.Fatalf("fakeclock: a timer of %v started, want none", d)
	default:
	}
}

// Manual is a clock that moves only when Set or Add is called, without the
// millisecond sleep *clock.Mock takes on every move, so long simulated
// timelines stay fast. It is for tests that do not wait on it: see After.
// Safe for concurrent use.
type Manual struct {
	mu      sync.Mutex
	t       time.Time // guarded by mu
	instant bool      // After moves the time on by d
}

// NewManual returns a Manual at start whose After answers at once without
// moving the time: a waiter given it spins rather than hangs.
func NewManual(start time.Time) *Manual { return &Manual{t: start} }

// NewInstant returns a Manual at start on which every wait ends at once:
// After moves the time on by d and answers, so a WaitN returns, on fake
// time, without another goroutine.
func NewInstant(start time.Time) *Manual { return &Manual{t: start, instant: true} }

// Now returns the clock's time.
func (c *Manual) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

// Set moves the clock to t.
func (c *Manual) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// Add moves the clock by d.
func (c *Manual) Add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// After returns a channel that already holds the time d from now; on a
// clock made by NewInstant it also moves the time there (and a d <= 0
// answers now).
func (c *Manual) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	at := c.t.Add(d)
	if c.instant {
		if d > 0 {
			c.t = at
		} else {
			at = c.t
		}
	}
	c.mu.Unlock()
	ch := make(chan time.Time, 1)
	ch <- at
	return ch
}
