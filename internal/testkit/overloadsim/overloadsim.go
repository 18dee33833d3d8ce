// Package overloadsim simulates a service under overload, to measure an
// admission gate (an adaptive concurrency limiter) in front of it: C
// workers, a service time s with a spread, a FIFO queue in front of the
// workers whose waiting shows up as latency, open-loop Poisson arrivals at
// a multiple of the capacity, a share of critical and sheddable requests,
// and capacity changes at given times.
//
// Run it inside a testing/synctest bubble: it waits with time.Sleep, so
// that a gate reading time.Now sees the simulated time, and the bubble
// makes that time fake and exact. The whole simulation is one event loop
// in the caller's goroutine (no goroutine per request), so a run is
// deterministic for its Seed: two runs of one Scenario give the same
// Result, whatever the scheduler does. (A [Waiter] gate, which may block,
// is the exception: a goroutine per waiting request, and the order of
// the requests let go at one instant is the scheduler's.)
package overloadsim

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/rlkit/ratelimit"
)

// Gate is the admission control under test. Admit asks to start one
// request of priority p and must not wait: when ok, the request is
// admitted and done must be called exactly once when it ends (failed: it
// timed out); when not ok, the request is shed. Limit is the gate's limit
// now, for the samples.
type Gate interface {
	Admit(p ratelimit.Priority) (done func(failed bool), ok bool)
	Limit() int
}

// Waiter is a Gate that may keep a request waiting for a place (a limiter
// with a queue of its own). When the Gate of a run is a Waiter, each
// arrival calls Wait, in a goroutine of its own, instead of Admit: Wait
// returns when the request may start (ok, with done as for Admit) or is
// refused. ctx ends at the Scenario's Timeout after the arrival; the time
// spent in Wait counts in the request's latency, and a request refused
// after waiting counts as shed. Wait must return when ctx ends: without a
// Timeout, a Waiter that never lets a request go leaves the run waiting
// (a synctest bubble reports it as a deadlock).
type Waiter interface {
	Gate
	Wait(ctx context.Context, p ratelimit.Priority) (done func(failed bool), ok bool)
}

// Scenario describes one simulated run. Workers, Service, Load and
// Duration are required; the other fields may be zero.
type Scenario struct {
	// Workers is C, the requests the service works on at once.
	Workers int
	// Service is s, the mean service time of a request.
	Service time.Duration
	// Spread makes the service time uniform in s·(1±Spread); 0: exactly s.
	// It must be in [0, 1).
	Spread float64
	// Load is the arrival rate as a multiple of the starting capacity,
	// Workers/Service requests per second: 3 is 3× overload. Arrivals are
	// open-loop (Poisson) and do not follow the capacity changes.
	Load float64
	// Critical and Sheddable are the shares of arrivals of those
	// priorities; the rest are PriorityDefault.
	Critical, Sheddable float64
	// Duration is how long arrivals go on; the run then waits for the
	// admitted requests to end.
	Duration time.Duration
	// Sample is the interval of the time series: default 100ms.
	Sample time.Duration
	// Timeout, when positive, fails a request (done(true)) that has not
	// finished that long after its arrival. A request still queued then is
	// dropped from the queue; one in service keeps its worker busy to the
	// end (the work is wasted).
	Timeout time.Duration
	// Changes set the number of workers (at least 1) at given times after
	// the start. A worker removed while busy finishes its request first.
	Changes []Change
	// Seed seeds the random arrivals, priorities and service times.
	Seed uint64
}

// Change sets the number of workers to Workers at At after the start.
type Change struct {
	At      time.Duration
	Workers int
}

// Capacity returns the service's capacity at the start, in requests per
// second: Workers/Service.
func (sc Scenario) Capacity() float64 {
	return float64(sc.Workers) / sc.Service.Seconds()
}

// WorkersAt returns the number of workers at t after the start.
func (sc Scenario) WorkersAt(t time.Duration) int {
	w, at := sc.Workers, time.Duration(-1)
	for _, c := range sc.Changes {
		if c.At <= t && c.At >= at {
			w, at = c.Workers, c.At
		}
	}
	return w
}

// UnloadedP99 returns the 99th percentile of the latency without any
// queueing: of the service time alone.
func (sc Scenario) UnloadedP99() time.Duration {
	return time.Duration(float64(sc.Service) * (1 + sc.Spread*(2*0.99-1)))
}

