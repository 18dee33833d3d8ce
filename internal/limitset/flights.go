package limitset

import (
	"context"
	"sync"

	"github.com/rlkit/ratelimit"
)

// flights tracks, per key, the reservations a limit counting by outcome
// holds in this process, so that a request the limit refuses while some
// of them may still come back waits for one to settle instead: with a
// limit of 5 failures, 16 concurrent successful logins queue 5 at a time
// and are never refused, while 64 concurrent failed ones run 5 handlers
// and refuse the rest once those 5 have settled as failures.
//
// Reservations of one key are made one at a time (a per-key mutex), so
// that a refusal seen with no reservation held is the limit's own: spent
// by settled counts, not by requests in flight. The zero value is ready.
type flights struct {
	mu   sync.Mutex
	keys map[string]*flight
}

// flight is one key's state in a flights.
type flight struct {
	reserving sync.Mutex    // serializes the key's reservations
	refs      int           // under flights.mu: reservers and holders
	held      int           // under flights.mu: reservations held
	settled   chan struct{} // under flights.mu: closed at the next settlement; nil until someone waits
}

// enter returns key's flight, counting the caller in it.
func (f *flights) enter(key string) *flight {
	f.mu.Lock()
	defer f.mu.Unlock()
	fl := f.keys[key]
	if fl == nil {
		if f.keys == nil {
			f.keys = make(map[string]*flight)
		}
		fl = new(flight)
		f.keys[key] = fl
	}
	fl.refs++
	return fl
}

// leave counts the caller out of key's flight, and forgets the flight
// when nobody is in it. With settled, the caller held a reservation that
// has now been settled: the requests waiting for one wake up.
func (f *flights) leave(key string, fl *flight, settled bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if settled {
		fl.held--
		if fl.settled != nil {
			close(fl.settled)
			fl.settled = nil
		}
	}
	if fl.refs--; fl.refs == 0 && f.keys[key] == fl {
		delete(f.keys, key)
	}
}

// reserve calls try for key until it admits, or refuses while no
// reservation of key is held in this process (it is final), or ctx ends
// while it waits for one to settle (ctx's error is returned with the
// refusal). A refusal that can never succeed (ratelimit.RetryNever), or
// that came with an error, is final. When it admits, the flight returned
// holds the reservation: give it back with leave(key, fl, true) once
// the reservation is settled.
func (f *flights) reserve(ctx context.Context, key string, try func() (*ratelimit.Reservation, error)) (*ratelimit.Reservation, *flight, error) {
	for {
		fl := f.enter(key)
		fl.reserving.Lock()
		// What is held is read before try: a reservation settled while
		// try ran closes wait, so that a refusal it caused is retried.
		// None can be granted meanwhile: that takes fl.reserving.
		f.mu.Lock()
		held := fl.held
		if held > 0 && fl.settled == nil {
			fl.settled = make(chan struct{})
		}
		wait := fl.settled
		f.mu.Unlock()
		r, err := try()
		if r.Allowed {
			f.mu.Lock()
			fl.held++
			f.mu.Unlock()
		}
		fl.reserving.Unlock()
		if r.Allowed {
			return r, fl, err
		}
		f.leave(key, fl, false)
		if held == 0 || err != nil || r.RetryAfter == ratelimit.RetryNever {
			return r, nil, err
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return r, nil, ctx.Err()
		}
	}
}
