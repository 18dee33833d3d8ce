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
// leaseRun; every decision is recorded with the time it was made (the
// limiter's decideHook: the local time of one from a lease, Redis's time
// of a grant's script, and for one script per decision the interval from
// its sending to its reply, in which Redis decided), as is every give-back
// of a lease (giveBackHook), and the parent checks the policy over all of
// them.
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
	// A long timeout: this test checks the accounting, not latency. On a
	// loaded machine a call (the warmup's first one too) took over 2s,
	// and a call that times out is an error here.
	l, err := New(c, p, WithPrefix(f[2]), WithTimeout(30*time.Second), WithFailurePolicy(FailClosed), WithLeases(LeaseConfig{}))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	decisions := make([]leaseDecision, 0, 1<<16)
	l.decideHook = func(d ratelimit.Decision, from, to int64) {
		mu.Lock()
		decisions = append(decisions, leaseDecision{d.Allowed, from, to, int64(d.ResetAfter)})
		mu.Unlock()
	}
	var backs []leaseGiveBack
	l.giveBackHook = func(left int, granted, from, to int64, err error) {
		mu.Lock()
		backs = append(backs, leaseGiveBack{left, granted, from, to})
		mu.Unlock()
		if err != nil {
			t.Errorf("give-back of %d: %v", left, err)
		}
	}
	// Dial and load the scripts before the start (a Peek of another key
	// runs the decision script), so that the first decisions on the hot
	// key are not late.
	if _, err := l.Peek(context.Background(), "warmup", 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Until(time.Unix(0, start)))
	first := time.Now().UnixNano()
	skew := clockOffset(l)
	stop := time.Unix(0, start).Add(leaseRun)
	var wg sync.WaitGroup
	var errs sync.Map
	for range leaseGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for time.Now().Before(stop) {
				if _, err := l.AllowN(ctx, "hot", 1); err != nil {
					errs.Store(err.Error(), true)
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
	// The check compares the hooks' local times (the limiter's clock) with
	// Redis's TIME and the wall clock: report how far apart they were.
	if o := clockOffset(l); max(o, -o) > max(skew, -skew) {
		skew = o
	}
	fmt.Fprintf(&b, "%d %d\n", first, skew)
	for _, d := range decisions {
		fmt.Fprintf(&b, "d %t %d %d %d\n", d.allowed, d.from, d.to, d.reset)
	}
	for _, g := range backs {
		fmt.Fprintf(&b, "g %d %d %d %d\n", g.left, g.granted, g.from, g.to)
	}
	if err := os.WriteFile(f[4], []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
}

// clockOffset returns how far l's clock (l.ts, the hooks' local times) is
// ahead of the wall clock, from the tightest of 20 bracketed readings.
func clockOffset(l *Limiter) int64 {
	width, off := int64(math.MaxInt64), int64(0)
	for range 20 {
		a := time.Now().UnixNano()
		n := l.ts.Now()
		z := time.Now().UnixNano()
		if z-a < width {
			width, off = z-a, n-(a+z)/2
		}
	}
	return off
}

// maxClockOffset is how far a helper's limiter clock may be from the wall
// clock: its local times are compared with Redis's TIME, and a clock 1ms
// behind showed as over-admission (lease admissions counted in the window
// before their grant's).
const maxClockOffset = 20 * time.Microsecond

// leaseDecision is one decision of a helper process: admitted or not,
// made in [from, to] (Unix ns), and its ResetAfter (ns).
type leaseDecision struct {
	allowed  bool
	from, to int64
	reset    int64
}

// leaseGiveBack is one give-back of a helper process: the left unused
// events of a lease granted at granted, given back in [from, to] (Unix
// ns).
type leaseGiveBack struct {
	left     int
	granted  int64
	from, to int64
}

// TestLeaseMultiProcess runs leaseProcesses processes with leases on one
// key for each leasable algorithm and checks, over every decision of all
// of them: no event beyond the policy (by the admissions' times: per
// window for the fixed window and the quota, the estimate at each event
// for the sliding counter, capacity + rate x elapsed for the buckets), and
// under-admission within the documented bound where a denial proves the
// key was saturated: leaseProcesses leases of at most Limit/MaxShare
// events, and for a bucket what its give-backs withheld (see
// checkBucketUnder), for a sliding counter less the previous window's
// weighted count at the denial.
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
					if cmd.ProcessState == nil {
						// Not waited for (a later Start failed): stop it,
						// and wait, so that buf is no longer written.
						_ = cmd.Process.Kill()
						_ = cmd.Wait()
					}
					if t.Failed() {
						t.Logf("process %d:\n%s", i, buf.String())
					}
				})
				outs = append(outs, out)
				cmds = append(cmds, cmd)
			}
			// Wait for every process before failing, so that no output is
			// read while it is written.
			var failed []string
			for i, cmd := range cmds {
				if err := cmd.Wait(); err != nil {
					failed = append(failed, fmt.Sprintf("process %d: %v", i, err))
				}
			}
			if len(failed) > 0 {
				t.Fatal(strings.Join(failed, "; "))
			}
			origin := int64(0)
			var all []leaseDecision
			var backs []leaseGiveBack
			for _, out := range outs {
				first, skew, ds, gs := readDecisions(t, out)
				if max(skew, -skew) > int64(maxClockOffset) {
					t.Fatalf("%s: the limiter's clock was %v off the wall clock (more than %v): its times cannot be checked against Redis's", out, time.Duration(skew), maxClockOffset)
				}
				if origin == 0 || first < origin {
					origin = first
				}
				all = append(all, ds...)
				backs = append(backs, gs...)
			}
			checkLeasedRun(t, p, origin, time.Unix(0, start).Add(leaseRun).UnixNano(), all, backs)
		})
	}
}

