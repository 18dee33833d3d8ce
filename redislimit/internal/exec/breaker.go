package exec

import (
	"errors"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// breaker fails calls fast while Redis is known to be unreachable, so that
// an outage costs callers no waiting: without it every call during an
// outage waits for its timeout (go-redis retries a refused dial with
// backoff, so even a dead server takes the whole timeout).
//
// Closed, calls go to Redis. A call that fails for want of Redis (not an
// error reply, not the caller's own context) opens it for cooldown: calls
// then get the failure policy at once. After cooldown one call at a time
// probes Redis while the others still fail fast; a success closes it, a
// failure opens it for another cooldown. Times are the limiter's local
// monotonic nanoseconds.
type breaker struct {
	cooldown  int64        // 0: disabled
	openUntil atomic.Int64 // 0: closed
	probing   atomic.Bool
	last      atomic.Pointer[error] // the error that opened it
}

// allow reports whether a call may go to Redis at now, and whether it is
// the probe of a half-open breaker, which must report back with done.
func (b *breaker) allow(now int64) (ok, probe bool, err error) {
	if b.cooldown == 0 {
		return true, false, nil
	}
	until := b.openUntil.Load()
	if until == 0 {
		return true, false, nil
	}
	if now >= until && b.probing.CompareAndSwap(false, true) {
		return true, true, nil
	}
	var last error
	if p := b.last.Load(); p != nil {
		last = *p
	}
	return false, false, &breakerError{last: last}
}

// done records the outcome of a call that went to Redis. callerDone says
// the caller's own context ended it, which says nothing about Redis.
func (b *breaker) done(now int64, probe bool, err error, callerDone bool) {
	if b.cooldown == 0 {
		return
	}
	if probe {
		defer b.probing.Store(false)
	}
	switch {
	case err == nil || isReply(err):
		if b.openUntil.Load() != 0 {
			b.openUntil.Store(0)
		}
	case callerDone:
	default:
		last := err         // a copy: taking err's address would move it to the heap on every call
		b.last.Store(&last) // a pointer: atomic.Value would panic on errors of different types
		b.openUntil.Store(now + b.cooldown)
	}
}

// isReply reports whether err is an error reply from Redis (the server
// answered), rather than a failure to reach it.
func isReply(err error) bool {
	var re redis.Error
	return errors.As(err, &re)
}
