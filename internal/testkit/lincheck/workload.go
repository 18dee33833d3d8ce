package lincheck

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/rlkit/ratelimit"
)

// Workload describes the operations of one phase. The inputs are a
// function of the seed, the phase and the client only, so a run is
// deterministic but for the interleaving of the goroutines.
type Workload struct {
	Clients  int      // concurrent goroutines
	PerPhase int      // operations per client and phase
	Keys     []string // each operation picks one at random
	MaxN     int      // n is drawn from 1..MaxN
	Peeks    int      // percentage of Peek operations (the rest are AllowN)
	Seed     uint64
}

// Inputs returns the inputs client runs in phase at limiter time t.
func (w Workload) Inputs(phase, client int, t time.Time) []Input {
	rng := rand.New(rand.NewPCG(w.Seed, uint64(phase)<<32|uint64(uint32(client))))
	ins := make([]Input, w.PerPhase)
	for i := range ins {
		in := Input{Key: w.Keys[rng.IntN(len(w.Keys))], N: 1 + rng.IntN(max(w.MaxN, 1)), T: t.UnixNano()}
		if rng.IntN(100) < w.Peeks {
			in.Kind = Peek
			in.N = rng.IntN(max(w.MaxN, 1) + 1)
		}
		ins[i] = in
	}
	return ins
}

// Run runs phase at limiter time t (the caller has set the limiters'
// clocks to t) and returns when every operation has returned: Clients
// goroutines, numbered from first, released together, each running its
// inputs through do, recorded by rec.
func (w Workload) Run(rec *Recorder, phase, first int, t time.Time, do func(Input) (ratelimit.Decision, error)) {
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for c := range w.Clients {
		ins := w.Inputs(phase, first+c, t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-gate
			for _, in := range ins {
				_, _ = rec.Do(first+c, in, func() (ratelimit.Decision, error) { return do(in) })
			}
		}()
	}
	close(gate)
	wg.Wait()
}

// Schedule returns the limiter times of phases phases: start, then steps
// drawn from seed in whole microseconds, relative to period (none, a
// little, up to a period, now and then several periods), so that phases
// see partial refills, whole refills and window boundaries.
func Schedule(seed uint64, start time.Time, phases int, period time.Duration) []time.Time {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	us := max(int64(period/time.Microsecond), 1)
	ts := make([]time.Time, phases)
	t := start
	for i := range ts {
		if i > 0 {
			var step int64
			switch r := rng.IntN(10); {
			case r < 1: // the same instant
			case r < 5:
				step = rng.Int64N(us/8 + 1)
			case r < 9:
				step = rng.Int64N(us + 1)
			default:
				step = rng.Int64N(3*us + 1)
			}
			t = t.Add(time.Duration(step) * time.Microsecond)
		}
		ts[i] = t
	}
	return ts
}
