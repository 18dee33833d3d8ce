package ratelimit

import (
	"context"
	"math"
	"slices"
	"sync"
	"sync/atomic"
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
	// Initial is the limit before any latency was measured: default 20,
	// or the bound nearest it when 20 is outside [Min, Max].
	Initial int
	// Min and Max bound the limit: default 1, and 1000 (or Min when it
	// is larger).
	Min, Max int
	// Tolerance is how much latency above the service's own, unloaded
	// latency is taken as queueing, and so as too much concurrency: 0.1
	// (10%) by default.
	Tolerance float64
	// Reserve is the share of the limit kept for critical requests:
	// PriorityCritical may exceed the limit by it, PrioritySheddable must
	// stay that share below it (though one is admitted when nothing is in
	// flight). It is counted in whole places, rounded up: with a limit of
	// 9 and 0.2, critical requests may fill 11 and sheddable ones 7.
	// Default 0.2; it must be below 0.5.
	Reserve float64
	// Timeout, when positive, counts a request that took longer than it as
	// dropped, whether its Flight was ended with Success or Dropped (one
	// ended with Ignore teaches nothing).
	Timeout time.Duration
}

// Adaptive is an adaptive concurrency limiter: it bounds the requests in
// flight to a service by a limit that follows the service's measured
// latency, so that it protects the service from itself when its capacity
// drops. It is process-wide: one for the service, not per key. Ask it
// with Acquire before the work; end the Flight it returns with Success,
// Dropped or Ignore after.
//
// The limit is a gradient on latency windows: each window's median latency
// of successful requests is compared with the service's unloaded latency
// (the lowest seen) plus the Tolerance, and the limit is scaled by their
// ratio, by half a step, cut by at most a quarter and grown by at most the
// Tolerance per window (or by one place, when the latency is the unloaded
// one), grown only while it is in use. Dropped requests
// (more than 1% of a window) cut it by a tenth whatever the latency. The
// unloaded latency is re-measured about every 30 seconds at
// 1/(1+Tolerance)² of the limit for a few windows, and adopted when
// cutting the limit does not lower the latency (the service got slower).
// docs/overload.md gives the reasons and the figures.
//
// Its decisions report to an [Observer] (Algorithm [AdaptiveAlgorithm],
// Home [HomeMemory]): a shed request as [OutcomeShed].
//
// Create one with [NewAdaptive]; the zero value is not usable. An
// Adaptive is safe for concurrent use.
type Adaptive struct {
	ts   timesrc.Source
	obs  Observer
	name string
	cfg  AdaptiveConfig

	// The hot path reads and writes these without a lock. The limit and
	// what follows from it are written when a window closes.
	inFlight   atomic.Int64
	limit      atomic.Int64
	ceil       [3]atomic.Int64                // in flight allowed for sheddable, default, critical
	half       atomic.Int64                   // in flight from which the limit counts as in use
	retryAfter atomic.Int64                   // ns
	win        atomic.Pointer[adaptiveWindow] // the window collecting samples: one of wins
	cutAt      atomic.Int64                   // flights started before it are not sampled
	tokens     sync.Pool                      // *flightToken, so that a Flight ends once

	// mu is held to close a window, taken with TryLock: one goroutine
	// closes it, the others do not wait.
	mu      sync.Mutex
	core    adaptiveCore      // guarded by mu
	scratch []int64           // guarded by mu: the closing window's latencies
	wins    [2]adaptiveWindow // the current window and the one before, reused
	winIdx  int               // guarded by mu: wins[winIdx] is current
}

// The sample windows.
const (
	// windowSamples is how many latencies a window keeps, the latest.
	windowSamples = 256
	// windowMinSamples is how many ended flights close a window (with
	// windowMinDur elapsed), startSamples in the slow start, after the
	// first window and before the latency first rose; windowMaxDur closes
	// it with one.
	windowMinSamples = 128
	startSamples     = 16
	windowMinDur     = int64(10 * time.Millisecond)
	windowMaxDur     = int64(time.Second)
)

