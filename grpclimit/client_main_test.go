package grpclimit

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run when a goroutine started by the tests outlives
// them. (Client-side stand-in: if the server side brings its own TestMain,
// this file goes.)
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
