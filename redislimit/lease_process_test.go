package redislimit

import (
	"bufio"
	"context"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
)

// The multi-process exactness test: leaseProcesses OS processes (this test
// binary, run again as TestLeaseHelperProcess) hammer one key of a real
// Redis with leases on, each from leaseGoroutines goroutines, for
// leaseRun; every admission is recorded with its time (the limiter's
// admitHook: the local time of one from a lease, Redis's time of a grant),
// and the parent checks the policy over all of them.
const (
	leaseProcesses  = 4
	leaseGoroutines = 32
	leaseRun        = 1200 * time.Millisecond
	leaseHelperEnv  = "REDISLIMIT_LEASE_HELPER"
)

// leaseProcessPolicies are the policies of the multi-process test, with
// limits far below what the processes ask, so that they compete for every
// event.
func leaseProcessPolicies() []ratelimit.Policy {
	return []ratelimit.Policy{
		ratelimit.TokenBucketPolicy(ratelimit.Per(5000, time.Second), 500),
		ratelimit.LeakyBucketPolicy(500, 200*time.Microsecond),
		ratelimit.FixedWindowPolicy(1000, 200*time.Millisecond),
		ratelimit.SlidingCounterPolicy(1000, 200*time.Millisecond),
		ratelimit.QuotaPolicy(3000, ratelimit.Calendar{Unit: ratelimit.Daily}),
	}
}

// TestLeaseHelperProcess is one process of TestLeaseMultiProcess; it does
// nothing unless run by it.
func TestLeaseHelperProcess(t *testing.T) {
	spec := os.Getenv(leaseHelperEnv)
	if spec == "" {
		t.Skip("run by TestLeaseMultiProcess")
	}
	// addr policy-index prefix start(Unix ns) out
	f := strings.Fields(spec)
	idx, _ := strconv.Atoi(f[1])
	start, _ := strconv.ParseInt(f[3], 10, 64)
	p := leaseProcessPolicies()[idx]
	c := redis.NewClient(&redis.Options{Addr: f[0], ContextTimeoutEnabled: true, PoolSize: 64})
	defer c.Close()
	l, err := New(c, p, WithPrefix(f[2]), WithTimeout(2*time.Second), WithFailurePolicy(FailClosed), WithLeases(LeaseConfig{}))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	times := make([]int64, 0, 16384)
	var denied []int64 // when a call returned denied
	l.admitHook = func(at int64) {
		mu.Lock()
		times = append(times, at)
		mu.Unlock()
	}
	// Dial and load the scripts before the start (a Peek of another key
	// runs the decision script), so that the first decisions on the hot
	// key are not late.
	if _, err := l.Peek(context.Background(), "warmup", 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(time.Unix(0, start)))
	first := time.Now().UnixNano()
	stop := time.Unix(0, start).Add(leaseRun)
	var wg sync.WaitGroup
	var errs sync.Map
	for range leaseGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for time.Now().Before(stop) {
				d, err := l.AllowN(ctx, "hot", 1)
				if err != nil {
					errs.Store(err.Error(), true)
				} else if !d.Allowed {
					at := time.Now().UnixNano()
					mu.Lock()
					denied = append(denied, at)
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if err := l.ReleaseLeases(context.Background()); err != nil {
		t.Fatal(err)
	}
	errs.Range(func(k, _ any) bool {
		t.Errorf("AllowN: %v", k)
		return true
	})
	mu.Lock()
	defer mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%d\n", first)
	for _, at := range times {
		fmt.Fprintf(&b, "%d\n", at)
	}
	b.WriteString("denied\n")
	for _, at := range denied {
		fmt.Fprintf(&b, "%d\n", at)
	}
	if err := os.WriteFile(f[4], []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestLeaseMultiProcess runs leaseProcesses processes with leases on one
// key for each leasable algorithm and checks, over every admission of all
// of them: no event beyond the policy (by the admissions' times: per
// window for the fixed window and the quota, the estimate at each event
// for the sliding counter, capacity + rate x elapsed for the buckets), and
// under-admission within the documented bound, leaseProcesses leases of at
// most Limit/MaxShare events.
func TestLeaseMultiProcess(t *testing.T) {
	if os.Getenv(leaseHelperEnv) != "" {
		t.Skip("in a helper process")
	}
	s, _ := startRedis(t)
	dir := t.TempDir()
	for idx, p := range leaseProcessPolicies() {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			prefix := uniquePrefix(t)
			// Start in 300ms, a quarter into a window (for the windowed
			// policies), so that the first decisions, one script each while
			// the key is cold, are far from a boundary.
			start := time.Now().Add(300 * time.Millisecond).UnixNano()
			if p.Algorithm != ratelimit.QuotaAlgorithm {
				w := int64(p.Period)
				start = (start/w+1)*w + w/4
			}
			var outs []string
			var cmds []*exec.Cmd
			for i := range leaseProcesses {
				out := filepath.Join(dir, fmt.Sprintf("%d-%d", idx, i))
				cmd := exec.Command(os.Args[0], "-test.run=^TestLeaseHelperProcess$", "-test.count=1", "-test.v")
				cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %d %s %d %s", leaseHelperEnv, s.Addr(), idx, prefix, start, out))
				var buf strings.Builder
				cmd.Stdout, cmd.Stderr = &buf, &buf
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					if t.Failed() {
						t.Logf("process %d:\n%s", i, buf.String())
					}
				})
				outs = append(outs, out)
				cmds = append(cmds, cmd)
			}
			for i, cmd := range cmds {
				if err := cmd.Wait(); err != nil {
					t.Fatalf("process %d: %v", i, err)
				}
			}
			origin := int64(0)
			var times, denied []int64
			for _, out := range outs {
				first, ts, ds := readTimes(t, out)
				if origin == 0 || first < origin {
					origin = first
				}
				times = append(times, ts...)
				denied = append(denied, ds...)
			}
			slices.Sort(times)
			slices.Sort(denied)
			checkLeasedRun(t, p, origin, time.Unix(0, start).Add(leaseRun).UnixNano(), times, denied)
		})
	}
}

