package redislimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/redistest"
)

func TestReplicaAckConfig(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"})
	t.Cleanup(func() { _ = c.Close() })
	p := ratelimit.FixedWindowPolicy(10, time.Second)
	for _, tc := range []struct {
		opts []Option
		want string
	}{
		{[]Option{WithReplicaAck(0, 10*time.Millisecond)}, "redislimit.WithReplicaAck replicas must be at least 1, got 0"},
		{[]Option{WithReplicaAck(-1, 10*time.Millisecond)}, "redislimit.WithReplicaAck replicas must be at least 1, got -1"},
		{[]Option{WithReplicaAck(1, 0)}, "redislimit.WithReplicaAck timeout must be positive, got 0s"},
		{[]Option{WithReplicaAck(1, -time.Second)}, "redislimit.WithReplicaAck timeout must be positive"},
		{[]Option{WithReplicaAck(1, defaultTimeout)}, "must be shorter than WithTimeout (100ms)"},
		{[]Option{WithReplicaAck(1, math.MaxInt64)}, "WithReplicaAck timeout (2562047h47m16.854775807s) must be shorter than WithTimeout (100ms)"},
		{[]Option{WithTimeout(20 * time.Millisecond), WithReplicaAck(1, 19500*time.Microsecond)}, "(19.5ms, in whole milliseconds for WAIT: 20ms) must be shorter than WithTimeout (20ms)"},
	} {
		_, err := New(c, p, tc.opts...)
		if !errors.Is(err, ratelimit.ErrInvalidConfig) || !strings.Contains(err.Error(), tc.want) || !strings.HasPrefix(err.Error(), "ratelimit: invalid configuration: ") {
			t.Errorf("New(%d options) = %v, want ErrInvalidConfig saying %q", len(tc.opts), err, tc.want)
		}
	}
	if _, err := New(c, p, WithReplicaAck(1, 99*time.Millisecond)); err != nil {
		t.Errorf("New with WithReplicaAck(1, 99ms) = %v, want nil", err)
	}
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	t.Cleanup(func() { _ = ring.Close() })
	if _, err := New(ring, p, WithReplicaAck(1, 10*time.Millisecond)); !errors.Is(err, ratelimit.ErrInvalidConfig) || !strings.Contains(err.Error(), "Ring") {
		t.Errorf("New(Ring, WithReplicaAck) = %v, want ErrInvalidConfig naming the Ring", err)
	}
}

