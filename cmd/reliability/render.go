package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rlkit/ratelimit/internal/testkit/reliability"
)

// Groups are the sections of the report, in order. A result of another group gets a section
// after these.
var Groups = []struct{ ID, Title, Intro string }{
	{"linearizability", "Linearizability",
		"Histories of concurrent decisions checked with porcupine against the sequential in-memory model of each algorithm."},
	{"failover", "Failover",
		"A Redis master fails (Sentinel or Cluster with replicas) under load, on one key whose limit cannot refill during the run."},
	{"network", "Network faults",
		"A TCP proxy between the limiter and Redis adds latency, limits bandwidth, resets connections or drops replies."},
}

// Scenario is one result with what the run adds: the packages of its test and the
// visualisation copied next to the report.
type Scenario struct {
	reliability.Result
	Packages []string // the test's packages, relative to the repository root: ".", "./redislimit"
	HTML     string   // link to <scenario>.html relative to the report, "" when none
}

// Machine describes the run: where and how the figures were measured.
type Machine struct {
	GoVersion string // the toolchain, as GoVersion gives it: "go1.26.8"
	GOOS      string
	GOARCH    string
	CPUs      int
	Redis     string // the Redis server, as RedisVersion gives it: "redis-server 7.0.15"
	Date      time.Time
	Long      bool   // the long versions of the scenarios
	Seed      string // the -seed flag, "" when each scenario picked its own
}

// LoadResults reads every <scenario>.json in dir. A file that is not a well-formed result (bad
// JSON, an unknown field, no scenario, group or test, negative counts) is an error naming it, as
// are two files with the same scenario.
func LoadResults(dir string) ([]reliability.Result, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil {
		return nil, fmt.Errorf("ratelimit: reliability: %w", err)
	}
	slices.Sort(names)
	seen := map[string]string{}
	var rs []reliability.Result
	for _, name := range names {
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("ratelimit: reliability: %w", err)
		}
		r, err := decodeResult(b)
		if err != nil {
			return nil, fmt.Errorf("ratelimit: reliability: malformed result %s: %w", filepath.Base(name), err)
		}
		if other, ok := seen[r.Scenario]; ok {
			return nil, fmt.Errorf("ratelimit: reliability: scenario %q recorded twice (%s and %s)",
				r.Scenario, other, filepath.Base(name))
		}
		seen[r.Scenario] = filepath.Base(name)
		rs = append(rs, r)
	}
	return rs, nil
}

func decodeResult(b []byte) (reliability.Result, error) {
	var r reliability.Result
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return r, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return r, errors.New("trailing data after the result")
	}
	switch {
	case r.Scenario == "":
		return r, errors.New("no scenario")
	case r.Group == "":
		return r, errors.New("no group")
	case r.Test == "":
		return r, errors.New("no test")
	case r.Limit < 0 || r.Calls < 0 || r.Admitted < 0 || r.Over < 0 || r.Failed < 0 ||
		r.Fallback < 0 || r.Executed < 0 || r.Ops < 0 || r.Histories < 0:
		return r, errors.New("a negative count")
	case r.Recovery < 0 || r.P50 < 0 || r.P99 < 0 || r.Max < 0:
		return r, errors.New("a negative duration")
	}
	return r, nil
}

// Sort orders scenarios as the report shows them: by group (Groups first, in their order, then
// the others by name), then by scenario id, numbers in ids compared by value
// (proxy-latency-1ms before proxy-latency-10ms).
func Sort(ss []Scenario) {
	rank := func(g string) int {
		for i, x := range Groups {
			if x.ID == g {
				return i
			}
		}
		return len(Groups)
	}
	slices.SortStableFunc(ss, func(a, b Scenario) int {
		if ra, rb := rank(a.Group), rank(b.Group); ra != rb {
			return ra - rb
		}
		if a.Group != b.Group {
			return strings.Compare(a.Group, b.Group)
		}
		return naturalCompare(a.Scenario, b.Scenario)
	})
}

