// Command reliability runs the fault scenarios of github.com/rlkit/ratelimit (every TestProof...
// test of the root and redislimit modules: linearizability checks, failovers, network faults)
// and writes their figures to docs/reliability.md, and optionally a summary table to the README.
//
// Usage, from anywhere in the repository:
//
//	go run ./cmd/reliability [-long] [-seed N] [-out docs/reliability.md] [-readme README.md]
//
// It runs, at the repository root, in the go.work workspace:
//
//	RLKIT_RELIABILITY_OUT=<temp dir> [RLKIT_RELIABILITY_LONG=1] [RLKIT_RELIABILITY_SEED=N] \
//	go test -json -count=1 -p=1 -run '^TestProof' -v ./... ./redislimit/...
//
// without -race, so the latencies are the real speed, and one package at a time, so that the
// scenarios of two packages do not share the CPUs (GOFLAGS is cleared for the same reason). The
// test output goes to stderr as go test -v prints it. When a test fails, or no scenario
// recorded a result, or a result file is malformed, it exits with status 1 and writes nothing.
//
// Each test leaves its figures in <temp dir>/<scenario>.json (internal/testkit/reliability.Record), and a
// linearizability test may leave <scenario>.html, porcupine's visualisation: those are copied to
// docs/reliability/<scenario>.html (next to the report, in a directory named after it) and
// linked from the report. With -readme, the block between <!-- reliability:begin --> and
// <!-- reliability:end --> in that file is replaced by the summary table; a README without the
// two markers is left untouched (with a warning).
package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rlkit/ratelimit/internal/testkit/reliability"
)

// Config is the command line.
type Config struct {
	Repo    string // repository root; "" means the one holding the working directory
	Out     string // the report; "" means <root>/docs/reliability.md
	Readme  string // the README to update; "" means none
	Long    bool
	Seed    string
	Timeout string
}

func main() {
	var cfg Config
	flag.BoolVar(&cfg.Long, "long", false, "run the long version of every scenario (RLKIT_RELIABILITY_LONG=1)")
	flag.StringVar(&cfg.Seed, "seed", "", "seed of every randomised scenario (RLKIT_RELIABILITY_SEED); by default each picks and records one")
	flag.StringVar(&cfg.Out, "out", "", "the report to write (default <repository>/docs/reliability.md)")
	flag.StringVar(&cfg.Readme, "readme", "", "a README whose reliability block gets the summary table (default: none)")
	flag.StringVar(&cfg.Repo, "repo", "", "the repository root (default: found from the working directory)")
	flag.StringVar(&cfg.Timeout, "timeout", "60m", "go test -timeout, per package")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "ratelimit: reliability: unexpected arguments %q\n", flag.Args())
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(cfg Config) error {
	if cfg.Seed != "" {
		if _, err := strconv.ParseInt(cfg.Seed, 10, 64); err != nil {
			return fmt.Errorf("ratelimit: reliability: -seed %q is not an integer", cfg.Seed)
		}
	}
	if _, err := time.ParseDuration(cfg.Timeout); err != nil {
		return fmt.Errorf("ratelimit: reliability: -timeout: %w", err)
	}
	root := cfg.Repo
	if root == "" {
		root = "."
	}
	root, err := FindRoot(root)
	if err != nil {
		return err
	}
	out := cfg.Out
	if out == "" {
		out = filepath.Join(root, "docs", "reliability.md")
	}
	if out, err = filepath.Abs(out); err != nil {
		return fmt.Errorf("ratelimit: reliability: %w", err)
	}
	var readme []byte
	if cfg.Readme != "" {
		// Read it now: a wrong path must not cost a whole run.
		if readme, err = os.ReadFile(cfg.Readme); err != nil {
			return fmt.Errorf("ratelimit: reliability: -readme: %w", err)
		}
	}

	tmp, err := os.MkdirTemp("", "rlkit-reliability-")
	if err != nil {
		return fmt.Errorf("ratelimit: reliability: %w", err)
	}
	defer os.RemoveAll(tmp)
	start := time.Now()
	st, err := RunTests(RunOptions{Root: root, OutDir: tmp, Long: cfg.Long, Seed: cfg.Seed, Timeout: cfg.Timeout}, os.Stderr)
	if err != nil {
		return fmt.Errorf("%w; no report written", err)
	}
	results, err := LoadResults(tmp)
	if err != nil {
		return fmt.Errorf("%w; no report written", err)
	}
	if len(results) == 0 {
		return errors.New("ratelimit: reliability: no TestProof test recorded a result; no report written")
	}

	ss := make([]Scenario, len(results))
	for i, r := range results {
		ss[i] = Scenario{Result: r}
		for _, p := range st.Packages[r.Test] {
			ss[i].Packages = append(ss[i].Packages, RelPackage(p))
		}
		slices.Sort(ss[i].Packages)
	}
	if err := copyVisualisations(tmp, out, ss); err != nil {
		return err
	}
	Sort(ss)
	m := Machine{
		GoVersion: GoVersion(commandLine("go", "version")),
		GOOS:      runtime.GOOS,
		GOARCH:    runtime.GOARCH,
		CPUs:      runtime.NumCPU(),
		Redis:     RedisVersion(commandLine("redis-server", "--version")),
		Date:      start,
		Long:      cfg.Long,
		Seed:      cfg.Seed,
	}
	var doc bytes.Buffer
	Render(&doc, m, ss)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return fmt.Errorf("ratelimit: reliability: %w", err)
	}
	if err := os.WriteFile(out, doc.Bytes(), 0o644); err != nil {
		return fmt.Errorf("ratelimit: reliability: %w", err)
	}
	fmt.Fprintf(os.Stderr, "reliability: wrote %s (%d scenarios)\n", out, len(ss))

	if cfg.Readme != "" {
		link, err := readmeLink(cfg.Readme, out)
		if err != nil {
			return err
		}
		updated, err := ReplaceBlock(readme, ReadmeBlock(m, ss, link))
		if errors.Is(err, ErrNoMarkers) {
			fmt.Fprintf(os.Stderr, "reliability: %s left untouched: %v\n", cfg.Readme, err)
			return nil
		}
		if err != nil {
			return err
		}
		if err := os.WriteFile(cfg.Readme, updated, 0o644); err != nil {
			return fmt.Errorf("ratelimit: reliability: %w", err)
		}
		fmt.Fprintf(os.Stderr, "reliability: updated the summary in %s\n", cfg.Readme)
	}
	return nil
}

