package redistest

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// TestMain unsets REDIS_ADDR: these tests check servers the tests own, and TestRedisAddr sets
// REDIS_ADDR itself to check the external mode. It fails the run when a goroutine started by the
// tests outlives them.
func TestMain(m *testing.M) {
	os.Unsetenv("REDIS_ADDR")
	goleak.VerifyTestMain(m)
}

func TestStartAndDo(t *testing.T) {
	t.Parallel()
	s := Start(t)
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") {
		t.Errorf("Addr() = %q, want 127.0.0.1:port", s.Addr())
	}
	steps := []struct {
		args    []string
		want    string
		wantErr string // prefix of the error text; "" means no error
	}{
		{args: []string{"PING"}, want: "PONG"},
		{args: []string{"SET", "k", "hello\r\nworld"}, want: "OK"},
		{args: []string{"GET", "k"}, want: "hello\r\nworld"},
		{args: []string{"SET", "empty", ""}, want: "OK"},
		{args: []string{"GET", "empty"}, want: ""},
		{args: []string{"INCRBY", "n", "41"}, want: "41"},
		{args: []string{"RPUSH", "l", "a", "b"}, want: "2"},
		{args: []string{"LRANGE", "l", "0", "-1"}, want: "a\nb"},
		{args: []string{"NOSUCHCOMMAND"}, wantErr: "ERR unknown command"},
		{args: []string{"CONFIG", "GET", "save"}, want: "save\n"},
		{args: []string{"CONFIG", "GET", "appendonly"}, want: "appendonly\nno"},
	}
	for _, st := range steps {
		got, err := s.Do(st.args...)
		switch {
		case st.wantErr != "":
			if err == nil || !strings.HasPrefix(err.Error(), st.wantErr) {
				t.Errorf("Do(%q) error = %v, want prefix %q", st.args, err, st.wantErr)
			}
		case err != nil:
			t.Errorf("Do(%q) error = %v", st.args, err)
		case got != st.want:
			t.Errorf("Do(%q) = %q, want %q", st.args, got, st.want)
		}
	}
	if _, err := s.Do("GET", "missing"); !errors.Is(err, ErrNil) {
		t.Errorf("Do(GET missing) error = %v, want ErrNil", err)
	}
	if _, err := s.Do(); err == nil {
		t.Error("Do() with no command: want error")
	}
	info, err := s.Do("INFO", "server")
	if err != nil {
		t.Fatalf("INFO: %v", err)
	}
	if got, want := infoField(info, "process_id"), strconv.Itoa(s.PID()); got != want {
		t.Errorf("INFO process_id = %s, want PID() = %s", got, want)
	}
}

func TestWithArgs(t *testing.T) {
	t.Parallel()
	s := Start(t, WithArgs("--maxmemory", "12345678"))
	got, err := s.Do("CONFIG", "GET", "maxmemory")
	if err != nil || got != "maxmemory\n12345678" {
		t.Errorf("CONFIG GET maxmemory = %q, %v; want maxmemory\\n12345678", got, err)
	}
}

func TestKillRestart(t *testing.T) {
	t.Parallel()
	s := Start(t)
	addr, pid := s.Addr(), s.PID()
	if _, err := s.Do("SET", "k", "v"); err != nil {
		t.Fatalf("SET: %v", err)
	}

	s.Kill()
	if _, err := s.Do("PING"); err == nil {
		t.Fatal("Do(PING) after Kill succeeded, want error")
	}
	if s.PID() != 0 {
		t.Errorf("PID() after Kill = %d, want 0", s.PID())
	}
	if processAlive(pid) {
		t.Errorf("process %d still exists after Kill", pid)
	}
	s.Kill() // a second Kill is a no-op

	s.Restart(t)
	if s.Addr() != addr {
		t.Errorf("Addr() after Restart = %s, want %s", s.Addr(), addr)
	}
	if s.PID() == 0 || s.PID() == pid {
		t.Errorf("PID() after Restart = %d, want a new pid (old %d)", s.PID(), pid)
	}
	if got, err := s.Do("PING"); err != nil || got != "PONG" {
		t.Fatalf("Do(PING) after Restart = %q, %v", got, err)
	}
	if _, err := s.Do("GET", "k"); !errors.Is(err, ErrNil) {
		t.Errorf("GET k after Restart: err = %v, want ErrNil (no persistence)", err)
	}

	// Restart of a running server replaces the process.
	pid = s.PID()
	s.Restart(t)
	if s.PID() == pid || processAlive(pid) {
		t.Errorf("Restart of a running server kept pid %d", pid)
	}
}

func TestCleanupKills(t *testing.T) {
	t.Parallel()
	var pid int
	t.Run("owner", func(t *testing.T) {
		pid = Start(t).PID()
	})
	if pid == 0 {
		t.Skip("subtest did not start a server")
	}
	if processAlive(pid) {
		t.Errorf("redis-server %d still running after its test's cleanup", pid)
	}
}

func TestParallelStartsGetDistinctPorts(t *testing.T) {
	t.Parallel()
	const n = 6
	servers := make([]*Server, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// On failure Start calls t.Fatal here, off the test goroutine; that ends only this
			// goroutine and leaves servers[i] nil, which is reported below.
			servers[i] = Start(t)
		}()
	}
	wg.Wait()
	seen := map[string]bool{}
	for _, s := range servers {
		if s == nil {
			t.Fatal("Start returned nil")
		}
		if seen[s.Addr()] {
			t.Errorf("address %s handed out twice", s.Addr())
		}
		seen[s.Addr()] = true
		if _, err := s.Do("PING"); err != nil {
			t.Errorf("PING %s: %v", s.Addr(), err)
		}
	}
}