// naturalCompare compares a and b with runs of digits compared as numbers.
func naturalCompare(a, b string) int {
	for a != "" && b != "" {
		da, db := digits(a), digits(b)
		if da > 0 && db > 0 {
			na := strings.TrimLeft(a[:da], "0")
			nb := strings.TrimLeft(b[:db], "0")
			if len(na) != len(nb) {
				return len(na) - len(nb)
			}
			if c := strings.Compare(na, nb); c != 0 {
				return c
			}
			a, b = a[da:], b[db:]
			continue
		}
		if a[0] != b[0] {
			return int(a[0]) - int(b[0])
		}
		a, b = a[1:], b[1:]
	}
	return len(a) - len(b)
}

func digits(s string) int {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i
}

// Render writes the report: header, summary table, then one section per group with every
// scenario's figures and the command that reproduces it. Links are relative to the report.
func Render(w io.Writer, m Machine, ss []Scenario) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("# Reliability under faults\n\n")
	p("<!-- Generated by `go run ./cmd/reliability`; do not edit by hand. -->\n\n")
	p("What the limiter does when things fail: the histories of concurrent decisions checked for\n")
	p("linearizability, a Redis master failing over to a replica, and network faults between the limiter\n")
	p("and Redis. Every scenario below is a `TestProof...` test: `go test -race` (CI) runs its short\n")
	p("version and asserts its bounds; `go run ./cmd/reliability` ran the same tests without `-race`, so\n")
	p("the latencies are real speed, and wrote this page from the figures each test recorded\n")
	p("(internal/testkit/reliability).\n\n")
	versions := "short versions (the ones CI runs)"
	if m.Long {
		versions = "long versions (`-long`)"
	}
	p("- Machine: %s/%s, %d CPUs; Go %s; %s.\n", m.GOOS, m.GOARCH, m.CPUs, m.GoVersion, m.Redis)
	p("- Run: %s, %s", m.Date.UTC().Format("2006-01-02 15:04 MST"), versions)
	if m.Seed != "" {
		p(", seed %s for every scenario", m.Seed)
	}
	p(".\n")
	p("- Regenerate: `go run ./cmd/reliability%s%s -readme README.md` from the repository root.\n\n",
		map[bool]string{true: " -long"}[m.Long], map[bool]string{true: " -seed " + m.Seed}[m.Seed != ""])
	p("Definitions. A call *failed* when it returned an error that is not the caller's own\n")
	p("cancellation; *fallback* counts the failed calls the failure policy decided (fail open, fail\n")
	p("closed or the local fallback). *Over-admission* is the events admitted beyond the key's limit,\n")
	p("on a key that cannot refill during the run, in events and in %% of the limit. *Recovery* is\n")
	p("the time from the start of the fault to the first moment after which every decision came from\n")
	p("Redis. A network fault lasts a set time (its How says how long: 1 s in the short versions,\n")
	p("15 s in the long ones), and its recovery includes that time; a failover's is the outage.\n")
	p("Latencies are per decision call during the fault.\n\n")

	p("## Summary\n\n")
	Summary(w, ss, "")
	p("\n")

	for i := 0; i < len(ss); {
		j := i
		for j < len(ss) && ss[j].Group == ss[i].Group {
			j++
		}
		title, intro := ss[i].Group, ""
		for _, g := range Groups {
			if g.ID == ss[i].Group {
				title, intro = g.Title, g.Intro
			}
		}
		p("## %s\n\n", title)
		if intro != "" {
			p("%s\n\n", intro)
		}
		for _, s := range ss[i:j] {
			renderScenario(w, s)
		}
		i = j
	}
}

func renderScenario(w io.Writer, s Scenario) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	p("<a id=\"%s\"></a>\n\n### %s\n\n", anchor(s.Scenario), mdText(title(s.Result)))
	p("Scenario `%s`, test `%s`", s.Scenario, s.Test)
	if len(s.Packages) > 0 {
		p(" in `%s`", strings.Join(s.Packages, "`, `"))
	}
	p(".\n\n")
	if s.How != "" {
		p("%s\n\n", strings.TrimSpace(s.How))
	}
	p("| figure | value |\n|---|---|\n")
	for _, row := range Figures(s.Result) {
		p("| %s | %s |\n", row[0], cell(row[1]))
	}
	p("\n")
	for _, n := range s.Notes {
		p("- %s\n", strings.TrimSpace(n))
	}
	if len(s.Notes) > 0 {
		p("\n")
	}
	if s.HTML != "" {
		p("Visualisation of the histories: [%s](%s).\n\n", filepath.Base(s.HTML), s.HTML)
	}
	p("Reproduce (from the repository root):\n\n    %s\n\n", Reproduce(s))
}

