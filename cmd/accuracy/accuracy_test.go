package main

import (
	"bytes"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// defaultConfig is the configuration of `go run ./cmd/accuracy`.
func defaultConfig() Config {
	return Config{Seed: 1, Limit: 100, Window: time.Minute, Windows: 60}
}

var (
	studyOnce sync.Once
	studyRes  []TraceResult
	studyErr  error
)

// study runs the default study once for all tests.
func study(t *testing.T) []TraceResult {
	t.Helper()
	studyOnce.Do(func() { studyRes, studyErr = Study(defaultConfig()) })
	if studyErr != nil {
		t.Fatal(studyErr)
	}
	return studyRes
}

// metrics returns the metrics of algorithm algo on trace name.
func metrics(t *testing.T, res []TraceResult, name, algo string) Metrics {
	t.Helper()
	for _, r := range res {
		if r.Trace.Name != name {
			continue
		}
		for i, run := range r.Runs {
			if run.Algo.Name == algo {
				return r.Metrics[i]
			}
		}
	}
	t.Fatalf("no result for %s on %s", algo, name)
	return Metrics{}
}

func TestHeadlineFigures(t *testing.T) {
	res := study(t)
	L := defaultConfig().Limit

	if m := metrics(t, res, "boundary", "fixedwindow"); m.MaxInWindow != 2*L {
		t.Errorf("fixed window on the boundary attack: max %d in one window, want %d (2x the limit)", m.MaxInWindow, 2*L)
	}
	if m := metrics(t, res, "boundary", "slidingcounter"); !(m.MaxRatio > 1 && m.MaxRatio < 2) {
		t.Errorf("sliding counter on the boundary attack: max %.3f x L, want above 1x and below 2x", m.MaxRatio)
	}
	if m := metrics(t, res, "burst-drip", "slidingcounter"); !(m.MaxRatio > 1.5 && m.MaxRatio < 2) {
		t.Errorf("sliding counter on burst-drip: max %.3f x L, want between 1.5x and 2x", m.MaxRatio)
	}
	for _, r := range res {
		name := r.Trace.Name
		if !r.BucketsIdentical {
			t.Errorf("%s: token bucket and leaky bucket meter decided differently", name)
		}
		for i, run := range r.Runs {
			m := r.Metrics[i]
			switch run.Algo.Name {
			case "slidinglog":
				if m.MaxInWindow > L {
					t.Errorf("%s: sliding log admitted %d in one window, limit %d", name, m.MaxInWindow, L)
				}
				if m.WrongAdmit != 0 || m.WrongDeny != 0 {
					t.Errorf("%s: sliding log disagrees with the exact answer: %d wrongly admitted, %d wrongly denied", name, m.WrongAdmit, m.WrongDeny)
				}
			case "tokenbucket", "leakybucket":
				// Capacity L plus a refill of L per W: at most 2L in any W.
				if m.MaxInWindow > 2*L {
					t.Errorf("%s: %s admitted %d in one window, more than capacity + refill = %d", name, run.Algo.Name, m.MaxInWindow, 2*L)
				}
			case "fixedwindow":
				if m.MaxInWindow > 2*L {
					t.Errorf("%s: fixed window admitted %d in one window, more than 2L = %d", name, m.MaxInWindow, 2*L)
				}
			case "slidingcounter":
				if m.ModelMismatch != 0 {
					t.Errorf("%s: %d sliding counter decisions differ from admit iff estimate+1 <= L", name, m.ModelMismatch)
				}
				if m.MaxInWindow >= 2*L {
					t.Errorf("%s: sliding counter admitted %d in one window, want < 2L", name, m.MaxInWindow)
				}
			}
		}
	}
	// Below the limit, nothing is ever wrong.
	for i, m := range res[0].Metrics {
		if m.WrongAdmit+m.WrongDeny != 0 || m.Admitted != m.Offered {
			t.Errorf("poisson-0.5x: %s: %d wrong decisions, %d of %d admitted", res[0].Runs[i].Algo.Name, m.WrongAdmit+m.WrongDeny, m.Admitted, m.Offered)
		}
	}
}

func TestDeterministic(t *testing.T) {
	cfg := defaultConfig()
	files1, out1, err := Generate(cfg, "docs")
	if err != nil {
		t.Fatal(err)
	}
	files2, out2, err := Generate(cfg, "docs")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(out1, out2) {
		t.Error("same seed, different results")
	}
	for name, b := range files1 {
		if !bytes.Equal(b, files2[name]) {
			t.Errorf("same seed, different %s", name)
		}
	}
	for _, want := range []string{"accuracy.md", "accuracy-bursty.svg", "accuracy-boundary.svg"} {
		if len(files1[want]) == 0 {
			t.Errorf("%s not generated", want)
		}
	}
	cfg.Seed = 2
	_, out3, err := Generate(cfg, "docs")
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(out1, out3) {
		t.Error("seeds 1 and 2 gave identical results")
	}
}

// TestMockClock checks that the fast clock and *clock.Mock drive the
// limiters to the same decisions.
func TestMockClock(t *testing.T) {
	cfg := Config{Seed: 1, Limit: 10, Window: time.Minute, Windows: 4}
	for _, tr := range []Trace{BoundaryTrace(cfg.Limit, cfg.Window), PoissonTrace(cfg.Seed, 9, 2, cfg.Limit, cfg.Window, 2)} {
		fast, err := Simulate(cfg, tr)
		if err != nil {
			t.Fatal(err)
		}
		cfg.MockClock = true
		slow, err := Simulate(cfg, tr)
		cfg.MockClock = false
		if err != nil {
			t.Fatal(err)
		}
		for i := range fast {
			if !slices.Equal(fast[i].Admitted, slow[i].Admitted) {
				t.Errorf("%s: %s decides differently on *clock.Mock", tr.Name, fast[i].Algo.Name)
			}
		}
	}
}

// TestMeasureBruteForce checks Measure's sliding counts against direct
// counting on random traces with random decisions.
func TestMeasureBruteForce(t *testing.T) {
	const L, W = 5, time.Second
	rng := rand.New(rand.NewPCG(7, 7))
	for range 50 {
		var times []time.Duration
		var adm []bool
		t0 := time.Duration(0)
		for range 60 {
			t0 += time.Duration(rng.Int64N(int64(W / 4))) // some ties, many overlaps
			if rng.IntN(5) == 0 {
				t0 = t0 / (W / 8) * (W / 8) // land on round times, including boundaries
			}
			times = append(times, t0)
			adm = append(adm, rng.IntN(3) > 0)
		}
		slices.Sort(times)
		m := Measure(times, adm, L, W, true)
		var want Metrics
		var gap float64
		for i, ti := range times {
			c, o, a := 0, 0, 0
			for j := 0; j < i; j++ {
				if times[j] > ti-W && adm[j] {
					c++
				}
			}
			for j := 0; j <= i; j++ {
				if times[j] > ti-W {
					o++
					if adm[j] {
						a++
					}
				}
			}
			if adm[i] {
				want.Admitted++
				want.MaxInWindow = max(want.MaxInWindow, a)
				if c+1 > L {
					want.WrongAdmit++
					if c == L {
						want.OffByOne++
					}
				}
			} else if c+1 <= L {
				want.WrongDeny++
				want.DenySlack = max(want.DenySlack, L-c)
				if c == L-1 {
					want.OffByOne++
				}
			}
			gap += math.Abs(float64(a - min(L, o)))
		}
		if d := m.Gap - gap/float64(len(times)); math.Abs(d) > 1e-9 {
			t.Fatalf("gap = %v, brute force %v", m.Gap, gap/float64(len(times)))
		}
		got := [6]int{m.Admitted, m.MaxInWindow, m.WrongAdmit, m.WrongDeny, m.OffByOne, m.DenySlack}
		exp := [6]int{want.Admitted, want.MaxInWindow, want.WrongAdmit, want.WrongDeny, want.OffByOne, want.DenySlack}
		if got != exp {
			t.Fatalf("Measure = %v, brute force %v (admitted, max, wrongly admitted, wrongly denied, off by one, deny slack)", got, exp)
		}
	}
}

// TestMeasureExample pins the definitions on a hand-checked trace: L=2,
// W=10s, events at 0s, 1s, 2s, 10s, 11s, all admitted.
func TestMeasureExample(t *testing.T) {
	s := time.Second
	times := []time.Duration{0, 1 * s, 2 * s, 10 * s, 11 * s}
	adm := []bool{true, true, true, true, true}
	m := Measure(times, adm, 2, 10*s, false)
	// Trailing counts before each event: 0, 1, 2, 2 ((0s,10s] holds 1s, 2s), 2 ((1s,11s] holds 2s, 10s).
	// Exact answers: admit, admit, deny, deny, deny -> 3 wrongly admitted.
	if m.WrongAdmit != 3 || m.WrongDeny != 0 {
		t.Errorf("wrong = +%d/-%d, want +3/-0", m.WrongAdmit, m.WrongDeny)
	}
	// Max in (t-10s, t]: 3 at t=2s (0,1,2) and at t=10s/11s (1,2,10 / 2,10,11).
	if m.MaxInWindow != 3 || m.MaxAt != 2*s {
		t.Errorf("max = %d at %v, want 3 at 2s", m.MaxInWindow, m.MaxAt)
	}
	// Gap |A - min(L, O)| after each decision: A = O = 1, 2, 3, 3, 3 -> 0, 0, 1, 1, 1.
	if want := 3.0 / 5; m.Gap != want {
		t.Errorf("gap = %v, want %v", m.Gap, want)
	}
}
