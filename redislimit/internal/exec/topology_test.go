package exec

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit/internal/testkit/redistest"
)

// TestTopologySuspect checks which failures make a Cluster client reload
// its topology: no answer, the open breaker, and the error replies of a
// cluster in reconfiguration, but not other error replies (a script's) nor the limiter's own queue.
func TestTopologySuspect(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr()})
	t.Cleanup(func() { _ = c.Close() })
	reply := func(text string) error {
		return c.Eval(context.Background(), "return redis.error_reply(ARGV[1])", nil, text).Err()
	}
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 50 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = dead.Close() })
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{dead.Ping(context.Background()).Err(), true},
		{&timeoutError{time.Second}, true},
		{&breakerError{}, true},
		{context.DeadlineExceeded, true},
		{reply("CLUSTERDOWN The cluster is down"), true},
		{reply("TRYAGAIN Multiple keys request during rehashing of slot"), true},
		{reply("MASTERDOWN Link with MASTER is down"), true},
		{reply("LOADING Redis is loading the dataset in memory"), true},
		{reply("READONLY You can't write against a read only replica."), true},
		{reply("ERR user_script:1: boom"), false},
		{reply("NOSCRIPT No matching script"), false},
		{errOverloaded, false},
	} {
		if got := topologySuspect(tc.err); got != tc.want {
			t.Errorf("topologySuspect(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
