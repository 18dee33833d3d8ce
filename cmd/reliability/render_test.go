package main

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rlkit/ratelimit/internal/testkit/reliability"
)

// sample returns hand-made results of every kind, in no particular order.
func sample() []Scenario {
	return []Scenario{
		{Result: reliability.Result{
			Group: "network", Scenario: "proxy-latency-100ms", Title: "Proxy adds 100 ms", Test: "TestProofProxy/latency_100ms",
			How: "one proxy, 100 ms each way", Limit: 1000, Calls: 500, Admitted: 500, Failed: 20, Fallback: 20,
			Recovery: 1500 * time.Millisecond, P50: 101 * time.Millisecond, P99: 180*time.Millisecond + 123456, Max: 250 * time.Millisecond,
			Seed: 7,
		}, Packages: []string{"./redislimit"}},
		{Result: reliability.Result{
			Group: "network", Scenario: "proxy-latency-10ms", Title: "Proxy adds 10 ms", Test: "TestProofProxy/latency_10ms",
			Limit: 1000, Calls: 500, Admitted: 500,
		}, Packages: []string{"./redislimit"}},
		{Result: reliability.Result{
			Group: "failover", Scenario: "sentinel-kill", Title: "Sentinel: kill the master", Test: "TestProofSentinel",
			How: "master, replica, 3 sentinels; 4 processes x 32 goroutines", Limit: 2000, Calls: 9000, Admitted: 2012,
			Over: 12, Failed: 300, Fallback: 280, Recovery: 3*time.Second + 456789012, P50: 2 * time.Millisecond,
			P99: 900 * time.Millisecond, Max: 2 * time.Second, Seed: 42, Long: true,
			Notes: []string{"the replica had lagged 12 writes"},
		}, Packages: []string{"./redislimit"}},
		{Result: reliability.Result{
			Group: "linearizability", Scenario: "memory-tokenbucket", Title: "In-memory token bucket", Test: "TestProofLinearizable",
			How: "8 goroutines", Ops: 4000, Histories: 1, Verdict: "linearizable",
		}, Packages: []string{"."}, HTML: "reliability/memory-tokenbucket.html"},
		{Result: reliability.Result{
			Group: "retries", Scenario: "lost-reply", Title: "A | lost reply", Test: "TestProofLostReply",
			Calls: 1, Admitted: 1, Failed: 1, Fallback: 1, Executed: 1, Verdict: "ok",
		}, Packages: []string{"./redislimit"}},
	}
}

func TestPercent(t *testing.T) {
	steps := []struct {
		part, whole int64
		want        string
	}{
		{12, 1000, "1.2 %"},
		{0, 1000, "0 %"},
		{1000, 1000, "100 %"},
		{1, 3, "33.33 %"},
		{2, 3, "66.67 %"},
		{1, 100000, "<0.01 %"},
		{1, 10000, "0.01 %"},
		{5, 0, "n/a"},
	}
	for _, st := range steps {
		if got := Percent(st.part, st.whole); got != st.want {
			t.Errorf("Percent(%d, %d) = %q, want %q", st.part, st.whole, got, st.want)
		}
	}
}

func TestDur(t *testing.T) {
	steps := []struct {
		d    time.Duration
		want string
	}{
		{0, "-"},
		{999, "999ns"},
		{523456, "523.5µs"},
		{12345678, "12.35ms"},
		{1234567890, "1.235s"},
		{2 * time.Second, "2s"},
	}
	for _, st := range steps {
		if got := Dur(st.d); got != st.want {
			t.Errorf("Dur(%d) = %q, want %q", int64(st.d), got, st.want)
		}
	}
}

