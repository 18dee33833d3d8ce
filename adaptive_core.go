package ratelimit

import (
	"math"
	"slices"
	"time"
)

// The arithmetic of the [Adaptive] limit (docs/overload.md): what a window
// teaches, with time as an argument and no concurrency; adaptive.go feeds
// it the windows.

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
