package lincheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/rlkit/ratelimit/internal/testkit/reliability"
)

// Result is the outcome of [Check].
type Result struct {
	Verdict   porcupine.CheckResult
	Ops       int           // operations checked
	Histories int           // partitions (keys) checked separately
	Elapsed   time.Duration // time porcupine took
	File      string        // the visualisation, written unless Verdict is Ok
}

// Linearizable reports whether the history was found linearizable.
func (r Result) Linearizable() bool { return r.Verdict == porcupine.Ok }

// VerdictString names the verdict: "linearizable", "not linearizable"
// or "unknown (timed out)".
func (r Result) VerdictString() string {
	switch r.Verdict {
	case porcupine.Ok:
		return "linearizable"
	case porcupine.Illegal:
		return "not linearizable"
	}
	return "unknown (timed out)"
}

// Check checks ops against m with porcupine.CheckOperationsVerbose, giving
// up after timeout (Verdict Unknown). Unless the history is linearizable,
// it writes porcupine's visualisation to <scenario>.html in tb.TempDir()
// and, when RLKIT_RELIABILITY_OUT is set, there too, and logs the paths.
// It also writes the history there as <scenario>.history (the operations
// as a JSON array, for [Recorder.Add] to load again; not .json, which
// names the scenario's reliability.Result in the same directory). It fails tb only if these cannot be
// written; the caller asserts the verdict.
func Check(tb testing.TB, scenario string, m porcupine.Model, ops []Op, timeout time.Duration) Result {
	tb.Helper()
	history := Operations(ops)
	keys := map[string]bool{}
	for _, op := range ops {
		keys[op.Input.Key] = true
	}
	start := time.Now()
	verdict, info := porcupine.CheckOperationsVerbose(m, history, timeout)
	r := Result{Verdict: verdict, Ops: len(ops), Histories: len(keys), Elapsed: time.Since(start)}
	tb.Logf("lincheck %s: %d operations, %d histories: %s in %v", scenario, r.Ops, r.Histories, r.VerdictString(), r.Elapsed.Round(time.Millisecond))
	if verdict == porcupine.Ok {
		return r
	}
	var html bytes.Buffer
	if err := porcupine.Visualize(m, info, &html); err != nil {
		tb.Fatalf("lincheck: rendering the visualisation: %v", err)
	}
	b, err := json.Marshal(ops)
	if err != nil {
		tb.Fatalf("lincheck: %v", err)
	}
	dirs := []string{tb.TempDir()}
	if out := os.Getenv(reliability.EnvOut); out != "" {
		dirs = append(dirs, out)
	}
	for _, dir := range dirs {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			tb.Fatalf("lincheck: %v", err)
		}
		path := filepath.Join(dir, reliability.FileName(scenario, ".html"))
		if err := os.WriteFile(path, html.Bytes(), 0o644); err != nil {
			tb.Fatalf("lincheck: writing the visualisation: %v", err)
		}
		if r.File == "" {
			r.File = path
		}
		// Not .json: reliability.Record writes <scenario>.json there.
		hist := filepath.Join(dir, reliability.FileName(scenario, ".history"))
		if err := os.WriteFile(hist, b, 0o644); err != nil {
			tb.Fatalf("lincheck: writing the history: %v", err)
		}
		tb.Logf("lincheck %s: visualisation in %s, history (JSON operations) in %s", scenario, path, hist)
	}
	return r
}

// Stats sums the results of the checks of one proof (one per algorithm,
// say) for its record. Add is safe for concurrent use; read the fields
// once every Add has returned.
type Stats struct {
	mu        sync.Mutex
	Ops       int      // operations checked
	Histories int      // histories (partitions) checked
	Notes     []string // one line per check
}

// Add counts r, the check of name.
func (s *Stats) Add(name string, r Result) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.Ops += r.Ops
	s.Histories += r.Histories
	s.Notes = append(s.Notes, fmt.Sprintf("%s: %d ops in %d histories, %s, checked in %v",
		name, r.Ops, r.Histories, r.VerdictString(), r.Elapsed.Round(time.Millisecond)))
}

// Require is Check giving up after a minute (ten minutes in the long runs,
// reliability.Long), and fails tb unless the history is linearizable,
// naming the visualisation.
func Require(tb testing.TB, scenario string, m porcupine.Model, ops []Op) Result {
	tb.Helper()
	r := Check(tb, scenario, m, ops, reliability.Pick(60*time.Second, 10*time.Minute))
	if !r.Linearizable() {
		tb.Fatalf("%s: %d operations are %s; visualisation: %s", scenario, r.Ops, r.VerdictString(), r.File)
	}
	return r
}
