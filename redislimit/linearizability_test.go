package redislimit

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/rlkit/ratelimit/internal/testkit/lincheck"
	"github.com/rlkit/ratelimit/internal/testkit/redistest"
	"github.com/rlkit/ratelimit/internal/testkit/reliability"
	"github.com/stretchr/testify/require"
)

// The linearizability proofs of issue 12 on Redis: concurrent decisions
// of one or several limiters (goroutines, processes) sharing a Redis
// server or Cluster, with time passed to the scripts from a manual clock
// that moves only between phases (WithClock), checked
// with porcupine against the in-memory limiter of the same policy
// replayed (internal/testkit/lincheck). Durations are compared at the microsecond
// Redis keeps: the scripts work in whole microseconds and round
// RetryAfter and ResetAfter up (docs/redis.md, Time), which the differential and
// conformance suites already demand (roundDecision); every phase time is
// a whole microsecond.

// linStart is the limiter time of the first phase: whole microseconds.
var linStart = time.Date(2026, 11, 30, 15, 0, 0, 123456000, time.UTC)

// linPolicy returns the policy of algo used by the proofs: a limit a phase
// can exhaust, periods that phase steps partly or wholly refill, and a New
// York day for the quota.
func linPolicy(algo ratelimit.Algorithm) ratelimit.Policy {
	switch algo {
	case ratelimit.TokenBucketAlgorithm:
		return ratelimit.TokenBucketPolicy(ratelimit.Per(10, time.Second), 15)
	case ratelimit.LeakyBucketAlgorithm:
		return ratelimit.LeakyBucketPolicy(15, 40*time.Millisecond)
	case ratelimit.FixedWindowAlgorithm:
		return ratelimit.FixedWindowPolicy(15, time.Second)
	case ratelimit.SlidingLogAlgorithm:
		return ratelimit.SlidingLogPolicy(15, time.Second)
	case ratelimit.SlidingCounterAlgorithm:
		return ratelimit.SlidingCounterPolicy(15, time.Second)
	case ratelimit.QuotaAlgorithm:
		return ratelimit.QuotaPolicy(40, ratelimit.Calendar{Unit: ratelimit.Daily, Location: mustZone("America/New_York")})
	}
	panic(fmt.Sprint("no policy for ", algo))
}

// linLimiter returns a limiter of p on c that decides at clk's time, with
// the default options otherwise (the deny cache on).
func linLimiter(t testing.TB, c redis.UniversalClient, p ratelimit.Policy, prefix string, clk *fakeclock.Manual, opts ...Option) *Limiter {
	t.Helper()
	opts = append([]Option{WithClock(clk), WithPrefix(prefix), WithTimeout(10 * time.Second)}, opts...)
	return mustNew(t, c, p, opts...)
}

// linVerdict is the verdict to record: linearizable unless t failed.
func linVerdict(t *testing.T) string {
	if t.Failed() {
		return "FAILED: not linearizable or an error (see the test log)"
	}
	return "linearizable"
}

// linDo returns the operation runner of l.
func linDo(l *Limiter) func(lincheck.Input) (ratelimit.Decision, error) {
	ctx := context.Background()
	return func(in lincheck.Input) (ratelimit.Decision, error) {
		if in.Kind == lincheck.Peek {
			return l.Peek(ctx, in.Key, in.N)
		}
		return l.AllowN(ctx, in.Key, in.N)
	}
}

// requireLinearizable checks ops of p and fails t unless porcupine finds
// them linearizable (or any call failed), with the visualisation's path.
func requireLinearizable(t *testing.T, scenario string, p ratelimit.Policy, ops []lincheck.Op) lincheck.Result {
	t.Helper()
	for _, op := range ops {
		if op.Output.Err != "" {
			t.Fatalf("%s: %v(%q, %d) failed on a healthy server: %s", scenario, op.Input.Kind, op.Input.Key, op.Input.N, op.Output.Err)
		}
	}
	m, err := lincheck.NewModel(p, linStart, lincheck.WithPrecision(time.Microsecond))
	require.NoError(t, err)
	return lincheck.Require(t, scenario, m, ops)
}

// linWorkload is the load of one process.
func linWorkload(seed uint64, clients int, keys []string) lincheck.Workload {
	return lincheck.Workload{Clients: clients, PerPhase: reliability.Pick(2, 4), Keys: keys, MaxN: 3, Peeks: 10, Seed: seed}
}

