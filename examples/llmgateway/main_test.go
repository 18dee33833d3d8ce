package main

import "testing"

// TestRun plays the example end to end, so that go test ./... keeps it
// working.
func TestRun(t *testing.T) {
	if err := run(); err != nil {
		t.Fatal(err)
	}
}
