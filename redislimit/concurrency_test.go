package redislimit

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/rlkit/ratelimit/internal/testkit/redistest"
)

// No over-admission: several OS processes, each with 32 goroutines, share
// one Redis (or the 3-master cluster) and hammer a few keys. With no quota
// coming back during the test, every key admits exactly its limit, no
// more and no fewer.

const (
	childEnv       = "REDISLIMIT_CHILD"
	childProcs     = 3
	childWorkers   = 32
	hammerKeys     = 4
	hammerAttempts = 60 // per worker and key
)

// hammerPolicies are policies under which no quota returns during a test:
// with a frozen clock passed to the scripts (client), or with server time
// and periods of hours (server).
func hammerPolicies(serverTime bool) []ratelimit.Policy {
	if serverTime {
		return []ratelimit.Policy{
			ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 500),
			ratelimit.LeakyBucketPolicy(500, time.Hour),
			ratelimit.SlidingLogPolicy(500, time.Hour),
		}
	}
	return []ratelimit.Policy{
		ratelimit.TokenBucketPolicy(ratelimit.Per(10, time.Second), 500),
		ratelimit.LeakyBucketPolicy(500, time.Millisecond),
		ratelimit.FixedWindowPolicy(500, time.Second),
		ratelimit.SlidingLogPolicy(500, time.Second),
		ratelimit.SlidingCounterPolicy(500, time.Second),
	}
}

// hammerSpec is what a child process is told through its environment.
type hammerSpec struct {
	Addrs      []string // one address, or the cluster's
	Cluster    bool
	Prefix     string
	Policy     int // index into hammerPolicies
	ServerTime bool
}

func (s hammerSpec) env() string {
	return fmt.Sprintf("%s|%t|%s|%d|%t", strings.Join(s.Addrs, ","), s.Cluster, s.Prefix, s.Policy, s.ServerTime)
}

func parseSpec(v string) (hammerSpec, error) {
	f := strings.Split(v, "|")
	if len(f) != 5 {
		return hammerSpec{}, fmt.Errorf("bad spec %q", v)
	}
	idx, err := strconv.Atoi(f[3])
	if err != nil {
		return hammerSpec{}, err
	}
	return hammerSpec{Addrs: strings.Split(f[0], ","), Cluster: f[1] == "true", Prefix: f[2], Policy: idx, ServerTime: f[4] == "true"}, nil
}

func (s hammerSpec) client() redis.UniversalClient {
	if s.Cluster {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: s.Addrs, ContextTimeoutEnabled: true})
	}
	return redis.NewClient(&redis.Options{Addr: s.Addrs[0], PoolSize: 64, ContextTimeoutEnabled: true})
}

// hammer runs childWorkers goroutines against every key and returns the
// number of events admitted per key. Errors are counted too: there must be
// none.
func hammer(s hammerSpec) (admitted [hammerKeys]int64, errs int64, err error) {
	c := s.client()
	defer c.Close()
	p := hammerPolicies(s.ServerTime)[s.Policy]
	opts := []Option{WithPrefix(s.Prefix), WithTimeout(10 * time.Second)}
	if !s.ServerTime {
		// A frozen clock, identical in every process.
		opts = append(opts, WithClock(fakeclock.NewManual(mockStart)))
	}
	l, err := New(c, p, opts...)
	if err != nil {
		return admitted, 0, err
	}
	var wg sync.WaitGroup
	var counts [hammerKeys]atomic.Int64
	var nerr atomic.Int64
	for w := range childWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range hammerAttempts * hammerKeys {
				k := (i + w) % hammerKeys
				d, err := l.AllowN(context.Background(), "key"+strconv.Itoa(k)+"-{x}"+strconv.Itoa(k*7919), 1)
				if err != nil {
					nerr.Add(1)
				}
				if d.Allowed && err == nil {
					counts[k].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	for k := range admitted {
		admitted[k] = counts[k].Load()
	}
	return admitted, nerr.Load(), nil
}

// TestHammerChild is the child process of the multi-process tests. It
// does nothing unless started by one of them.
func TestHammerChild(t *testing.T) {
	v := os.Getenv(childEnv)
	if v == "" {
		t.Skip("child process of TestNoOverAdmission")
	}
	s, err := parseSpec(v)
	if err != nil {
		t.Fatal(err)
	}
	admitted, errs, err := hammer(s)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, a := range admitted {
		fmt.Fprintf(&b, " %d", a)
	}
	fmt.Printf("ADMITTED%s ERRORS %d\n", b.String(), errs)
}

// runChildren runs childProcs copies of the test binary hammering as s
// says, and returns the total admitted per key.
func runChildren(t *testing.T, s hammerSpec) [hammerKeys]int64 {
	t.Helper()
	var total [hammerKeys]int64
	type result struct {
		out []byte
		err error
	}
	results := make(chan result, childProcs)
	for range childProcs {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHammerChild$", "-test.count=1")
			cmd.Env = append(os.Environ(), childEnv+"="+s.env())
			out, err := cmd.CombinedOutput()
			results <- result{out, err}
		}()
	}
	for range childProcs {
		r := <-results
		if r.err != nil {
			t.Fatalf("child: %v\n%s", r.err, r.out)
		}
		var line string
		sc := bufio.NewScanner(strings.NewReader(string(r.out)))
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "ADMITTED") {
				line = sc.Text()
			}
		}
		f := strings.Fields(line)
		if len(f) != hammerKeys+3 {
			t.Fatalf("child output has no result line:\n%s", r.out)
		}
		for k := range total {
			v, _ := strconv.ParseInt(f[1+k], 10, 64)
			total[k] += v
		}
		if f[hammerKeys+2] != "0" {
			t.Errorf("child saw %s errors", f[hammerKeys+2])
		}
	}
	return total
}

func TestNoOverAdmission(t *testing.T) {
	t.Parallel()
	if os.Getenv(childEnv) != "" {
		t.Skip("in a child process")
	}
	srv, _ := startRedis(t)
	cases := []struct {
		name       string
		serverTime bool
	}{{"clienttime", false}, {"servertime", true}}
	for _, tc := range cases {
		for i, p := range hammerPolicies(tc.serverTime) {
			t.Run(tc.name+"/"+name(p), func(t *testing.T) {
				s := hammerSpec{Addrs: []string{srv.Addr()}, Prefix: uniquePrefix(t), Policy: i, ServerTime: tc.serverTime}
				checkExact(t, p, runChildren(t, s))
			})
		}
	}
}

func TestNoOverAdmissionCluster(t *testing.T) {
	t.Parallel()
	if os.Getenv(childEnv) != "" {
		t.Skip("in a child process")
	}
	cl := redistest.StartCluster(t)
	for i, p := range hammerPolicies(false) {
		t.Run(name(p), func(t *testing.T) {
			s := hammerSpec{Addrs: cl.Addrs(), Cluster: true, Prefix: uniquePrefix(t), Policy: i}
			checkExact(t, p, runChildren(t, s))
		})
	}
}

func checkExact(t *testing.T, p ratelimit.Policy, total [hammerKeys]int64) {
	t.Helper()
	attempts := int64(childProcs * childWorkers * hammerAttempts)
	for k, got := range total {
		if want := min(int64(p.Limit), attempts); got != want {
			t.Errorf("key %d: %d admitted by %d processes x %d goroutines, want exactly %d", k, got, childProcs, childWorkers, want)
		}
	}
}