// Figures returns the rows of a scenario's table: (figure, value). Rows of fields the scenario
// did not set are left out.
func Figures(r reliability.Result) [][2]string {
	var rows [][2]string
	add := func(k, v string) { rows = append(rows, [2]string{k, v}) }
	if r.Limit > 0 {
		add("limit", fmt.Sprintf("%d events (cannot refill during the run)", r.Limit))
	}
	if r.Calls > 0 || r.Admitted > 0 {
		add("calls", strconv.FormatInt(r.Calls, 10))
		add("admitted", fmt.Sprintf("%d events", r.Admitted))
	}
	if r.Limit > 0 {
		add("over-admission", Over(r))
	} else if r.Over > 0 {
		add("over-admission", fmt.Sprintf("%d events", r.Over))
	}
	if r.Calls > 0 || r.Failed > 0 || r.Fallback > 0 {
		add("failed calls", FailedText(r))
	}
	if r.Executed > 0 {
		add("executions of the script", strconv.FormatInt(r.Executed, 10))
	}
	if r.Recovery > 0 {
		add("recovery", Dur(r.Recovery))
	}
	if r.P50 > 0 || r.P99 > 0 || r.Max > 0 {
		add("latency during the fault", fmt.Sprintf("p50 %s, p99 %s, max %s", Dur(r.P50), Dur(r.P99), Dur(r.Max)))
	}
	if r.Verdict != "" {
		v := r.Verdict
		if r.Ops > 0 || r.Histories > 0 {
			v += fmt.Sprintf(" (%d operations in %d histories)", r.Ops, r.Histories)
		}
		add("verdict", v)
	} else if r.Ops > 0 || r.Histories > 0 {
		add("operations", fmt.Sprintf("%d in %d histories", r.Ops, r.Histories))
	}
	if r.Seed != 0 {
		add("seed", strconv.FormatInt(r.Seed, 10))
	}
	return rows
}

// Over formats the over-admission: events and % of the limit ("12 (1.2 %)"; "0 (0 %)"; a
// positive share below 0.01 % reads "<0.01 %"). Without a limit, events only.
func Over(r reliability.Result) string {
	if r.Limit <= 0 {
		return strconv.FormatInt(r.Over, 10)
	}
	return fmt.Sprintf("%d (%s of the limit)", r.Over, Percent(r.Over, r.Limit))
}

// Percent formats 100*part/whole with at most two decimals, trailing zeros dropped.
func Percent(part, whole int64) string {
	if whole <= 0 {
		return "n/a"
	}
	pc := 100 * float64(part) / float64(whole)
	if part > 0 && pc < 0.01 {
		return "<0.01 %"
	}
	s := strconv.FormatFloat(pc, 'f', 2, 64)
	s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	return s + " %"
}

// FailedText formats the failed calls, their share of the calls and how many of them the
// failure policy decided.
func FailedText(r reliability.Result) string {
	s := strconv.FormatInt(r.Failed, 10)
	if r.Calls > 0 {
		s += " (" + Percent(r.Failed, r.Calls) + " of calls)"
	}
	return s + fmt.Sprintf(", %d decided by the failure policy", r.Fallback)
}

// Dur formats d with four significant digits at most ("12.35ms", "1.235s", "523.5µs"), "-" for 0.
func Dur(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	step := time.Duration(1)
	for n := d; n >= 10000; n /= 10 {
		step *= 10
	}
	return d.Round(step).String()
}

// Reproduce returns the shell command that runs s's test alone, with its seed and length.
func Reproduce(s Scenario) string {
	var env []string
	if s.Seed != 0 {
		env = append(env, reliability.EnvSeed+"="+strconv.FormatInt(s.Seed, 10))
	}
	if s.Long {
		env = append(env, reliability.EnvLong+"=1")
	}
	pkgs := s.Packages
	if len(pkgs) == 0 {
		pkgs = proofPackages
	}
	parts := strings.Split(s.Test, "/")
	for i, x := range parts {
		parts[i] = "^" + regexp.QuoteMeta(x) + "$"
	}
	cmd := append(env, "go", "test", "-run", shellQuote(strings.Join(parts, "/")), "-count=1", "-v")
	return strings.Join(append(cmd, pkgs...), " ")
}