func TestFigures(t *testing.T) {
	ss := sample()
	got := Figures(ss[2].Result)
	want := [][2]string{
		{"limit", "2000 events (cannot refill during the run)"},
		{"calls", "9000"},
		{"admitted", "2012 events"},
		{"over-admission", "12 (0.6 % of the limit)"},
		{"failed calls", "300 (3.33 % of calls), 280 decided by the failure policy"},
		{"recovery", "3.457s"},
		{"latency during the fault", "p50 2ms, p99 900ms, max 2s"},
		{"seed", "42"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Figures(sentinel-kill) =\n%q\nwant\n%q", got, want)
	}
	got = Figures(ss[3].Result)
	want = [][2]string{{"verdict", "linearizable (4000 operations in 1 histories)"}}
	if !slices.Equal(got, want) {
		t.Errorf("Figures(memory-tokenbucket) = %q, want %q", got, want)
	}
	got = Figures(ss[4].Result)
	want = [][2]string{
		{"calls", "1"},
		{"admitted", "1 events"},
		{"failed calls", "1 (100 % of calls), 1 decided by the failure policy"},
		{"executions of the script", "1"},
		{"verdict", "ok"},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Figures(lost-reply) = %q, want %q", got, want)
	}
}

func TestSort(t *testing.T) {
	ss := sample()
	Sort(ss)
	var got []string
	for _, s := range ss {
		got = append(got, s.Scenario)
	}
	want := []string{"memory-tokenbucket", "sentinel-kill", "proxy-latency-10ms", "proxy-latency-100ms", "lost-reply"}
	if !slices.Equal(got, want) {
		t.Errorf("Sort = %q, want %q", got, want)
	}
	for _, c := range []struct{ a, b string }{{"x-1ms", "x-10ms"}, {"x-9", "x-10"}, {"a", "b"}, {"a1", "a1b"}, {"x-01", "x-2"}} {
		if naturalCompare(c.a, c.b) >= 0 || naturalCompare(c.b, c.a) <= 0 {
			t.Errorf("naturalCompare(%q, %q) does not order them", c.a, c.b)
		}
	}
	if naturalCompare("x-10ms", "x-10ms") != 0 {
		t.Error("naturalCompare(x, x) != 0")
	}
}

func TestReproduce(t *testing.T) {
	ss := sample()
	steps := []struct {
		s    Scenario
		want string
	}{
		{ss[0], `RLKIT_RELIABILITY_SEED=7 go test -run '^TestProofProxy$/^latency_100ms$' -count=1 -v ./redislimit`},
		{ss[2], `RLKIT_RELIABILITY_SEED=42 RLKIT_RELIABILITY_LONG=1 go test -run '^TestProofSentinel$' -count=1 -v ./redislimit`},
		{ss[3], `go test -run '^TestProofLinearizable$' -count=1 -v .`},
		{Scenario{Result: reliability.Result{Test: "TestProofX/it's_a.b"}},
			`go test -run '^TestProofX$/^it'\''s_a\.b$' -count=1 -v ./... ./redislimit/...`},
	}
	for _, st := range steps {
		if got := Reproduce(st.s); got != st.want {
			t.Errorf("Reproduce(%s) =\n%s\nwant\n%s", st.s.Test, got, st.want)
		}
	}
}

func TestSummary(t *testing.T) {
	ss := sample()
	Sort(ss)
	var b bytes.Buffer
	Summary(&b, ss, "docs/reliability.md")
	want := `| scenario | over-admission | failed / fallback | recovery | p99 | verdict |
|---|---|---|---|---|---|
| [In-memory token bucket](docs/reliability.md#scenario-memory-tokenbucket) | - | - | - | - | linearizable |
| [Sentinel: kill the master](docs/reliability.md#scenario-sentinel-kill) | 12 (0.6 %) | 300 / 280 | 3.457s | 900ms | - |
| [Proxy adds 10 ms](docs/reliability.md#scenario-proxy-latency-10ms) | 0 (0 %) | 0 / 0 | - | - | - |
| [Proxy adds 100 ms](docs/reliability.md#scenario-proxy-latency-100ms) | 0 (0 %) | 20 / 20 | 1.5s | 180.1ms | - |
| [A \| lost reply](docs/reliability.md#scenario-lost-reply) | - | 1 / 1 | - | - | ok |
`
	if b.String() != want {
		t.Errorf("Summary =\n%s\nwant\n%s", b.String(), want)
	}
}

func TestRender(t *testing.T) {
	ss := sample()
	Sort(ss)
	m := Machine{GoVersion: "go1.26.8", GOOS: "linux", GOARCH: "amd64", CPUs: 2,
		Redis: "redis-server 7.0.15", Date: time.Date(2026, 12, 1, 3, 4, 0, 0, time.UTC), Long: true, Seed: "42"}
	var b bytes.Buffer
	Render(&b, m, ss)
	doc := b.String()
	for _, want := range []string{
		"# Reliability under faults\n",
		"- Machine: linux/amd64, 2 CPUs; Go go1.26.8; redis-server 7.0.15.\n",
		"- Run: 2026-12-01 03:04 UTC, long versions (`-long`), seed 42 for every scenario.\n",
		"- Regenerate: `go run ./cmd/reliability -long -seed 42 -readme README.md`",
		"| [Sentinel: kill the master](#scenario-sentinel-kill) | 12 (0.6 %) | 300 / 280 | 3.457s | 900ms | - |\n",
		"<a id=\"scenario-sentinel-kill\"></a>\n\n### Sentinel: kill the master\n\nScenario `sentinel-kill`, test `TestProofSentinel` in `./redislimit`.\n\nmaster, replica, 3 sentinels; 4 processes x 32 goroutines\n\n",
		"| over-admission | 12 (0.6 % of the limit) |\n",
		"| failed calls | 300 (3.33 % of calls), 280 decided by the failure policy |\n",
		"| latency during the fault | p50 2ms, p99 900ms, max 2s |\n",
		"- the replica had lagged 12 writes\n",
		"    RLKIT_RELIABILITY_SEED=42 RLKIT_RELIABILITY_LONG=1 go test -run '^TestProofSentinel$' -count=1 -v ./redislimit\n",
		"Visualisation of the histories: [memory-tokenbucket.html](reliability/memory-tokenbucket.html).\n",
		"| verdict | linearizable (4000 operations in 1 histories) |\n",
		"### A | lost reply\n",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("the report lacks %q; it is:\n%s", want, doc)
		}
	}
	// The sections come in the order of Groups, then the other groups, each scenario once.
	last := -1
	for _, h := range []string{"## Summary\n", "## Linearizability\n", "### In-memory token bucket\n", "## Failover\n",
		"### Sentinel: kill the master\n", "## Network faults\n", "### Proxy adds 10 ms\n", "### Proxy adds 100 ms\n",
		"## retries\n", "### A | lost reply\n"} {
		i := strings.Index(doc, h)
		if i <= last {
			t.Errorf("%q at %d, want after %d", h, i, last)
		}
		if strings.Count(doc, h) != 1 {
			t.Errorf("%q appears %d times, want 1", h, strings.Count(doc, h))
		}
		last = i
	}
	// A linearizability scenario has no over-admission or latency row.
	lin := doc[strings.Index(doc, "### In-memory token bucket"):strings.Index(doc, "## Failover")]
	for _, no := range []string{"over-admission", "latency", "failed calls"} {
		if strings.Contains(lin, no) {
			t.Errorf("the linearizability scenario shows %q:\n%s", no, lin)
		}
	}
}

