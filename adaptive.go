package ratelimit

import (
	"context"
	"sync"
	"time"

	"github.com/rlkit/ratelimit/internal/timesrc"
)

// Priority says how important a request is to an [Adaptive] limiter:
// under pressure the lowest priority is shed first. The zero Priority is
// [PriorityDefault].
type Priority int8

// The priorities, from the first shed to the last.
const (
	// PrioritySheddable requests (prefetches, batch jobs, health checks of
	// other services) are shed first: they may fill the limit only up to
	// a share below it (see [AdaptiveConfig].Reserve).
	PrioritySheddable Priority = -1
	// PriorityDefault requests may fill the limit.
	PriorityDefault Priority = 0
	// PriorityCritical requests (checkout, login) are shed last: they may
	// exceed the limit by the reserved share.
	PriorityCritical Priority = 1
)

// String returns "sheddable", "default" or "critical".
func (p Priority) String() string {
	switch {
	case p < PriorityDefault:
		return "sheddable"
	case p > PriorityDefault:
		return "critical"
	}
	return "default"
}

// AdaptiveConfig configures [NewAdaptive]. Its zero value is valid: each
// zero field takes the default it names.
type AdaptiveConfig struct {
	// Initial is the limit before any latency was measured: default 20.
	Initial int
	// Min and Max bound the limit: default 1 and 1000.
	Min, Max int
	// Tolerance is how much latency above the service's own, unloaded
	// latency is taken as queueing, and so as too much concurrency: 0.1
	// (10%) by default.
	Tolerance float64
	// Reserve is the share of the limit kept for critical requests:
	// PriorityCritical may exceed the limit by it, PrioritySheddable must
	// stay that share below it. Default 0.2; it must be below 0.5.
	Reserve float64
	// Timeout, when positive, counts a request that took longer than it as
	// dropped, whatever its Flight was ended with.
	Timeout time.Duration
}

// Adaptive is an adaptive concurrency limiter: it bounds the requests in
// flight to a service by a limit that follows the service's measured
// latency, so that it protects the service from itself when its capacity
// drops. It is process-wide: one for the service, not per key. Ask it
// with Acquire before the work; end the Flight it returns with Success,
// Dropped or Ignore after.
//
// Its decisions report to an [Observer] (Algorithm [AdaptiveAlgorithm],
// Home [HomeMemory]): a shed request as [OutcomeShed].
//
// An Adaptive is safe for concurrent use.
type Adaptive struct {
	ts   timesrc.Source
	obs  Observer
	name string
	cfg  AdaptiveConfig

	mu       sync.Mutex
	limit    float64
	inFlight int
}

// NewAdaptive returns an adaptive concurrency limiter configured by cfg.
// The options [WithClock], [WithObserver] and [WithName] apply. A field of
// cfg out of range is an error wrapping [ErrInvalidConfig].
func NewAdaptive(cfg AdaptiveConfig, opts ...Option) (*Adaptive, error) {
	o, err := buildOptions("NewAdaptive", optClock|optObserver|optName, opts)
	if err != nil {
		return nil, err
	}
	if cfg.Initial == 0 {
		cfg.Initial = 20
	}
	if cfg.Min == 0 {
		cfg.Min = 1
	}
	if cfg.Max == 0 {
		cfg.Max = 1000
	}
	if cfg.Tolerance == 0 {
		cfg.Tolerance = 0.1
	}
	if cfg.Reserve == 0 {
		cfg.Reserve = 0.2
	}
	switch {
	case cfg.Min < 1:
		return nil, configError("ratelimit.AdaptiveConfig.Min must be at least 1, got %d", cfg.Min)
	case cfg.Max < cfg.Min:
		return nil, configError("ratelimit.AdaptiveConfig.Max must be at least Min (%d), got %d", cfg.Min, cfg.Max)
	case cfg.Initial < cfg.Min || cfg.Initial > cfg.Max:
		return nil, configError("ratelimit.AdaptiveConfig.Initial must be within [Min, Max] = [%d, %d], got %d", cfg.Min, cfg.Max, cfg.Initial)
	case !(cfg.Tolerance > 0 && cfg.Tolerance <= 1):
		return nil, configError("ratelimit.AdaptiveConfig.Tolerance must be in (0, 1], got %v", cfg.Tolerance)
	case !(cfg.Reserve > 0 && cfg.Reserve < 0.5):
		return nil, configError("ratelimit.AdaptiveConfig.Reserve must be in (0, 0.5), got %v", cfg.Reserve)
	case cfg.Timeout < 0:
		return nil, configError("ratelimit.AdaptiveConfig.Timeout must not be negative, got %v", cfg.Timeout)
	}
	return &Adaptive{ts: timesrc.New(o.clock), obs: o.observer, name: o.name, cfg: cfg, limit: float64(cfg.Initial)}, nil
}

