// Command accuracy measures how closely each algorithm of
// github.com/rlkit/ratelimit holds the limit "at most L events in any
// window W", on synthetic traffic traces played on a simulated clock, and
// writes the results to docs/accuracy.md with two SVG charts.
//
// Usage, from the repository root:
//
//	go run ./cmd/accuracy [-seed 1] [-limit 100] [-window 1m] [-out docs] [-mockclock]
//
// # Setup
//
// Every algorithm gets the same limit L per window W: a token bucket of
// capacity L refilling L per W; a leaky bucket meter (AllowN) of capacity
// L leaking one event every W/L; a fixed window, a sliding log and a
// sliding counter of L per W. Each trace, a list of single-event requests
// deterministic from the seed (math/rand/v2, PCG), is played through a
// fresh limiter of each algorithm; the clock starts at a multiple of W
// since the Unix epoch and is set to each event's time. Traces: steady
// Poisson traffic at 0.5x, 1x and 2x the limit for 60 windows; on/off
// bursts (5x the limit for 10% of the time, idle otherwise); the boundary
// attack (L events just before a window boundary, L just after, 5 rounds);
// and a burst followed by a steady drip, the sliding counter's worst case.
//
// # The exact answer
//
// Windows are half-open, (t-W, t], as the sliding log enforces them. For
// each algorithm separately, a shadow exact sliding window runs on the same
// trace, fed with the events that algorithm admitted: for event i at time
// t, with c the number of events the algorithm admitted before i in
// (t-W, t], the exact answer is "admit" iff c+1 <= L. An event is wrongly
// admitted if the algorithm admitted it and the exact answer is deny,
// wrongly denied if the reverse. See [Metrics] for every figure reported,
// and docs/accuracy.md for the results.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Charts are the charts written next to accuracy.md.
var Charts = []ChartSpec{
	{File: "accuracy-bursty.svg", Trace: "bursty", Anchor: "fixedwindow",
		Title:  "Bursty traffic: the bursts where the fixed window does worst",
		Before: 2, After: 2, Lead: 6, Buckets: 80},
	{File: "accuracy-boundary.svg", Trace: "boundary", Anchor: "fixedwindow",
		Title:  "Boundary attack: L just before a window boundary, L just after (first round)",
		Before: 1, After: 1, Lead: 9, Buckets: 20},
	{File: "accuracy-burst-drip.svg", Trace: "burst-drip", Anchor: "slidingcounter",
		Title:  "Burst then drip: the sliding counter's worst case (first round)",
		Before: 1, After: 1, Lead: 9, Buckets: 80, TopYMax: 5},
}

// Generate runs the study and returns the files to write (name -> content)
// and the results markdown for stdout.
func Generate(cfg Config, out string) (files map[string][]byte, results []byte, err error) {
	res, err := Study(cfg)
	if err != nil {
		return nil, nil, err
	}
	files = map[string][]byte{}
	var names []string
	for _, cs := range Charts {
		for _, r := range res {
			if r.Trace.Name != cs.Trace {
				continue
			}
			var b bytes.Buffer
			if err := WriteSVG(&b, BuildChart(cfg, r, cs)); err != nil {
				return nil, nil, err
			}
			files[cs.File] = b.Bytes()
			names = append(names, cs.File)
		}
	}
	var doc, stdout bytes.Buffer
	WriteDoc(&doc, cfg, out, res, names)
	files["accuracy.md"] = doc.Bytes()
	WriteResults(&stdout, cfg, res)
	return files, stdout.Bytes(), nil
}

func main() {
	var cfg Config
	var out string
	flag.Uint64Var(&cfg.Seed, "seed", 1, "seed of the random traces")
	flag.IntVar(&cfg.Limit, "limit", 100, "limit L: events per window")
	flag.DurationVar(&cfg.Window, "window", time.Minute, "window W")
	flag.StringVar(&out, "out", "docs", "directory to write accuracy.md and the SVG charts to")
	flag.BoolVar(&cfg.MockClock, "mockclock", false, "drive the limiters with github.com/benbjohnson/clock's *clock.Mock (about 1 ms per event: slow)")
	flag.Parse()
	cfg.Windows = 60
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "accuracy: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	files, results, err := Generate(cfg, out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "accuracy:", err)
		os.Exit(1)
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, "accuracy:", err)
		os.Exit(1)
	}
	for name, b := range files {
		if err := os.WriteFile(filepath.Join(out, name), b, 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "accuracy:", err)
			os.Exit(1)
		}
	}
	os.Stdout.Write(results)
	fmt.Fprintf(os.Stderr, "accuracy: wrote %d files to %s\n", len(files), out)
}
