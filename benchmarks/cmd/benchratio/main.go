// Command benchratio reads `go test -bench` output and prints, for every
// benchmark of this module (sub-benchmark names starting with "ratelimit-"),
// the median of a metric (ns/op unless -metric says otherwise) and its ratio
// to each other library's median in the same group, mode and GOMAXPROCS,
// from the same run.
//
// Usage:
//
//	benchratio [-metric ns/op] [-base libs] [-rows regexp] [-target specs] [-max specs] [-md] results.txt...
//	benchratio -medians [-md] results.txt...
//	benchratio -minus bare [-metric ns/op] [-target specs] [-max specs] [-md] results.txt...
//
// Names must have the form Benchmark<Group>/<library>/<mode>[-<procs>], as
// BenchmarkAllow/xtimerate/serial-2 or BenchmarkKeyed/sethvargo/1Mkeys/serial-2
// (the mode is everything after the library). A benchmark that does not
// report the metric is left out (bytes/key only exists for 1M-key runs); a
// mode a baseline was not run in prints "-".
//
// The baselines of a group are, unless -base names them, every library in
// it whose name does not start with "ratelimit-", in the order they first
// appear, except those -exclude names: by default "bare", BenchmarkHTTP's
// handler without middleware, of which a ratio says little (subtract its
// ns/op instead: see http_test.go).
//
// Targets mark results "ok" or "MISS". -target bounds ratios, -max bounds
// our own value; both are comma-separated lists of
//
//	-target [Group/]baseline[@regexp]=max   ratio ours/baseline <= max
//	-max    Group[@regexp]=max              ours <= max
//
// Group is the name after "Benchmark" (Allow, Keyed); without it a -target
// applies in every group. The regexp, if any, must match
// "<our library>/<mode>", e.g. ^ratelimit-tokenbucket/1Mkeys/. Without the
// flags, the targets of the issues apply for the metric chosen (see
// defaultTargets); -target= and -max= turn them off.
//
// -minus names a baseline library, such as "bare" (a handler without
// middleware): in the groups that have it, every library's metric becomes
// what it adds to that baseline, and the ratios compare added costs. The
// added cost is taken round by round: the i-th sample of a benchmark minus
// the i-th sample of the baseline in the same group, mode and GOMAXPROCS
// (the same round of run.sh, seconds apart), and the median of those
// differences is printed with their range over the rounds, which says how
// far noise goes. With -minus the targets of the issues on added costs
// apply (see addedTargets).
//
// -medians prints instead one table per group of every benchmark's medians
// in every unit it reports. -md prints Markdown tables instead of aligned
// text.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

// defaultTargets are the targets applied when -target and -max are not
// given, by metric: BenchmarkAllow's (issue 1) and BenchmarkKeyed's for the
// token bucket, fixed window and sliding counter: at 1M keys at most 0.5x
// sethvargo's ns/op, round-robin (1Mkeys, issue 6) and random with fresh key
// bytes (1Mrandom, issue 14); on one hot key with two goroutines at most
// 0.6x (issue 14); at most 80 bytes per key; no allocation for an existing
// key; BenchmarkRedis's server time (issue 25); and BenchmarkConcurrency's
// acquire + release at most 1.2x x/sync/semaphore's, allocating nothing
// (issue 26).
var defaultTargets = map[string]struct{ ratio, max string }{
	"ns/op":     {ratio: allowTargets + "," + keyedTargets + "," + concurrencyTargets},
	"cpu-ns/op": {ratio: allowTargets + "," + keyedTargets + "," + concurrencyTargets},
	"bytes/key": {max: "Keyed@^ratelimit-(tokenbucket|fixedwindow|slidingcounter)/=80"},
	"allocs/op": {max: "Allow=0,Keyed@^ratelimit-(tokenbucket|fixedwindow|slidingcounter)/=0,Concurrency=0"},
	// Issue 25: Redis server time per decision at most redis_rate's for
	// the bucket, window and quota scripts, 1.5x for the sliding log.
	"server-µs/op": {ratio: "Redis/redis_rate@^ratelimit-(tokenbucket|leakybucket|fixedwindow|slidingcounter|quota)/=1,Redis/redis_rate@^ratelimit-slidinglog/=1.5"},
}

