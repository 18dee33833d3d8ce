package benchmarks

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run when a goroutine started by the tests outlives them,
// and removes the servers the Envoy tests built (envoy_servers_test.go).
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(cleanupMain{m})
}

// cleanupMain runs the tests, then removes what they left for the run.
type cleanupMain struct{ m *testing.M }

func (c cleanupMain) Run() int {
	defer removeRLSBins()
	return c.m.Run()
}
