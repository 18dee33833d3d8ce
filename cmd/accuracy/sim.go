package main

import (
	"fmt"
	"math"
	"math/big"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/rlkit/ratelimit"
)

// Algo is one limiter under study, built for a limit L per window W.
type Algo struct {
	Name  string
	Title string
	New   func(limit int, window time.Duration, c ratelimit.Clock) (ratelimit.Limiter, error)
}

// Algos are the five algorithms, all configured for "limit events per
// window": the token bucket holds limit tokens and refills limit per window;
// the leaky bucket (used as a meter, through AllowN) holds limit events and
// leaks one every window/limit.
var Algos = []Algo{
	{"tokenbucket", "token bucket", func(l int, w time.Duration, c ratelimit.Clock) (ratelimit.Limiter, error) {
		return ratelimit.NewTokenBucket(ratelimit.Per(l, w), l, ratelimit.WithClock(c))
	}},
	{"leakybucket", "leaky bucket (meter)", func(l int, w time.Duration, c ratelimit.Clock) (ratelimit.Limiter, error) {
		return ratelimit.NewLeakyBucket(l, w/time.Duration(l), ratelimit.WithClock(c))
	}},
	{"fixedwindow", "fixed window", func(l int, w time.Duration, c ratelimit.Clock) (ratelimit.Limiter, error) {
		return ratelimit.NewFixedWindow(l, w, ratelimit.WithClock(c))
	}},
	{"slidinglog", "sliding log", func(l int, w time.Duration, c ratelimit.Clock) (ratelimit.Limiter, error) {
		return ratelimit.NewSlidingLog(l, w, ratelimit.WithClock(c))
	}},
	{"slidingcounter", "sliding counter", func(l int, w time.Duration, c ratelimit.Clock) (ratelimit.Limiter, error) {
		return ratelimit.NewSlidingCounter(l, w, ratelimit.WithClock(c))
	}},
}

// Start returns the simulation's start time: 2026-01-01T00:00:00Z rounded
// down to a multiple of window since the Unix epoch, so that the first
// window of the fixed window and sliding counter begins exactly at offset 0.
func Start(window time.Duration) time.Time {
	t := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	return time.Unix(0, t-t%int64(window)).UTC()
}

// stepClock is a ratelimit.Clock whose time is set directly. It exists for
// speed: (*clock.Mock).Set and Add sleep 1 ms after every call (to let timer
// goroutines run), which at one call per event would make this program take
// minutes. The limiters only read Now (AllowN never waits), so a clock that
// just returns the time we set is all they need; After is delegated to a
// *clock.Mock and never used. -mockclock runs the same study on a
// *clock.Mock, and a test checks both clocks give identical decisions.
type stepClock struct {
	now  time.Time
	mock *clock.Mock
}

func (c *stepClock) Now() time.Time                         { return c.now }
func (c *stepClock) After(d time.Duration) <-chan time.Time { return c.mock.After(d) }

// newClock returns the clock the limiters read and a function that moves it.
func newClock(start time.Time, mock bool) (ratelimit.Clock, func(time.Time)) {
	m := clock.NewMock()
	m.Set(start)
	if mock {
		return m, m.Set
	}
	c := &stepClock{now: start, mock: m}
	return c, func(t time.Time) { c.now = t }
}

// Config is one run of the study.
type Config struct {
	Seed      uint64
	Limit     int
	Window    time.Duration
	Windows   int  // length of the steady and bursty traces, in windows
	MockClock bool // drive the limiters with a *clock.Mock (slow)
}

// Validate reports whether c can be run.
func (c Config) Validate() error {
	switch {
	case c.Limit <= 0:
		return fmt.Errorf("-limit must be positive, got %d", c.Limit)
	case c.Window <= 0:
		return fmt.Errorf("-window must be positive, got %v", c.Window)
	case c.Window%time.Duration(c.Limit) != 0:
		return fmt.Errorf("-window %v must be a whole number of nanoseconds per event (a multiple of -limit %d) so that the leaky bucket leaks exactly limit per window", c.Window, c.Limit)
	case c.Window < boundaryFraction:
		return fmt.Errorf("-window %v must be at least %dns (the attacks and charts use W/%d)", c.Window, boundaryFraction, boundaryFraction)
	case c.Windows < burstCycle:
		return fmt.Errorf("the traces must last at least %d windows, got %d", burstCycle, c.Windows)
	}
	return nil
}