var linKeys = []string{"alice", "bob"}

// TestProofLinearizableRedis: one Limiter on a single Redis node, many
// goroutines, each algorithm.
func TestProofLinearizableRedis(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	seed := reliability.Seed(t)
	clients, phases := reliability.Pick(32, 64), reliability.Pick(5, 30)
	var st lincheck.Stats
	for _, algo := range allAlgorithms {
		t.Run(algo.String(), func(t *testing.T) {
			p := linPolicy(algo)
			clk := fakeclock.NewManual(linStart)
			l := linLimiter(t, c, p, uniquePrefix(t), clk)
			w := linWorkload(seed+uint64(algo), clients, linKeys)
			var rec lincheck.Recorder
			for k, at := range lincheck.Schedule(seed, linStart, phases, p.WindowAt(linStart)) {
				clk.Set(at)
				w.Run(&rec, k, 0, at, linDo(l))
			}
			st.Add(algo.String(), requireLinearizable(t, "linearizability-redis-"+algo.String(), p, rec.Ops()))
		})
	}
	reliability.Record(t, reliability.Result{
		Group: "linearizability", Scenario: "linearizability-redis",
		Title: "Redis single node, every algorithm, concurrent goroutines",
		How: fmt.Sprintf("redis-server 7 on loopback; one redislimit.Limiter per algorithm (go-redis Client, batching and deny cache on) "+
			"deciding at a manual clock's time (WithClock); %d goroutines, "+
			"%d calls each per phase on %d keys (AllowN n=1..3, 10%% Peek), %d phases with seeded clock steps between them; "+
			"checked against the in-memory limiter replayed, durations at Redis's microsecond", clients, reliability.Pick(2, 4), len(linKeys), phases),
		Ops: st.Ops, Histories: st.Histories, Verdict: linVerdict(t), Seed: int64(seed), Notes: st.Notes,
	})
}

// TestProofLinearizableRedisCluster: one Limiter on a three-node Redis
// Cluster, keys in different slots, many goroutines, each algorithm.
func TestProofLinearizableRedisCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	seed := reliability.Seed(t)
	keys := []string{"alice", "bob", "carol", "dave", "erin", "frank"}
	clients, phases := reliability.Pick(32, 64), reliability.Pick(5, 30)
	var st lincheck.Stats
	for _, algo := range allAlgorithms {
		t.Run(algo.String(), func(t *testing.T) {
			p := linPolicy(algo)
			clk := fakeclock.NewManual(linStart)
			l := linLimiter(t, c, p, uniquePrefix(t), clk)
			nodes := map[string]bool{}
			for _, k := range keys {
				n, err := c.MasterForKey(context.Background(), l.Key(k))
				require.NoError(t, err)
				nodes[n.Options().Addr] = true
			}
			require.GreaterOrEqual(t, len(nodes), 2, "the keys must spread over several nodes")
			w := linWorkload(seed+uint64(algo), clients, keys)
			w.PerPhase *= 2
			var rec lincheck.Recorder
			for k, at := range lincheck.Schedule(seed, linStart, phases, p.WindowAt(linStart)) {
				clk.Set(at)
				w.Run(&rec, k, 0, at, linDo(l))
			}
			st.Add(fmt.Sprintf("%s (keys on %d nodes)", algo, len(nodes)),
				requireLinearizable(t, "linearizability-cluster-"+algo.String(), p, rec.Ops()))
		})
	}
	reliability.Record(t, reliability.Result{
		Group: "linearizability", Scenario: "linearizability-cluster",
		Title: "Redis Cluster (3 masters), every algorithm, keys in different slots",
		How: fmt.Sprintf("three redis-server 7 cluster nodes on loopback (no replicas), go-redis ClusterClient; one redislimit.Limiter "+
			"per algorithm (deny cache on) deciding at a manual clock's time; %d keys hashed to several nodes (one history each); %d goroutines, "+
			"%d calls each per phase (AllowN n=1..3, 10%% Peek), %d phases with seeded clock steps between them", len(keys), clients, 2*reliability.Pick(2, 4), phases),
		Ops: st.Ops, Histories: st.Histories, Verdict: linVerdict(t), Seed: int64(seed), Notes: st.Notes,
	})
}

// The multi-process proof: the test binary re-executed as workers
// (TestWorkerLinearizable), each a process with its own go-redis client
// and Limiter on the parent's server, driven phase by phase over stdin
// and stdout.

