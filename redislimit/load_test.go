package redislimit

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/bits"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/redistest"
	"github.com/rlkit/ratelimit/internal/testkit/reliability"
)

// The multi-process load harness of the fault scenarios (issue 12).
//
// runLoad re-executes this test binary procs times with
// -test.run=^TestWorkerLoad$ and the loadSpec (JSON) in the environment
// variable envLoadSpec. Each child builds its own go-redis client and
// Limiter from the spec, prints readyLine on stdout and waits for the
// parent's "go <start> <stop>" line on stdin (Unix nanoseconds), so that
// every process starts and stops at the same wall-clock times whatever
// its start-up took; a later "stop <stop>" line moves the stop earlier
// (see StopAfterFault). Its goroutines then call AllowN in a loop; every call
// is classified (admitted or denied by Redis, decided by the failure
// policy, other error) and timed on the wall clock, which the processes of
// one machine share. At the stop time the child writes a compact summary
// (loadReport: counts, first and last times of interest, per-slot latency
// histograms) as JSON to the file named by envLoadOut and exits.
//
// Nothing may hang: a child exits when its stdin closes (the parent went
// away), dies with the parent on Linux (Pdeathsig), and is killed by the
// parent at a deadline (the run's stop time plus loadGrace).

const (
	envLoadSpec = "RLKIT_LOAD_SPEC" // the loadSpec, JSON; set only in children
	envLoadOut  = "RLKIT_LOAD_OUT"  // where the child writes its loadReport
	readyLine   = "rlkit-load: ready"

	// loadSlot is the width of the time slots of the latency histograms.
	loadSlot = 50 * time.Millisecond
	// loadGrace is how long after the stop time the parent waits for a
	// child's report before it kills the child; it also bounds start-up.
	loadGrace = 30 * time.Second
	// maxErrorTexts bounds the distinct error texts a child reports.
	maxErrorTexts = 8
)

// loadSpec is what every child process of [runLoad] runs. Durations are
// JSON nanoseconds.
type loadSpec struct {
	// How to connect: one of Addr (a single server), MasterName with
	// Sentinels (redis.NewFailoverClient) or Cluster (redis.NewClusterClient).
	Addr       string   `json:"addr,omitempty"`
	MasterName string   `json:"master_name,omitempty"`
	Sentinels  []string `json:"sentinels,omitempty"`
	Cluster    []string `json:"cluster,omitempty"`

	// The policy. Algorithm "tokenbucket": burst Limit, refilling one
	// event per Window (so a run shorter than Window can admit at most
	// Limit events). Algorithm "fixedwindow": Limit per Window (windows are
	// aligned to the epoch, so a run can cross a boundary: prefer the
	// token bucket for over-admission figures).
	Algorithm string        `json:"algorithm"`
	Limit     int           `json:"limit"`
	Window    time.Duration `json:"window"`

	// Limiter options. Failure is "closed", "open" or "local" (local needs
	// Instances, the WithLocalFallback argument). Zero Timeout and unset
	// Breaker keep the defaults. ReplicaAck > 0 asks for
	// WithReplicaAck(ReplicaAck, ReplicaAckTimeout). NoDenyCache sends
	// every call to Redis (WithDenyCache(0)).
	Timeout           time.Duration  `json:"timeout,omitempty"`
	Failure           string         `json:"failure"`
	Instances         int            `json:"instances,omitempty"`
	Breaker           *time.Duration `json:"breaker,omitempty"`
	ReplicaAck        int            `json:"replica_ack,omitempty"`
	ReplicaAckTimeout time.Duration  `json:"replica_ack_timeout,omitempty"`
	NoDenyCache       bool           `json:"no_deny_cache,omitempty"`
	Prefix            string         `json:"prefix"`

	// The load: Goroutines per process calling AllowN(ctx, Key, N) in a
	// loop for Duration, sleeping Pause after each call (0: none). With
	// DeniedFor > 0 a process stops sooner: DeniedFor after both the first
	// call Redis denied and the last failed call (in that process) ended,
	// which on a key that cannot refill gives a final phase of that length
	// after the key is spent and the fault is over.
	Key        string        `json:"key"`
	N          int           `json:"n"`
	Goroutines int           `json:"goroutines"`
	Duration   time.Duration `json:"duration"`
	Pause      time.Duration `json:"pause,omitempty"`
	DeniedFor  time.Duration `json:"denied_for,omitempty"`

	// StopAfterFault > 0 ends the run that long after runLoad's fault
	// function returns, when that is before Duration, which is then only
	// an upper bound. A fault function that returns once the failover is
	// over (a replica promoted) so gets the same tail of load after it
	// however long the failover took: on a loaded machine a Redis Cluster
	// election that fails costs 4 s more, one that a fixed Duration does
	// not leave room for. Read by the parent only.
	StopAfterFault time.Duration `json:"-"`
}