// readDecisions reads a helper's output: the time it began, its
// limiter clock's offset from the wall clock (clockOffset), its decisions
// and its give-backs.
func readDecisions(t *testing.T, path string) (first, skew int64, ds []leaseDecision, gs []leaseGiveBack) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() {
		t.Fatalf("%s: empty", path)
	}
	if _, err := fmt.Sscanf(sc.Text(), "%d %d", &first, &skew); err != nil {
		t.Fatalf("%s: %q: %v", path, sc.Text(), err)
	}
	for sc.Scan() {
		// "d allowed from to reset" or "g left granted from to".
		f := strings.Fields(sc.Text())
		if len(f) != 5 || f[0] != "d" && f[0] != "g" {
			t.Fatalf("%s: %q: want d or g and 4 fields", path, sc.Text())
		}
		var v [3]int64
		for i := range v {
			if v[i], err = strconv.ParseInt(f[i+2], 10, 64); err != nil {
				t.Fatalf("%s: %q: %v", path, sc.Text(), err)
			}
		}
		if f[0] == "d" {
			ds = append(ds, leaseDecision{f[1] == "true", v[0], v[1], v[2]})
			continue
		}
		left, err := strconv.Atoi(f[1])
		if err != nil {
			t.Fatalf("%s: %q: %v", path, sc.Text(), err)
		}
		gs = append(gs, leaseGiveBack{left, v[0], v[1], v[2]})
	}
	return first, skew, ds, gs
}

// span is when an event happened: in [lo, hi] (Unix ns), lo == hi when
// the time is known.
type span struct{ lo, hi int64 }

// decidedAt returns when each decision was made: the hook's interval, and
// for one script per decision of a windowed policy the script's exact
// time when the interval holds only one that agrees with its ResetAfter
// (an allowed or denied decision of a fixed window or sliding counter
// with anything counted ends it on a window boundary: now + ResetAfter is
// a multiple of the window; the script's now is whole microseconds, at
// most 1µs before the local time it was sent).
func decidedAt(p ratelimit.Policy, ds []leaseDecision) (admitted, denied []span) {
	w := int64(p.Period)
	windowed := p.Algorithm == ratelimit.FixedWindowAlgorithm || p.Algorithm == ratelimit.SlidingCounterAlgorithm
	for _, d := range ds {
		s := span{d.from, d.to}
		if windowed && s.lo < s.hi && d.reset > 0 {
			lo := s.lo - int64(time.Microsecond)
			// The boundaries b with lo <= b - reset <= hi.
			if first, last := ceilDiv(lo+d.reset, w), (s.hi+d.reset)/w; first == last {
				at := first*w - d.reset
				s = span{at, at}
			}
		}
		if d.allowed {
			admitted = append(admitted, s)
		} else {
			denied = append(denied, s)
		}
	}
	return admitted, denied
}

