package redislimit

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
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
	"github.com/stretchr/testify/require"
)

// The concurrency limit across OS processes: exactness (4 processes x 64
// goroutines on one key never hold more than the limit, as every holder
// sees it), and crashes (a SIGKILLed holder's permits come back within
// the expiry; a SIGSTOPped one is told its permits are lost before any
// other process gets them, and its late Release frees no one else's).
//
// The children are this test binary run again with ccChildEnv set to
// what they must do (TestConcurrencyChild). The exactness test makes
// 10^5 acquisitions in all; set RLKIT_CC_LONG=1 for 10^6 (the issue's
// long run).

const (
	ccChildEnv   = "REDISLIMIT_CC_CHILD"
	ccProcs      = 4
	ccWorkers    = 64
	ccLimit      = 8
	ccShortTotal = 100_000
	ccLongTotal  = 1_000_000
)

// ccSpec is what a child is told: the Redis, the prefix, the limit, the
// expiry, the mode ("hammer" or "hold") and, for hammer, its share of the
// acquisitions.
type ccSpec struct {
	Addrs   []string
	Cluster bool
	Prefix  string
	Limit   int
	Expiry  time.Duration
	Mode    string
	Acqs    int
}

func (s ccSpec) env() string {
	return fmt.Sprintf("%s|%t|%s|%d|%d|%s|%d", strings.Join(s.Addrs, ","), s.Cluster, s.Prefix, s.Limit, s.Expiry, s.Mode, s.Acqs)
}

func parseCCSpec(v string) (ccSpec, error) {
	f := strings.Split(v, "|")
	if len(f) != 7 {
		return ccSpec{}, fmt.Errorf("bad spec %q", v)
	}
	limit, err1 := strconv.Atoi(f[3])
	exp, err2 := strconv.ParseInt(f[4], 10, 64)
	acqs, err3 := strconv.Atoi(f[6])
	if err1 != nil || err2 != nil || err3 != nil {
		return ccSpec{}, fmt.Errorf("bad spec %q", v)
	}
	return ccSpec{Addrs: strings.Split(f[0], ","), Cluster: f[1] == "true", Prefix: f[2], Limit: limit,
		Expiry: time.Duration(exp), Mode: f[5], Acqs: acqs}, nil
}

func (s ccSpec) client() redis.UniversalClient {
	if s.Cluster {
		return redis.NewClusterClient(&redis.ClusterOptions{Addrs: s.Addrs, ContextTimeoutEnabled: true, PoolSize: 128})
	}
	return redis.NewClient(&redis.Options{Addr: s.Addrs[0], PoolSize: 128, ContextTimeoutEnabled: true})
}

// ccKeyName is the one key the processes share; ccCounter, on another
// node of a Cluster maybe, counts the permits in use as their holders
// see it.
const ccKeyName = "tenant-{7}"

func (s ccSpec) counter() string { return s.Prefix + "inuse" }

// TestConcurrencyChild is the child process of the tests in this file. It
// does nothing unless started by one of them.
func TestConcurrencyChild(t *testing.T) {
	v := os.Getenv(ccChildEnv)
	if v == "" {
		t.Skip("child process of TestConcurrencyExact and TestConcurrencyCrash")
	}
	s, err := parseCCSpec(v)
	if err != nil {
		t.Fatal(err)
	}
	c := s.client()
	defer c.Close()
	cc, err := NewConcurrency(c, s.Limit, WithPrefix(s.Prefix), WithTimeout(5*time.Second), WithPermitExpiry(s.Expiry),
		WithFailurePolicy(FailClosed))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	switch s.Mode {
	case "hammer":
		ccHammer(s, c, cc)
	case "hold":
		ccHold(s, cc)
	default:
		t.Fatalf("mode %q", s.Mode)
	}
}

// ccHammer acquires s.Acqs times over ccWorkers goroutines, each holding
// its 1 or 2 permits a random short time, and prints what it saw.
func ccHammer(s ccSpec, c redis.UniversalClient, cc *Concurrency) {
	var budget, acquired, overshoot, lost, errs, maxSeen atomic.Int64
	budget.Store(int64(s.Acqs))
	ctx := context.Background()
	var wg sync.WaitGroup
	for w := range ccWorkers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rnd := rand.New(rand.NewPCG(uint64(os.Getpid()), uint64(w)))
			for budget.Add(-1) >= 0 {
				n := 1 + rnd.IntN(2)
				var p ratelimit.Permit
				var err error
				if rnd.IntN(4) == 0 {
					p, err = cc.Acquire(ctx, ccKeyName, n)
				} else {
					for {
						var d ratelimit.Decision
						p, d, err = cc.TryAcquire(ctx, ccKeyName, n)
						if err != nil || d.Allowed {
							break
						}
						time.Sleep(time.Duration(100+rnd.IntN(500)) * time.Microsecond)
					}
				}
				if err != nil {
					errs.Add(1)
					continue
				}
				acquired.Add(1)
				v, err := c.IncrBy(ctx, s.counter(), int64(n)).Result()
				if err != nil {
					errs.Add(1)
				}
				if v > int64(s.Limit) {
					overshoot.Add(1)
				}
				for m := maxSeen.Load(); v > m && !maxSeen.CompareAndSwap(m, v); m = maxSeen.Load() {
				}
				if h := rnd.IntN(200) - 50; h > 0 {
					time.Sleep(time.Duration(h) * time.Microsecond)
				}
				if isLost(p) {
					lost.Add(1)
				}
				if v, err := c.DecrBy(ctx, s.counter(), int64(n)).Result(); err != nil || v < 0 {
					errs.Add(1)
				}
				p.Release()
			}
		}()
	}
	wg.Wait()
	fmt.Printf("CCRESULT %d %d %d %d %d\n", acquired.Load(), overshoot.Load(), maxSeen.Load(), lost.Load(), errs.Load())
}

