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
// The limit is a gradient on latency windows: each window's median latency
// of successful requests is compared with the lowest seen (the service's
// unloaded latency) plus the Tolerance, and the limit is scaled by their
// ratio, cut by at most half and grown by at most the Tolerance per window,
// grown only while it is in use. Dropped requests (more than 1% of a
// window) cut it by a tenth whatever the latency. The unloaded latency is
// re-measured about every 30 seconds at half the limit for one window, and
// adopted at once when cutting the limit does not lower the latency.
// docs/overload.md gives the reasons and the figures.
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
		a.report(ctx, d)
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

// publish makes the core's limit the one Acquire reads and opens a new
// window at now. Requires a.mu held, or a not yet shared.
func (a *Adaptive) publish(now int64) {
	c := &a.core
	l := c.limit
	a.ceil[0].Store(int64(l * (1 - a.cfg.Reserve)))
	a.ceil[1].Store(int64(l))
	a.ceil[2].Store(int64(l * (1 + a.cfg.Reserve)))
	a.half.Store((int64(l) + 1) / 2)
	a.limit.Store(int64(l))
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

// The unloaded latency's re-measurement.
const (
	// firstProbe is when the first probe is due after creation: soon, as
	// the first windows may have run queued, and probePeriod the mean
	// period after.
	firstProbe  = time.Second
	probePeriod = 30 * time.Second
	// staleSteps steps down of the limit of staleStep or more each, by
	// staleCut in all, after which the latency did not fall, make the
	// latency the service's own (see learnBaseline).
	staleStep  = 0.05
	staleSteps = 2
	staleCut   = 0.2
	// dropShare is the share of a window's flights dropped above which
	// the limit is cut by dropCut.
	dropShare = 0.01
	dropCut   = 0.9
	// baselineBlock is how many windows' figures make one candidate for
	// the baseline (their median), so that the lowest seen is not the
	// luckiest window's.
	baselineBlock = 4
)

// windowStats is what a closed window measured.
type windowStats struct {
	figure  int64 // the median latency of the samples, ns
	samples int   // successful flights sampled
	drops   int   // flights dropped or timed out
	used    bool  // in flight reached half the limit
}

// adaptiveCore is the algorithm, with time as an argument: the limit and
// what it has learnt of the service's latency.
type adaptiveCore struct {
	cfg      AdaptiveConfig
	limit    float64
	baseline int64 // the unloaded latency, ns; 0 until the first sample
	started  bool  // the slow start is over

	// The figures of the windows since the last block: the median of a
	// block of baselineBlock windows may lower the baseline.
	block     [baselineBlock]int64
	blockN    int
	blocked   bool  // the baseline is a block's, not the first window's
	lastBlock int64 // the median of the last block

	// The window a step of the limit is measured from (anchorLimit 0:
	// none), and the steps down in a row after which the latency did not
	// fall: how many, and the limit before the first.
	anchorLimit  float64
	anchorFigure int64
	staleN       int
	staleFrom    float64

	// The probe: due at nextProbe; while probing, the limit is held at
	// probeShare of restore.
	nextProbe int64
	probes    int
	probing   bool
	restore   float64
	probeFig  [baselineBlock]int64 // the probe's figures, probeN of them
	probeN    int
}

// update learns from the window that closed at now and sets the limit of
// the next. It reports whether the limit was lowered (so that flights
// started before are not sampled).
func (c *adaptiveCore) update(now int64, w windowStats) bool {
	old := c.limit
	if c.probing {
		c.endProbe(now, w)
		return c.limit < old
	}
	next := old
	tol := c.cfg.Tolerance
	dropped := float64(w.drops) > dropShare*float64(w.samples+w.drops)
	if w.samples > 0 {
		c.learnBaseline(w.figure, old, dropped)
		g := 1 + tol
		if w.figure > 0 {
			g = min(max(float64(c.baseline)*(1+tol)/float64(w.figure), 0.5), 1+tol)
		}
		if g > 1 && !w.used {
			g = 1
		}
		// The slow start, with short windows, lasts until the latency
		// first rises above the target.
		c.started = c.started || g < 1
		// Half the step: the figure is a sample, and half halves the
		// limit's noise at the cost of a window more to settle. But not
		// when the latency is at the baseline: nothing queues, and the
		// limit may grow by the Tolerance at once.
		if g < 1+tol {
			g = 1 + (g-1)/2
		}
		next = old * g
	}
	if dropped {
		next = min(next, old*dropCut)
		c.started = true
	}
	next = c.clamp(next)
	if now >= c.nextProbe && w.samples > 0 {
		c.probing, c.restore, c.started = true, next, true
		next = c.clamp(next * c.probeShare())
	}
	c.limit = next
	return next < old
}

// learnBaseline takes figure, measured at limit, into the baseline: a
// lower one from a block of windows, or figure itself when the limit was
// cut twice in steps of staleStep, by staleCut in all, and the latency did
// not fall with it (by a quarter of each step), which under queueing it
// does: the service itself got slower. Steps, not windows, so that a
// window of noise does not count, and two, as the window that led to the
// first may have straddled a change of capacity.
func (c *adaptiveCore) learnBaseline(figure int64, limit float64, dropped bool) {
	if c.baseline == 0 {
		c.baseline = figure
		return
	}
	c.block[c.blockN] = figure
	if c.blockN++; c.blockN == baselineBlock {
		c.blockN = 0
		b := c.block
		slices.Sort(b[:])
		m := (b[baselineBlock/2-1] + b[baselineBlock/2]) / 2
		c.lastBlock = m
		if !c.blocked {
			// The first block corrects the first window's figure, up by
			// the Tolerance at most: later windows of the first block may
			// already be queued.
			m = min(m, int64(float64(c.baseline)*(1+c.cfg.Tolerance)))
		}
		if m < c.baseline || !c.blocked {
			c.baseline, c.staleN, c.blocked = m, 0, true
		}
	}
	if c.anchorLimit == 0 || limit > c.anchorLimit || dropped {
		// Drops are overload, not a slower service; and the latency of
		// the flights that did not time out is capped by the timeout, so
		// that it need not fall with the limit.
		c.anchorLimit, c.anchorFigure, c.staleN = limit, figure, 0
		return
	}
	cut := 1 - limit/c.anchorLimit
	if cut < staleStep {
		return
	}
	if fall := 1 - float64(figure)/float64(c.anchorFigure); fall >= cut/4 {
		c.staleN = 0
	} else {
		if c.staleN == 0 {
			c.staleFrom = c.anchorLimit
		}
		c.staleN++
	}
	c.anchorLimit, c.anchorFigure = limit, figure
	if c.staleN >= staleSteps && 1-limit/c.staleFrom >= staleCut {
		c.baseline, c.staleN = figure, 0
	}
}

// endProbe learns from a probe window, run at the probe's share of the
// limit: the median latency of a block of them is the baseline, unless it
// fell from the block before the probe by nearly as much as the limit
// (nine tenths of the cut or more), which is queueing still: then the
// probe starts over a share lower.
func (c *adaptiveCore) endProbe(now int64, w windowStats) {
	if float64(w.drops) > dropShare*float64(w.samples+w.drops) {
		c.restore = c.clamp(c.restore * dropCut)
	}
	if w.samples > 0 {
		c.probeFig[c.probeN] = w.figure
		if c.probeN++; c.probeN < baselineBlock {
			return
		}
		b := c.probeFig
		slices.Sort(b[:])
		m := (b[baselineBlock/2-1] + b[baselineBlock/2]) / 2
		share := c.probeShare()
		if c.lastBlock > 0 && 1-float64(m)/float64(c.lastBlock) >= 0.9*(1-share) && c.limit > float64(c.cfg.Min) {
			// The latency fell with the limit: it still queues, and the
			// limit to return to is at most this one.
			c.lastBlock, c.probeN, c.restore = m, 0, min(c.restore, c.limit)
			c.limit = c.clamp(c.limit * share)
			return
		}
		c.baseline, c.blocked = m, true
	}
	c.probing, c.anchorLimit, c.staleN, c.limit, c.probeN, c.blockN = false, 0, 0, c.restore, 0, 0
	c.probes++
	// The period varies from 0.75 to 1.25 of probePeriod by the golden
	// ratio's sequence: deterministic, and not in step with a periodic
	// load.
	_, frac := math.Modf(float64(c.probes) * 0.6180339887498949)
	c.nextProbe = now + int64(float64(probePeriod)*(0.75+0.5*frac))
}

// probeShare is the share of the limit a probe holds: 1/(1+Tolerance)²,
// so that from a limit settled at (1+Tolerance) times the concurrency the
// service takes without queueing it goes below that by the Tolerance,
// where latency is the unloaded one, and no further.
func (c *adaptiveCore) probeShare() float64 {
	return 1 / ((1 + c.cfg.Tolerance) * (1 + c.cfg.Tolerance))
}

// clamp bounds l to [Min, Max].
func (c *adaptiveCore) clamp(l float64) float64 {
	return min(max(l, float64(c.cfg.Min)), float64(c.cfg.Max))
}