// Run is the outcome of one algorithm on one trace: its decision for every
// event of the trace.
type Run struct {
	Algo     Algo
	Admitted []bool
}

// Simulate plays tr through a fresh limiter of every algorithm, all reading
// one clock that is set to each event's time in turn.
func Simulate(cfg Config, tr Trace) ([]Run, error) {
	start := Start(cfg.Window)
	clk, set := newClock(start, cfg.MockClock)
	runs := make([]Run, len(Algos))
	lims := make([]ratelimit.Limiter, len(Algos))
	for i, a := range Algos {
		l, err := a.New(cfg.Limit, cfg.Window, clk)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", a.Name, err)
		}
		lims[i] = l
		runs[i] = Run{Algo: a, Admitted: make([]bool, len(tr.Times))}
	}
	last := time.Duration(-1)
	for i, t := range tr.Times {
		if t != last {
			set(start.Add(t))
			last = t
		}
		for a, l := range lims {
			runs[a].Admitted[i] = l.AllowN(1).Allowed
		}
	}
	return runs, nil
}

// Metrics are the accuracy figures of one algorithm on one trace. Every
// count over "the trailing window at t" is over the half-open interval
// (t-W, t], the interval the sliding log enforces.
type Metrics struct {
	Offered  int // events in the trace
	Admitted int // events the algorithm admitted

	// MaxInWindow is the most admitted events in any interval (t-W, t],
	// over every t (an exact sliding maximum), and MaxRatio is it / L.
	MaxInWindow int
	MaxRatio    float64
	MaxAt       time.Duration // the first time MaxInWindow is reached

	// WrongAdmit counts events the algorithm admitted although the exact
	// answer was deny, WrongDeny events it denied although the exact answer
	// was admit; the Pct fields are per cent of Offered. The exact answer
	// for event i at time t is "admit" iff c+1 <= L, where c is the number
	// of events the algorithm itself admitted before i in (t-W, t].
	WrongAdmit, WrongDeny       int
	WrongAdmitPct, WrongDenyPct float64
	// OffByOne counts the wrong decisions on the knife edge: admitting
	// event L+1 (c == L) or denying event L (c == L-1).
	OffByOne int
	// DenySlack is the most free slots (L - c) an exact limiter had at a
	// wrongly denied event: how badly the algorithm under-admits. 0 when
	// nothing was wrongly denied.
	DenySlack   int
	DenySlackAt time.Duration // the first time DenySlack is reached

	// Gap is the mean, over all events, of |A - min(L, O)| measured just
	// after the event's decision, where A is the events admitted in the
	// trailing window and O the events offered in it: how far the admitted
	// count is from what an ideal limiter would let through (everything
	// offered, up to the limit). GapPct is Gap as per cent of L.
	Gap, GapPct float64

	// For the sliding counter only (HasEstimate): EstErr is the mean, over
	// all events, of |estimate - c| at the decision, where estimate =
	// prev x (W-elapsed)/W + cur is the counter's own estimate of c, from
	// its admitted events in the previous and current aligned windows.
	// ModelMismatch counts decisions that differ from "admit iff
	// estimate + 1 <= L" evaluated exactly: a library bug if not zero.
	HasEstimate   bool
	EstErr        float64
	EstErrPct     float64
	ModelMismatch int
}

