// Package reliability carries the figures of the fault scenarios (linearizability checks,
// failovers, network faults) from the tests that measure them to the command that writes
// docs/reliability.md (go run ./cmd/reliability).
//
// Every scenario is a test. Run by `go test` as usual it is the short version, fit for CI, and it
// asserts its bounds. The command runs the same tests with RLKIT_RELIABILITY_OUT naming a
// directory, where [Record] leaves one JSON file per scenario, and with RLKIT_RELIABILITY_LONG=1
// for the long versions ([Long]).
package reliability

import (
	"encoding/json"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"testing"
	"time"
)

// Environment variables read by this package.
const (
	// EnvOut names the directory where Record writes results; unset, Record only logs.
	EnvOut = "RLKIT_RELIABILITY_OUT"
	// EnvLong, set to 1, asks for the long version of every scenario.
	EnvLong = "RLKIT_RELIABILITY_LONG"
	// EnvSeed, when set, is the seed of every randomised scenario (else each picks one and
	// records it).
	EnvSeed = "RLKIT_RELIABILITY_SEED"
)

// Result is what one scenario measured. Counts are events (the n of each call summed), not
// calls, unless the field says calls.
type Result struct {
	Group    string `json:"group"`    // "linearizability", "failover" or "network"
	Scenario string `json:"scenario"` // a short unique id: "sentinel-kill", "proxy-latency-10ms", ...
	Title    string `json:"title"`    // one line for the tables
	How      string `json:"how"`      // how it is run: topology, load, fault, durations, client settings
	Test     string `json:"test"`     // the test that measures it, for the reproduce command

	Limit    int64 `json:"limit,omitempty"`    // the key's limit over the whole run (it cannot refill)
	Calls    int64 `json:"calls"`              // decision calls made
	Admitted int64 `json:"admitted"`           // events admitted, by Redis or by the failure policy
	Over     int64 `json:"over"`               // events admitted beyond Limit (0 when exact)
	Failed   int64 `json:"failed"`             // calls that got an error and no decision from Redis
	Fallback int64 `json:"fallback"`           // calls decided by the failure policy (of Failed)
	Executed int64 `json:"executed,omitempty"` // for retry scenarios: times Redis ran the script

	Recovery time.Duration `json:"recovery_ns,omitempty"` // fault start until decisions are exact again
	P50      time.Duration `json:"p50_ns,omitempty"`      // decision latency during the fault
	P99      time.Duration `json:"p99_ns,omitempty"`
	Max      time.Duration `json:"max_ns,omitempty"`

	// Linearizability: operations checked, histories (partitions) and the verdict.
	Ops       int    `json:"ops,omitempty"`
	Histories int    `json:"histories,omitempty"`
	Verdict   string `json:"verdict,omitempty"` // "linearizable", "caught", "ok", "FAILED: ..."

	Seed  int64    `json:"seed,omitempty"`
	Long  bool     `json:"long"`
	Notes []string `json:"notes,omitempty"`
}

// Long reports whether the long versions were asked for (RLKIT_RELIABILITY_LONG=1).
func Long() bool { return os.Getenv(EnvLong) == "1" }

// Pick returns short in a normal run and long under RLKIT_RELIABILITY_LONG=1.
func Pick[T any](short, long T) T {
	if Long() {
		return long
	}
	return short
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// FileName is the name of a scenario's file with extension ext (such as
// ".json"): the scenario with every run of characters other than
// letters, digits, '.', '_' and '-' replaced by '_'. Record, lincheck's
// visualisations and cmd/reliability all name files this way.
func FileName(scenario, ext string) string {
	return unsafeName.ReplaceAllString(scenario, "_") + ext
}

// Record logs r on tb and, when RLKIT_RELIABILITY_OUT is set, writes it there as
// <scenario>.json. It fills Test from tb and Long from the environment.
func Record(tb testing.TB, r Result) {
	tb.Helper()
	if r.Test == "" {
		r.Test = tb.Name()
	}
	r.Long = Long()
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		tb.Fatalf("reliability: %v", err)
	}
	tb.Logf("reliability result:\n%s", b)
	dir := os.Getenv(EnvOut)
	if dir == "" {
		return
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		tb.Fatalf("reliability: %v", err)
	}
	name := filepath.Join(dir, FileName(r.Scenario, ".json"))
	if err := os.WriteFile(name, append(b, '\n'), 0o644); err != nil {
		tb.Fatalf("reliability: %v", err)
	}
}

// Percentiles returns the p50, p99 and maximum of ds (zeros when empty). It sorts ds.
func Percentiles(ds []time.Duration) (p50, p99, maxd time.Duration) {
	if len(ds) == 0 {
		return 0, 0, 0
	}
	slices.Sort(ds)
	at := func(q float64) time.Duration {
		i := int(q*float64(len(ds)) + 0.5)
		if i >= len(ds) {
			i = len(ds) - 1
		}
		return ds[i]
	}
	return at(0.50), at(0.99), ds[len(ds)-1]
}

// Seed returns the seed of a randomised scenario: RLKIT_RELIABILITY_SEED
// when set, else a random one, logged with the way to repeat it.
func Seed(tb testing.TB) uint64 {
	tb.Helper()
	if s := os.Getenv(EnvSeed); s != "" {
		v, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			tb.Fatalf("reliability: %s=%q: %v", EnvSeed, s, err)
		}
		return uint64(v)
	}
	v := rand.Int64()
	tb.Logf("seed %d (set %s=%d to repeat)", v, EnvSeed, v)
	return uint64(v)
}
