package benchmarks

// BenchmarkEnvoyRLS measures whole Envoy rate limit services, each a
// subprocess on loopback, through the generated gRPC client
// (rlspb.NewRateLimitServiceClient) as Envoy calls them:
//
//	envoyproxy-redis         envoyproxy/ratelimit, its defaults (REDIS_POOL_SIZE=10)
//	envoyproxy-redis-pool64  the same with REDIS_POOL_SIZE=64 (one connection per call in flight)
//	envoyproxy-redis-window  the same with REDIS_PIPELINE_WINDOW=150us and REDIS_PIPELINE_LIMIT=8,
//	                         its documented pipelining (at this version the window applies to
//	                         REDIS_TYPE=cluster only and the limit is ignored: it measures that)
//	envoyproxy-redis-nostats the same with DISABLE_STATS=true: without statsd (USE_STATSD=false,
//	                         as all the others run) its stats go to a logging sink, which costs
//	                         CPU on every call; this is its cheapest setting
//	ours-redis               envoylimit-server -redis
//	ours-memory              envoylimit-server, counters in memory
//
// One configuration for all (one file written by the benchmark): a per-IP
// limit (remote_address, 1000 per minute) over 10,000 addresses and a
// per-path limit (path, 10,000,000 per minute) over 20 paths; every request
// carries both descriptors. 2% of the requests come from one address that is
// over its limit after its first thousand, the others stay far below theirs,
// so most requests are admitted (ok/op reports the fraction). The Redis
// servers share one redis-server started by the benchmark.
//
// Each sub-benchmark runs b.RunParallel with SetParallelism(32): at -cpu=2,
// 64 calls in flight over 4 connections. Metrics: req/s (calls per second of
// wall time), p50-ns and p99-ns (each call's latency as the client sees it),
// ok/op, err/op (calls that failed), the user+system CPU time per call (from
// /proc) of the server (server-cpu-ns/op), of this process, the client
// (client-cpu-ns/op), and of redis-server (redis-cpu-ns/op; 0 for
// ours-memory give or take a tick), and the calls redis-server counted per
// call: scripts (redis-scripts/op) and other commands, those scripts run
// included (redis-cmds/op). The client, the server and redis-server share
// the machine's CPUs, so req/s is the throughput of the whole loop; compare
// the servers by ratios within one run (see README.md, "Envoy rate limit
// service"). The envoyproxy servers keep their keys under a prefix of their
// own (CACHE_KEY_PREFIX), so every server starts from empty counters.
//
// With ENVOY_BENCH_PIN set, the servers and redis-server run on CPU 0 and
// the load generator on CPU 1 (taskset), so that req/s is what one CPU
// serves, server and Redis together, rather than what the three processes
// together get from two.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/rlkit/ratelimit/internal/testkit/redistest"
)

const (
	benchRLSAddresses = 10000
	benchRLSPaths     = 20
	benchRLSConns     = 4
	benchRLSPerProc   = 32 // goroutines per GOMAXPROCS
)

var benchRLSConfig = map[string]string{
	"bench.yaml": `domain: bench
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 1000
  - key: path
    rate_limit:
      unit: minute
      requests_per_unit: 10000000
`,
}

// lazyTB is a sub-benchmark's B whose cleanups and temporary directories
// belong to its parent: a sub-benchmark's function runs once per b.N tried,
// and each run ends with its own cleanups, so a server it starts for all of
// them is the parent's to stop.
type lazyTB struct {
	*testing.B
	parent *testing.B
}

func (l lazyTB) Cleanup(f func()) { l.parent.Cleanup(f) }
func (l lazyTB) TempDir() string  { return l.parent.TempDir() }