// addedTargets are the targets applied with -minus, by metric: issue 13's
// gRPC server interceptor adds at most 0.5x what go-grpc-middleware's
// ratelimit interceptor over x/time/rate adds, like for like (no metadata),
// and allocates nothing when called directly.
var addedTargets = map[string]struct{ ratio, max string }{
	"ns/op":     {ratio: "GRPCUnary/grpcmw-xtimerate@^ratelimit-grpclimit-nofields/=0.5"},
	"cpu-ns/op": {ratio: "GRPCUnary/grpcmw-xtimerate@^ratelimit-grpclimit-nofields/=0.5"},
	"allocs/op": {max: "GRPCUnary@^ratelimit-grpclimit-nofields/=0"},
}

const (
	allowTargets = "Allow/xtimerate=0.6,Allow/uber=1"
	keyedTarget  = "Keyed/sethvargo@^ratelimit-(tokenbucket|fixedwindow|slidingcounter)"
	// The 1M-key target is on 1Mrandom, the measure of real traffic
	// (issue 14); 1Mkeys, the old round-robin measure, is reported beside
	// it without one (see README.md, "Two 1M-key measures").
	keyedTargets       = keyedTarget + "/1Mrandom/=0.5," + keyedTarget + "/hotkey/parallel$=0.6"
	concurrencyTargets = "Concurrency/xsync-semaphore=1.2"
)

type key struct {
	group, lib, mode, procs string
}

func (k key) name() string { return k.group + "/" + k.lib + "/" + k.mode }

// results holds every sample of every benchmark, by unit, in input order.
type results struct {
	samples map[key]map[string][]float64
	order   []key
	units   map[string][]string // by group, in order of first appearance
	spread  map[key]string      // after subtract: "min..max" of each benchmark's differences
}

// target is one bound: on ours/base when base is set, on ours otherwise.
type target struct {
	group, base string
	re          *regexp.Regexp // nil: every benchmark
	max         float64
	spec        string
}

func (t target) applies(k key, base string) bool {
	return (t.group == "" || t.group == strings.TrimPrefix(k.group, "Benchmark")) &&
		t.base == base && (t.re == nil || t.re.MatchString(k.lib+"/"+k.mode))
}

func main() {
	metric := flag.String("metric", "ns/op", "unit of the metric compared, e.g. ns/op, cpu-ns/op, bytes/key, allocs/op")
	base := flag.String("base", "", "comma-separated baseline libraries (default: every other library of each group but -exclude)")
	exclude := flag.String("exclude", "bare", "comma-separated libraries that are no baseline by default")
	ratioSpec := flag.String("target", "", "comma-separated [Group/]baseline[@regexp]=maxratio targets (default: the issues' for -metric)")
	maxSpec := flag.String("max", "", "comma-separated Group[@regexp]=max bounds on our value (default: the issues' for -metric)")
	rowsRE := flag.String("rows", "", "regexp: only our benchmarks whose name (BenchmarkGroup/library/mode) matches")
	md := flag.Bool("md", false, "print Markdown tables")
	medians := flag.Bool("medians", false, "print every benchmark's medians in every unit instead of ratios")
	minus := flag.String("minus", "", "baseline library (such as bare) to subtract, round by round, before taking ratios")
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	defaults := defaultTargets
	if *minus != "" {
		defaults = addedTargets
	}
	if !set["target"] {
		*ratioSpec = defaults[*metric].ratio
	}
	if !set["max"] {
		*maxSpec = defaults[*metric].max
	}
	targets := append(parseTargets(*ratioSpec, true), parseTargets(*maxSpec, false)...)

	r := &results{samples: map[key]map[string][]float64{}, units: map[string][]string{}}
	if flag.NArg() == 0 {
		r.parse(os.Stdin)
	}
	for _, name := range flag.Args() {
		f, err := os.Open(name)
		if err != nil {
			fatalf("%v", err)
		}
		r.parse(f)
		f.Close()
	}
	t := newTable(*md)
	if *medians {
		r.printMedians(t)
		return
	}
	var bases []string
	if *base != "" {
		bases = strings.Split(*base, ",")
	}
	rows, err := regexp.Compile(*rowsRE)
	if err != nil {
		fatalf("bad -rows: %v", err)
	}
	note := "medians"
	if *minus != "" {
		if !r.subtract(*minus, *metric) {
			fatalf("no group has both %q and another library reporting %s", *minus, *metric)
		}
		note = "added to " + *minus + " (medians of the per-round differences, range min..max)"
	}
	checked, misses := r.printRatios(t, *metric, rows, bases, strings.Split(*exclude, ","), targets)
	fmt.Printf("\n%s %s, %s; ratio = ours/baseline", *metric, note, r.countNote())
	if checked > 0 {
		fmt.Printf("; targets: %s; %d checked, %d missed", specs(targets), checked, misses)
	}
	fmt.Println()
}

