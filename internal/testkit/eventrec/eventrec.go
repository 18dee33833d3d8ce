// Package eventrec is the [ratelimit.Observer] of the tests above the root
// package: it keeps every Event it is given, for the test to read. (The
// root package's own tests keep their own: a package it imports cannot
// import it back.)
package eventrec

import (
	"context"
	"sync"

	"github.com/rlkit/ratelimit"
)

// Recorder is a ratelimit.Observer that keeps every Event. The zero value
// is ready to use; it is safe for concurrent use.
type Recorder struct {
	mu  sync.Mutex
	all []ratelimit.Event // guarded by mu
}

// Observe keeps e.
func (r *Recorder) Observe(_ context.Context, e ratelimit.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all = append(r.all, e)
}

// Take returns the Events received since the last Take, and forgets them.
func (r *Recorder) Take() []ratelimit.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	all := r.all
	r.all = nil
	return all
}

// All returns a copy of the Events received since the last Take.
func (r *Recorder) All() []ratelimit.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]ratelimit.Event(nil), r.all...)
}