// Measure computes the metrics of one algorithm's decisions on a trace.
// times are the events' offsets from a window-aligned start.
func Measure(times []time.Duration, admitted []bool, limit int, window time.Duration, estimate bool) Metrics {
	m := Metrics{Offered: len(times), HasEstimate: estimate}
	L := limit
	var (
		acc      []time.Duration // admitted events' times
		lo, olo  int             // first admitted / offered event inside the trailing window
		gapSum   float64         // sum of |A - min(L, O)|
		estSum   float64         // sum of |estimate - c|
		perWin   = map[int64]int{}
		bigL     = new(big.Int).Mul(big.NewInt(int64(L)), big.NewInt(int64(window)))
		lhs, tmp big.Int
	)
	for i, t := range times {
		for lo < len(acc) && acc[lo] <= t-window {
			lo++
		}
		for times[olo] <= t-window {
			olo++
		}
		c := len(acc) - lo // admitted so far in (t-W, t]
		exact := c+1 <= L
		if estimate {
			k := int64(t / window)
			e := t - time.Duration(k)*window
			prev, cur := perWin[k-1], perWin[k]
			est := float64(prev)*float64(window-e)/float64(window) + float64(cur)
			estSum += math.Abs(est - float64(c))
			// Model decision, exactly: (cur+1)*W + prev*(W-e) <= L*W.
			lhs.Mul(big.NewInt(int64(cur+1)), big.NewInt(int64(window)))
			tmp.Mul(big.NewInt(int64(prev)), big.NewInt(int64(window-e)))
			lhs.Add(&lhs, &tmp)
			if (lhs.Cmp(bigL) <= 0) != admitted[i] {
				m.ModelMismatch++
			}
			if admitted[i] {
				perWin[k]++
			}
		}
		a := c
		if admitted[i] {
			a++
			acc = append(acc, t)
			m.Admitted++
			if a > m.MaxInWindow {
				m.MaxInWindow, m.MaxAt = a, t
			}
			if !exact {
				m.WrongAdmit++
				if c == L {
					m.OffByOne++
				}
			}
		} else if exact {
			m.WrongDeny++
			if L-c > m.DenySlack {
				m.DenySlack, m.DenySlackAt = L-c, t
			}
			if c == L-1 {
				m.OffByOne++
			}
		}
		o := i - olo + 1
		gapSum += math.Abs(float64(a - min(L, o)))
	}
	n := float64(max(len(times), 1))
	m.MaxRatio = float64(m.MaxInWindow) / float64(L)
	m.WrongAdmitPct = 100 * float64(m.WrongAdmit) / n
	m.WrongDenyPct = 100 * float64(m.WrongDeny) / n
	m.Gap = gapSum / n
	m.GapPct = 100 * m.Gap / float64(L)
	if estimate {
		m.EstErr = estSum / n
		m.EstErrPct = 100 * m.EstErr / float64(L)
	}
	return m
}

// Series returns, for each bucket of length bucket in [from, to), the
// number of events of times (only the admitted ones if admitted is not nil)
// that fall in it.
func Series(times []time.Duration, admitted []bool, bucket, from, to time.Duration) []int {
	out := make([]int, int((to-from)/bucket))
	for i, t := range times {
		if t < from || t >= to || (admitted != nil && !admitted[i]) {
			continue
		}
		if b := int((t - from) / bucket); b < len(out) {
			out[b]++
		}
	}
	return out
}

// Trailing returns, at the end of each bucket of [from, to) (at times
// from+bucket, from+2*bucket, ...), the number of events of times (only the
// admitted ones if admitted is not nil) in the trailing window (t-W, t].
func Trailing(times []time.Duration, admitted []bool, window, bucket, from, to time.Duration) []int {
	out := make([]int, int((to-from)/bucket))
	var sel []time.Duration
	for i, t := range times {
		if admitted == nil || admitted[i] {
			sel = append(sel, t)
		}
	}
	lo, hi := 0, 0
	for b := range out {
		t := from + time.Duration(b+1)*bucket
		for hi < len(sel) && sel[hi] <= t {
			hi++
		}
		for lo < hi && sel[lo] <= t-window {
			lo++
		}
		out[b] = hi - lo
	}
	return out
}

// TraceResult is the study of one trace.
type TraceResult struct {
	Trace   Trace
	Runs    []Run
	Metrics []Metrics // parallel to Runs
	// BucketsIdentical reports whether the token bucket and the leaky
	// bucket meter made the same decision on every event (they should:
	// with these parameters the meter is the token bucket's mirror image).
	BucketsIdentical bool
}

// Study runs every trace of cfg.
func Study(cfg Config) ([]TraceResult, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	var out []TraceResult
	for _, tr := range Traces(cfg.Seed, cfg.Limit, cfg.Window, cfg.Windows) {
		runs, err := Simulate(cfg, tr)
		if err != nil {
			return nil, err
		}
		res := TraceResult{Trace: tr, Runs: runs, BucketsIdentical: true}
		for _, r := range runs {
			res.Metrics = append(res.Metrics, Measure(tr.Times, r.Admitted, cfg.Limit, cfg.Window, r.Algo.Name == "slidingcounter"))
		}
		for i := range tr.Times {
			if runs[0].Admitted[i] != runs[1].Admitted[i] {
				res.BucketsIdentical = false
			}
		}
		out = append(out, res)
	}
	return out, nil
}