func (sc *Scenario) check() error {
	if sc.Sample == 0 {
		sc.Sample = 100 * time.Millisecond
	}
	switch {
	case sc.Workers < 1:
		return fmt.Errorf("overloadsim: Workers must be at least 1, got %d", sc.Workers)
	case sc.Service <= 0:
		return fmt.Errorf("overloadsim: Service must be positive, got %v", sc.Service)
	case !(sc.Spread >= 0 && sc.Spread < 1):
		return fmt.Errorf("overloadsim: Spread must be in [0, 1), got %v", sc.Spread)
	case !(sc.Load > 0) || math.IsInf(sc.Load, 0):
		return fmt.Errorf("overloadsim: Load must be positive, got %v", sc.Load)
	case !(sc.Critical >= 0 && sc.Sheddable >= 0 && sc.Critical+sc.Sheddable <= 1):
		return fmt.Errorf("overloadsim: Critical (%v) and Sheddable (%v) must be shares summing to at most 1", sc.Critical, sc.Sheddable)
	case sc.Duration <= 0:
		return fmt.Errorf("overloadsim: Duration must be positive, got %v", sc.Duration)
	case sc.Sample < 0:
		return fmt.Errorf("overloadsim: Sample must not be negative, got %v", sc.Sample)
	case sc.Timeout < 0:
		return fmt.Errorf("overloadsim: Timeout must not be negative, got %v", sc.Timeout)
	}
	for _, c := range sc.Changes {
		if c.At < 0 || c.Workers < 1 {
			return fmt.Errorf("overloadsim: a Change needs At >= 0 and Workers >= 1, got %+v", c)
		}
	}
	return nil
}

// Sample is one interval of a run's time series.
type Sample struct {
	// At is the end of the interval, after the start.
	At time.Duration
	// Limit is the gate's limit at At; InFlight the requests admitted and
	// not yet ended at At (queued or in service); Workers the workers then.
	Limit, InFlight, Workers int
	// P50 and P99 are the latency percentiles of the admitted requests that
	// ended in the interval (a timed-out request counts with Timeout); 0
	// when none ended.
	P50, P99 time.Duration
	// Goodput is the requests that succeeded in the interval, per second.
	Goodput float64
	// Admitted and Shed count the arrivals of the interval.
	Admitted, Shed int
}

// Totals counts the requests of one priority over a run.
type Totals struct {
	Arrived, Admitted, Shed, Succeeded, Failed int
}

// SuccessRate is Succeeded/Arrived: 1 when nothing arrived.
func (t Totals) SuccessRate() float64 {
	if t.Arrived == 0 {
		return 1
	}
	return float64(t.Succeeded) / float64(t.Arrived)
}

// Result is what a run measured.
type Result struct {
	// Scenario is the scenario run, with its defaults filled in.
	Scenario Scenario
	// Samples is the time series, one Sample per Scenario.Sample interval
	// until the last request ended.
	Samples []Sample

	totals [3]Totals
	lat    [][]time.Duration // per sample: the latencies of the requests ended in it
	ok     []int             // per sample: the successes
}

// Totals returns the counts for priority p (any p below default counts as
// sheddable, any above as critical).
func (r *Result) Totals(p ratelimit.Priority) Totals {
	return r.totals[prioIndex(p)]
}

// All returns the counts over every priority.
func (r *Result) All() Totals {
	var a Totals
	for _, t := range r.totals {
		a.Arrived += t.Arrived
		a.Admitted += t.Admitted
		a.Shed += t.Shed
		a.Succeeded += t.Succeeded
		a.Failed += t.Failed
	}
	return a
}

// Window is the figures of a run over a span of time.
type Window struct {
	// P50 and P99 are the latency percentiles of the admitted requests that
	// ended in the span.
	P50, P99 time.Duration
	// Goodput is the successes per second over the span.
	Goodput float64
	// MinLimit, MaxLimit and MeanLimit are over the samples of the span.
	MinLimit, MaxLimit int
	MeanLimit          float64
}

// Window returns the figures of the samples whose interval ends in
// (from, to].
func (r *Result) Window(from, to time.Duration) Window {
	var w Window
	var lat []time.Duration
	var ok, n int
	var sum float64
	for i, s := range r.Samples {
		if s.At <= from || s.At > to {
			continue
		}
		lat = append(lat, r.lat[i]...)
		ok += r.ok[i]
		sum += float64(s.Limit)
		if n == 0 || s.Limit < w.MinLimit {
			w.MinLimit = s.Limit
		}
		if n == 0 || s.Limit > w.MaxLimit {
			w.MaxLimit = s.Limit
		}
		n++
	}
	if n == 0 {
		return w
	}
	w.MeanLimit = sum / float64(n)
	w.Goodput = float64(ok) / (time.Duration(n) * r.Scenario.Sample).Seconds()
	w.P50, w.P99 = percentiles(lat)
	return w
}