func BenchmarkEnvoyRLS(b *testing.B) {
	redis := redistest.Start(b)
	if os.Getenv("ENVOY_BENCH_PIN") != "" {
		pinEnvoyBench(b, redis.PID())
	}
	cfgDir := writeRLSConfig(b, benchRLSConfig)
	probe := rlsRequest("probe", "k=v")
	type server struct {
		name  string
		start func(tb testing.TB) *rlsServer
	}
	servers := []server{
		{"envoyproxy-redis", func(tb testing.TB) *rlsServer {
			return startTheirs(tb, "envoyproxy-redis", cfgDir, redis.Addr(), probe,
				theirsOptions{"CACHE_KEY_PREFIX=default:"})
		}},
		{"envoyproxy-redis-pool64", func(tb testing.TB) *rlsServer {
			return startTheirs(tb, "envoyproxy-redis-pool64", cfgDir, redis.Addr(), probe, theirsOptions{"CACHE_KEY_PREFIX=pool64:", "REDIS_POOL_SIZE=64"})
		}},
		{"envoyproxy-redis-window", func(tb testing.TB) *rlsServer {
			return startTheirs(tb, "envoyproxy-redis-window", cfgDir, redis.Addr(), probe,
				theirsOptions{"CACHE_KEY_PREFIX=window:", "REDIS_PIPELINE_WINDOW=150us", "REDIS_PIPELINE_LIMIT=8"})
		}},
		{"envoyproxy-redis-nostats", func(tb testing.TB) *rlsServer {
			return startTheirs(tb, "envoyproxy-redis-nostats", cfgDir, redis.Addr(), probe,
				theirsOptions{"CACHE_KEY_PREFIX=nostats:", "DISABLE_STATS=true"})
		}},
		{"ours-redis", func(tb testing.TB) *rlsServer { return startOurs(tb, "ours-redis", cfgDir, redis.Addr(), probe) }},
		{"ours-memory", func(tb testing.TB) *rlsServer { return startOurs(tb, "ours-memory", cfgDir, "", probe) }},
	}
	for _, s := range servers {
		var srv *rlsServer
		var clients []rlspb.RateLimitServiceClient
		b.Run(s.name, func(sb *testing.B) {
			if srv == nil {
				tb := lazyTB{sb, b}
				srv = s.start(tb)
				for range benchRLSConns {
					conn := dialRLS(tb, srv.addr)
					b.Cleanup(func() { conn.Close() })
					clients = append(clients, rlspb.NewRateLimitServiceClient(conn))
				}
			}
			benchRLS(sb, srv, redis, clients)
		})
	}
}

// pinEnvoyBench confines the servers and redis-server to CPU 0 and this
// process (the load generator) to CPU 1, until b ends: the servers' and
// Redis's work then shares one CPU and the client has the other, so the
// throughput measures what one CPU serves, unless the client is the
// bottleneck (its CPU per call says).
func pinEnvoyBench(b *testing.B, redisPID int) {
	b.Helper()
	if runtime.NumCPU() < 2 {
		b.Skip("ENVOY_BENCH_PIN needs 2 CPUs")
	}
	if _, err := exec.LookPath("taskset"); err != nil {
		b.Skip("ENVOY_BENCH_PIN needs taskset (util-linux)")
	}
	taskset := func(cpus string, pid int) {
		if out, err := exec.Command("taskset", "-a", "-cp", cpus, strconv.Itoa(pid)).CombinedOutput(); err != nil {
			b.Fatalf("taskset -a -cp %s %d: %v\n%s", cpus, pid, err, out)
		}
	}
	taskset("0", redisPID)
	taskset("1", os.Getpid())
	rlsServerCPUs = "0"
	b.Cleanup(func() {
		rlsServerCPUs = ""
		taskset(fmt.Sprintf("0-%d", runtime.NumCPU()-1), os.Getpid())
	})
}

