// Package timerclock is a mock clock for tests that announces every timer
// started on it, so that a test knows when the code under test has begun
// to wait, and for how long, and can then move time deterministically.
// It is shared by the tests of the outbound clients (httplimit's
// transport, grpclimit's client) and of internal/pacer.
package timerclock

import (
	"sync"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
)

// patience is how long Next waits for a timer before failing the test.
const patience = 5 * time.Second

// Clock is a *clock.Mock whose After announces each timer on Timers.
//
// Starting a timer and moving time are serialized: clock.Mock (v1.3.5)
// fires a due timer from both After and Add without holding its lock in
// between, so that an After racing an Add could fire one timer twice, and
// the second send on its channel (of one slot) blocked forever while
// holding the mock's lock: every goroutine reading the clock hung.
type Clock struct {
	*clock.Mock
	// Timers receives the duration of each timer started with After, in
	// order; it holds up to 64 unread.
	Timers chan time.Duration

	mu sync.Mutex // held while a timer starts or time moves
}

// New returns a Clock set to start.
func New(start time.Time) *Clock {
	m := clock.NewMock()
	m.Set(start)
	return &Clock{Mock: m, Timers: make(chan time.Duration, 64)}
}

// After starts a timer on the mock and announces its duration.
func (c *Clock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	ch := c.Mock.After(d)
	c.mu.Unlock()
	c.Timers <- d
	return ch
}

// Add moves the mock's time on by d, firing the timers due.
func (c *Clock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Mock.Add(d)
}

// Set moves the mock's time to t, firing the timers due.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Mock.Set(t)
}

// Next returns the duration of the next timer started on c, failing t if
// none starts within a few seconds.
func (c *Clock) Next(t testing.TB) time.Duration {
	t.Helper()
	select {
	case d := <-c.Timers:
		return d
	case <-time.After(patience):
		t.Fatal("no timer started")
		return 0
	}
}

// None fails t if a timer has been started on c and not read.
func (c *Clock) None(t testing.TB) {
	t.Helper()
	select {
	case d := <-c.Timers:
		t.Fatalf("a timer of %v started, want none", d)
	default:
	}
}