func TestReplaceBlock(t *testing.T) {
	readme := "# ratelimit\n\nintro\n\n" + BeginMarker + "\nold table\n" + EndMarker + "\n\nafter\n"
	got, err := ReplaceBlock([]byte(readme), []byte("| new |\n"))
	if err != nil {
		t.Fatalf("ReplaceBlock: %v", err)
	}
	want := "# ratelimit\n\nintro\n\n" + BeginMarker + "\n| new |\n" + EndMarker + "\n\nafter\n"
	if string(got) != want {
		t.Errorf("ReplaceBlock =\n%s\nwant\n%s", got, want)
	}
	again, err := ReplaceBlock(got, []byte("| new |\n"))
	if err != nil || string(again) != want {
		t.Errorf("ReplaceBlock twice = %q, %v; want the same README", again, err)
	}
	for _, bad := range []string{
		"# no markers\n",
		BeginMarker + "\nonly begin\n",
		"only end\n" + EndMarker,
		EndMarker + "\nreversed\n" + BeginMarker,
		BeginMarker + BeginMarker + "\ntwice\n" + EndMarker,
	} {
		got, err := ReplaceBlock([]byte(bad), []byte("x"))
		if !errors.Is(err, ErrNoMarkers) || got != nil {
			t.Errorf("ReplaceBlock(%q) = %q, %v; want nil, ErrNoMarkers", bad, got, err)
		}
	}
}