// policy returns the spec's ratelimit.Policy.
func (s loadSpec) policy() (ratelimit.Policy, error) {
	switch s.Algorithm {
	case "tokenbucket":
		return ratelimit.TokenBucketPolicy(ratelimit.Per(1, s.Window), s.Limit), nil
	case "fixedwindow":
		return ratelimit.FixedWindowPolicy(s.Limit, s.Window), nil
	}
	return ratelimit.Policy{}, fmt.Errorf("ratelimit: load spec: unknown algorithm %q", s.Algorithm)
}

// options returns the spec's limiter options.
func (s loadSpec) options() ([]Option, error) {
	opts := []Option{WithPrefix(s.Prefix), WithLogger(nil)}
	if s.Timeout > 0 {
		opts = append(opts, WithTimeout(s.Timeout))
	}
	switch s.Failure {
	case "closed":
		opts = append(opts, WithFailurePolicy(FailClosed))
	case "open":
		opts = append(opts, WithFailurePolicy(FailOpen))
	case "local":
		opts = append(opts, WithLocalFallback(s.Instances))
	default:
		return nil, fmt.Errorf("ratelimit: load spec: unknown failure policy %q", s.Failure)
	}
	if s.Breaker != nil {
		opts = append(opts, WithBreaker(*s.Breaker))
	}
	if s.NoDenyCache {
		opts = append(opts, WithDenyCache(0))
	}
	if s.ReplicaAck > 0 {
		opts = append(opts, WithReplicaAck(s.ReplicaAck, s.ReplicaAckTimeout))
	}
	return opts, nil
}

// client returns the go-redis client the spec names, with
// ContextTimeoutEnabled as the documentation advises.
func (s loadSpec) client() (redis.UniversalClient, error) {
	switch {
	case s.MasterName != "":
		return redis.NewFailoverClient(&redis.FailoverOptions{
			MasterName:            s.MasterName,
			SentinelAddrs:         s.Sentinels,
			ContextTimeoutEnabled: true,
		}), nil
	case len(s.Cluster) > 0:
		return redis.NewClusterClient(&redis.ClusterOptions{
			Addrs:                 s.Cluster,
			ContextTimeoutEnabled: true,
		}), nil
	case s.Addr != "":
		return redis.NewClient(&redis.Options{Addr: s.Addr, ContextTimeoutEnabled: true}), nil
	}
	return nil, errors.New("ratelimit: load spec: no address")
}

// loadSlotStats is what happened in one loadSlot of a run, by the start
// time of each call.
type loadSlotStats struct {
	Calls    int64 `json:"calls,omitempty"`
	Admitted int64 `json:"admitted,omitempty"` // events
	Failed   int64 `json:"failed,omitempty"`   // calls
	MaxUS    int64 `json:"max_us,omitempty"`   // the slowest call, µs
	// Lat counts calls by latency bucket (see latBucket).
	Lat map[int]int64 `json:"lat,omitempty"`
}

