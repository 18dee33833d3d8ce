package main

import (
	"fmt"
	"math/rand/v2"
	"time"
)

// Trace is a sequence of single-event requests, each at an offset from the
// start of the simulation (which is aligned to a window boundary).
type Trace struct {
	Name  string          // short name, used in tables and file names
	Desc  string          // one line for the report
	Times []time.Duration // offsets from the start, non-decreasing
	Span  time.Duration   // length of the trace; every offset is < Span
}

// rngFor returns the random source of one trace: a PCG seeded with the
// user's seed and the trace's stream number, so that each trace depends
// only on the seed and not on how many numbers another trace drew.
func rngFor(seed uint64, stream uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, stream))
}

// poisson appends to ts the arrivals of a Poisson process of rate events per
// ns within [from, to): exponential inter-arrival times, accumulated in
// integer nanoseconds so that the trace is the same on every platform.
func poisson(ts []time.Duration, rng *rand.Rand, rate float64, from, to time.Duration) []time.Duration {
	mean := 1 / rate // ns between arrivals
	t := from
	for {
		t += time.Duration(rng.ExpFloat64() * mean)
		if t >= to {
			return ts
		}
		ts = append(ts, t)
	}
}

// PoissonTrace is steady traffic at mult times the limit: a Poisson process
// of rate mult*limit/window over windows windows.
func PoissonTrace(seed uint64, stream uint64, mult float64, limit int, window time.Duration, windows int) Trace {
	span := time.Duration(windows) * window
	rate := mult * float64(limit) / float64(window)
	return Trace{
		Name:  fmt.Sprintf("poisson-%gx", mult),
		Desc:  fmt.Sprintf("steady Poisson arrivals at %g x the limit for %d windows", mult, windows),
		Times: poisson(nil, rngFor(seed, stream), rate, 0, span),
		Span:  span,
	}
}

// Trace parameters. Bursty: cycles of burstCycle windows, burstOnTenths
// tenths of each spent at burstMult times the limit, the rest idle. The
// attacks' bursts last window/boundaryFraction; their rounds start at
// boundary 2W and repeat every boundaryEvery windows.
const (
	burstCycle       = 4  // windows per on/off cycle
	burstOnTenths    = 1  // tenths of the cycle spent bursting (10%)
	burstMult        = 5  // rate during a burst, in multiples of the limit
	boundaryRounds   = 5  // rounds of the boundary attack
	boundaryEvery    = 3  // windows between rounds
	boundaryFraction = 60 // the attack's bursts last window/boundaryFraction
	dripRounds       = 3  // rounds of the burst-then-drip attack
)

// BurstyTrace is on/off traffic: in each cycle of 4 windows, one burst of
// Poisson arrivals at 5 x the limit lasting 10% of the cycle (0.4 windows),
// starting at a random offset within the cycle; idle otherwise. The average
// rate is 0.5 x the limit, but each burst offers 2 x the limit.
func BurstyTrace(seed uint64, stream uint64, limit int, window time.Duration, windows int) Trace {
	rng := rngFor(seed, stream)
	cycle := burstCycle * window
	on := cycle * burstOnTenths / 10
	cycles := max(windows/burstCycle, 1)
	rate := burstMult * float64(limit) / float64(window)
	var ts []time.Duration
	for c := range cycles {
		start := time.Duration(c)*cycle + time.Duration(rng.Int64N(int64(cycle-on)))
		ts = poisson(ts, rng, rate, start, start+on)
	}
	return Trace{
		Name:  "bursty",
		Desc:  fmt.Sprintf("on/off: Poisson at %d x the limit for 10%% of each %d-window cycle (random phase), idle otherwise; %d cycles", burstMult, burstCycle, cycles),
		Times: ts,
		Span:  time.Duration(cycles) * cycle,
	}
}

// spread appends n events evenly spaced over [from, from+d).
func spread(ts []time.Duration, n int, from, d time.Duration) []time.Duration {
	for m := range n {
		ts = append(ts, from+time.Duration(int64(d)*int64(m)/int64(n)))
	}
	return ts
}

// BoundaryTrace is the boundary attack: limit events evenly spread over the
// last window/60 before a window boundary, then limit more over the first
// window/60 after it. Rounds repeat every 3 windows (boundaries 2W, 5W, ...).
func BoundaryTrace(limit int, window time.Duration) Trace {
	d := window / boundaryFraction
	var ts []time.Duration
	var b time.Duration
	for r := range boundaryRounds {
		b = time.Duration(2+boundaryEvery*r) * window
		ts = spread(ts, limit, b-d, d)
		ts = spread(ts, limit, b, d)
	}
	return Trace{
		Name:  "boundary",
		Desc:  fmt.Sprintf("boundary attack: L events in the last W/%d before a boundary, L more in the first W/%d after it; %d rounds, %d windows apart", boundaryFraction, boundaryFraction, boundaryRounds, boundaryEvery),
		Times: ts,
		Span:  b + 2*window,
	}
}

// DripTrace is the attack that takes the sliding counter closest to 2x:
// limit events in the last window/60 before a boundary, then a steady drip
// of 2 x limit events evenly spread over the next window, which claims
// every slot the counter frees as its weighting of the previous window
// decays, while the burst is still inside the true sliding window.
func DripTrace(limit int, window time.Duration) Trace {
	d := window / boundaryFraction
	var ts []time.Duration
	var b time.Duration
	for r := range dripRounds {
		b = time.Duration(2+boundaryEvery*r) * window
		ts = spread(ts, limit, b-d, d)
		ts = spread(ts, 2*limit, b, window)
	}
	return Trace{
		Name:  "burst-drip",
		Desc:  fmt.Sprintf("burst then drip: L events in the last W/%d before a boundary, then 2L evenly over the next window; %d rounds, %d windows apart", boundaryFraction, dripRounds, boundaryEvery),
		Times: ts,
		Span:  b + 2*window,
	}
}

// Traces returns every trace of the study, deterministic from seed.
func Traces(seed uint64, limit int, window time.Duration, windows int) []Trace {
	return []Trace{
		PoissonTrace(seed, 1, 0.5, limit, window, windows),
		PoissonTrace(seed, 2, 1, limit, window, windows),
		PoissonTrace(seed, 3, 2, limit, window, windows),
		BurstyTrace(seed, 4, limit, window, windows),
		BoundaryTrace(limit, window),
		DripTrace(limit, window),
	}
}
