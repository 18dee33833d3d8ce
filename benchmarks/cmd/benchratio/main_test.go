package main

import (
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run when a goroutine started by the tests outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// TestSubtract checks -minus: each round's baseline sample is subtracted
// from the same round's sample, the range of the differences is kept,
// groups without the baseline are dropped, and a benchmark with a
// different number of samples is taken against the baseline's median.
func TestSubtract(t *testing.T) {
	in := `
BenchmarkGRPCUnary/bare/serial-2          100  10 ns/op  0 allocs/op
BenchmarkGRPCUnary/theirs/serial-2        100 110 ns/op  0 allocs/op
BenchmarkGRPCUnary/ratelimit-ours/serial-2 100  60 ns/op  0 allocs/op
BenchmarkAllow/xtimerate/serial-2         100 130 ns/op
BenchmarkAllow/ratelimit-tb/serial-2      100  50 ns/op
BenchmarkGRPCUnary/bare/serial-2          100  30 ns/op  0 allocs/op
BenchmarkGRPCUnary/theirs/serial-2        100 120 ns/op  0 allocs/op
BenchmarkGRPCUnary/ratelimit-ours/serial-2 100  70 ns/op  0 allocs/op
BenchmarkGRPCUnary/bare/serial-2          100  20 ns/op  0 allocs/op
BenchmarkGRPCUnary/theirs/serial-2        100 140 ns/op  0 allocs/op
BenchmarkGRPCUnary/ratelimit-ours/serial-2 100  75 ns/op  0 allocs/op
BenchmarkGRPCUnary/ratelimit-ours/serial-2 100  80 ns/op  0 allocs/op
`
	r := &results{samples: map[key]map[string][]float64{}, units: map[string][]string{}}
	r.parse(strings.NewReader(in))
	if !r.subtract("bare", "ns/op") {
		t.Fatal("subtract found nothing")
	}
	theirs := key{"BenchmarkGRPCUnary", "theirs", "serial", "2"}
	ours := key{"BenchmarkGRPCUnary", "ratelimit-ours", "serial", "2"}
	if got, want := r.order, []key{theirs, ours}; len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("order %v, want %v (bare and BenchmarkAllow dropped)", got, want)
	}
	// theirs: 110-10, 120-30, 140-20, round by round.
	if got := r.samples[theirs]["ns/op"]; len(got) != 3 || got[0] != 100 || got[1] != 90 || got[2] != 120 {
		t.Errorf("theirs differences %v, want [100 90 120]", got)
	}
	if got := median(r.samples[theirs]["ns/op"]); got != 100 {
		t.Errorf("theirs median %v, want 100", got)
	}
	if got := r.spread[theirs]; got != "90..120" {
		t.Errorf("theirs range %q, want 90..120", got)
	}
	// ours has 4 samples against bare's 3: each minus bare's median, 20.
	if got := r.samples[ours]["ns/op"]; len(got) != 4 || got[0] != 40 || got[3] != 60 {
		t.Errorf("ours differences %v, want [40 50 55 60]", got)
	}
	if r.subtract("none", "ns/op") {
		t.Error("subtract of a library that is not there found something")
	}
}

// TestDefaultTargets checks which of BenchmarkKeyed's benchmarks the issues'
// ns/op targets bound against sethvargo, and how far.
func TestDefaultTargets(t *testing.T) {
	targets := parseTargets(defaultTargets["ns/op"].ratio, true)
	for _, c := range []struct {
		lib, mode string
		want      float64 // 0: no target
	}{
		{"ratelimit-tokenbucket", "1Mkeys/serial", 0},
		{"ratelimit-fixedwindow", "1Mkeys/parallel", 0},
		{"ratelimit-tokenbucket", "1Mrandom/serial", 0.5},
		{"ratelimit-slidingcounter", "1Mrandom/parallel", 0.5},
		{"ratelimit-tokenbucket", "hotkey/parallel", 0.6},
		{"ratelimit-tokenbucket", "hotkey/serial", 0},
		{"ratelimit-slidinglog", "1Mrandom/serial", 0},
		{"ratelimit-leakybucket", "hotkey/parallel", 0},
	} {
		k := key{"BenchmarkKeyed", c.lib, c.mode, "2"}
		var got []float64
		for _, tg := range targets {
			if tg.applies(k, "sethvargo") {
				got = append(got, tg.max)
			}
		}
		switch {
		case c.want == 0 && len(got) != 0:
			t.Errorf("%s/%s: targets %v, want none", c.lib, c.mode, got)
		case c.want != 0 && (len(got) != 1 || got[0] != c.want):
			t.Errorf("%s/%s: targets %v, want [%v]", c.lib, c.mode, got, c.want)
		}
	}
}