// loadReport is one child's summary of a run (and, merged, the whole run's).
// Times are Unix nanoseconds, 0 when there was no such call.
type loadReport struct {
	Start, Stop int64 // the run's start and stop times, as the parent sent them

	Calls            int64 // AllowN calls
	Admitted         int64 // events admitted, by Redis or by the failure policy
	Denied           int64 // calls denied by Redis
	Failed           int64 // calls with an error that is not the caller's cancellation
	Fallback         int64 // of Failed, errors wrapping ErrUnavailable: the failure policy decided
	FallbackAdmitted int64 // events admitted by the failure policy

	FirstFailStart int64 // the start of the first failed call
	LastFailEnd    int64 // the end of the last failed call
	LastAdmitStart int64 // the start of the last call Redis admitted
	FirstDenyEnd   int64 // the end of the first call Redis denied

	Errors map[string]int64 // failed calls by error text (at most maxErrorTexts texts, then "(other texts)")
	Slots  []loadSlotStats  // by start time: slot i covers [Start+i*loadSlot, Start+(i+1)*loadSlot)
}

// merge adds o (another process's report of the same run) to r.
func (r *loadReport) merge(o loadReport) {
	r.Calls += o.Calls
	r.Admitted += o.Admitted
	r.Denied += o.Denied
	r.Failed += o.Failed
	r.Fallback += o.Fallback
	r.FallbackAdmitted += o.FallbackAdmitted
	r.FirstFailStart = minTime(r.FirstFailStart, o.FirstFailStart)
	r.LastFailEnd = max(r.LastFailEnd, o.LastFailEnd)
	r.LastAdmitStart = max(r.LastAdmitStart, o.LastAdmitStart)
	r.FirstDenyEnd = minTime(r.FirstDenyEnd, o.FirstDenyEnd)
	for text, n := range o.Errors {
		if r.Errors == nil {
			r.Errors = map[string]int64{}
		}
		r.Errors[text] += n
	}
	for len(r.Slots) < len(o.Slots) {
		r.Slots = append(r.Slots, loadSlotStats{})
	}
	for i, s := range o.Slots {
		d := &r.Slots[i]
		d.Calls += s.Calls
		d.Admitted += s.Admitted
		d.Failed += s.Failed
		d.MaxUS = max(d.MaxUS, s.MaxUS)
		for b, n := range s.Lat {
			if d.Lat == nil {
				d.Lat = map[int]int64{}
			}
			d.Lat[b] += n
		}
	}
}

// minTime is the earlier of two times, where 0 means none.
func minTime(a, b int64) int64 {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	return min(a, b)
}

// latBucket maps a latency in microseconds to a histogram bucket: exact
// below 32 µs, then 16 buckets per doubling (each at most 1/16 of its
// values wide).
func latBucket(us int64) int {
	if us < 16 {
		return int(max(us, 0))
	}
	shift := bits.Len64(uint64(us)) - 5
	return shift*16 + int(us>>shift)
}

// latBucketMax returns the largest latency (µs) that latBucket maps to b.
func latBucketMax(b int) int64 {
	if b < 16 {
		return int64(b)
	}
	shift := (b - 16) / 16
	m := int64(b - 16*shift)
	return (m+1)<<shift - 1
}

// loadRecorder collects one child's calls. Safe for concurrent use.
type loadRecorder struct {
	start     int64
	deniedFor int64        // the spec's DeniedFor
	stopAt    atomic.Int64 // deniedFor after the first denial and the last failure; 0 before a denial
	mu        sync.Mutex
	rep       loadReport
}

// record adds one call that started at s and ended at e (Unix ns).
func (rec *loadRecorder) record(s, e int64, n int, d ratelimit.Decision, err error) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	r := &rec.rep
	r.Calls++
	if d.Allowed {
		r.Admitted += int64(n)
	}
	failed := err != nil && !errors.Is(err, context.Canceled)
	switch {
	case failed:
		r.Failed++
		if errors.Is(err, ErrUnavailable) {
			r.Fallback++
			if d.Allowed {
				r.FallbackAdmitted += int64(n)
			}
		}
		r.FirstFailStart = minTime(r.FirstFailStart, s)
		r.LastFailEnd = max(r.LastFailEnd, e)
		if rec.deniedFor > 0 && r.Denied > 0 {
			rec.stopAt.Store(max(rec.stopAt.Load(), e+rec.deniedFor))
		}
		text := err.Error()
		if len(text) > 160 {
			text = text[:160]
		}
		if _, ok := r.Errors[text]; !ok && len(r.Errors) >= maxErrorTexts {
			text = "(other texts)"
		}
		if r.Errors == nil {
			r.Errors = map[string]int64{}
		}
		r.Errors[text]++
	case err != nil:
		// The caller's own cancellation: neither a decision nor a failure.
	case d.Allowed:
		r.LastAdmitStart = max(r.LastAdmitStart, s)
	default:
		r.Denied++
		r.FirstDenyEnd = minTime(r.FirstDenyEnd, e)
		if rec.deniedFor > 0 && r.Denied == 1 {
			rec.stopAt.Store(max(e, r.LastFailEnd) + rec.deniedFor)
		}
	}
	i := int(max(s-rec.start, 0) / int64(loadSlot))
	for len(r.Slots) <= i {
		r.Slots = append(r.Slots, loadSlotStats{})
	}
	sl := &r.Slots[i]
	sl.Calls++
	if d.Allowed {
		sl.Admitted += int64(n)
	}
	if failed {
		sl.Failed++
	}
	us := (e - s) / 1e3
	sl.MaxUS = max(sl.MaxUS, us)
	if sl.Lat == nil {
		sl.Lat = map[int]int64{}
	}
	sl.Lat[latBucket(us)]++
}