func TestReadmeBlock(t *testing.T) {
	ss := sample()[:1]
	m := Machine{GOOS: "linux", GOARCH: "amd64", CPUs: 2, GoVersion: "go1.26.8", Redis: "redis-server 7.0.15", Date: time.Date(2026, 12, 1, 3, 4, 0, 0, time.UTC)}
	got := string(ReadmeBlock(m, ss, "docs/reliability.md"))
	for _, want := range []string{
		"| [Proxy adds 100 ms](docs/reliability.md#scenario-proxy-latency-100ms) | 0 (0 %) | 20 / 20 | 1.5s | 180.1ms | - |\n",
		"(short versions) on linux/amd64, 2 CPUs, Go go1.26.8, redis-server 7.0.15, 2026-12-01.",
		"[docs/reliability.md](docs/reliability.md)",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("ReadmeBlock lacks %q:\n%s", want, got)
		}
	}
}

func TestLoadResults(t *testing.T) {
	write := func(dir, name, s string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A result as reliability.Record writes it.
	dir := t.TempDir()
	t.Setenv(reliability.EnvOut, dir)
	t.Setenv(reliability.EnvLong, "1")
	in := sample()[2].Result
	reliability.Record(t, in)
	write(dir, "notes.txt", "not a result")
	rs, err := LoadResults(dir)
	if err != nil {
		t.Fatalf("LoadResults: %v", err)
	}
	if len(rs) != 1 || rs[0].Scenario != in.Scenario || rs[0].Over != 12 || rs[0].Recovery != in.Recovery ||
		!rs[0].Long || !slices.Equal(rs[0].Notes, in.Notes) {
		t.Errorf("LoadResults = %+v, want %+v", rs, in)
	}

	bad := []struct{ name, json, want string }{
		{"syntax", `{"group": "network", "scenario": "x", "test": "T"`, "x.json"},
		{"unknown field", `{"group": "network", "scenario": "x", "test": "T", "overs": 3}`, "unknown field"},
		{"wrong type", `{"group": "network", "scenario": "x", "test": "T", "over": "3"}`, "x.json"},
		{"no scenario", `{"group": "network", "test": "T"}`, "no scenario"},
		{"no group", `{"scenario": "x", "test": "T"}`, "no group"},
		{"no test", `{"group": "network", "scenario": "x"}`, "no test"},
		{"negative", `{"group": "network", "scenario": "x", "test": "T", "failed": -1}`, "negative count"},
		{"negative duration", `{"group": "network", "scenario": "x", "test": "T", "p99_ns": -1}`, "negative duration"},
		{"trailing", `{"group": "network", "scenario": "x", "test": "T"} {}`, "trailing data"},
		{"empty", ``, "x.json"},
	}
	for _, c := range bad {
		dir := t.TempDir()
		write(dir, "x.json", c.json)
		rs, err := LoadResults(dir)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), "ratelimit: ") {
			t.Errorf("%s: LoadResults = %v, %v; want an error with %q", c.name, rs, err, c.want)
		}
	}

	dir = t.TempDir()
	write(dir, "a.json", `{"group": "network", "scenario": "x", "test": "T"}`)
	write(dir, "b.json", `{"group": "network", "scenario": "x", "test": "T2"}`)
	if _, err := LoadResults(dir); err == nil || !strings.Contains(err.Error(), "recorded twice") {
		t.Errorf("LoadResults with a scenario twice: %v, want an error", err)
	}
}

