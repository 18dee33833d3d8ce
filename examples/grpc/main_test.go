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
// testdata/output.golden, which the README shows: three calls of a free
// key counting down to a ResourceExhausted denial with RetryInfo and
// QuotaFailure, the pro key's own bucket, the free key admitted again once
// the announced delay has passed; then a client paced by a local limiter
// that refuses its third call without sending it, and a client that paces
// by the server's metadata and does not send a call until the announced
// reset. go test
// -run TestOutput -update rewrites the file; the facts the README states
// are checked on their own as well, so that an update cannot lose them
// unseen.
func TestOutput(t *testing.T) {
	var out strings.Builder
	require.NoError(t, run(context.Background(), &out))
	for _, want := range []string{
		"x-ratelimit-remaining: 1\n",
		"retry-after: 30\n",
		"Code: ResourceExhausted\n",
		`Message: rate limit "per-key" exceeded, retry in 30 s`,
		`"@type": "type.googleapis.com/google.rpc.RetryInfo"`,
		`"retryDelay": "30s"`,
		`"@type": "type.googleapis.com/google.rpc.QuotaFailure"`,
		`"subject": "limit:per-key"`,
		"call 3: DeadlineExceeded, not sent: the server's pause outlasts the deadline",
		"the server served 2 of key-carol's calls",
		"(pause hook: the server asks to hold calls back for 1m0s after /demo.Greeter/Hello)\ncall 2: OK",
		"call 4: DeadlineExceeded, not sent: the server's pause outlasts the deadline",
		"call 5: OK",
		"the server served 3 of key-dave's calls",
	} {
		assert.Contains(t, out.String(), want)
	}
	golden := filepath.Join("testdata", "output.golden")
	if *update {
		require.NoError(t, os.WriteFile(golden, []byte(out.String()), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err)
	assert.Equal(t, string(want), out.String())
}
