package main

import (
	"context"
	"testing"
	"time"
)

// TestRun plays the example end to end, so that go test ./... keeps it
// working.
func TestRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := run(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestSixteenWorkers runs 16 workers that stop at their first Wait error:
// none dies, and every job is done.
func TestSixteenWorkers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := runWith(ctx, 16, 48); err != nil {
		t.Fatal(err)
	}
}