func ceilDiv(a, b int64) int64 { return (a + b - 1) / b }

// checkLeasedRun checks the decisions and give-backs of a run of p that
// began at origin and stopped asking at stop. A time known only within an
// interval is used in the direction that cannot fail by its uncertainty:
// an event counts against a bound on the events in an interval only when
// it is surely inside, and against a lower bound whenever it may be.
//
// Over-admission is checked on every admission. Under-admission is
// checked only where the key was saturated, as a denial proves (Redis
// had nothing left to grant): a machine too busy to keep the key
// saturated admits less without any fault of the leases.
func checkLeasedRun(t *testing.T, p ratelimit.Policy, origin, stop int64, ds []leaseDecision, backs []leaseGiveBack) {
	t.Helper()
	parked := leaseProcesses * max(1, p.Limit/defaultLeaseShare) // the documented bound
	w := int64(p.Period)
	admitted, denied := decidedAt(p, ds)
	his := make([]int64, len(admitted))
	los := make([]int64, len(admitted))
	points := 0
	for i, s := range admitted {
		his[i], los[i] = s.hi, s.lo
		if s.lo == s.hi {
			points++
		}
	}
	slices.Sort(his)
	slices.Sort(los)
	t.Logf("%d admitted (%d at a known time), %d denied, %d give-backs", len(admitted), points, len(denied), len(backs))
	switch p.Algorithm {
	case ratelimit.TokenBucketAlgorithm, ratelimit.LeakyBucketAlgorithm:
		// Every admission's event was charged at or before its time, and
		// the bucket started full at or after origin: by the time his[i]
		// at least i+1 events happened.
		rate := float64(p.Refill) / float64(p.Period) // per ns
		if p.Algorithm == ratelimit.LeakyBucketAlgorithm {
			rate = 1 / float64(p.Period)
		}
		for i, at := range his {
			if allowed := p.Limit + int(rate*float64(at-origin)); i+1 > allowed {
				t.Fatalf("event %d at +%v: %d admitted, the bucket allows %d", i, time.Duration(at-origin), i+1, allowed)
			}
		}
		// The documented bound over every interval [a, b]: at most
		// capacity + rate x (b - a) + parked events (the leases granted
		// before a and used in it). Surely inside [los[i], his[j]] are at
		// least (j + 1) - i events: j + 1 happened by his[j], at most i
		// of them before los[i]. For each b = his[j] the worst a = los[i]
		// <= b maximizes rate x los[i] - i: keep its running maximum.
		best, from := math.Inf(-1), 0
		for i, j := 0, 0; j < len(his); j++ {
			b := his[j]
			for ; i < len(los) && los[i] <= b; i++ {
				if v := rate*float64(los[i]-origin) - float64(i); v > best {
					best, from = v, i
				}
			}
			if excess := float64(j+1) - rate*float64(b-origin) + best; excess > float64(p.Limit+parked)+1e-9 {
				a := los[from]
				t.Fatalf("[+%v, +%v]: at least %d admitted, the bound is %d + %.1f + %d parked", time.Duration(a-origin), time.Duration(b-origin), j+1-from, p.Limit, rate*float64(b-a), parked)
			}
		}
		checkBucketUnder(t, p, rate, parked, admitted, denied, backs)
	case ratelimit.FixedWindowAlgorithm, ratelimit.SlidingCounterAlgorithm:
		// Over-admission by the events whose time is known (the others
		// could be in either of two windows; fewer events cannot raise a
		// count or an estimate), under-admission by every event that may
		// be in the window.
		var times []int64
		most := map[int64]int{}
		for _, s := range admitted {
			if s.lo == s.hi {
				times = append(times, s.lo)
			}
			for k := s.lo / w; k <= s.hi/w; k++ {
				most[k]++
			}
		}
		slices.Sort(times)
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
		// A denial at offset e of window k proves that Redis had less than
		// one event left there: the events charged in the window reached
		// Limit less, for the sliding counter, the previous window's count
		// weighted by (w - e) / w. Of those at most the leases parked at
		// the window's end are not admitted in it. The previous window's
		// count on Redis is what it admitted and what was parked at its
		// end (leases end with their window). So a whole window of the run
		// with a denial (the latest one surely in it) admits at least
		// Limit - parked - (previous + parked) x (w - e) / w.
		lastDenial := map[int64]int64{} // window: the latest offset of a denial surely in it
		for _, s := range denied {
			if k := s.lo / w; k == s.hi/w {
				if e, ok := lastDenial[k]; !ok || s.lo-k*w > e {
					lastDenial[k] = s.lo - k*w
				}
			}
		}
		var full []int
		for k := origin/w + 1; (k+1)*w <= stop; k++ {
			full = append(full, most[k])
			e, ok := lastDenial[k]
			if !ok {
				continue
			}
			want := p.Limit - parked
			if p.Algorithm == ratelimit.SlidingCounterAlgorithm {
				want -= int(math.Ceil(float64(most[k-1]+parked) * float64(w-e) / float64(w)))
			}
			if most[k] < want {
				t.Errorf("window %d, denied at +%v: admitted %d, below %d", k, time.Duration(e), most[k], want)
			}
		}
		t.Logf("admitted per whole window: %v (limit %d, bound %d parked; windows with a denial: %d)", full, p.Limit, parked, len(lastDenial))
	case ratelimit.QuotaAlgorithm:
		t.Logf("%d admitted (limit %d, bound %d parked)", len(admitted), p.Limit, parked)
		if len(admitted) > p.Limit {
			t.Fatalf("%d admitted in one period, limit %d", len(admitted), p.Limit)
		}
		if len(denied) > 0 && len(admitted) < p.Limit-parked {
			t.Errorf("%d admitted, below %d - %d parked", len(admitted), p.Limit, parked)
		}
	}
}