// ccHold acquires all the permits of the key, prints "HELD", then "LOST
// <t> <due>" when Lost closes (t the Unix ns it closed at, due the Unix
// ns it was due at: the last renewal's send time + expiry - margin), and
// releases on a line "RELEASE" on stdin, printing "RELEASED".
func ccHold(s ccSpec, cc *Concurrency) {
	cc.lostHook = func(h *ccHolder, at time.Time) {
		fmt.Printf("LOST %d %d\n", at.UnixNano(), h.deadline.UnixNano())
	}
	_, d, err := cc.TryAcquire(context.Background(), ccKeyName, s.Limit)
	if err != nil || !d.Allowed {
		fmt.Printf("NOTHELD %v %+v\n", err, d)
		return
	}
	cc.mu.Lock()
	var p *ccHolder
	for _, hs := range cc.held {
		for h := range hs {
			p = h
		}
	}
	cc.mu.Unlock()
	fmt.Println("HELD")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		if sc.Text() == "RELEASE" {
			p.Release(0)
			fmt.Println("RELEASED")
			return
		}
	}
}

// ccChild is a running child process.
type ccChild struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	done  chan struct{} // closed when it exited, with err
	err   error
}

// wait waits for the child to exit and returns how it did.
func (ch *ccChild) wait() error {
	<-ch.done
	return ch.err
}

func startCCChild(t *testing.T, s ccSpec) *ccChild {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestConcurrencyChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), ccChildEnv+"="+s.env())
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	ch := &ccChild{cmd: cmd, stdin: stdin, lines: make(chan string, 100), done: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			ch.lines <- sc.Text()
		}
		close(ch.lines)
		ch.err = cmd.Wait()
		close(ch.done)
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = stdin.Close()
		<-ch.done
	})
	return ch
}

// expect returns the fields of the next line of the child's output that
// starts with prefix.
func (ch *ccChild) expect(t *testing.T, prefix string, within time.Duration) []string {
	t.Helper()
	deadline := time.After(within)
	for {
		select {
		case l, ok := <-ch.lines:
			if !ok {
				t.Fatalf("child exited before printing %s", prefix)
			}
			if strings.HasPrefix(l, prefix) {
				return strings.Fields(l)
			}
		case <-deadline:
			t.Fatalf("child printed no %s within %v", prefix, within)
		}
	}
}

func TestConcurrencyExact(t *testing.T) {
	t.Parallel()
	if os.Getenv(ccChildEnv) != "" {
		t.Skip("in a child process")
	}
	srv, _ := startRedis(t)
	runCCExact(t, ccSpec{Addrs: []string{srv.Addr()}, Prefix: uniquePrefix(t)})
}

func TestConcurrencyExactCluster(t *testing.T) {
	t.Parallel()
	if os.Getenv(ccChildEnv) != "" {
		t.Skip("in a child process")
	}
	cl := redistest.StartCluster(t)
	runCCExact(t, ccSpec{Addrs: cl.Addrs(), Cluster: true, Prefix: uniquePrefix(t)})
}

func ccTotal() int {
	if os.Getenv("RLKIT_CC_LONG") != "" {
		return ccLongTotal
	}
	return ccShortTotal
}