// TestWorkerLoad is the body of runLoad's child processes; it skips unless
// envLoadSpec is set.
func TestWorkerLoad(t *testing.T) {
	raw := os.Getenv(envLoadSpec)
	if raw == "" {
		t.Skip("a child process of runLoad; runs only with " + envLoadSpec + " set")
	}
	if err := workerLoad(raw, os.Getenv(envLoadOut), os.Stdin, os.Stdout); err != nil {
		t.Fatal(err)
	}
}

// workerLoad runs one child: spec, output file, the parent's control
// stream, where to say ready.
func workerLoad(raw, out string, control io.Reader, ready io.Writer) error {
	var spec loadSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		return fmt.Errorf("ratelimit: load spec: %w", err)
	}
	p, err := spec.policy()
	if err != nil {
		return err
	}
	opts, err := spec.options()
	if err != nil {
		return err
	}
	client, err := spec.client()
	if err != nil {
		return err
	}
	defer client.Close()
	l, err := New(client, p, opts...)
	if err != nil {
		return err
	}
	// Connect before saying ready, so that start-up does not count as load.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	err = client.Ping(ctx).Err()
	cancel()
	if err != nil {
		return fmt.Errorf("ratelimit: load worker: PING: %w", err)
	}
	fmt.Fprintln(ready, readyLine)

	lines := bufio.NewScanner(control)
	if !lines.Scan() {
		return errors.New("ratelimit: load worker: no go line from the parent")
	}
	var start, stop int64
	if _, err := fmt.Sscanf(lines.Text(), "go %d %d", &start, &stop); err != nil {
		return fmt.Errorf("ratelimit: load worker: bad go line %q: %v", lines.Text(), err)
	}
	// A "stop" line moves the stop earlier; the parent closes our stdin
	// only by going away: stop at once then.
	var stopAt atomic.Int64
	stopAt.Store(stop)
	orphaned := make(chan struct{})
	go func() {
		for lines.Scan() {
			var at int64
			if _, err := fmt.Sscanf(lines.Text(), "stop %d", &at); err == nil && at < stopAt.Load() {
				stopAt.Store(at)
			}
		}
		close(orphaned)
	}()

	rec := &loadRecorder{start: start, deniedFor: int64(spec.DeniedFor)}
	rec.rep.Start, rec.rep.Stop = start, stop
	time.Sleep(time.Until(time.Unix(0, start)))
	var wg sync.WaitGroup
	var quit atomic.Bool
	for range spec.Goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !quit.Load() {
				s := time.Now()
				if at := s.UnixNano(); at >= stopAt.Load() || at >= rec.stopAt.Load() && rec.stopAt.Load() != 0 {
					return
				}
				d, err := l.AllowN(context.Background(), spec.Key, spec.N)
				e := time.Now()
				rec.record(s.UnixNano(), e.UnixNano(), spec.N, d, err)
				if spec.Pause > 0 {
					time.Sleep(spec.Pause)
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-orphaned:
		quit.Store(true)
		return errors.New("ratelimit: load worker: the parent went away")
	}
	rec.rep.Stop = stopAt.Load()
	b, err := json.Marshal(rec.rep)
	if err != nil {
		return err
	}
	return os.WriteFile(out, b, 0o644)
}

