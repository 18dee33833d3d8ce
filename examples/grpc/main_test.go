package main

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite testdata/output.golden with the program's output")

// TestOutput runs the program and compares its output with
// testdata/output.golden, which the README shows: three calls of the free
// key counting down to a ResourceExhausted denial with RetryInfo and
// QuotaFailure, the pro key's own bucket, and the free key admitted again
// once the announced delay has passed. go test -run TestOutput -update
// rewrites the file.
func TestOutput(t *testing.T) {
	var out strings.Builder
	require.NoError(t, run(context.Background(), &out))
	golden := filepath.Join("testdata", "output.golden")
	if *update {
		require.NoError(t, os.WriteFile(golden, []byte(out.String()), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	assert.Equal(t, string(want), out.String())
}