// benchRLS drives one server with b.N calls from parallel goroutines.
func benchRLS(b *testing.B, srv *rlsServer, redis *redistest.Server, clients []rlspb.RateLimitServiceClient) {
	var (
		mu        sync.Mutex
		latencies []time.Duration
		next      atomic.Uint64
		ok, fails atomic.Int64
		firstErr  atomic.Value
	)
	addrs := make([]string, benchRLSAddresses)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("10.%d.%d.%d", i>>16&255, i>>8&255, i&255)
	}
	paths := make([]string, benchRLSPaths)
	for i := range paths {
		paths[i] = "/api/v1/resource" + strconv.Itoa(i)
	}
	b.SetParallelism(benchRLSPerProc)
	pids := []int{srv.pid, os.Getpid(), redis.PID()}
	scripts0, cmds0 := redisCalls(redis)
	cpu0 := make([]int64, len(pids))
	for i, p := range pids {
		cpu0[i] = procCPU(p)
	}
	b.ResetTimer()
	start := time.Now()
	b.RunParallel(func(pb *testing.PB) {
		g := next.Add(1)
		r := rand.New(rand.NewPCG(g, uint64(time.Now().UnixNano())))
		client := clients[g%uint64(len(clients))]
		lat := make([]time.Duration, 0, 1024)
		ctx := context.Background()
		ip := &rlcommon.RateLimitDescriptor_Entry{Key: "remote_address"}
		path := &rlcommon.RateLimitDescriptor_Entry{Key: "path"}
		req := &rlspb.RateLimitRequest{Domain: "bench", Descriptors: []*rlcommon.RateLimitDescriptor{
			{Entries: []*rlcommon.RateLimitDescriptor_Entry{ip}},
			{Entries: []*rlcommon.RateLimitDescriptor_Entry{path}},
		}}
		for pb.Next() {
			if r.IntN(50) == 0 {
				ip.Value = "203.0.113.7" // the abusive client
			} else {
				ip.Value = addrs[r.IntN(len(addrs))]
			}
			path.Value = paths[r.IntN(len(paths))]
			t0 := time.Now()
			resp, err := client.ShouldRateLimit(ctx, req)
			lat = append(lat, time.Since(t0))
			switch {
			case err != nil:
				fails.Add(1)
				firstErr.CompareAndSwap(nil, err)
			case resp.GetOverallCode() == rlspb.RateLimitResponse_OK:
				ok.Add(1)
			}
		}
		mu.Lock()
		latencies = append(latencies, lat...)
		mu.Unlock()
	})
	elapsed := time.Since(start)
	b.StopTimer()
	// A failed call is reported (err/op), not fatal: ours answers a Redis
	// call that outlives redislimit's timeout (100ms) with Unavailable, as
	// it is meant to, which happens when the machine is overloaded.
	if n := fails.Load(); n == int64(b.N) {
		b.Fatalf("%s: every call failed, the first: %v\n%s", srv.name, firstErr.Load(), srv.logTail())
	} else if n > 0 {
		b.Logf("%s: %d of %d calls failed, the first: %v", srv.name, n, b.N, firstErr.Load())
	}
	b.ReportMetric(float64(fails.Load())/float64(b.N), "err/op")
	slices.Sort(latencies)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "req/s")
	b.ReportMetric(float64(latencies[len(latencies)/2]), "p50-ns")
	b.ReportMetric(float64(latencies[len(latencies)*99/100]), "p99-ns")
	b.ReportMetric(float64(ok.Load())/float64(b.N), "ok/op")
	scripts1, cmds1 := redisCalls(redis)
	b.ReportMetric(float64(scripts1-scripts0)/float64(b.N), "redis-scripts/op")
	b.ReportMetric(float64(cmds1-cmds0)/float64(b.N), "redis-cmds/op")
	for i, unit := range []string{"server-cpu-ns/op", "client-cpu-ns/op", "redis-cpu-ns/op"} {
		if c1 := procCPU(pids[i]); cpu0[i] >= 0 && c1 >= 0 {
			b.ReportMetric(float64(c1-cpu0[i])/float64(b.N), unit)
		}
	}
}

// redisCalls returns the calls redis-server has counted (INFO
// commandstats) of scripts (EVAL, EVALSHA) and of every other command but
// the ones this benchmark and its helpers send (INFO, PING). Commands a
// script runs count under their own names.
func redisCalls(redis *redistest.Server) (scripts, cmds int64) {
	info, err := redis.Do("INFO", "commandstats")
	if err != nil {
		return -1, -1
	}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, found := strings.CutPrefix(name, "cmdstat_")
		if !ok || !found {
			continue
		}
		calls, _, _ := strings.Cut(strings.TrimPrefix(rest, "calls="), ",")
		n, err := strconv.ParseInt(calls, 10, 64)
		if err != nil {
			continue
		}
		switch name {
		case "info", "ping", "command", "hello", "client|setinfo", "client|setname":
		case "eval", "evalsha", "eval_ro", "evalsha_ro", "fcall":
			scripts += n
		default:
			cmds += n
		}
	}
	return scripts, cmds
}

// procCPU is the user+system CPU time of process pid in nanoseconds, from
// /proc/PID/stat (fields 14 and 15, in clock ticks of 1/100 s), or -1.
func procCPU(pid int) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return -1
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return (utime + stime) * int64(10*time.Millisecond)
}