func parseTargets(spec string, ratio bool) []target {
	var ts []target
	for _, s := range strings.Split(spec, ",") {
		if s == "" {
			continue
		}
		lhs, v, ok := strings.Cut(s, "=")
		limit, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil {
			fatalf("bad target %q", s)
		}
		t := target{max: limit, spec: s}
		lhs, pattern, hasRE := strings.Cut(lhs, "@")
		if hasRE {
			re, err := regexp.Compile(pattern)
			if err != nil {
				fatalf("bad target %q: %v", s, err)
			}
			t.re = re
		}
		if ratio {
			if g, b, ok := strings.Cut(lhs, "/"); ok {
				t.group, t.base = g, b
			} else {
				t.base = lhs
			}
			if t.base == "" {
				fatalf("bad target %q: no baseline", s)
			}
		} else {
			t.group = lhs
		}
		ts = append(ts, t)
	}
	return ts
}

func specs(ts []target) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		if t.base == "" {
			s[i] = "ours " + t.spec
		} else {
			s[i] = t.spec
		}
	}
	return strings.Join(s, ", ")
}

// parse reads benchmark result lines.
func (r *results) parse(in io.Reader) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue // not a result line (a log line, say)
		}
		name, procs := f[0], "1"
		if i := strings.LastIndexByte(name, '-'); i > strings.LastIndexByte(name, '/') {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name, procs = name[:i], name[i+1:]
			}
		}
		parts := strings.SplitN(name, "/", 3)
		if len(parts) != 3 {
			continue
		}
		k := key{parts[0], parts[1], parts[2], procs}
		m, seen := r.samples[k]
		if !seen {
			m = map[string][]float64{}
			r.samples[k] = m
			r.order = append(r.order, k)
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			unit := f[i+1]
			m[unit] = append(m[unit], v)
			if !slices.Contains(r.units[k.group], unit) {
				r.units[k.group] = append(r.units[k.group], unit)
			}
		}
	}
	if err := sc.Err(); err != nil {
		fatalf("%v", err)
	}
}

func (r *results) groups() []string {
	var gs []string
	for _, k := range r.order {
		if !slices.Contains(gs, k.group) {
			gs = append(gs, k.group)
		}
	}
	return gs
}

func isOurs(lib string) bool { return strings.HasPrefix(lib, "ratelimit-") }

// printRatios prints one table per group that has our results in metric
// and a baseline, and returns how many targets were checked and missed.
func (r *results) printRatios(t *table, metric string, rowsRE *regexp.Regexp, only, exclude []string, targets []target) (checked, misses int) {
	check := func(k key, base string, v float64) string {
		mark := ""
		for _, tg := range targets {
			if tg.applies(k, base) {
				checked++
				if v > tg.max || math.IsNaN(v) {
					misses++
					mark = " MISS"
				} else if mark == "" {
					mark = " ok"
				}
			}
		}
		return mark
	}
	for _, g := range r.groups() {
		var bases []string
		var rows []key
		for _, k := range r.order {
			if k.group != g {
				continue
			}
			if isOurs(k.lib) {
				if len(r.samples[k][metric]) > 0 && rowsRE.MatchString(k.name()) {
					rows = append(rows, k)
				}
			} else if !slices.Contains(bases, k.lib) &&
				(only == nil && !slices.Contains(exclude, k.lib) || slices.Contains(only, k.lib)) {
				bases = append(bases, k.lib)
			}
		}
		if len(rows) == 0 {
			continue
		}
		head := []string{g, "procs", metric}
		if r.spread != nil {
			head = append(head, "range")
		}
		for _, b := range bases {
			head = append(head, b, "ratio")
		}
		t.start(head, 2)
		for _, k := range rows {
			ours := median(r.samples[k][metric])
			row := []string{k.lib + "/" + k.mode, k.procs, formatValue(ours) + check(k, "", ours)}
			if r.spread != nil {
				row = append(row, r.spread[k])
			}
			for _, b := range bases {
				s := r.samples[key{k.group, b, k.mode, k.procs}][metric]
				if len(s) == 0 || r.spread != nil && r.spread[key{k.group, b, k.mode, k.procs}] == "" {
					row = append(row, "-", "-")
					continue
				}
				m := median(s)
				ratio := fmt.Sprintf("%.2fx", ours/m)
				switch {
				case m == 0 && ours == 0:
					ratio = "="
				case m == 0:
					ratio = "inf"
				case m < 0 && r.spread != nil:
					ratio = "n/a" // the baseline's added cost is below the noise
				}
				row = append(row, formatValue(m), ratio+check(k, b, ours/m))
			}
			t.row(row)
		}
		t.end()
	}
	return checked, misses
}

