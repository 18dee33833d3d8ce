package redislimit

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/redistest"
)

// Failover on a Redis Cluster with replicas (issue 12). The scenarios
// (TestProofClusterFailover*) fail a master under the multi-process load of
// runLoad and record the figures; TestClusterFollowsFailover checks the
// mechanics in one process: calls fail only while the slot has no master,
// with the failure policy's decision, and the limiter finds the promoted
// replica by itself.

// failoverRecord is one call of the in-process load.
type failoverRecord struct {
	start, end int64 // Unix ns
	d          ratelimit.Decision
	err        error
}

// inProcessLoad calls AllowN(key, 1) from workers goroutines, pausing
// between calls, until stop is called; stop returns every call.
// lastFail returns the end of the last failed call so far (Unix ns, 0 for
// none).
func inProcessLoad(l *Limiter, key string, workers int, pause time.Duration) (stop func() []failoverRecord, lastFail func() int64) {
	var (
		mu   sync.Mutex
		recs []failoverRecord
		last atomic.Int64
		quit atomic.Bool
		wg   sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !quit.Load() {
				s := time.Now().UnixNano()
				d, err := l.AllowN(context.Background(), key, 1)
				r := failoverRecord{start: s, end: time.Now().UnixNano(), d: d, err: err}
				if err != nil {
					last.Store(max(last.Load(), r.end)) // a race between two failures loses a few µs at most
				}
				mu.Lock()
				recs = append(recs, r)
				mu.Unlock()
				time.Sleep(pause)
			}
		}()
	}
	stop = func() []failoverRecord {
		quit.Store(true)
		wg.Wait()
		return recs
	}
	return stop, last.Load
}

// checkFailClosed fails t unless err is a FailClosed limiter's answer to a
// Redis failure: an error wrapping ErrUnavailable and a denial with
// FailClosedRetryAfter.
func checkFailClosed(t *testing.T, d ratelimit.Decision, err error) {
	t.Helper()
	if !errors.Is(err, ErrUnavailable) {
		t.Errorf("failed call: %v, want an error wrapping ErrUnavailable", err)
	}
	if d.Allowed || d.RetryAfter != FailClosedRetryAfter {
		t.Errorf("failed call decided %+v, want FailClosed's denial with RetryAfter %v", d, FailClosedRetryAfter)
	}
}

// TestClusterFollowsFailover fails the master of a key's slot, by SIGKILL
// and then by CLUSTER FAILOVER (of another master), under an in-process
// load through a ClusterClient with default options: every failed call is
// FailClosed's denial with ErrUnavailable, and calls stop failing within a
// bound after the replica is promoted (a killed master does not answer
// MOVED: the client must reload the topology itself).
func TestClusterFollowsFailover(t *testing.T) {
	cl := redistest.StartClusterWithReplicas(t, 3, 1)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	// The limit cannot run out: every call goes to Redis.
	l := mustNew(t, c, ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Minute), 1<<20),
		WithTimeout(200*time.Millisecond), WithFailurePolicy(FailClosed), WithPrefix(uniquePrefix(t)))

	// recoverBy is how long after the promotion calls may still fail: the
	// breaker's cooldown (a probe) plus a reload of the topology, with a
	// margin for a loaded machine.
	recoverBy := DefaultBreakerCooldown + 2*time.Second

	var killedSlotMaster *redistest.Server
	for _, kill := range []bool{true, false} {
		name := "kill"
		if !kill {
			name = "manual"
		}
		t.Run(name, func(t *testing.T) {
			key := "follow-" + name
			// The manual failover must not hit the node that took over the killed one's slots.
			for i := 0; !kill; i++ {
				m, err := cl.MasterOf(l.Key(key))
				if err != nil {
					t.Fatal(err)
				}
				if m != killedSlotMaster {
					break
				}
				key = "follow-" + name + string(rune('a'+i))
			}
			rkey := l.Key(key)
			if d, err := l.AllowN(bg(), key, 1); err != nil || !d.Allowed {
				t.Fatalf("AllowN before the fault = %+v, %v", d, err)
			}
			stop, lastFailed := inProcessLoad(l, key, 16, time.Millisecond)
			time.Sleep(300 * time.Millisecond)
			faultAt := time.Now()
			var old *redistest.Server
			if kill {
				old = cl.KillMaster(t, rkey)
			} else {
				old, _ = cl.ManualFailover(t, rkey)
			}
			m := cl.WaitPromoted(t, rkey, old, 20*time.Second)
			promoted := time.Now()
			killedSlotMaster = m
			// Load on until no call has failed for 500 ms, or until
			// recoverBy has passed by more than that (then the check below
			// fails).
			for deadline := promoted.Add(recoverBy + time.Second); time.Now().Before(deadline); {
				if time.Since(time.Unix(0, max(lastFailed(), promoted.UnixNano()))) > 500*time.Millisecond {
					break
				}
				time.Sleep(20 * time.Millisecond)
			}
			recs := stop()

			var failed, after int
			var lastFail int64
			for _, r := range recs {
				if r.err == nil {
					continue
				}
				failed++
				checkFailClosed(t, r.d, r.err)
				lastFail = max(lastFail, r.end)
				if r.start > promoted.Add(recoverBy).UnixNano() {
					after++
				}
			}
			t.Logf("%s: promoted after %v; %d calls, %d failed, the last failure ended %v after the fault",
				name, promoted.Sub(faultAt), len(recs), failed, time.Duration(max(lastFail-faultAt.UnixNano(), 0)))
			if after > 0 {
				t.Errorf("%d calls started more than %v after the promotion failed, want none", after, recoverBy)
			}
			if d, err := l.AllowN(bg(), key, 1); err != nil || !d.Allowed {
				t.Errorf("AllowN after the failover = %+v, %v", d, err)
			}
		})
	}
}

// TestTopologySuspect checks which failures make a Cluster client reload
// its topology: no answer, the open breaker, and the error replies of a
// cluster in reconfiguration, but not other error replies (a script's).
func TestTopologySuspect(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	reply := func(text string) error {
		return c.Eval(bg(), "return redis.error_reply(ARGV[1])", nil, text).Err()
	}
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", DialTimeout: 50 * time.Millisecond, MaxRetries: -1})
	t.Cleanup(func() { _ = dead.Close() })
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{dead.Ping(bg()).Err(), true},
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
	} {
		if got := topologySuspect(tc.err); got != tc.want {
			t.Errorf("topologySuspect(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
