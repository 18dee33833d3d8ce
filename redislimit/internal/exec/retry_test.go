package exec

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// replyError is an error reply as go-redis returns one.
type replyError string

func (e replyError) Error() string { return string(e) }
func (replyError) RedisError()     {}

// TestUnexecutedClassification lists which errors the limiter retries
// (they prove the script did not run) and which it never retries (the
// script may have run).
func TestUnexecutedClassification(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}, true},
		{fmt.Errorf("wrapped: %w", &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}), true},
		{redis.ErrPoolTimeout, true},
		{replyError("LOADING Redis is loading the dataset in memory"), true},
		{replyError("READONLY You can't write against a read only replica. script: 544e, on @user_script:310."), true},
		{replyError("MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'."), true},
		{replyError("CLUSTERDOWN The cluster is down"), true},
		{replyError("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{replyError("NOREPLICAS Not enough good replicas to write."), true},
		{replyError("ERR max number of clients reached"), true},
		{replyError("MOVED 3999 127.0.0.1:6381"), true},
		{replyError("ASK 3999 127.0.0.1:6381"), true},
		{replyError("ERR Error running script: user_script:1: oops"), false},
		{replyError("OOM command not allowed when used memory > 'maxmemory'."), false},
		{replyError("BUSY Redis is busy running a script."), false},
		{io.EOF, false},
		{io.ErrUnexpectedEOF, false},
		{&net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}, false},
		{&net.OpError{Op: "write", Net: "tcp", Err: syscall.EPIPE}, false},
		{context.DeadlineExceeded, false},
		{os.ErrDeadlineExceeded, false},
		{errors.New("READONLY but not a reply"), false},
	} {
		if got := unexecuted(tc.err); got != tc.want {
			t.Errorf("unexecuted(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// TestUnexecutedNilAllocatesNothing: the batcher asks unexecuted about
// every call's error, nil for nearly all of them; its errors.As targets
// escape to the heap, so it cost every successful decision 2 allocations
// before it returned early on nil.
func TestUnexecutedNilAllocatesNothing(t *testing.T) {
	var got bool
	allocs := testing.AllocsPerRun(100, func() { got = unexecuted(nil) })
	require.False(t, got)
	require.Zero(t, allocs, "allocations per unexecuted(nil)")
}