// subtract replaces, in every group that has the library base, each other
// library's samples of metric by their differences to base's: round by
// round (the i-th sample minus the i-th) when both have as many samples,
// else every sample minus base's median. Benchmarks of groups without base,
// and base itself, are dropped. It records each difference's range in
// r.spread and reports whether anything is left.
func (r *results) subtract(base, metric string) bool {
	r.spread = map[key]string{}
	var order []key
	for _, k := range r.order {
		b, ok := r.samples[key{k.group, base, k.mode, k.procs}]
		s := r.samples[k][metric]
		if k.lib == base || !ok || len(b[metric]) == 0 || len(s) == 0 {
			continue
		}
		bs := b[metric]
		d := make([]float64, len(s))
		if len(s) == len(bs) {
			for i, v := range s {
				d[i] = v - bs[i]
			}
		} else {
			m := median(bs)
			for i, v := range s {
				d[i] = v - m
			}
		}
		r.samples[k] = map[string][]float64{metric: d}
		r.spread[k] = formatValue(slices.Min(d)) + ".." + formatValue(slices.Max(d))
		order = append(order, k)
	}
	r.order = order
	return len(order) > 0
}

// printMedians prints, per group, every benchmark's median in every unit
// the group reports, and the number of samples.
func (r *results) printMedians(t *table) {
	for _, g := range r.groups() {
		head := append([]string{g, "procs", "runs"}, r.units[g]...)
		t.start(head, 1)
		for _, k := range r.order {
			if k.group != g {
				continue
			}
			runs := 0
			row := []string{k.lib + "/" + k.mode, k.procs, ""}
			for _, u := range r.units[g] {
				s := r.samples[k][u]
				runs = max(runs, len(s))
				if len(s) == 0 {
					row = append(row, "-")
				} else {
					row = append(row, formatValue(median(s)))
				}
			}
			row[2] = strconv.Itoa(runs)
			t.row(row)
		}
		t.end()
	}
	fmt.Printf("\nmedians of %s\n", r.countNote())
}

// formatValue prints v with about four significant digits, without an
// exponent for the magnitudes benchmarks report.
func formatValue(v float64) string {
	a := math.Abs(v)
	switch {
	case v == math.Trunc(v) && a < 1e15:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 100:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 1:
		return strconv.FormatFloat(v, 'f', 1, 64)
	case a >= 0.001:
		return strconv.FormatFloat(v, 'f', 3, 64)
	}
	return strconv.FormatFloat(v, 'g', 3, 64)
}

func median(s []float64) float64 {
	s = slices.Sorted(slices.Values(s))
	n := len(s)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func (r *results) countNote() string {
	lo, hi := -1, 0
	for _, m := range r.samples {
		for _, s := range m {
			if lo < 0 || len(s) < lo {
				lo = len(s)
			}
			hi = max(hi, len(s))
		}
	}
	if lo == hi {
		return fmt.Sprintf("%d runs each", lo)
	}
	return fmt.Sprintf("%d-%d runs each", lo, hi)
}

// table prints rows as aligned text or as a Markdown table.
type table struct {
	md bool
	w  *tabwriter.Writer
}

func newTable(md bool) *table { return &table{md: md} }

// start begins a table; columns from left on are right-aligned.
func (t *table) start(head []string, left int) {
	if t.md {
		fmt.Println()
		fmt.Println("| " + strings.Join(head, " | ") + " |")
		sep := make([]string, len(head))
		for i := range sep {
			sep[i] = "---"
			if i >= left {
				sep[i] = "---:"
			}
		}
		fmt.Println("|" + strings.Join(sep, "|") + "|")
		return
	}
	fmt.Println()
	t.w = tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	t.row(head)
}

func (t *table) row(cells []string) {
	if t.md {
		fmt.Println("| " + strings.Join(cells, " | ") + " |")
		return
	}
	fmt.Fprintln(t.w, strings.Join(cells, "\t")+"\t")
}

func (t *table) end() {
	if !t.md {
		t.w.Flush()
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "benchratio: "+format+"\n", args...)
	os.Exit(2)
}
