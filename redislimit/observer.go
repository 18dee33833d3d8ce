package redislimit

import (
	"context"
	"errors"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/observe"
)

// Observing: the Events of WithObserver, and what the servers of packages
// httplimit and grpclimit need to label this home's decisions themselves.

// observe reports a decision to the observer; start is when the decision
// began, as time.Since(l.epoch) (one monotonic clock read, where time.Now
// reads two clocks).
func (l *Limiter) observe(ctx context.Context, n int, d ratelimit.Decision, err error, wait bool, start time.Duration) {
	if ctx == nil {
		ctx = context.Background()
	}
	l.observer.Observe(ctx, ratelimit.Event{
		Name:      l.name,
		Algorithm: l.cur.Load().policy.Algorithm,
		Home:      ratelimit.HomeRedis,
		Outcome:   outcome(d, err),
		N:         n,
		Decision:  d,
		Err:       err,
		Wait:      wait,
		Latency:   time.Since(l.epoch) - start,
	})
}

// outcome classifies a decision for the observer: refused by the limit
// (Denied), decided by the failure policy (the error wraps
// ErrUnavailable), or refused before anything was decided (a done ctx, an
// impossible wait).
func outcome(d ratelimit.Decision, err error) ratelimit.Outcome {
	switch {
	case err == nil && d.Allowed:
		return ratelimit.OutcomeAllowed
	case err == nil:
		return ratelimit.OutcomeDenied
	case errors.Is(err, ErrUnavailable):
		return ratelimit.OutcomeFallback
	}
	return ratelimit.OutcomeError
}

// init tells the servers of packages httplimit and grpclimit, which
// report the decisions of the limits they serve themselves, how to label
// this home's: Home redis, a fallback for every error that wraps
// ErrUnavailable, and whether the limiter reports to an observer or a
// logger of its own.
func init() {
	observe.Register(func(l any) (observe.Info, bool) {
		if cc, ok := l.(*Concurrency); ok && cc != nil {
			return observe.Info{
				Home:     uint8(ratelimit.HomeRedis),
				Observed: cc.observer != nil,
				Logs:     cc.logger.Get() != nil,
				Fallback: isUnavailable,
			}, true
		}
		lim, ok := l.(*Limiter)
		if !ok || lim == nil {
			return observe.Info{}, false
		}
		return observe.Info{
			Home:     uint8(ratelimit.HomeRedis),
			Observed: lim.observer != nil,
			Logs:     lim.logger.Get() != nil,
			Fallback: isUnavailable,
		}, true
	})
}

// isUnavailable reports whether err says that Redis could not decide, so
// that the failure policy did.
func isUnavailable(err error) bool { return errors.Is(err, ErrUnavailable) }