// Limit returns the limit now: how many default-priority requests may be
// in flight.
func (a *Adaptive) Limit() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return int(a.limit)
}

// InFlight returns how many requests are in flight.
func (a *Adaptive) InFlight() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.inFlight
}

// Acquire asks to start one request of priority p. It never waits. When
// the Decision is allowed, the request holds a place until its Flight is
// ended; when it is not, the request is shed and the zero Flight is
// returned. The Decision says Limit (the limit now), Remaining (the
// places still free for p) and, when shed, RetryAfter: a suggestion of
// when to try again.
func (a *Adaptive) Acquire(ctx context.Context, p Priority) (Flight, Decision) {
	a.mu.Lock()
	ceil := a.ceiling(p)
	d := Decision{Limit: int(a.limit)}
	if a.inFlight < ceil {
		a.inFlight++
		d.Allowed, d.Remaining = true, ceil-a.inFlight
	} else {
		d.RetryAfter = time.Second
	}
	a.mu.Unlock()
	if a.obs != nil {
		a.report(ctx, d)
	}
	if !d.Allowed {
		return Flight{}, d
	}
	return Flight{a: a, start: a.ts.Now()}, d
}

// ceiling is how many requests may be in flight when one of priority p
// asks. Requires a.mu held.
func (a *Adaptive) ceiling(p Priority) int {
	switch {
	case p > PriorityDefault:
		return int(a.limit * (1 + a.cfg.Reserve))
	case p < PriorityDefault:
		return int(a.limit * (1 - a.cfg.Reserve))
	}
	return int(a.limit)
}

func (a *Adaptive) report(ctx context.Context, d Decision) {
	if ctx == nil {
		ctx = context.Background()
	}
	e := Event{Name: a.name, Algorithm: AdaptiveAlgorithm, Home: HomeMemory, Outcome: OutcomeShed, N: 1, Decision: d}
	if d.Allowed {
		e.Outcome = OutcomeAllowed
	}
	a.obs.Observe(ctx, e)
}

// Flight is one request admitted by an [Adaptive] limiter, in flight until
// it is ended by exactly one call of Success, Dropped or Ignore. The zero
// Flight holds nothing: ending it does nothing.
type Flight struct {
	a     *Adaptive
	start int64
}

// Success ends the flight of a request the service served: its latency is
// a sample of the service's.
func (f Flight) Success() { f.end(flightSuccess) }

// Dropped ends the flight of a request the service failed from overload
// (it timed out, or answered unavailable): a sign of too much concurrency.
func (f Flight) Dropped() { f.end(flightDropped) }

// Ignore ends the flight of a request that says nothing of the service's
// capacity (it was cancelled by its client, or failed validation fast):
// its place is freed and nothing is learnt.
func (f Flight) Ignore() { f.end(flightIgnored) }

type flightEnd uint8

const (
	flightSuccess flightEnd = iota
	flightDropped
	flightIgnored
)

func (f Flight) end(how flightEnd) {
	if f.a == nil {
		return
	}
	_ = how
	f.a.mu.Lock()
	f.a.inFlight--
	f.a.mu.Unlock()
}
