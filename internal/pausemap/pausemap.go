// Package pausemap keeps the pauses that servers ask an outbound client
// for (HTTP 429 with Retry-After, gRPC ResourceExhausted with RetryInfo):
// per key, the time until which no call of that key may be sent. It is the
// one copy of that bookkeeping, shared by httplimit's Transport and
// grpclimit's Client.
package pausemap

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlkit/ratelimit/internal/errs"
	"github.com/rlkit/ratelimit/internal/timesrc"
)

// SweepAbove is the number of paused keys above which adding a pause for
// a new key first drops the pauses that have ended, so that the map holds
// at most the keys paused now plus SweepAbove.
const SweepAbove = 64

// Map holds one pause per key. Its zero value is ready to use: no key is
// paused. A Map is safe for concurrent use; it must not be copied after
// first use.
type Map struct {
	held atomic.Int64 // len(pauses), readable without mu

	mu     sync.Mutex
	pauses map[string]time.Time // guarded by mu; no call of a key is sent before its time
}

// Idle reports whether no key holds a pause, ended or not, without taking
// the lock: a caller on its hot path checks it before building a key. A
// pause found ended by [Map.Wait] is dropped, so a client whose pauses
// have all been waited out is idle again.
func (m *Map) Idle() bool { return m.held.Load() == 0 }

// Pause pauses key until now+d, unless it is already paused until later.
// A d <= 0 changes nothing. Callers cap d (a server's hint is not trusted
// to be small).
func (m *Map) Pause(key string, now time.Time, d time.Duration) {
	if d <= 0 {
		return
	}
	until := now.Add(d)
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pauses == nil {
		m.pauses = make(map[string]time.Time)
	}
	if _, ok := m.pauses[key]; !ok && len(m.pauses) >= SweepAbove {
		for k, u := range m.pauses {
			if !u.After(now) {
				delete(m.pauses, k)
			}
		}
	}
	if until.After(m.pauses[key]) {
		m.pauses[key] = until
	}
	m.held.Store(int64(len(m.pauses)))
}

// forget drops key's pause if it is still the one that ended at until.
func (m *Map) forget(key string, until time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if u, ok := m.pauses[key]; ok && u.Equal(until) {
		delete(m.pauses, key)
		m.held.Store(int64(len(m.pauses)))
	}
}

// Until returns the time until which key is paused; the zero time if it
// never was (a time in the past once its pause has ended).
func (m *Map) Until(key string) time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pauses[key]
}

// Latest returns the latest time until which any key is paused; the zero
// time if none ever was.
func (m *Map) Latest() time.Time {
	m.mu.Lock()
	defer m.mu.Unlock()
	var until time.Time
	for _, u := range m.pauses {
		if u.After(until) {
			until = u
		}
	}
	return until
}

// Left returns how long from now until is: 0 for the zero time or a time
// in the past.
func Left(until, now time.Time) time.Duration {
	if until.IsZero() {
		return 0
	}
	return max(until.Sub(now), 0)
}

// Wait blocks until key is no longer paused, reading and sleeping on src,
// and then returns ctx.Err() (a call whose caller has gone is not sent).
// When the pause outlasts ctx's deadline it returns at once, without
// waiting, an error that matches both deadline (the caller's sentinel, as
// httplimit.ErrPauseDeadline) and context.DeadlineExceeded. When ctx ends
// during the wait it returns ctx.Err(). A pause extended during the wait
// is waited for too.
func (m *Map) Wait(ctx context.Context, src *timesrc.Source, key string, deadline error) error {
	for {
		if m.Idle() {
			return ctx.Err()
		}
		until := m.Until(key)
		if until.IsZero() {
			return ctx.Err()
		}
		d := Left(until, src.Time())
		if d <= 0 {
			m.forget(key, until)
			return ctx.Err()
		}
		if timesrc.Outlasts(ctx, d) {
			return errs.Deadline(deadline, d)
		}
		if err := src.Sleep(ctx, d); err != nil {
			return err
		}
	}
}