func runCCExact(t *testing.T, s ccSpec) {
	s.Limit, s.Expiry, s.Mode, s.Acqs = ccLimit, 10*time.Second, "hammer", ccTotal()/ccProcs
	start := time.Now()
	children := make([]*ccChild, ccProcs)
	for i := range children {
		children[i] = startCCChild(t, s)
	}
	var acquired, overshoot, maxSeen, lost, errs int64
	for _, ch := range children {
		f := ch.expect(t, "CCRESULT", 10*time.Minute)
		v := make([]int64, 5)
		for i := range v {
			v[i], _ = strconv.ParseInt(f[1+i], 10, 64)
		}
		acquired += v[0]
		overshoot += v[1]
		maxSeen = max(maxSeen, v[2])
		lost += v[3]
		errs += v[4]
		require.NoError(t, ch.wait())
	}
	t.Logf("%d processes x %d goroutines, limit %d: %d acquisitions in %v, most in use seen %d, overshoot %d, lost %d, errors %d",
		ccProcs, ccWorkers, ccLimit, acquired, time.Since(start).Round(time.Millisecond), maxSeen, overshoot, lost, errs)
	require.Zero(t, overshoot, "holders saw more than the limit in use")
	require.Zero(t, errs)
	require.Zero(t, lost, "a permit was lost while held (no fault, 10s expiry)")
	require.Equal(t, int64(s.Acqs*ccProcs), acquired)
	require.LessOrEqual(t, maxSeen, int64(ccLimit))
}

// TestConcurrencyCrash: a SIGKILLed holder's permits are free again within
// the expiry plus 1s; a SIGSTOPped one's Lost is due before another
// process acquires its permits, closes as soon as it runs again, and its
// Release then frees nothing of the new holder's.
func TestConcurrencyCrash(t *testing.T) {
	t.Parallel()
	if os.Getenv(ccChildEnv) != "" {
		t.Skip("in a child process")
	}
	srv, c := startRedis(t)
	const expiry = time.Second
	t.Run("SIGKILL", func(t *testing.T) {
		s := ccSpec{Addrs: []string{srv.Addr()}, Prefix: uniquePrefix(t), Limit: 4, Expiry: expiry, Mode: "hold"}
		ch := startCCChild(t, s)
		ch.expect(t, "HELD", 30*time.Second)
		time.Sleep(expiry / 2) // a renewal round or so
		require.NoError(t, ch.cmd.Process.Kill())
		killed := time.Now()
		cc, err := NewConcurrency(c, s.Limit, WithPrefix(s.Prefix), WithPermitExpiry(expiry))
		require.NoError(t, err)
		defer cc.Close()
		for {
			p, d, err := cc.TryAcquire(bg(), ccKeyName, s.Limit)
			require.NoError(t, err)
			if d.Allowed {
				p.Release()
				break
			}
			require.Less(t, time.Since(killed), expiry+time.Second, "the killed holder's permits are not free within expiry + 1s")
			time.Sleep(5 * time.Millisecond)
		}
		t.Logf("a killed holder's permits were free again %v after SIGKILL (expiry %v)", time.Since(killed).Round(time.Millisecond), expiry)
	})
	t.Run("SIGSTOP", func(t *testing.T) {
		s := ccSpec{Addrs: []string{srv.Addr()}, Prefix: uniquePrefix(t), Limit: 4, Expiry: expiry, Mode: "hold"}
		ch := startCCChild(t, s)
		ch.expect(t, "HELD", 30*time.Second)
		require.NoError(t, ch.cmd.Process.Signal(syscall.SIGSTOP))
		stopped := time.Now()
		cc, err := NewConcurrency(c, s.Limit, WithPrefix(s.Prefix), WithPermitExpiry(expiry))
		require.NoError(t, err)
		defer cc.Close()
		var p ratelimit.Permit
		// granted is a lower bound of when Redis gave the permits to this
		// process: after both the send of the admitting call and the
		// return of the denied one before it.
		var granted time.Time
		for {
			sent := time.Now()
			var d ratelimit.Decision
			p, d, err = cc.TryAcquire(bg(), ccKeyName, s.Limit)
			require.NoError(t, err)
			if d.Allowed {
				if sent.After(granted) {
					granted = sent
				}
				break
			}
			granted = time.Now()
			require.Less(t, time.Since(stopped), 3*expiry)
			time.Sleep(5 * time.Millisecond)
		}
		defer p.Release()
		resumed := time.Now()
		require.NoError(t, ch.cmd.Process.Signal(syscall.SIGCONT))
		f := ch.expect(t, "LOST", 10*time.Second)
		at, _ := strconv.ParseInt(f[1], 10, 64)
		due, _ := strconv.ParseInt(f[2], 10, 64)
		// On this machine's wall clock, the stopped holder's Lost was due
		// before Redis gave its permits to another process.
		require.Less(t, due, granted.UnixNano(), "the stopped holder's Lost was due after another process got its permits")
		t.Logf("Lost due %v before another process acquired (expiry %v, margin %v); it closed %v after SIGCONT was sent",
			time.Duration(granted.UnixNano()-due).Round(time.Millisecond), expiry, expiry/5, time.Duration(at-resumed.UnixNano()).Round(time.Microsecond))
		_, err = io.WriteString(ch.stdin, "RELEASE\n")
		require.NoError(t, err)
		ch.expect(t, "RELEASED", 10*time.Second)
		n, err := cc.InFlight(bg(), ccKeyName)
		require.NoError(t, err)
		require.Equal(t, s.Limit, n, "the resumed holder's Release freed the new holder's permits")
		require.False(t, isLost(p))
	})
}