// loadStats is what runLoad measured, merged over every process.
type loadStats struct {
	loadReport
	Spec  loadSpec
	Procs int

	FaultStart int64         // what fault returned (Unix ns); 0 without a fault
	Recovery   time.Duration // FaultStart until the end of the last failed call (0 without failures)
	// Latencies of the calls that started in the fault window: from
	// FaultStart until the last failed call ended (at least one slot), by
	// slot; the whole run without a fault. Latencies are recorded in
	// whole microseconds (truncated); P50 and P99 are the upper bounds of
	// their buckets (at most 1/16 above the recorded value), Max is the
	// largest recorded value.
	P50, P99, Max time.Duration
	WindowCalls   int64 // calls in that window
}

// Over is the events admitted beyond the spec's limit (0 when exact).
func (s loadStats) Over() int64 { return max(s.Admitted-int64(s.Spec.Limit), 0) }

// result returns r with the measured fields filled in.
func (s loadStats) result(r reliability.Result) reliability.Result {
	r.Limit = int64(s.Spec.Limit)
	r.Calls = s.Calls
	r.Admitted = s.Admitted
	r.Over = s.Over()
	r.Failed = s.Failed
	r.Fallback = s.Fallback
	r.Recovery = s.Recovery
	r.P50, r.P99, r.Max = s.P50, s.P99, s.Max
	return r
}

// String is a one-line summary for logs.
func (s loadStats) String() string {
	return fmt.Sprintf("%d procs x %d goroutines: calls=%d admitted=%d (limit %d, over %d) denied=%d failed=%d fallback=%d (admitted %d) recovery=%v fault-window calls=%d p50=%v p99=%v max=%v errors=%v",
		s.Procs, s.Spec.Goroutines, s.Calls, s.Admitted, s.Spec.Limit, s.Over(), s.Denied, s.Failed, s.Fallback,
		s.FallbackAdmitted, s.Recovery, s.WindowCalls, s.P50, s.P99, s.Max, s.Errors)
}

// sinceStart returns t (Unix ns) as an offset from the run's start, for
// messages.
func (s loadStats) sinceStart(t int64) time.Duration {
	if t == 0 {
		return 0
	}
	return time.Duration(t - s.Start)
}

