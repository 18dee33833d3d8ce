package benchmarks

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/redislimit"
)

// BenchmarkRedis compares distributed limiting on Redis in one run, against
// one Redis server and through one go-redis client (ContextTimeoutEnabled,
// default pool). Names are BenchmarkRedis/<library>/<mode>:
//
//	ping                  PING on the same client: the floor of a round trip
//	redis_rate            github.com/go-redis/redis_rate/v10 Limiter.Allow
//	                      (GCRA, one EVALSHA per call)
//	ratelimit-<algorithm> this module's redislimit.Limiter.AllowN, all six
//	                      algorithms (one script per decision, concurrent
//	                      decisions pipelined)
//
// Modes: serial is one caller (ns/op is the latency of one decision);
// parallel is 64 goroutines (decisions/s is the throughput). Every limiter
// admits nearly every call (1M/s with a burst of 1M; windows of 1e9), keys
// cycle over 1000 clients, and every library runs in one mode before the
// next mode. Serial runs also report server-µs/op, the server's
// usec_per_call for the script from INFO commandstats (reset before each),
// and redis-calls/op, the commands the script ran per decision (TIME, GET,
// SET...: the part of its server time that does not depend on load).
//
// It uses the Redis at REDIS_ADDR, or starts redis-server on a free
// loopback port (internal/testkit/redistest is not importable from this module),
// and skips when there is neither.
func BenchmarkRedis(b *testing.B) {
	addr := benchRedisAddr(b)
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	b.Cleanup(func() { _ = c.Close() })
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = "user" + strconv.Itoa(i)
	}
	prefix := fmt.Sprintf("bench:%d:", time.Now().UnixNano())

	type entry struct {
		name   string
		script bool // runs EVALSHA, so commandstats applies
		call   func(ctx context.Context, key string) error
	}
	entries := []entry{{name: "ping", call: func(ctx context.Context, _ string) error { return c.Ping(ctx).Err() }}}

	rr := redis_rate.NewLimiter(c)
	rrLimit := redis_rate.Limit{Rate: 1_000_000, Burst: 1_000_000, Period: time.Second}
	entries = append(entries, entry{name: "redis_rate", script: true, call: func(ctx context.Context, key string) error {
		_, err := rr.Allow(ctx, prefix+"rr:"+key, rrLimit)
		return err
	}})
	for _, p := range []ratelimit.Policy{
		ratelimit.TokenBucketPolicy(ratelimit.Per(1_000_000, time.Second), 1_000_000),
		ratelimit.LeakyBucketPolicy(1_000_000, time.Microsecond),
		ratelimit.FixedWindowPolicy(1_000_000_000, time.Second),
		ratelimit.SlidingLogPolicy(1_000_000_000, time.Second),
		ratelimit.SlidingCounterPolicy(1_000_000, time.Second),
		ratelimit.QuotaPolicy(1_000_000_000, ratelimit.Calendar{Unit: ratelimit.Daily}),
	} {
		l, err := redislimit.New(c, p, redislimit.WithPrefix(prefix), redislimit.WithTimeout(time.Second))
		if err != nil {
			b.Fatal(err)
		}
		entries = append(entries, entry{name: "ratelimit-" + p.Algorithm.String(), script: true, call: func(ctx context.Context, key string) error {
			_, err := l.AllowN(ctx, key, 1)
			return err
		}})
	}

	for _, e := range entries {
		b.Run(e.name+"/serial", func(b *testing.B) {
			ctx := context.Background()
			b.ReportAllocs()
			_ = c.ConfigResetStat(ctx).Err()
			i := 0
			for b.Loop() {
				if err := e.call(ctx, keys[i%len(keys)]); err != nil {
					b.Fatal(err)
				}
				i++
			}
			if e.script {
				st := redisCommandStats(c)
				if us := st["evalsha"].usecPerCall; us > 0 {
					b.ReportMetric(us, "server-µs/op")
				}
				if n := st["evalsha"].calls; n > 0 {
					inner := 0.0
					for name, s := range st {
						if name != "evalsha" && name != "config|resetstat" && name != "info" {
							inner += s.calls
						}
					}
					b.ReportMetric(inner/n, "redis-calls/op")
				}
			}
		})
	}
	for _, e := range entries {
		b.Run(e.name+"/parallel", func(b *testing.B) {
			var next, errs atomic.Int64
			var first atomic.Value
			b.ReportAllocs()
			b.SetParallelism(max(redisBenchWorkers/runtime.GOMAXPROCS(0), 1))
			b.RunParallel(func(pb *testing.PB) {
				ctx := context.Background()
				i := int(next.Add(7919))
				for pb.Next() {
					if err := e.call(ctx, keys[i%len(keys)]); err != nil && errs.Add(1) == 1 {
						first.Store(err)
					}
					i++
				}
			})
			if n := errs.Load(); n > 0 {
				b.Fatalf("%d errors, first: %v", n, first.Load())
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
		})
	}
}

// redisBenchWorkers is the number of goroutines in parallel mode.
const redisBenchWorkers = 64

// benchRedisAddr returns REDIS_ADDR, or starts a throwaway redis-server
// (persistence off) for b and kills it afterwards.
func benchRedisAddr(b *testing.B) string {
	b.Helper()
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		return addr
	}
	if _, err := exec.LookPath("redis-server"); err != nil {
		b.Skip("redis-server not in PATH and REDIS_ADDR not set")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	cmd := exec.Command("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
		"--save", "", "--appendonly", "no", "--dir", b.TempDir())
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	for deadline := time.Now().Add(10 * time.Second); c.Ping(context.Background()).Err() != nil; {
		if time.Now().After(deadline) {
			b.Fatal("redis-server did not answer PING within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	return addr
}

// cmdStat is one command's line of INFO commandstats.
type cmdStat struct{ calls, usecPerCall float64 }

// redisCommandStats returns INFO commandstats by command name (lower
// case; the commands a script calls are counted under their own names).
func redisCommandStats(c *redis.Client) map[string]cmdStat {
	out := map[string]cmdStat{}
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		return out
	}
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, found := strings.CutPrefix(name, "cmdstat_")
		if !ok || !found {
			continue
		}
		var st cmdStat
		for _, f := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(f, "=")
			x, _ := strconv.ParseFloat(v, 64)
			switch k {
			case "calls":
				st.calls = x
			case "usec_per_call":
				st.usecPerCall = x
			}
		}
		out[name] = st
	}
	return out
}