// SettleTime returns how long after `after` the gate's limit entered the
// band target·(1±tol) for good: the end of the first sample from which
// every later sample of the arrival period (up to Scenario.Duration) is in
// the band. ok is false when the last sample of that period is outside it.
func (r *Result) SettleTime(target int, tol float64, after time.Duration) (d time.Duration, ok bool) {
	lo, hi := float64(target)*(1-tol), float64(target)*(1+tol)
	first := time.Duration(-1)
	for _, s := range r.Samples {
		if s.At <= after || s.At > r.Scenario.Duration {
			continue
		}
		in := float64(s.Limit) >= lo && float64(s.Limit) <= hi
		switch {
		case !in:
			first = -1
		case first < 0:
			first = s.At
		}
	}
	if first < 0 {
		return 0, false
	}
	return first - after, true
}

func prioIndex(p ratelimit.Priority) int {
	switch {
	case p < ratelimit.PriorityDefault:
		return 0
	case p > ratelimit.PriorityDefault:
		return 2
	}
	return 1
}

func percentiles(lat []time.Duration) (p50, p99 time.Duration) {
	if len(lat) == 0 {
		return 0, 0
	}
	slices.Sort(lat)
	at := func(q float64) time.Duration {
		i := int(math.Ceil(q*float64(len(lat)))) - 1
		return lat[max(i, 0)]
	}
	return at(0.50), at(0.99)
}

// Run drives g through sc and returns what it measured. Run it inside a
// testing/synctest bubble (outside one it takes sc.Duration of real time).
func Run(g Gate, sc Scenario) (*Result, error) {
	if g == nil {
		return nil, errors.New("overloadsim: the Gate is nil")
	}
	if err := sc.check(); err != nil {
		return nil, err
	}
	s := &sim{
		g: g, sc: sc, res: &Result{Scenario: sc},
		grants: make(chan grant, 64),
		rng:    rand.New(rand.NewPCG(sc.Seed, sc.Seed^0x9e3779b97f4a7c15)), workers: sc.Workers,
		start: time.Now(),
	}
	s.run()
	return s.res, nil
}

// The event loop.

type kind uint8

const (
	evArrive  kind = iota
	evFinish       // a worker finished a request
	evTimeout      // a request's deadline
	evChange       // the number of workers changes
	evSample       // the end of a sample interval
)

type event struct {
	at   time.Duration
	seq  uint64
	kind kind
	req  *request
	n    int // evChange: the workers
}

type events []*event

func (h events) Len() int { return len(h) }
func (h events) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h events) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *events) Push(x any)   { *h = append(*h, x.(*event)) }
func (h *events) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

type request struct {
	arrived time.Duration
	prio    int
	done    func(failed bool)
	ended   bool // done was called
}

type sim struct {
	g     Gate
	sc    Scenario
	res   *Result
	rng   *rand.Rand
	start time.Time

	q        events
	seq      uint64
	queue    []*request // FIFO; ended requests are skipped
	busy     int
	workers  int
	inFlight int

	// a Waiter's requests
	w       Waiter
	pending int
	grants  chan grant

	// the current sample interval
	lat           []time.Duration
	ok, adm, shed int
}

func (s *sim) push(e *event) {
	s.seq++
	e.seq = s.seq
	heap.Push(&s.q, e)
}

func (s *sim) run() {
	rate := s.sc.Load * s.sc.Capacity() // arrivals per second
	s.push(&event{at: s.interarrival(rate), kind: evArrive})
	s.push(&event{at: s.sc.Sample, kind: evSample})
	for _, c := range s.sc.Changes {
		s.push(&event{at: c.At, kind: evChange, n: c.Workers})
	}
	s.w, _ = s.g.(Waiter)
	for s.q.Len() > 0 || s.pending > 0 {
		if !s.waitFor() {
			continue
		}
		e := heap.Pop(&s.q).(*event)
		switch e.kind {
		case evArrive:
			s.arrive(e.at)
			if next := e.at + s.interarrival(rate); next < s.sc.Duration {
				s.push(&event{at: next, kind: evArrive})
			}
		case evFinish:
			s.busy--
			if r := e.req; !r.ended {
				s.end(r, e.at, false)
			}
			s.dispatch(e.at)
		case evTimeout:
			if r := e.req; !r.ended {
				s.end(r, e.at, true)
			}
		case evChange:
			s.workers = e.n
			s.dispatch(e.at)
		case evSample:
			s.sample(e.at)
			if e.at < s.sc.Duration || s.inFlight > 0 || s.pending > 0 {
				s.push(&event{at: e.at + s.sc.Sample, kind: evSample})
			}
		}
	}
}

// waitFor waits until the next event is due and reports true, or until a
// Waiter lets a request go (handled here), and reports false.
func (s *sim) waitFor() bool {
	if s.q.Len() == 0 {
		s.grant(<-s.grants)
		return false
	}
	d := time.Until(s.start.Add(s.q[0].at))
	if s.w == nil {
		if d > 0 {
			time.Sleep(d)
		}
		return true
	}
	if d <= 0 {
		select {
		case g := <-s.grants:
			s.grant(g)
			return false
		default:
			return true
		}
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case g := <-s.grants:
		s.grant(g)
		return false
	}
}