// runLoad runs spec in procs child processes (see the comment at the top of
// this file). Once every child is ready and the load has run for
// faultAfter, it calls fault (when not nil) on the test's goroutine, with a
// context that ends at the run's deadline; fault returns when the fault
// started. runLoad returns after every child has reported, or fails t.
func runLoad(t testing.TB, spec loadSpec, procs int, faultAfter time.Duration, fault func(ctx context.Context) (faultStart time.Time)) loadStats {
	t.Helper()
	if procs < 1 || spec.Goroutines < 1 || spec.N < 1 || spec.Duration <= 0 {
		t.Fatalf("runLoad: procs=%d goroutines=%d n=%d duration=%v: all must be positive", procs, spec.Goroutines, spec.N, spec.Duration)
	}
	if _, err := spec.policy(); err != nil {
		t.Fatal(err)
	}
	if _, err := spec.options(); err != nil {
		t.Fatal(err)
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatalf("runLoad: %v", err)
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		t.Fatalf("runLoad: %v", err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), loadGrace+spec.Duration+loadGrace)
	defer cancel()

	type child struct {
		cmd    *exec.Cmd
		stdin  io.WriteCloser
		out    string
		stderr strings.Builder
		ready  chan error
		done   chan error
	}
	children := make([]*child, procs)
	t.Cleanup(func() {
		// Normally every child has exited by now; this ends those that
		// have not (a failed test) and reaps them.
		cancel()
		for _, c := range children {
			if c != nil && c.done != nil {
				<-c.done
			}
		}
	})
	for i := range children {
		c := &child{out: filepath.Join(dir, fmt.Sprintf("report-%d.json", i)), ready: make(chan error, 1), done: make(chan error, 1)}
		children[i] = c
		c.cmd = exec.CommandContext(ctx, exe, "-test.run=^TestWorkerLoad$", "-test.count=1", "-test.timeout="+(spec.Duration+loadGrace).String())
		c.cmd.Env = append(os.Environ(),
			envLoadSpec+"="+string(raw),
			envLoadOut+"="+c.out,
			// The examples' TestMain starts a redis-server unless
			// REDIS_ADDR names one; the worker does not need it (and a
			// killed child would leave it running).
			"REDIS_ADDR=127.0.0.1:1",
		)
		c.cmd.SysProcAttr = loadProcAttr()
		c.cmd.Stderr = &c.stderr
		c.cmd.WaitDelay = time.Second
		if c.stdin, err = c.cmd.StdinPipe(); err != nil {
			t.Fatalf("runLoad: %v", err)
		}
		stdout, err := c.cmd.StdoutPipe()
		if err != nil {
			t.Fatalf("runLoad: %v", err)
		}
		if err := c.cmd.Start(); err != nil {
			c.done = nil
			t.Fatalf("runLoad: starting child %d: %v", i, err)
		}
		var tail strings.Builder // what the child printed, for errors
		go func() {
			sc := bufio.NewScanner(stdout)
			said := false
			for sc.Scan() {
				if !said && sc.Text() == readyLine {
					said = true
					c.ready <- nil
					continue
				}
				if tail.Len() < 8<<10 {
					tail.WriteString(sc.Text() + "\n")
				}
			}
			if !said {
				c.ready <- errors.New("exited before it was ready")
			}
			err := c.cmd.Wait()
			if err != nil {
				err = fmt.Errorf("%v\nstdout:\n%s", err, tail.String())
			}
			c.done <- err
			close(c.done)
		}()
	}

	readyBy := time.NewTimer(loadGrace)
	defer readyBy.Stop()
	for i, c := range children {
		select {
		case err := <-c.ready:
			if err != nil {
				cancel()
				werr := <-c.done
				t.Fatalf("runLoad: child %d %v: %v\nstderr:\n%s", i, err, werr, c.stderr.String())
			}
		case <-readyBy.C:
			t.Fatalf("runLoad: child %d not ready after %v", i, loadGrace)
		}
	}
	start := time.Now().Add(20 * time.Millisecond)
	stop := start.Add(spec.Duration)
	for i, c := range children {
		if _, err := fmt.Fprintf(c.stdin, "go %d %d\n", start.UnixNano(), stop.UnixNano()); err != nil {
			t.Fatalf("runLoad: child %d: %v", i, err)
		}
	}

	var faultStart time.Time
	if fault != nil {
		time.Sleep(time.Until(start.Add(faultAfter)))
		faultStart = fault(ctx)
		if at := time.Now().Add(spec.StopAfterFault); spec.StopAfterFault > 0 && at.Before(stop) {
			stop = at
			for _, c := range children {
				// A child that has stopped already (DeniedFor) no longer reads.
				_, _ = fmt.Fprintf(c.stdin, "stop %d\n", stop.UnixNano())
			}
		}
	}

	stats := loadStats{Spec: spec, Procs: procs}
	stats.Start, stats.Stop = start.UnixNano(), stop.UnixNano()
	for i, c := range children {
		err := <-c.done
		c.stdin.Close()
		if err != nil {
			t.Fatalf("runLoad: child %d: %v\nstderr:\n%s", i, err, c.stderr.String())
		}
		b, err := os.ReadFile(c.out)
		if err != nil {
			t.Fatalf("runLoad: child %d wrote no report: %v", i, err)
		}
		var rep loadReport
		if err := json.Unmarshal(b, &rep); err != nil {
			t.Fatalf("runLoad: child %d report: %v", i, err)
		}
		stats.merge(rep)
	}
	if !faultStart.IsZero() {
		stats.FaultStart = faultStart.UnixNano()
	}
	stats.summarize()
	return stats
}