// readmeLink is the report's path relative to the README's directory, with forward slashes.
func readmeLink(readme, report string) (string, error) {
	dir, err := filepath.Abs(filepath.Dir(readme))
	if err != nil {
		return "", fmt.Errorf("ratelimit: reliability: %w", err)
	}
	rel, err := filepath.Rel(dir, report)
	if err != nil {
		return "", fmt.Errorf("ratelimit: reliability: %w", err)
	}
	return filepath.ToSlash(rel), nil
}

// VisualisationDir is the directory next to the report where the HTML visualisations go:
// docs/reliability.md -> docs/reliability.
func VisualisationDir(report string) string {
	return strings.TrimSuffix(report, filepath.Ext(report))
}

// copyVisualisations copies <scenario>.html from the results directory into the report's
// visualisation directory (removing the HTML files of earlier runs there) and sets each
// scenario's link. An HTML file that matches no scenario is reported and left out.
func copyVisualisations(results, report string, ss []Scenario) error {
	dir := VisualisationDir(report)
	old, _ := filepath.Glob(filepath.Join(dir, "*.html"))
	for _, f := range old {
		if err := os.Remove(f); err != nil {
			return fmt.Errorf("ratelimit: reliability: %w", err)
		}
	}
	found, _ := filepath.Glob(filepath.Join(results, "*.html"))
	for i := range ss {
		name := reliability.FileName(ss[i].Scenario, ".html")
		src := filepath.Join(results, name)
		b, err := os.ReadFile(src)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("ratelimit: reliability: %w", err)
		}
		found = slices.DeleteFunc(found, func(f string) bool { return f == src })
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("ratelimit: reliability: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o644); err != nil {
			return fmt.Errorf("ratelimit: reliability: %w", err)
		}
		ss[i].HTML = filepath.Base(dir) + "/" + name
	}
	for _, f := range found {
		fmt.Fprintf(os.Stderr, "reliability: %s matches no scenario; not copied\n", filepath.Base(f))
	}
	return nil
}
