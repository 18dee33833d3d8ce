package redislimit

import (
	"log/slog"
	"os"
	"testing"
)

// TestMain silences the default logger: the tests that make Redis fail
// would otherwise fill the output with error reports. Tests that check the
// reports give their limiter a logger of their own.
func TestMain(m *testing.M) {
	slog.SetDefault(slog.New(slog.DiscardHandler))
	os.Exit(m.Run())
}