func TestReadEvents(t *testing.T) {
	stream := `{"Action":"start","Package":"github.com/rlkit/ratelimit"}
{"Action":"run","Package":"github.com/rlkit/ratelimit","Test":"TestProofA"}
{"Action":"output","Package":"github.com/rlkit/ratelimit","Test":"TestProofA","Output":"=== RUN   TestProofA\n"}
{"Action":"run","Package":"github.com/rlkit/ratelimit","Test":"TestProofA/sub"}
{"Action":"pass","Package":"github.com/rlkit/ratelimit","Test":"TestProofA/sub"}
{"Action":"pass","Package":"github.com/rlkit/ratelimit","Test":"TestProofA"}
{"Action":"run","Package":"github.com/rlkit/ratelimit/redislimit","Test":"TestProofA"}
{"Action":"run","Package":"github.com/rlkit/ratelimit/redislimit","Test":"TestProofB"}
{"Action":"output","Package":"github.com/rlkit/ratelimit/redislimit","Test":"TestProofB","Output":"--- FAIL: TestProofB (0.01s)\n"}
{"Action":"fail","Package":"github.com/rlkit/ratelimit/redislimit","Test":"TestProofB"}
{"Action":"fail","Package":"github.com/rlkit/ratelimit/redislimit"}
not json at all
{"ImportPath":"github.com/rlkit/ratelimit/x","Action":"build-output","Output":"x.go:1: syntax error\n"}
`
	var out bytes.Buffer
	st, err := ReadEvents(strings.NewReader(stream), &out)
	if err != nil {
		t.Fatalf("ReadEvents: %v", err)
	}
	wantOut := "=== RUN   TestProofA\n--- FAIL: TestProofB (0.01s)\nnot json at all\nx.go:1: syntax error\n"
	if out.String() != wantOut {
		t.Errorf("output =\n%q\nwant\n%q", out.String(), wantOut)
	}
	if got := st.Packages["TestProofA"]; !slices.Equal(got, []string{"github.com/rlkit/ratelimit", "github.com/rlkit/ratelimit/redislimit"}) {
		t.Errorf("Packages[TestProofA] = %q", got)
	}
	if got := st.Packages["TestProofA/sub"]; !slices.Equal(got, []string{"github.com/rlkit/ratelimit"}) {
		t.Errorf("Packages[TestProofA/sub] = %q", got)
	}
	wantFailed := []string{"github.com/rlkit/ratelimit/redislimit TestProofB", "github.com/rlkit/ratelimit/redislimit"}
	if !slices.Equal(st.Failed, wantFailed) {
		t.Errorf("Failed = %q, want %q", st.Failed, wantFailed)
	}
	for _, c := range [][2]string{{"github.com/rlkit/ratelimit", "."}, {"github.com/rlkit/ratelimit/redislimit", "./redislimit"},
		{"github.com/rlkit/ratelimitx", "github.com/rlkit/ratelimitx"}} {
		if got := RelPackage(c[0]); got != c[1] {
			t.Errorf("RelPackage(%q) = %q, want %q", c[0], got, c[1])
		}
	}
}

func TestTestCommand(t *testing.T) {
	o := RunOptions{Root: "/repo", OutDir: "/tmp/out", Long: true, Seed: "9", Timeout: "60m"}
	args := strings.Join(TestArgs(o), " ")
	if want := "test -json -count=1 -p=1 -timeout=60m -run ^TestProof -v ./... ./redislimit/..."; args != want {
		t.Errorf("TestArgs = %q, want %q", args, want)
	}
	if strings.Contains(args, "-race") {
		t.Errorf("TestArgs has -race: %q", args)
	}
	env := TestEnv([]string{"PATH=/bin", "GOFLAGS=-race", "GOWORK=off", "RLKIT_RELIABILITY_LONG=0", "HOME=/h"}, o)
	want := []string{"PATH=/bin", "HOME=/h", "GOWORK=/repo/go.work", "RLKIT_RELIABILITY_OUT=/tmp/out",
		"RLKIT_RELIABILITY_LONG=1", "RLKIT_RELIABILITY_SEED=9"}
	if !slices.Equal(env, want) {
		t.Errorf("TestEnv = %q, want %q", env, want)
	}
	env = TestEnv([]string{"RLKIT_RELIABILITY_SEED=3"}, RunOptions{Root: "/repo", OutDir: "/o"})
	if want := []string{"GOWORK=/repo/go.work", "RLKIT_RELIABILITY_OUT=/o"}; !slices.Equal(env, want) {
		t.Errorf("TestEnv without -long and -seed = %q, want %q", env, want)
	}
}