// readTimes reads a helper's output: the time it began, the times of its
// admissions, and the times its calls returned denied.
func readTimes(t *testing.T, path string) (int64, []int64, []int64) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	var ts, ds []int64
	cur := &ts
	for sc.Scan() {
		if sc.Text() == "denied" {
			cur = &ds
			continue
		}
		v, err := strconv.ParseInt(sc.Text(), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		*cur = append(*cur, v)
	}
	if len(ts) == 0 {
		t.Fatalf("%s: empty", path)
	}
	return ts[0], ts[1:], ds
}

// checkLeasedRun checks the admissions times (sorted, Unix ns) of a run of
// p that began at origin and stopped asking at stop, whose calls returned
// denied at the times denied (sorted). Over-admission is checked on every
// admission. Under-admission is checked only where the key was saturated,
// as a denial proves (Redis had nothing left to grant): a machine too busy
// to keep the key saturated admits less without any fault of the leases.
func checkLeasedRun(t *testing.T, p ratelimit.Policy, origin, stop int64, times, denied []int64) {
	t.Helper()
	parked := leaseProcesses * max(1, p.Limit/DefaultLeaseShare) // the documented bound
	w := int64(p.Period)
	switch p.Algorithm {
	case ratelimit.TokenBucketAlgorithm, ratelimit.LeakyBucketAlgorithm:
		// Every admission's event was charged at or before its time, and
		// the bucket started full at or after origin.
		rate := float64(p.Refill) / float64(p.Period) // per ns
		if p.Algorithm == ratelimit.LeakyBucketAlgorithm {
			rate = 1 / float64(p.Period)
		}
		for i, at := range times {
			if allowed := p.Limit + int(rate*float64(at-origin)); i+1 > allowed {
				t.Fatalf("event %d at +%v: %d admitted, the bucket allows %d", i, time.Duration(at-origin), i+1, allowed)
			}
		}
		// The documented bound over every interval [a, b] between two
		// admissions: at most capacity + rate x (b - a) + parked events
		// (the leases granted before a and used in it). For each b = times[j]
		// the worst a = times[i] maximizes (j - i + 1) - rate x (b - a):
		// keep the running maximum of rate x times[i] - i.
		best, from := math.Inf(-1), 0
		for j, b := range times {
			if v := rate*float64(b-origin) - float64(j); v > best {
				best, from = v, j
			}
			if excess := float64(j+1) - rate*float64(b-origin) + best; excess > float64(p.Limit+parked)+1e-9 {
				a := times[from]
				t.Fatalf("[+%v, +%v]: %d admitted, the bound is %d + %.1f + %d parked", time.Duration(a-origin), time.Duration(b-origin), j-from+1, p.Limit, rate*float64(b-a), parked)
			}
		}
		// Under-admission between the first and the last denial: the
		// bucket was empty at both (Redis had less than one event to
		// grant), so all the refill between them, r x (d2 - d1), was
		// charged by d2, give or take the one event a level below 1
		// hides; of it, at most the leases parked at d2 is not admitted.
		// A denial is recorded when its call returns, a little after
		// Redis decided: allow 10ms of refill for that.
		if len(denied) < 2 {
			t.Logf("%d admitted, %d denials: the key was not saturated, under-admission not measured", len(times), len(denied))
			return
		}
		d1, d2 := denied[0], denied[len(denied)-1]
		lo, _ := slices.BinarySearch(times, d1+1)
		hi, _ := slices.BinarySearch(times, d2+1)
		refill := int(rate * float64(d2-d1))
		t.Logf("%d admitted in all; between the first and last denial (%v) %d admitted of %d refilled (under-admission %d, bound %d parked)", len(times), time.Duration(d2-d1), hi-lo, refill, refill-(hi-lo), parked)
		if under := refill - (hi - lo); under > parked+1+int(rate*float64(10*time.Millisecond)) {
			t.Errorf("under-admission %d beyond the bound %d", under, parked)
		}
	case ratelimit.FixedWindowAlgorithm, ratelimit.SlidingCounterAlgorithm:
		counts := map[int64]int{}
		for _, at := range times {
			k := at / w
			counts[k]++
			if p.Algorithm == ratelimit.FixedWindowAlgorithm {
				if counts[k] > p.Limit {
					t.Fatalf("window %d: more than %d events", k, p.Limit)
				}
				continue
			}
			// The sliding counter's estimate at the event, itself included.
			e := float64(at - k*w)
			est := float64(counts[k-1])*(float64(w)-e)/float64(w) + float64(counts[k])
			if est > float64(p.Limit)+1e-9 {
				t.Fatalf("event at +%v: estimate %.3f (previous %d, current %d) above %d", time.Duration(at-origin), est, counts[k-1], counts[k], p.Limit)
			}
		}
		// Windows wholly inside the run in which a call was denied (the
		// window was spent on Redis) admit at least Limit less the leases
		// parked at their end.
		deniedIn := map[int64]bool{}
		for _, at := range denied {
			deniedIn[at/w] = true
		}
		var full []int
		for k := origin/w + 1; (k+1)*w <= stop; k++ {
			full = append(full, counts[k])
			if deniedIn[k] && counts[k] < p.Limit-parked {
				t.Errorf("window %d admitted %d, below %d - %d parked", k, counts[k], p.Limit, parked)
			}
		}
		t.Logf("admitted per whole window: %v (limit %d, bound %d parked; windows with a denial: %d)", full, p.Limit, parked, len(deniedIn))
	case ratelimit.QuotaAlgorithm:
		t.Logf("%d admitted (limit %d, bound %d parked)", len(times), p.Limit, parked)
		if len(times) > p.Limit {
			t.Fatalf("%d admitted in one period, limit %d", len(times), p.Limit)
		}
		if len(denied) > 0 && len(times) < p.Limit-parked {
			t.Errorf("%d admitted, below %d - %d parked", len(times), p.Limit, parked)
		}
	}
}
