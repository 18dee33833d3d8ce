// Command benchratio reads `go test -bench` output and prints, for every
// benchmark of this module (sub-benchmark names starting with "ratelimit-"),
// the median of a metric (ns/op unless -metric says otherwise) and its ratio
// to each baseline library's median in the same mode and GOMAXPROCS, from the
// same run.
//
// Usage:
//
//	benchratio [-metric ns/op] [-base xtimerate,uber,juju] [-target xtimerate=0.6,uber=1] results.txt...
//
// Names must have the form Benchmark<Group>/<library>/<mode>[-<procs>], as
// BenchmarkAllow/xtimerate/serial-2. A mode a baseline was not run in (uber
// has no denied modes) prints "-". A ratio above its target is marked MISS.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
)

type key struct {
	group, lib, mode, procs string
}

func main() {
	base := flag.String("base", "xtimerate,uber,juju", "comma-separated baseline libraries")
	target := flag.String("target", "xtimerate=0.6,uber=1", "comma-separated lib=maxratio targets")
	metric := flag.String("metric", "ns/op", "unit of the metric compared, e.g. ns/op or cpu-ns/op")
	flag.Parse()
	targets := map[string]float64{}
	for _, t := range strings.Split(*target, ",") {
		if t == "" {
			continue
		}
		lib, v, ok := strings.Cut(t, "=")
		f, err := strconv.ParseFloat(v, 64)
		if !ok || err != nil {
			fatalf("bad -target %q", t)
		}
		targets[lib] = f
	}
	samples := map[key][]float64{}
	var order []key
	if flag.NArg() == 0 {
		parse(os.Stdin, *metric, samples, &order)
	}
	for _, name := range flag.Args() {
		f, err := os.Open(name)
		if err != nil {
			fatalf("%v", err)
		}
		parse(f, *metric, samples, &order)
		f.Close()
	}
	bases := strings.Split(*base, ",")
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(w, "benchmark\tprocs\t%s\t", *metric)
	for _, b := range bases {
		fmt.Fprintf(w, "%s\tratio\t", b)
	}
	fmt.Fprintln(w)
	misses := 0
	for _, k := range order {
		if !strings.HasPrefix(k.lib, "ratelimit-") {
			continue
		}
		ours := median(samples[k])
		fmt.Fprintf(w, "%s/%s/%s\t%s\t%.1f\t", k.group, k.lib, k.mode, k.procs, ours)
		for _, b := range bases {
			s, ok := samples[key{k.group, b, k.mode, k.procs}]
			if !ok {
				fmt.Fprint(w, "-\t-\t")
				continue
			}
			m := median(s)
			r := ours / m
			mark := ""
			if t, ok := targets[b]; ok && r > t {
				mark = " MISS"
				misses++
			}
			fmt.Fprintf(w, "%.1f\t%.2fx%s\t", m, r, mark)
		}
		fmt.Fprintln(w)
	}
	w.Flush()
	fmt.Printf("\n%s, medians of %s; ratio = ours/baseline; targets %s; %d missed\n",
		*metric, countNote(samples), *target, misses)
}

// parse reads benchmark result lines, keeping ns/op per name.
func parse(r io.Reader, metric string, samples map[key][]float64, order *[]key) {
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		v, found := 0.0, false
		for i := 2; i+1 < len(f); i += 2 {
			if f[i+1] == metric {
				x, err := strconv.ParseFloat(f[i], 64)
				v, found = x, err == nil
				break
			}
		}
		if !found {
			continue
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
		if _, seen := samples[k]; !seen {
			*order = append(*order, k)
		}
		samples[k] = append(samples[k], v)
	}
	if err := sc.Err(); err != nil {
		fatalf("%v", err)
	}
}

func median(s []float64) float64 {
	s = slices.Sorted(slices.Values(s))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func countNote(samples map[key][]float64) string {
	lo, hi := -1, 0
	for _, s := range samples {
		if lo < 0 || len(s) < lo {
			lo = len(s)
		}
		hi = max(hi, len(s))
	}
	if lo == hi {
		return fmt.Sprintf("%d runs each", lo)
	}
	return fmt.Sprintf("%d-%d runs each", lo, hi)
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "benchratio: "+format+"\n", args...)
	os.Exit(2)
}