// adaptiveWindow collects the flights that end in one window. Its start and
// closeAt are set before it is published. Windows are reused: a flight that
// loaded the window before the last close may still record into it, one
// sample late, which is harmless.
type adaptiveWindow struct {
	start, closeAt atomic.Int64
	minN           atomic.Int64                // ended flights that close it
	n              atomic.Int64                // latencies recorded
	drops          atomic.Int64                // flights dropped or timed out
	used           atomic.Bool                 // in flight reached half the limit
	lat            [windowSamples]atomic.Int64 // latency+1 ns, the n-th at n%windowSamples; 0: not yet written
}

// NewAdaptive returns an adaptive concurrency limiter configured by cfg.
// The options [WithClock], [WithObserver] and [WithName] apply. A field of
// cfg out of range is an error wrapping [ErrInvalidConfig].
func NewAdaptive(cfg AdaptiveConfig, opts ...Option) (*Adaptive, error) {
	o, err := buildOptions("NewAdaptive", optClock|optObserver|optName, opts)
	if err != nil {
		return nil, err
	}
	if cfg.Min == 0 {
		cfg.Min = 1
	}
	if cfg.Max == 0 {
		cfg.Max = max(1000, cfg.Min)
	}
	if cfg.Initial == 0 {
		cfg.Initial = min(max(20, cfg.Min), cfg.Max)
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
	a := &Adaptive{ts: timesrc.New(o.clock), obs: o.observer, name: o.name, cfg: cfg,
		scratch: make([]int64, 0, windowSamples)}
	a.tokens.New = func() any { return &flightToken{a: a} }
	now := a.ts.Now()
	a.core = adaptiveCore{cfg: cfg, limit: float64(cfg.Initial), nextProbe: now + int64(firstProbe)}
	a.cutAt.Store(now)
	a.publish(now)
	return a, nil
}

// Limit returns the limit now: how many default-priority requests may be
// in flight.
func (a *Adaptive) Limit() int { return int(a.limit.Load()) }

// InFlight returns how many requests are in flight.
func (a *Adaptive) InFlight() int { return int(a.inFlight.Load()) }

// Acquire asks to start one request of priority p. It never waits. When
// the Decision is allowed, the request holds a place until its Flight is
// ended; when it is not, the request is shed and the zero Flight is
// returned. The Decision says Limit (the limit now), Remaining (the
// places still free for p) and, when shed, RetryAfter: the service's
// unloaded latency (at least a millisecond), about when the requests in
// flight now have made room.
func (a *Adaptive) Acquire(ctx context.Context, p Priority) (Flight, Decision) {
	ceil := a.ceil[priorityIndex(p)].Load()
	d := Decision{Limit: int(a.limit.Load())}
	n := a.inFlight.Load()
	for n < ceil && !a.inFlight.CompareAndSwap(n, n+1) {
		n = a.inFlight.Load()
	}
	if n < ceil {
		n++
		d.Allowed, d.Remaining = true, int(ceil-n)
	} else {
		d.RetryAfter = time.Duration(a.retryAfter.Load())
	}
	if n >= a.half.Load() {
		if w := a.win.Load(); !w.used.Load() {
			w.used.Store(true)
		}
	}
	if a.obs != nil {
		observeGuard(ctx, a.obs, Event{Name: a.name, Algorithm: AdaptiveAlgorithm, Home: HomeMemory, Decision: d})
	}
	if !d.Allowed {
		return Flight{}, d
	}
	t := a.tokens.Get().(*flightToken)
	t.start = a.ts.Now()
	return Flight{t: t, gen: t.gen.Load()}, d
}

// priorityIndex is p's index in Adaptive.ceil.
func priorityIndex(p Priority) int {
	switch {
	case p > PriorityDefault:
		return 2
	case p < PriorityDefault:
		return 0
	}
	return 1
}

// publish makes the core's limit the one Acquire reads and opens a new
// window at now. Requires a.mu held, or a not yet shared.
func (a *Adaptive) publish(now int64) {
	c := &a.core
	l := c.limit
	// The reserve in whole places, rounded up (less a hair, so that 10 ×
	// 0.2 is 2): at a small limit, a reserve rounded down would leave
	// critical requests one place or none. Sheddable requests get a place
	// at least when none is in flight, so that at a limit of one a
	// service whose traffic is all sheddable still serves it, and its
	// limit can grow again.
	lim := satInt64(l)
	res := satInt64(math.Ceil(float64(lim)*a.cfg.Reserve - 1e-9))
	a.ceil[0].Store(max(lim-res, 1))
	a.ceil[1].Store(lim)
	a.ceil[2].Store(lim + res)
	a.half.Store((lim + 1) / 2)
	a.limit.Store(lim)
	a.retryAfter.Store(max(c.baseline, int64(time.Millisecond)))
	a.winIdx ^= 1
	w := &a.wins[a.winIdx]
	w.n.Store(0)
	w.drops.Store(0)
	w.used.Store(false)
	for i := range w.lat {
		w.lat[i].Store(0)
	}
	w.start.Store(now)
	w.closeAt.Store(now + max(windowMinDur, c.baseline))
	w.minN.Store(windowMinSamples)
	if !c.started && c.baseline > 0 {
		w.minN.Store(startSamples)
	}
	a.win.Store(w)
}

// satInt64 converts f, not negative, to an int64, saturated at 1<<62 so
// that a huge limit (Max math.MaxInt) neither overflows into a negative
// ceiling nor overflows when a ceiling is added to.
func satInt64(f float64) int64 {
	return int64(min(f, 1<<62))
}

// closeWindow closes w, the current window, at now: its latencies and
// drops update the limit. Another goroutine closing it meanwhile wins.
func (a *Adaptive) closeWindow(now int64, w *adaptiveWindow) {
	if !a.mu.TryLock() {
		return
	}
	defer a.mu.Unlock()
	if a.win.Load() != w {
		return
	}
	s := a.scratch[:0]
	for i := range min(w.n.Load(), windowSamples) {
		if v := w.lat[i].Load(); v > 0 {
			s = append(s, v-1)
		}
	}
	a.scratch = s
	ws := windowStats{samples: len(s), drops: int(w.drops.Load()), used: w.used.Load() || a.inFlight.Load() >= a.half.Load()}
	if len(s) > 0 {
		slices.Sort(s)
		ws.figure = s[(len(s)-1)/2]
	}
	if a.core.update(now, ws) {
		a.cutAt.Store(now)
	}
	a.publish(now)
}

// Flight is one request admitted by an [Adaptive] limiter, in flight until
// it is ended by a call of Success, Dropped or Ignore. Only the first call
// on a Flight (or its copies) counts: the others do nothing. The zero
// Flight holds nothing: ending it does nothing.
type Flight struct {
	t   *flightToken
	gen uint64
}

// flightToken is the place a flight holds, reused from a pool: gen counts
// its ends, so that a Flight holding an older gen ends nothing.
type flightToken struct {
	a     *Adaptive
	gen   atomic.Uint64
	start int64 // written by the Acquire that took the token, read by its end
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
	t := f.t
	if t == nil || !t.gen.CompareAndSwap(f.gen, f.gen+1) {
		return
	}
	a, start := t.a, t.start
	a.tokens.Put(t)
	now := a.ts.Now()
	a.inFlight.Add(-1)
	if how == flightIgnored {
		return
	}
	w := a.win.Load()
	if start >= a.cutAt.Load() {
		lat := max(now-start, 0)
		if how == flightDropped || (a.cfg.Timeout > 0 && lat > int64(a.cfg.Timeout)) {
			w.drops.Add(1)
		} else {
			i := w.n.Add(1) - 1
			w.lat[i%windowSamples].Store(lat + 1)
		}
	}
	if now >= w.closeAt.Load() {
		if c := w.n.Load() + w.drops.Load(); c >= w.minN.Load() || (c > 0 && now-w.start.Load() >= windowMaxDur) {
			a.closeWindow(now, w)
		}
	}
}