// summarize computes Recovery and the fault window's latencies.
func (s *loadStats) summarize() {
	from, to := 0, len(s.Slots)-1
	if s.FaultStart != 0 {
		if s.LastFailEnd > s.FaultStart {
			s.Recovery = time.Duration(s.LastFailEnd - s.FaultStart)
		}
		from = int(max(s.FaultStart-s.Start, 0) / int64(loadSlot))
		to = from
		if s.LastFailEnd > s.FaultStart {
			to = int((s.LastFailEnd - s.Start) / int64(loadSlot))
		}
	}
	hist := map[int]int64{}
	var maxUS int64
	for i := from; i <= to && i < len(s.Slots); i++ {
		for b, n := range s.Slots[i].Lat {
			hist[b] += n
			s.WindowCalls += n
		}
		maxUS = max(maxUS, s.Slots[i].MaxUS)
	}
	buckets := make([]int, 0, len(hist))
	for b := range hist {
		buckets = append(buckets, b)
	}
	slices.Sort(buckets)
	at := func(q float64) time.Duration {
		want := int64(q*float64(s.WindowCalls) + 0.5)
		var seen int64
		for _, b := range buckets {
			seen += hist[b]
			if seen >= max(want, 1) {
				return time.Duration(min(latBucketMax(b), maxUS)) * time.Microsecond
			}
		}
		return 0
	}
	if s.WindowCalls > 0 {
		s.P50, s.P99, s.Max = at(0.50), at(0.99), time.Duration(maxUS)*time.Microsecond
	}
}

// slotTable returns the per-slot counts from..to as text, for logs.
func (s loadStats) slotTable(from, to time.Duration) string {
	var b strings.Builder
	for i, sl := range s.Slots {
		at := time.Duration(i) * loadSlot
		if at < from || at > to {
			continue
		}
		fmt.Fprintf(&b, "%7v calls=%-6d admitted=%-6d failed=%-6d max=%v\n", at, sl.Calls, sl.Admitted, sl.Failed, time.Duration(sl.MaxUS)*time.Microsecond)
	}
	return b.String()
}

// TestLoadHarnessExact checks the harness's counting: several processes
// on one healthy server, no fault, a key that cannot refill during the
// run: Redis admits exactly the limit, and the harness must count exactly
// that, with no failures.
func TestLoadHarnessExact(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	spec := loadSpec{
		Addr:      s.Addr(),
		Algorithm: "tokenbucket",
		Limit:     500, // small enough to be spent even on a slow, loaded machine
		Window:    time.Hour,
		// A healthy server must decide every call: a timeout far above
		// what a loaded two-CPU machine under -race needs (100ms is not).
		Timeout:    5 * time.Second,
		Failure:    "closed",
		Prefix:     uniquePrefix(t),
		Key:        "harness",
		N:          1,
		Goroutines: 8,
		Duration:   2 * time.Second,
		Pause:      100 * time.Microsecond,
	}
	st := runLoad(t, spec, 3, 0, nil)
	t.Log(st)
	t.Logf("first slots:\n%s", st.slotTable(0, 4*loadSlot))
	if r := st.result(reliability.Result{}); r.Admitted != int64(spec.Limit) || r.Over != 0 || r.Limit != int64(spec.Limit) {
		t.Errorf("admitted %d events (over %d), want exactly the limit %d", r.Admitted, r.Over, spec.Limit)
	}
	if st.Failed != 0 || st.Fallback != 0 {
		t.Errorf("failed %d, fallback %d calls on a healthy server, want 0: %v", st.Failed, st.Fallback, st.Errors)
	}
	if st.Denied == 0 || st.Calls != st.Denied+int64(spec.Limit) {
		t.Errorf("calls %d, denied %d: want calls = denied + %d admitted, with some denied", st.Calls, st.Denied, spec.Limit)
	}
	var slotCalls, slotAdmitted int64
	for _, sl := range st.Slots {
		slotCalls += sl.Calls
		slotAdmitted += sl.Admitted
	}
	if slotCalls != st.Calls || slotAdmitted != st.Admitted {
		t.Errorf("slots count %d calls and %d admitted, totals %d and %d", slotCalls, slotAdmitted, st.Calls, st.Admitted)
	}
	// Every call is in the histogram and the quantiles are in order. P50
	// may be 0: the deny cache answers most calls here in less than the
	// histogram's 1 µs (it failed "p50=0s" on a quiet machine). Max may
	// not: each admission is a round trip to Redis over loopback, two
	// system calls and a context switch at the least.
	if st.WindowCalls != st.Calls || st.P50 > st.P99 || st.P99 > st.Max || st.Max < time.Microsecond {
		t.Errorf("latencies over the whole run: %d calls of %d, p50=%v p99=%v max=%v", st.WindowCalls, st.Calls, st.P50, st.P99, st.Max)
	}
	// Once Redis denied, nothing more was admitted (the key cannot refill).
	if st.LastAdmitStart >= st.FirstDenyEnd {
		t.Errorf("an admission started at %v, after a denial ended at %v", st.sinceStart(st.LastAdmitStart), st.sinceStart(st.FirstDenyEnd))
	}
}