func TestFindRoot(t *testing.T) {
	root := t.TempDir()
	deep := filepath.Join(root, "redislimit", "examples")
	if err := os.MkdirAll(deep, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "go.mod"), []byte("module github.com/rlkit/ratelimit\n\ngo 1.22\n"), 0o644)
	os.WriteFile(filepath.Join(root, "go.work"), []byte("go 1.24\n"), 0o644)
	os.WriteFile(filepath.Join(root, "redislimit", "go.mod"), []byte("module github.com/rlkit/ratelimit/redislimit\n"), 0o644)
	for _, dir := range []string{root, deep} {
		got, err := FindRoot(dir)
		if err != nil || got != root {
			t.Errorf("FindRoot(%s) = %q, %v; want %q", dir, got, err, root)
		}
	}
	if got, err := FindRoot(t.TempDir()); err == nil {
		t.Errorf("FindRoot(empty dir) = %q, want an error", got)
	}
}

func TestCopyVisualisations(t *testing.T) {
	results, docs := t.TempDir(), t.TempDir()
	report := filepath.Join(docs, "reliability.md")
	os.MkdirAll(filepath.Join(docs, "reliability"), 0o755)
	os.WriteFile(filepath.Join(docs, "reliability", "stale.html"), []byte("old"), 0o644)
	os.WriteFile(filepath.Join(results, "a_b.html"), []byte("<html>a</html>"), 0o644)
	os.WriteFile(filepath.Join(results, "orphan.html"), []byte("x"), 0o644)
	ss := []Scenario{{Result: reliability.Result{Scenario: "a b"}}, {Result: reliability.Result{Scenario: "c"}}}
	if err := copyVisualisations(results, report, ss); err != nil {
		t.Fatalf("copyVisualisations: %v", err)
	}
	if ss[0].HTML != "reliability/a_b.html" || ss[1].HTML != "" {
		t.Errorf("links = %q, %q; want reliability/a_b.html and none", ss[0].HTML, ss[1].HTML)
	}
	b, err := os.ReadFile(filepath.Join(docs, "reliability", "a_b.html"))
	if err != nil || string(b) != "<html>a</html>" {
		t.Errorf("copied visualisation = %q, %v", b, err)
	}
	for _, gone := range []string{"stale.html", "orphan.html"} {
		if _, err := os.Stat(filepath.Join(docs, "reliability", gone)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is in the visualisation directory: %v", gone, err)
		}
	}
}

func TestRunRefusesBadFlags(t *testing.T) {
	for _, cfg := range []Config{
		{Seed: "x", Timeout: "1m"},
		{Timeout: "soon"},
		{Repo: t.TempDir(), Timeout: "1m"},
		{Readme: filepath.Join(t.TempDir(), "missing.md"), Timeout: "1m"},
	} {
		if err := run(cfg); err == nil || !strings.HasPrefix(err.Error(), "ratelimit: ") {
			t.Errorf("run(%+v) = %v, want a ratelimit: error", cfg, err)
		}
	}
}

func TestVersions(t *testing.T) {
	if got := GoVersion("go version go1.26.8 linux/amd64"); got != "go1.26.8" {
		t.Errorf("GoVersion = %q", got)
	}
	line := "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64 build=ae4d7c971a948f0"
	if got := RedisVersion(line); got != "redis-server 7.0.15" {
		t.Errorf("RedisVersion = %q", got)
	}
	for _, other := range []string{"redis-server not available (exec: not found)", "go not available"} {
		if RedisVersion(other) != other || GoVersion(other) != other {
			t.Errorf("an unparsed line %q was changed", other)
		}
	}
}