func TestRedisAddr(t *testing.T) {
	// Not parallel: it sets an environment variable.
	owned := Start(t)
	t.Setenv("REDIS_ADDR", owned.Addr())
	s := Start(t)
	if s.Addr() != owned.Addr() || s.PID() != 0 {
		t.Errorf("with REDIS_ADDR: Addr() = %s, PID() = %d; want %s, 0", s.Addr(), s.PID(), owned.Addr())
	}
	if got, err := s.Do("PING"); err != nil || got != "PONG" {
		t.Errorf("PING = %q, %v", got, err)
	}
	for name, f := range map[string]func(testing.TB){
		"Kill":    func(testing.TB) { s.Kill() },
		"Restart": func(tb testing.TB) { s.Restart(tb) },
	} {
		tb := &fakeTB{TB: t}
		if name == "Kill" {
			s.tb = tb // Kill skips the test that called Start
		}
		tb.run(func() { f(tb) })
		if !tb.skipped || !strings.Contains(tb.msg, "REDIS_ADDR") {
			t.Errorf("%s with REDIS_ADDR: skipped=%v msg=%q; want a skip naming REDIS_ADDR", name, tb.skipped, tb.msg)
		}
	}
	if _, err := owned.Do("PING"); err != nil {
		t.Errorf("the real server was disturbed: %v", err)
	}
}

func TestMissingBinary(t *testing.T) {
	// Not parallel: it sets environment variables.
	t.Setenv("REDIS_ADDR", "")
	t.Setenv("PATH", t.TempDir())
	warnOut = io.Discard
	t.Cleanup(func() { warnOut = os.Stderr })
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		for name, f := range map[string]func(testing.TB){
			"Start":        func(tb testing.TB) { Start(tb) },
			"StartCluster": func(tb testing.TB) { StartCluster(tb) },
		} {
			tb := &fakeTB{TB: t}
			tb.run(func() { f(tb) })
			if ci == "" && !tb.skipped || ci != "" && !tb.failed {
				t.Errorf("%s with CI=%q: skipped=%v failed=%v; want skip without CI, failure with it", name, ci, tb.skipped, tb.failed)
			}
			if want := "redis-server not found in PATH; install with: apt-get install redis-server redis-tools"; !strings.Contains(tb.msg, want) {
				t.Errorf("%s with CI=%q: message %q does not contain %q", name, ci, tb.msg, want)
			}
		}
	}
}

func TestStartCluster(t *testing.T) {
	t.Parallel()
	began := time.Now()
	c := StartCluster(t)
	t.Logf("cluster up in %v", time.Since(began))
	addrs := c.Addrs()
	if len(addrs) != 3 || len(c.Nodes()) != 3 {
		t.Fatalf("Addrs() = %v, want 3 nodes", addrs)
	}
	for _, n := range c.Nodes() {
		info, err := n.Do("CLUSTER", "INFO")
		if err != nil {
			t.Fatalf("CLUSTER INFO on %s: %v", n.Addr(), err)
		}
		for field, want := range map[string]string{"cluster_state": "ok", "cluster_slots_assigned": "16384", "cluster_known_nodes": "3"} {
			if got := infoField(info, field); got != want {
				t.Errorf("%s: %s = %q, want %q", n.Addr(), field, got, want)
			}
		}
	}
	// Exactly one node owns a key's slot; the others redirect.
	var owners, moved int
	for _, n := range c.Nodes() {
		_, err := n.Do("SET", "{user42}:tokens", "1")
		switch {
		case err == nil:
			owners++
		case strings.HasPrefix(err.Error(), "MOVED "):
			moved++
		default:
			t.Errorf("SET on %s: %v", n.Addr(), err)
		}
	}
	if owners != 1 || moved != 2 {
		t.Errorf("SET on each node: %d accepted, %d MOVED; want 1 and 2", owners, moved)
	}
}

func TestReadReplyMalformed(t *testing.T) {
	t.Parallel()
	for _, in := range []string{"", "+OK\n", "$abc\r\n", "$5\r\nab", "?x\r\n", "*2\r\n+a\r\n"} {
		if got, err := readReply(bufio.NewReader(strings.NewReader(in))); err == nil {
			t.Errorf("readReply(%q) = %q, nil; want error", in, got)
		}
	}
}

// processAlive reports whether a process with this pid exists (and is not a zombie we own:
// stop reaps it before returning).
func processAlive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	return p.Signal(syscall.Signal(0)) == nil
}

// fakeTB records Skip and Fatal instead of acting on the real test. run executes f on its own
// goroutine, which Skip and Fatal end with runtime.Goexit as the testing package does.
type fakeTB struct {
	testing.TB
	skipped, failed bool
	msg             string
}

func (f *fakeTB) run(fn func()) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		fn()
	}()
	<-done
}

func (f *fakeTB) Helper() {}

func (f *fakeTB) Skip(args ...any) {
	f.skipped, f.msg = true, fmt.Sprint(args...)
	runtime.Goexit()
}

func (f *fakeTB) Fatal(args ...any) {
	f.failed, f.msg = true, fmt.Sprint(args...)
	runtime.Goexit()
}

func (f *fakeTB) Fatalf(format string, args ...any) {
	f.failed, f.msg = true, fmt.Sprintf(format, args...)
	runtime.Goexit()
}