type grant struct {
	r    *request
	done func(failed bool)
	ok   bool
}

// grant takes the answer of a Waiter.
func (s *sim) grant(g grant) {
	s.pending--
	now := time.Since(s.start)
	if !g.ok {
		s.res.totals[g.r.prio].Shed++
		s.shed++
		return
	}
	g.r.done = g.done
	s.admit(g.r, now)
}

func (s *sim) interarrival(rate float64) time.Duration {
	return max(time.Duration(s.rng.ExpFloat64()/rate*float64(time.Second)), 1)
}

func (s *sim) arrive(now time.Duration) {
	p := ratelimit.PriorityDefault
	switch u := s.rng.Float64(); {
	case u < s.sc.Critical:
		p = ratelimit.PriorityCritical
	case u < s.sc.Critical+s.sc.Sheddable:
		p = ratelimit.PrioritySheddable
	}
	r := &request{arrived: now, prio: prioIndex(p)}
	t := &s.res.totals[r.prio]
	t.Arrived++
	if s.w != nil {
		s.pending++
		go s.wait(r, p)
		return
	}
	done, ok := s.g.Admit(p)
	if !ok {
		t.Shed++
		s.shed++
		return
	}
	r.done = done
	s.admit(r, now)
}

// wait asks the Waiter for r, in a goroutine of r's own.
func (s *sim) wait(r *request, p ratelimit.Priority) {
	ctx, cancel := context.Background(), context.CancelFunc(func() {})
	if s.sc.Timeout > 0 {
		ctx, cancel = context.WithTimeout(ctx, s.sc.Timeout)
	}
	done, ok := s.w.Wait(ctx, p)
	cancel()
	s.grants <- grant{r, done, ok}
}

// admit queues r, admitted by the gate, for a worker.
func (s *sim) admit(r *request, now time.Duration) {
	s.res.totals[r.prio].Admitted++
	s.adm++
	s.inFlight++
	s.queue = append(s.queue, r)
	if s.sc.Timeout > 0 {
		s.push(&event{at: max(r.arrived+s.sc.Timeout, now), kind: evTimeout, req: r})
	}
	s.dispatch(now)
}

// dispatch starts the queued requests while a worker is free.
func (s *sim) dispatch(now time.Duration) {
	for s.busy < s.workers && len(s.queue) > 0 {
		r := s.queue[0]
		s.queue[0] = nil
		s.queue = s.queue[1:]
		if r.ended {
			continue
		}
		s.busy++
		svc := s.sc.Service
		if s.sc.Spread > 0 {
			svc = time.Duration(float64(svc) * (1 + s.sc.Spread*(2*s.rng.Float64()-1)))
		}
		s.push(&event{at: now + svc, kind: evFinish, req: r})
	}
	if len(s.queue) == 0 {
		s.queue = s.queue[:0:0] // let the backing array go
	}
}

func (s *sim) end(r *request, now time.Duration, failed bool) {
	r.ended = true
	s.inFlight--
	t := &s.res.totals[r.prio]
	if failed {
		t.Failed++
	} else {
		t.Succeeded++
		s.ok++
	}
	s.lat = append(s.lat, now-r.arrived)
	r.done(failed)
}

func (s *sim) sample(now time.Duration) {
	p50, p99 := percentiles(s.lat)
	s.res.Samples = append(s.res.Samples, Sample{
		At: now, Limit: s.g.Limit(), InFlight: s.inFlight, Workers: s.workers,
		P50: p50, P99: p99, Goodput: float64(s.ok) / s.sc.Sample.Seconds(),
		Admitted: s.adm, Shed: s.shed,
	})
	s.res.lat = append(s.res.lat, s.lat)
	s.res.ok = append(s.res.ok, s.ok)
	s.lat, s.ok, s.adm, s.shed = nil, 0, 0, 0
}

// Adaptive is the Gate of a [ratelimit.Adaptive]: done(false) ends the
// flight with Success, done(true) with Dropped.
func Adaptive(a *ratelimit.Adaptive) Gate { return adaptiveGate{a} }

type adaptiveGate struct{ a *ratelimit.Adaptive }

func (g adaptiveGate) Admit(p ratelimit.Priority) (func(failed bool), bool) {
	f, d := g.a.Acquire(context.Background(), p)
	if !d.Allowed {
		return nil, false
	}
	return func(failed bool) {
		if failed {
			f.Dropped()
		} else {
			f.Success()
		}
	}, true
}

func (g adaptiveGate) Limit() int { return g.a.Limit() }