// shellQuote quotes s for a POSIX shell, in single quotes.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// Summary writes the compact table of every scenario: over-admission, failed/fallback calls,
// recovery, p99 and verdict, each scenario linked to its section in the report at link
// ("" for the report itself).
func Summary(w io.Writer, ss []Scenario, link string) {
	fmt.Fprintf(w, "| scenario | over-admission | failed / fallback | recovery | p99 | verdict |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|---|\n")
	for _, s := range ss {
		over := "-"
		switch {
		case s.Limit > 0:
			over = fmt.Sprintf("%d (%s)", s.Over, Percent(s.Over, s.Limit))
		case s.Over > 0:
			over = strconv.FormatInt(s.Over, 10)
		}
		failed := "-"
		if s.Calls > 0 || s.Failed > 0 || s.Fallback > 0 {
			failed = fmt.Sprintf("%d / %d", s.Failed, s.Fallback)
		}
		verdict := s.Verdict
		if verdict == "" {
			verdict = "-"
		}
		fmt.Fprintf(w, "| [%s](%s#%s) | %s | %s | %s | %s | %s |\n", cell(mdText(title(s.Result))),
			link, anchor(s.Scenario), over, failed, Dur(s.Recovery), Dur(s.P99), cell(verdict))
	}
}

func title(r reliability.Result) string {
	if r.Title != "" {
		return r.Title
	}
	return r.Scenario
}

var unsafeAnchor = regexp.MustCompile(`[^a-z0-9_-]+`)

// anchor is the id of a scenario's section.
func anchor(scenario string) string {
	return "scenario-" + unsafeAnchor.ReplaceAllString(strings.ToLower(scenario), "-")
}

// cell makes s fit in one table cell.
func cell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.ReplaceAll(s, "|", `\|`)
}

// mdText escapes the characters that would start markup in a title.
func mdText(s string) string {
	r := strings.NewReplacer("<", "&lt;", ">", "&gt;", "[", `\[`, "]", `\]`)
	return r.Replace(s)
}

// Markers delimit the generated block in the README.
const (
	BeginMarker = "<!-- reliability:begin -->"
	EndMarker   = "<!-- reliability:end -->"
)

// ErrNoMarkers is returned by ReplaceBlock when the README has no well-formed block.
var ErrNoMarkers = errors.New("ratelimit: reliability: the README has no " + BeginMarker + " ... " + EndMarker + " block")

// ReplaceBlock returns readme with the text between the markers (exclusive) replaced by block.
// Each marker must appear exactly once, begin before end; otherwise it returns ErrNoMarkers.
func ReplaceBlock(readme, block []byte) ([]byte, error) {
	b, e := []byte(BeginMarker), []byte(EndMarker)
	if bytes.Count(readme, b) != 1 || bytes.Count(readme, e) != 1 {
		return nil, ErrNoMarkers
	}
	i := bytes.Index(readme, b) + len(b)
	j := bytes.Index(readme, e)
	if j < i {
		return nil, ErrNoMarkers
	}
	out := make([]byte, 0, len(readme)+len(block))
	out = append(out, readme[:i]...)
	out = append(out, '\n')
	out = append(out, block...)
	out = append(out, readme[j:]...)
	return out, nil
}

// ReadmeBlock is the README's summary: the table and a line on where the figures come from,
// linking to the report at report (a path relative to the README).
func ReadmeBlock(m Machine, ss []Scenario, report string) []byte {
	var b bytes.Buffer
	Summary(&b, ss, report)
	versions := "short"
	if m.Long {
		versions = "long"
	}
	fmt.Fprintf(&b, "\nMeasured by `go run ./cmd/reliability` (%s versions) on %s/%s, %d CPUs, Go %s, %s, %s. "+
		"How each scenario runs, the latencies and the commands to reproduce: [%s](%s).\n",
		versions, m.GOOS, m.GOARCH, m.CPUs, m.GoVersion, m.Redis, m.Date.UTC().Format("2006-01-02"), report, report)
	return b.Bytes()
}