// TestLoadHarnessStopAfterFault: with StopAfterFault, a fault that takes
// longer than the run's Duration minus faultAfter (a slow failover) is
// still followed by StopAfterFault of load, and the run ends then, not at
// Duration, which is only an upper bound.
func TestLoadHarnessStopAfterFault(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	spec := loadSpec{
		Addr:           s.Addr(),
		Algorithm:      "tokenbucket",
		Limit:          100_000, // never spent: every call admitted
		Window:         time.Minute,
		Timeout:        5 * time.Second,
		Failure:        "closed",
		Prefix:         uniquePrefix(t),
		Key:            "harness",
		N:              1,
		Goroutines:     2,
		Duration:       time.Minute,
		Pause:          time.Millisecond,
		StopAfterFault: time.Second,
	}
	var returned time.Time
	st := runLoad(t, spec, 2, 200*time.Millisecond, func(context.Context) time.Time {
		began := time.Now()
		time.Sleep(1500 * time.Millisecond) // the "failover"
		returned = time.Now()
		return began
	})
	if got := time.Duration(st.Stop - returned.UnixNano()); got < spec.StopAfterFault || got > spec.StopAfterFault+time.Second {
		t.Errorf("the run stopped %v after the fault function returned, want StopAfterFault (%v)", got, spec.StopAfterFault)
	}
	var after, late int64
	for i, sl := range st.Slots {
		at := st.Start + int64(i)*int64(loadSlot)
		if at >= returned.UnixNano()+int64(spec.StopAfterFault)/2 && at+int64(loadSlot) <= st.Stop {
			after += sl.Calls
		}
		if at >= st.Stop {
			late += sl.Calls
		}
	}
	if after == 0 || late != 0 {
		t.Errorf("%d calls in the second half of the tail after the fault, %d started after the stop; want some, none\n%s", after, late, st.slotTable(0, time.Minute))
	}
	if st.Failed != 0 {
		t.Errorf("%d calls failed on a healthy server: %v", st.Failed, st.Errors)
	}
}

// TestLatBucket checks the histogram buckets: they tile the latencies in
// order, each at most 1/16 of its values wide.
func TestLatBucket(t *testing.T) {
	t.Parallel()
	if got := latBucket(-5); got != 0 {
		t.Errorf("latBucket(-5) = %d, want 0", got)
	}
	for b := 1; b < 600; b++ {
		lo, hi := latBucketMax(b-1)+1, latBucketMax(b)
		if hi < lo {
			t.Fatalf("bucket %d is [%d, %d], empty", b, lo, hi)
		}
		if latBucket(lo) != b || latBucket(hi) != b || latBucket(hi+1) != b+1 {
			t.Fatalf("bucket %d is not [%d, %d]: latBucket gives %d, %d, and %d above", b, lo, hi, latBucket(lo), latBucket(hi), latBucket(hi+1))
		}
		if lo >= 16 && float64(hi-lo+1) > float64(lo)/16 {
			t.Errorf("bucket %d is [%d, %d], more than 1/16 of its values wide", b, lo, hi)
		}
	}
	for us := int64(1); us < 1e12; us = us*3/2 + 1 {
		if b := latBucket(us); latBucketMax(b) < us || b > 0 && latBucketMax(b-1) >= us {
			t.Errorf("latBucket(%d) = %d, which covers (%d, %d]", us, b, latBucketMax(b-1), latBucketMax(b))
		}
	}
}