const linWorkerEnv = "RLKIT_LIN_WORKER"

// linSpec is what a worker is told when it starts.
type linSpec struct {
	Addr    string `json:"addr"`
	Prefix  string `json:"prefix"`
	Algo    int    `json:"algo"`
	Seed    uint64 `json:"seed"`
	First   int    `json:"first"` // the first client number of this worker
	Clients int    `json:"clients"`
	Keys    []string
}

// linPhase is one phase, sent to every worker as a line of JSON.
type linPhase struct {
	Phase int   `json:"phase"`
	T     int64 `json:"t"` // Unix ns
}

// linOpsPrefix marks a worker's line of results on stdout (the test
// framework writes there too).
const linOpsPrefix = "LINCHECK-OPS "

// TestWorkerLinearizable is a worker of TestProofLinearizableRedisProcesses:
// it skips unless started by it. It runs each phase read from stdin on its
// goroutines and writes the recorded operations back as one line, until
// stdin closes (so it also ends when the parent dies).
func TestWorkerLinearizable(t *testing.T) {
	env := os.Getenv(linWorkerEnv)
	if env == "" {
		t.Skip("a worker of TestProofLinearizableRedisProcesses")
	}
	var spec linSpec
	require.NoError(t, json.Unmarshal([]byte(env), &spec))
	c := redis.NewClient(&redis.Options{Addr: spec.Addr, ContextTimeoutEnabled: true})
	defer c.Close()
	p := linPolicy(ratelimit.Algorithm(spec.Algo))
	clk := fakeclock.NewManual(linStart)
	l := linLimiter(t, c, p, spec.Prefix, clk)
	w := linWorkload(spec.Seed, spec.Clients, spec.Keys)
	in := bufio.NewScanner(os.Stdin)
	for in.Scan() {
		var ph linPhase
		require.NoError(t, json.Unmarshal(in.Bytes(), &ph))
		at := time.Unix(0, ph.T)
		clk.Set(at)
		var rec lincheck.Recorder
		w.Run(&rec, ph.Phase, spec.First, at, linDo(l))
		b, err := json.Marshal(rec.Ops())
		require.NoError(t, err)
		fmt.Printf("%s%s\n", linOpsPrefix, b)
	}
	require.NoError(t, in.Err())
}

// linWorker is a running worker process.
type linWorker struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

// startWorker starts a worker process for spec; it is killed when t ends.
func startWorker(t *testing.T, ctx context.Context, spec linSpec) *linWorker {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	b, err := json.Marshal(spec)
	require.NoError(t, err)
	cmd := exec.CommandContext(ctx, exe, "-test.run=^TestWorkerLinearizable$", "-test.count=1")
	// REDIS_ADDR keeps the examples' TestMain from starting a server of
	// its own in every worker.
	cmd.Env = append(os.Environ(), linWorkerEnv+"="+string(b), "REDIS_ADDR="+spec.Addr)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = in.Close()
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	sc := bufio.NewScanner(out)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	return &linWorker{cmd: cmd, in: in, out: sc}
}

// phase runs ph on w and returns its operations.
func (w *linWorker) phase(ph linPhase) ([]lincheck.Op, error) {
	b, err := json.Marshal(ph)
	if err != nil {
		return nil, err
	}
	if _, err := w.in.Write(append(b, '\n')); err != nil {
		return nil, fmt.Errorf("ratelimit: worker stdin: %w", err)
	}
	for w.out.Scan() {
		line := w.out.Text()
		if rest, ok := strings.CutPrefix(line, linOpsPrefix); ok {
			var ops []lincheck.Op
			err := json.Unmarshal([]byte(rest), &ops)
			return ops, err
		}
	}
	return nil, fmt.Errorf("ratelimit: worker ended before phase %d: %v", ph.Phase, w.out.Err())
}

