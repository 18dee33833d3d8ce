package main

import "testing"

// TestRun plays the example end to end (in memory: REDIS_URL is ignored), so that go test ./... keeps it
// working.
func TestRun(t *testing.T) {
	t.Setenv("REDIS_URL", "")
	if err := run(); err != nil {
		t.Fatal(err)
	}
}