// startReplicated starts a master and one replica of it, and returns once
// the replica acknowledges a write of the master (SET and WAIT on one
// connection). INFO showing the replica online is not enough: after a
// diskless sync, Redis 7.0 streams to the replica only from its first
// REPLCONF ACK, and an ACK that comes before the master has reaped its
// RDB child is spent without starting the stream; the next comes a second
// later, and until then every WAIT falls short (TestLeaseReplicaAck, with
// WAIT's 300 ms, failed so on a loaded machine).
func startReplicated(t testing.TB) (master, replica *redistest.Server) {
	t.Helper()
	master = redistest.Start(t, redistest.WithArgs("--repl-diskless-sync-delay", "0"))
	host, port, _ := net.SplitHostPort(master.Addr())
	replica = redistest.Start(t, redistest.WithArgs("--replicaof", host, port))
	c := redis.NewClient(&redis.Options{Addr: master.Addr(), ContextTimeoutEnabled: true})
	defer c.Close()
	key := uniquePrefix(t) + "ready"
	deadline := time.Now().Add(30 * time.Second) // a generous bound: the sync takes milliseconds
	for {
		pipe := c.Pipeline()
		pipe.Set(bg(), key, "1", 0)
		wait := pipe.Do(bg(), "WAIT", 1, 100)
		_, err := pipe.Exec(bg())
		if n, werr := wait.Int(); err == nil && werr == nil && n == 1 {
			c.Del(bg(), key)
			return master, replica
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica does not acknowledge the master's writes after 30s: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// stop sends SIGSTOP to s until t ends or resume is called.
func stop(t testing.TB, s *redistest.Server) (resume func()) {
	t.Helper()
	pid := s.PID()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	resume = func() { once.Do(func() { _ = syscall.Kill(pid, syscall.SIGCONT) }) }
	t.Cleanup(resume)
	return resume
}

// TestReplicaAck runs decisions on a master with one replica under
// WithReplicaAck(1, 2s): exact while the replica acknowledges (and the
// replica holds the state), the failure policy with ErrNotReplicated for
// admissions while it is stopped (denials, peeks and refunds pass
// through), and exact again once it resumes.
func TestReplicaAck(t *testing.T) {
	t.Parallel()
	master, replica := startReplicated(t)
	c := redis.NewClient(&redis.Options{Addr: master.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	const limit = 10
	p := ratelimit.FixedWindowPolicy(limit, time.Hour)
	prefix := uniquePrefix(t)
	// 2 s for the replica: far above what a loaded machine takes (tens of
	// ms). (CI once saw an acknowledgement take more than 500 ms: the
	// first after the initial sync, which startReplicated now waits for.)
	l, err := New(c, p, WithPrefix(prefix), WithFailurePolicy(FailClosed), WithDenyCache(0), WithBreaker(0),
		WithTimeout(5*time.Second), WithReplicaAck(1, 2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range limit {
		if d, err := l.AllowN(ctx, "a", 1); err != nil || !d.Allowed || d.Remaining != limit-1-i {
			t.Fatalf("AllowN #%d = %+v, %v; want admitted, Remaining %d", i+1, d, err, limit-1-i)
		}
	}
	if d, err := l.AllowN(ctx, "a", 1); err != nil || d.Allowed {
		t.Fatalf("AllowN beyond the limit = %+v, %v; want a denial", d, err)
	}
	// The replica holds every admission.
	rc := redis.NewClient(&redis.Options{Addr: replica.Addr()})
	t.Cleanup(func() { _ = rc.Close() })
	rl, err := New(rc, p, WithPrefix(prefix), WithDenyCache(0))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := rl.Peek(ctx, "a", 0); err != nil || d.Remaining != 0 {
		t.Fatalf("Peek on the replica = %+v, %v; want Remaining 0: every admission acknowledged", d, err)
	}

	// Concurrent callers share pipelines, each ending with WAIT.
	var wg sync.WaitGroup
	var admitted atomic.Int64
	for i := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := l.AllowN(ctx, "b", 1)
			if err != nil {
				t.Errorf("AllowN #%d = %v", i, err)
			}
			if d.Allowed {
				admitted.Add(1)
			}
		}()
	}
	wg.Wait()
	if admitted.Load() != limit {
		t.Fatalf("32 concurrent calls admitted %d, want %d", admitted.Load(), limit)
	}

	resume := stop(t, replica)
	start := time.Now()
	d, err := l.AllowN(ctx, "c", 1)
	el := time.Since(start)
	if !errors.Is(err, ErrNotReplicated) || !errors.Is(err, ErrUnavailable) || d.Allowed || d.RetryAfter != FailClosedRetryAfter {
		t.Fatalf("AllowN with the replica stopped = %+v, %v; want FailClosed's denial, ErrNotReplicated and ErrUnavailable", d, err)
	}
	if !strings.Contains(err.Error(), "acknowledged by 0 of 1 replicas within 2s") {
		t.Fatalf("error = %q, want it to say how many replicas acknowledged", err)
	}
	if el < 2*time.Second {
		t.Fatalf("AllowN returned after %v, before WAIT's 2s", el)
	}
	// The event was charged on the master (under-admission, never over).
	if d, err := l.Peek(ctx, "c", 0); err != nil || d.Remaining != limit-1 {
		t.Fatalf("Peek with the replica stopped = %+v, %v; want Remaining %d and no error", d, err, limit-1)
	}
	if d, err := l.AllowN(ctx, "a", 1); err != nil || d.Allowed {
		t.Fatalf("denied AllowN with the replica stopped = %+v, %v; want the denial, no error", d, err)
	}
	if err := l.RefundN(ctx, "c", 1); err != nil {
		t.Fatalf("RefundN with the replica stopped = %v, want nil", err)
	}
	// FailOpen admits by policy, still saying why.
	lo, err := New(c, p, WithPrefix(prefix), WithDenyCache(0), WithBreaker(0), WithTimeout(5*time.Second), WithReplicaAck(1, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	if d, err := lo.AllowN(ctx, "d", 1); !errors.Is(err, ErrNotReplicated) || !d.Allowed {
		t.Fatalf("FailOpen AllowN with the replica stopped = %+v, %v; want admitted by the policy, ErrNotReplicated", d, err)
	}

	resume()
	deadline := time.Now().Add(10 * time.Second)
	for {
		d, err := l.AllowN(ctx, "e", 1)
		if err == nil && d.Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("AllowN 10s after the replica resumed = %+v, %v", d, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReplicaAckCluster runs WithReplicaAck(1, 20ms) on a 3-master
// Cluster without replicas: WAIT 1 can only time out, so every admission
// gets ErrNotReplicated, and INFO commandstats shows each WAIT ran on the
// master that ran the script (the one holding the key), none elsewhere.
func TestReplicaAckCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	prefix := uniquePrefix(t)
	l, err := New(c, ratelimit.FixedWindowPolicy(10, time.Hour), WithPrefix(prefix), WithFailurePolicy(FailClosed),
		WithDenyCache(0), WithBreaker(0), WithTimeout(5*time.Second), WithReplicaAck(1, 20*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	waits := func() map[string]int {
		m := map[string]int{}
		for _, a := range cl.Addrs() {
			m[a] = cmdCalls(t, a, "wait")
		}
		return m
	}
	for i := range 6 {
		key := "user" + strconv.Itoa(i)
		node, err := c.MasterForKey(ctx, l.Key(key))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Peek(ctx, key, 0); err != nil { // loads the script: no NOSCRIPT round below
			t.Fatal(err)
		}
		before := waits()
		d, err := l.AllowN(ctx, key, 1)
		if !errors.Is(err, ErrNotReplicated) || d.Allowed {
			t.Fatalf("AllowN(%s) = %+v, %v; want FailClosed's denial and ErrNotReplicated", key, d, err)
		}
		after := waits()
		for _, a := range cl.Addrs() {
			want := 0
			if a == node.Options().Addr {
				want = 1
			}
			if got := after[a] - before[a]; got != want {
				t.Fatalf("AllowN(%s), key on %s: %d WAITs on %s, want %d", key, node.Options().Addr, got, a, want)
			}
		}
		if d, err := l.Peek(ctx, key, 0); err != nil || d.Remaining != 9 {
			t.Fatalf("Peek(%s) = %+v, %v; want Remaining 9 (charged on its master)", key, d, err)
		}
	}
	// Concurrent calls over all three masters: grouped per master, each
	// group's WAIT on its own master.
	var wg sync.WaitGroup
	var notRepl atomic.Int64
	for i := range 30 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := l.AllowN(ctx, fmt.Sprintf("many%d", i), 1); errors.Is(err, ErrNotReplicated) {
				notRepl.Add(1)
			}
		}()
	}
	wg.Wait()
	if notRepl.Load() != 30 {
		t.Fatalf("%d of 30 concurrent calls got ErrNotReplicated, want all", notRepl.Load())
	}
}

// BenchmarkReplicaAck measures the cost of WithReplicaAck(1, 50ms) on a
// loopback master with one replica: decisions without it ("none") and
// with it ("ack"), one caller (latency per decision) and 64 goroutines
// (decisions/s), the token bucket with a limit that always admits.
func BenchmarkReplicaAck(b *testing.B) {
	master, _ := startReplicated(b)
	c := redis.NewClient(&redis.Options{Addr: master.Addr(), ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = c.Close() })
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "user" + strconv.Itoa(i)
	}
	p := benchPolicies()[0]
	for _, mode := range []struct {
		name string
		opts []Option
	}{
		{"none", nil},
		{"ack", []Option{WithReplicaAck(1, 50*time.Millisecond)}},
	} {
		l := mustNew(b, c, p, append([]Option{WithPrefix(uniquePrefix(b)), WithTimeout(time.Second), WithBreaker(0)}, mode.opts...)...)
		b.Run(mode.name+"/serial", func(b *testing.B) {
			ctx := bg()
			i, unacked := 0, 0
			for b.Loop() {
				if _, err := l.AllowN(ctx, keys[i%len(keys)], 1); errors.Is(err, ErrNotReplicated) {
					unacked++ // the replica was late: a loaded machine
				} else if err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(unacked)/float64(b.N), "unacked/op")
		})
		b.Run(mode.name+"/parallel", func(b *testing.B) {
			var next, unacked, errs atomic.Int64
			var first atomic.Value
			b.SetParallelism(max(benchWorkers/runtimeGOMAXPROCS(), 1))
			b.RunParallel(func(pb *testing.PB) {
				ctx := bg()
				i := int(next.Add(7919))
				for pb.Next() {
					_, err := l.AllowN(ctx, keys[i%len(keys)], 1)
					if errors.Is(err, ErrNotReplicated) {
						unacked.Add(1)
					} else if err != nil && errs.Add(1) == 1 {
						first.Store(err)
					}
					i++
				}
			})
			if n := errs.Load(); n > 0 {
				b.Fatalf("%d errors, first: %v", n, first.Load())
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
			b.ReportMetric(float64(unacked.Load())/float64(b.N), "unacked/op")
		})
	}
}

// TestReplicaAckClusterReplicas runs WithReplicaAck(1, 2s) on a Cluster
// of 3 masters with one replica each: admissions on every master are
// acknowledged; with one master's replica stopped, admissions on that
// master get ErrNotReplicated while those on the other masters are still
// acknowledged, in the same pipelines: each master's WAIT counts its own
// replicas.
func TestReplicaAckClusterReplicas(t *testing.T) {
	t.Parallel()
	cl := redistest.StartClusterWithReplicas(t, 3, 1)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	l, err := New(c, ratelimit.FixedWindowPolicy(100, time.Hour), WithPrefix(uniquePrefix(t)), WithFailurePolicy(FailClosed),
		WithDenyCache(0), WithBreaker(0), WithTimeout(5*time.Second), WithReplicaAck(1, 2*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	// Keys and the master of each.
	masterOf := map[string]string{}
	var keys []string
	for i := range 30 {
		k := "user" + strconv.Itoa(i)
		m, err := cl.MasterOf(l.Key(k))
		if err != nil {
			t.Fatal(err)
		}
		masterOf[k] = m.Addr()
		keys = append(keys, k)
	}
	allow := func() (acked, notRepl map[string]int) {
		acked, notRepl = map[string]int{}, map[string]int{}
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, k := range keys {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, err := l.AllowN(ctx, k, 1)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err == nil && d.Allowed:
					acked[masterOf[k]]++
				case errors.Is(err, ErrNotReplicated):
					notRepl[masterOf[k]]++
				default:
					t.Errorf("AllowN(%s) = %+v, %v", k, d, err)
				}
			}()
		}
		wg.Wait()
		return acked, notRepl
	}
	if acked, notRepl := allow(); len(notRepl) != 0 || len(acked) != 3 {
		t.Fatalf("all replicas up: acknowledged per master %v, not replicated %v; want every master acknowledged", acked, notRepl)
	}
	victim, err := cl.MasterOf(l.Key(keys[0]))
	if err != nil {
		t.Fatal(err)
	}
	reps, err := cl.ReplicasOf(victim)
	if err != nil || len(reps) != 1 {
		t.Fatalf("ReplicasOf = %v, %v; want one", reps, err)
	}
	resume := stop(t, reps[0])
	acked, notRepl := allow()
	resume()
	if notRepl[victim.Addr()] == 0 || acked[victim.Addr()] != 0 || len(notRepl) != 1 || len(acked) != 2 {
		t.Fatalf("replica of %s stopped: acknowledged per master %v, not replicated %v; want only %s's not replicated", victim.Addr(), acked, notRepl, victim.Addr())
	}
}
