package overloadsim

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run when a goroutine started by the tests outlives them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