// TestProofLinearizableRedisProcesses: several processes, each with its
// own client, Limiter and goroutines, sharing keys on one Redis node.
func TestProofLinearizableRedisProcesses(t *testing.T) {
	t.Parallel()
	srv, _ := startRedis(t)
	seed := reliability.Seed(t)
	procs, clients, phases := reliability.Pick(3, 6), reliability.Pick(12, 32), reliability.Pick(5, 30)
	ctx, cancel := context.WithTimeout(context.Background(), reliability.Pick(2*time.Minute, 20*time.Minute))
	t.Cleanup(cancel)
	var st lincheck.Stats
	for _, algo := range allAlgorithms {
		t.Run(algo.String(), func(t *testing.T) {
			p := linPolicy(algo)
			prefix := uniquePrefix(t)
			workers := make([]*linWorker, procs)
			for i := range workers {
				workers[i] = startWorker(t, ctx, linSpec{Addr: srv.Addr(), Prefix: prefix, Algo: int(algo),
					Seed: seed + uint64(algo), First: i * clients, Clients: clients, Keys: linKeys})
			}
			var all []lincheck.Op
			for k, at := range lincheck.Schedule(seed, linStart, phases, p.WindowAt(linStart)) {
				ph := linPhase{Phase: k, T: at.UnixNano()}
				results := make([][]lincheck.Op, procs)
				errs := make([]error, procs)
				var wg sync.WaitGroup
				for i, w := range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						results[i], errs[i] = w.phase(ph)
					}()
				}
				wg.Wait()
				for i := range workers {
					require.NoError(t, errs[i], "worker %d", i)
					all = append(all, results[i]...)
				}
			}
			st.Add(algo.String(), requireLinearizable(t, "linearizability-redis-processes-"+algo.String(), p, all))
		})
	}
	reliability.Record(t, reliability.Result{
		Group: "linearizability", Scenario: "linearizability-redis-processes",
		Title: "Redis single node, every algorithm, several processes",
		How: fmt.Sprintf("redis-server 7 on loopback; %d worker processes (the test binary re-executed), each with its own go-redis "+
			"Client and redislimit.Limiter (deny cache on) and %d goroutines; the parent moves every worker's manual clock to the "+
			"phase's time, the workers run %d calls per goroutine on %d shared keys (AllowN n=1..3, 10%% Peek) and return their "+
			"recorded calls as JSON; %d phases; the merged history checked against the in-memory limiter replayed",
			procs, clients, reliability.Pick(2, 4), len(linKeys), phases),
		Ops: st.Ops, Histories: st.Histories, Verdict: linVerdict(t), Seed: int64(seed), Notes: st.Notes,
	})
}

// TestDenyCacheLinearizable: with the deny cache on (the default), a
// cached denial must say what Redis would, also when another Limiter
// instance admits on the key, or when, on one instance, an admission's
// reply is still in flight while another call's denial is cached. Before
// the cache kept only denials with Remaining 0, a later call was told
// Remaining 1 after an earlier one had been told 0 (both subtests failed).
func TestDenyCacheLinearizable(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	t.Run("two-instances", func(t *testing.T) {
		p := ratelimit.FixedWindowPolicy(5, time.Hour)
		clk := fakeclock.NewManual(linStart)
		prefix := uniquePrefix(t)
		a := linLimiter(t, c, p, prefix, clk, WithDenyCache(defaultDenyCacheKeys))
		b := linLimiter(t, c, p, prefix, clk, WithDenyCache(defaultDenyCacheKeys))
		var rec lincheck.Recorder
		// One call after the other: A takes 4 of 5, is denied 3 (cached,
		// Remaining 1), B takes the last one, A asks for 3 again.
		for _, st := range []struct {
			l *Limiter
			n int
		}{{a, 4}, {a, 3}, {b, 1}, {a, 3}} {
			in := lincheck.Input{Key: "k", N: st.n, T: linStart.UnixNano()}
			_, _ = rec.Do(map[*Limiter]int{a: 0, b: 1}[st.l], in, func() (ratelimit.Decision, error) {
				return st.l.AllowN(bg(), "k", st.n)
			})
		}
		requireLinearizable(t, "linearizability-denycache-two-instances", p, rec.Ops())
	})
	t.Run("one-instance", func(t *testing.T) {
		seed := reliability.Seed(t)
		for _, algo := range allAlgorithms {
			p := linPolicy(algo)
			clk := fakeclock.NewManual(linStart)
			l := linLimiter(t, c, p, uniquePrefix(t), clk, WithDenyCache(defaultDenyCacheKeys))
			w := linWorkload(seed+uint64(algo), 32, linKeys)
			var rec lincheck.Recorder
			for k, at := range lincheck.Schedule(seed, linStart, 10, p.WindowAt(linStart)) {
				clk.Set(at)
				w.Run(&rec, k, 0, at, linDo(l))
			}
			requireLinearizable(t, "linearizability-denycache-"+algo.String(), p, rec.Ops())
		}
	})
}
