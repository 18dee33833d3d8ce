package main

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestRun plays the example end to end, briefly, so that go test ./...
// keeps it working. Its figures are real time on a shared machine, so it
// checks the shape of the report, not them: those are the synctest
// proofs' (the root's TestAdaptive... and overloadsim).
func TestRun(t *testing.T) {
	var out bytes.Buffer
	if err := run(&out, 500*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"unprotected: 40 workers", "adaptive: 40 workers", "critical served"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("the report lacks %q:\n%s", want, out.String())
		}
	}
}