// checkBucketUnder checks a bucket's under-admission (rate per ns) over
// each stretch of the run in which the bucket was surely never full:
// between denials at known times (grants', on Redis's clock) no farther
// apart than (capacity - 1 - parked) / rate. At each denial the bucket
// held less than one event; until the next it gained the refill and at
// most what was given back of the leases held at the denial (parked;
// what is given back of a later lease was charged after it), so it stayed
// below full and no refill was lost to the cap. So all the refill between
// the first and the last denial of a stretch, at T1 and T2, was charged by
// T2, give or take the one event a level below 1 hides; of it, not
// admitted in (T1, T2] are at most the leases parked at T2 and what the
// give-backs made in between withheld: a bucket's give-back withholds up
// to refill x (its time - the grant's), at most the events it gives back,
// in case refill cancelled them (docs/redis.md, "Leases": that is the
// under-admission it documents besides the parked leases).
func checkBucketUnder(t *testing.T, p ratelimit.Policy, rate float64, parked int, admitted, denied []span, backs []leaseGiveBack) {
	t.Helper()
	var at []int64
	for _, s := range denied {
		if s.lo == s.hi {
			at = append(at, s.lo)
		}
	}
	slices.Sort(at)
	gap := int64(float64(p.Limit-1-parked) / rate)
	measured, longest := 0, time.Duration(0)
	for i := 0; i < len(at); {
		j := i
		for j+1 < len(at) && at[j+1]-at[j] <= gap {
			j++
		}
		t1, t2 := at[i], at[j]
		i = j + 1
		if t1 == t2 {
			continue
		}
		got := 0
		for _, s := range admitted {
			if s.hi > t1 && s.lo <= t2 {
				got++
			}
		}
		withheld := 0
		for _, g := range backs {
			if g.to > t1 && g.from <= t2 {
				withheld += min(g.left, int(rate*float64(g.to-g.granted)))
			}
		}
		refill := int(rate * float64(t2-t1))
		under := refill - got
		measured++
		if d := time.Duration(t2 - t1); d > longest {
			longest = d
			t.Logf("between denials %v apart: %d admitted of %d refilled (under-admission %d, bound %d parked + %d withheld by give-backs)", d, got, refill, under, parked, withheld)
		}
		if under > parked+withheld+1 {
			t.Errorf("between denials %v apart: %d admitted of %d refilled: under-admission %d beyond the bound %d parked + %d withheld", time.Duration(t2-t1), got, refill, under, parked, withheld)
		}
	}
	if measured == 0 {
		t.Logf("the key was not saturated, under-admission not measured")
	}
}
