package ratelimit

import (
	"container/heap"
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// A discrete-event queue model of a service for the algorithm's unit tests:
// C workers, service time s spread uniformly by ±spread, a FIFO queue in
// front of them, open-loop arrivals evenly spaced. No goroutine runs: time
// is a manual clock set at each event.

type desScenario struct {
	workers   int
	service   time.Duration
	spread    float64
	load      float64       // arrivals, x capacity
	duration  time.Duration // simulated
	critical  float64       // share of critical arrivals
	sheddable float64       // share of sheddable arrivals
	change    time.Duration // when positive: at it, workers and service change
	workers2  int
	service2  time.Duration
	timeout   time.Duration // a flight waiting longer is dropped by the service
	cfg       AdaptiveConfig
}

type desResult struct {
	limits      []int // every 100 ms
	lat         []time.Duration
	latAfter    []time.Duration // admitted after settle
	served      int
	servedAfter int
	admitted    [3]int
	shed        [3]int
	dropped     int
	a           *Adaptive
}

type desJob struct {
	f      Flight
	start  time.Duration
	svc    time.Duration
	done   time.Duration
	arrive time.Duration
}

type desHeap []*desJob

func (h desHeap) Len() int           { return len(h) }
func (h desHeap) Less(i, j int) bool { return h[i].done < h[j].done }
func (h desHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *desHeap) Push(x any)        { *h = append(*h, x.(*desJob)) }
func (h *desHeap) Pop() any          { o := *h; x := o[len(o)-1]; *h = o[:len(o)-1]; return x }

func runDES(t *testing.T, sc desScenario, settle time.Duration) desResult {
	t.Helper()
	t0 := time.Unix(1_700_000_000, 0)
	clk := fakeclock.NewManual(t0)
	a, err := NewAdaptive(sc.cfg, WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewSource(1))
	var res desResult
	res.a = a
	workers, service := sc.workers, sc.service
	rate := sc.load * float64(workers) / service.Seconds()
	gap := time.Duration(float64(time.Second) / rate)
	var busy desHeap
	var queue []*desJob
	next := time.Duration(0)
	nextSample := time.Duration(0)
	changed := false
	startJob := func(j *desJob, now time.Duration) {
		sp := 1 + sc.spread*(2*rng.Float64()-1)
		j.start, j.svc = now, time.Duration(float64(service)*sp)
		j.done = now + j.svc
		heap.Push(&busy, j)
	}
	for next < sc.duration {
		var now time.Duration
		if len(busy) > 0 && busy[0].done <= next {
			now = busy[0].done
			clk.Set(t0.Add(now))
			j := heap.Pop(&busy).(*desJob)
			j.f.Success()
			l := now - j.arrive
			res.lat = append(res.lat, l)
			res.served++
			if j.arrive >= settle {
				res.latAfter = append(res.latAfter, l)
				res.servedAfter++
			}
		} else {
			now = next
			next += gap
			clk.Set(t0.Add(now))
			p := PriorityDefault
			switch u := rng.Float64(); {
			case u < sc.critical:
				p = PriorityCritical
			case u < sc.critical+sc.sheddable:
				p = PrioritySheddable
			}
			f, d := a.Acquire(nil, p)
			if !d.Allowed {
				res.shed[priorityIndex(p)]++
			} else {
				res.admitted[priorityIndex(p)]++
				queue = append(queue, &desJob{f: f, arrive: now})
			}
		}
		if !changed && sc.change > 0 && now >= sc.change {
			changed = true
			workers, service = sc.workers2, sc.service2
		}
		for len(busy) < workers && len(queue) > 0 {
			j := queue[0]
			queue = queue[1:]
			if sc.timeout > 0 && now-j.arrive > sc.timeout {
				j.f.Dropped()
				res.dropped++
				continue
			}
			startJob(j, now)
		}
		for now >= nextSample {
			res.limits = append(res.limits, a.Limit())
			nextSample += 100 * time.Millisecond
		}
	}
	return res
}

func pct(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(p*float64(len(s)-1))]
}

func TestDESOverload(t *testing.T) {
	sc := desScenario{workers: 50, service: 10 * time.Millisecond, spread: 0.2, load: 3, duration: 10 * time.Second}
	r := runDES(t, sc, 5*time.Second)
	unl := runDES(t, desScenario{workers: 50, service: 10 * time.Millisecond, spread: 0.2, load: 0.5, duration: 2 * time.Second}, 0)
	t.Logf("limits %v", r.limits)
	t.Logf("p50 %v p99 %v after; unloaded p99 %v; goodput after %.3f", pct(r.latAfter, .5), pct(r.latAfter, .99), pct(unl.lat, .99),
		float64(r.servedAfter)/(5*5000))
	t.Logf("baseline %v", time.Duration(r.a.core.baseline))
}

func TestDESScenarios(t *testing.T) {
	base := desScenario{workers: 50, service: 10 * time.Millisecond, spread: 0.2, load: 3, duration: 12 * time.Second}
	for name, sc := range map[string]desScenario{
		"workers-halve": func() desScenario {
			s := base
			s.change, s.workers2, s.service2 = 5*time.Second, 25, 10*time.Millisecond
			return s
		}(),
		"service-doubles": func() desScenario {
			s := base
			s.change, s.workers2, s.service2 = 5*time.Second, 50, 20*time.Millisecond
			return s
		}(),
		"critical": func() desScenario { s := base; s.critical, s.sheddable = 0.2, 0.3; return s }(),
		"timeout":  func() desScenario { s := base; s.cfg.Initial = 500; s.timeout = 50 * time.Millisecond; return s }(),
		"long":     func() desScenario { s := base; s.duration = 70 * time.Second; return s }(),
	} {
		r := runDES(t, sc, 7*time.Second)
		t.Logf("%s: limits %v", name, r.limits)
		t.Logf("%s: p50 %v p99 %v after; served after %d admitted %v shed %v dropped %d base %v", name, pct(r.latAfter, .5), pct(r.latAfter, .99), r.servedAfter, r.admitted, r.shed, r.dropped, time.Duration(r.a.core.baseline))
	}
}
