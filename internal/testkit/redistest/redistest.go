// Package redistest starts throwaway redis-server processes for tests.
//
// [Start] runs one redis-server on a free 127.0.0.1 port with persistence off and its working
// directory in the test's temporary directory; [StartCluster] runs a three-master Redis Cluster.
// Every process is killed (SIGKILL) and reaped when the test ends. The package needs only the
// standard library: readiness is checked with raw RESP over net.Dial, and [Server.Do] sends
// simple commands the same way, which is enough for test setup and assertions.
//
// # Requirements
//
// The redis-server binary (and redis-cli for [StartCluster]) must be in PATH. When one is missing,
// the test is skipped, or fails if the CI environment variable is non-empty, so that CI never
// passes by silently skipping every Redis test. Install them with:
//
//	apt-get install redis-server redis-tools
//
// Note that `go test ./...` hides skip messages unless -v is given.
//
// # Using an existing server
//
// If REDIS_ADDR is set (host:port), [Start] starts nothing and returns a [Server] for that address
// after checking that it answers PING. Such a server is shared, so tests must use unique keys and
// must not flush it; [Server.Kill] and [Server.Restart] skip the calling test, and [Server.PID]
// returns 0. REDIS_ADDR does not affect [StartCluster], which always starts its own nodes.
package redistest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

const (
	// installHint is the message given when a Redis binary is missing.
	installHint = "not found in PATH; install with: apt-get install redis-server redis-tools"
	// sentinelHint is the message given when redis-sentinel is missing.
	sentinelHint = "not found in PATH; install with: apt-get install redis-sentinel"

	startTimeout   = 10 * time.Second
	clusterTimeout = 20 * time.Second
	startAttempts  = 5

	// busOffset is the distance from a node's client port to its cluster bus port
	// (the Redis default when cluster-port is not set).
	busOffset = 10000
)

// ErrNil is returned by [Server.Do] when Redis answers with a nil reply, such as GET of a
// missing key.
var ErrNil = errors.New("redistest: nil reply")

// Option configures a server started by [Start].
type Option func(*options)

type options struct {
	args []string
}

// WithArgs appends command-line arguments to redis-server, for example
// WithArgs("--maxmemory", "10mb"). They come after the defaults, so they override them.
// With REDIS_ADDR set, options are ignored.
func WithArgs(args ...string) Option {
	return func(o *options) { o.args = append(o.args, args...) }
}

// Server is a redis-server process owned by one test, or an external server named by
// REDIS_ADDR. Addr, PID and Do are safe for concurrent use, also with Kill and Restart;
// Kill and Restart must not run concurrently with each other.
type Server struct {
	// Set by Start and not changed afterwards.
	tb       testing.TB // the test that called Start; used by Kill to skip
	addr     string
	port     int
	dir      string
	args     []string // everything after --port N
	external bool

	// mu guards the fields below.
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed once cmd has been reaped; nil when no process was started
}

// Start starts a redis-server on a free loopback port, waits until it answers PING, and kills
// it when the test ends. Persistence is off (--save "" --appendonly no) and the working
// directory is a fresh tb.TempDir(). Extra arguments are given with [WithArgs].
//
// If REDIS_ADDR is set, Start uses that server instead; see the package documentation.
// If redis-server is not in PATH, the test is skipped, or fails when CI is set.
func Start(tb testing.TB, opts ...Option) *Server {
	tb.Helper()
	if addr := os.Getenv("REDIS_ADDR"); addr != "" {
		if err := waitPing(addr, nil, startTimeout); err != nil {
			tb.Fatalf("redistest: REDIS_ADDR=%s: %v", addr, err)
		}
		return &Server{tb: tb, addr: addr, external: true}
	}
	requireBinaries(tb, "redis-server")
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	return start(tb, o.args)
}

// start launches a server on a fresh port, retrying with new ports if another process
// takes the chosen one first.
func start(tb testing.TB, extra []string) *Server {
	tb.Helper()
	// TempDir first: cleanups run last-registered-first, so the process is killed before
	// its directory is removed.
	dir := tb.TempDir()
	s := &Server{
		tb:  tb,
		dir: dir,
		args: append([]string{
			"--bind", "127.0.0.1",
			"--save", "",
			"--appendonly", "no",
			"--protected-mode", "no",
			"--dir", dir,
		}, extra...),
	}
	tb.Cleanup(func() {
		s.stop()
		releasePort(s.port)
	})
	var err error
	for range startAttempts {
		port, perr := reservePort()
		if perr != nil {
			tb.Fatalf("redistest: %v", perr)
		}
		s.port = port
		s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if err = s.launch(); err == nil {
			return s
		}
		s.stop()
		releasePort(port)
		s.port = 0
	}
	tb.Fatalf("redistest: redis-server did not start after %d attempts: %v", startAttempts, err)
	return nil
}

// Addr returns the server's address as host:port.
func (s *Server) Addr() string { return s.addr }

// PID returns the process id of the running redis-server, which changes after
// [Server.Restart]. It returns 0 for a REDIS_ADDR server.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return 0
	}
	return s.cmd.Process.Pid
}

// Kill sends SIGKILL to the server and waits for it to exit. It does nothing if the server is
// already stopped. With REDIS_ADDR it skips the test that called [Start], so call it only from
// that test's goroutine.
func (s *Server) Kill() {
	if s.external {
		s.tb.Skip("redistest: Kill needs a redis-server owned by the test; unset REDIS_ADDR to run this test")
	}
	s.stop()
}

// Restart starts the server again on the same port and waits until it answers PING, killing
// the current process first if it is still running. Data is lost (persistence is off). If the
// port is momentarily unavailable it retries a few times before failing tb.
// With REDIS_ADDR it skips tb.
func (s *Server) Restart(tb testing.TB) {
	tb.Helper()
	if s.external {
		tb.Skip("redistest: Restart needs a redis-server owned by the test; unset REDIS_ADDR to run this test")
	}
	s.stop()
	var err error
	for attempt := range startAttempts {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * 100 * time.Millisecond)
		}
		if err = s.launch(); err == nil {
			return
		}
		s.stop()
	}
	tb.Fatalf("redistest: restarting redis-server on %s: %v", s.addr, err)
}

// launch starts redis-server on s.port and waits until it answers PING.
// On error the process may still be running; the caller stops it.
func (s *Server) launch() error {
	logPath := filepath.Join(s.dir, "redis.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close() // the child has its own copy
	offset, _ := logFile.Seek(0, io.SeekEnd)

	cmd := exec.Command("redis-server", append([]string{"--port", strconv.Itoa(s.port)}, s.args...)...)
	cmd.Dir = s.dir
	cmd.Stdout = logFile
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting redis-server: %w", err)
	}
	done := make(chan struct{})
	go func() {
		_ = cmd.Wait() // killed on purpose, so the exit status says nothing
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()

	if err := waitPing(s.addr, done, startTimeout); err != nil {
		return fmt.Errorf("%v\n%s", err, logTail(logPath, offset))
	}
	// Another process could own the port and answer PING while ours fails to bind.
	info, err := s.Do("INFO", "server")
	if err != nil {
		return err
	}
	if pid := infoField(info, "process_id"); pid != strconv.Itoa(cmd.Process.Pid) {
		return fmt.Errorf("port %d is served by another redis-server (pid %s)", s.port, pid)
	}
	return nil
}

// stop kills the process, if any, and waits until it has been reaped.
func (s *Server) stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.done == nil {
		return
	}
	_ = s.cmd.Process.Kill() // fails only if it has already exited
	<-s.done
	s.cmd, s.done = nil, nil
}

// Do sends one command and returns its reply, on a new connection. Simple strings,
// integers (in decimal) and bulk strings are returned as strings; a nil reply returns
// [ErrNil]; an error reply returns an error with Redis's text (such as "ERR unknown command
// ...") and no prefix. Arrays are returned with their elements joined by "\n", nil elements
// as "". Do is for tests; use a real client for anything else.
//
// Since each call has its own connection, a command that depends on what its connection did
// before does not see an earlier call: WAIT after Do("SET", ...) returns at once with the
// number of connected replicas, whether they have the write or not.
func (s *Server) Do(args ...string) (string, error) {
	return do(s.addr, args...)
}

// Cluster is a three-master Redis Cluster started by [StartCluster].
type Cluster struct {
	nodes []*Server
}

// StartCluster starts three redis-server nodes in cluster mode on free loopback ports, joins
// them with redis-cli --cluster create (no replicas), and waits until every node reports
// cluster_state:ok. All nodes are killed when the test ends. It needs redis-server and
// redis-cli in PATH (skip, or fail when CI is set) and ignores REDIS_ADDR.
func StartCluster(tb testing.TB) *Cluster {
	tb.Helper()
	requireBinaries(tb, "redis-server", "redis-cli")
	c := &Cluster{}
	for range 3 {
		c.nodes = append(c.nodes, start(tb, []string{
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
		}))
	}
	c.create(tb, 0, clusterTimeout)

	deadline := time.Now().Add(clusterTimeout)
	for _, n := range c.nodes {
		for {
			info, err := n.Do("CLUSTER", "INFO")
			if err == nil && infoField(info, "cluster_state") == "ok" {
				break
			}
			if time.Now().After(deadline) {
				tb.Fatalf("redistest: cluster node %s not ok after %v: %v\n%s", n.Addr(), clusterTimeout, err, info)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return c
}

// create makes a cluster of c's nodes with redis-cli --cluster create,
// replicas replicas per master, and fails tb unless every slot is covered
// within timeout.
func (c *Cluster) create(tb testing.TB, replicas int, timeout time.Duration) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs()...)
	args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
	out, err := exec.CommandContext(ctx, "redis-cli", args...).CombinedOutput()
	if err != nil || !bytes.Contains(out, []byte("All 16384 slots covered")) {
		tb.Fatalf("redistest: redis-cli --cluster create failed: %v\n%s", err, out)
	}
}

// Addrs returns the addresses of the cluster's nodes.
func (c *Cluster) Addrs() []string {
	addrs := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		addrs[i] = n.Addr()
	}
	return addrs
}

// Nodes returns the cluster's nodes, for example to kill or restart one.
func (c *Cluster) Nodes() []*Server {
	return append([]*Server(nil), c.nodes...)
}

// requireBinaries skips tb, or fails it when CI is set, unless every named program is in PATH.
func requireBinaries(tb testing.TB, names ...string) {
	tb.Helper()
	for _, name := range names {
		if _, err := exec.LookPath(name); err == nil {
			continue
		}
		msg := name + " " + installHint
		if name == "redis-sentinel" {
			msg = name + " " + sentinelHint
		}
		if os.Getenv("CI") != "" {
			tb.Fatal(msg)
		}
		warnOnce.Do(func() {
			fmt.Fprintf(warnOut, "\n*** redistest: SKIPPING Redis tests: %s ***\n\n", msg)
		})
		tb.Skip("SKIPPED: " + msg)
	}
}

// warnOnce makes the missing-binary warning appear once per test binary on warnOut (stderr),
// where `go test` in directory mode shows it even without -v.
var (
	warnOnce sync.Once
	warnOut  io.Writer = os.Stderr
)

// Port bookkeeping: ports handed to servers of this test binary are not handed out again
// until released, so parallel tests never pick the same one.
var (
	portsMu sync.Mutex
	ports   = map[int]bool{}
)

// reservePort finds a loopback port p such that p and its cluster bus port p+10000 are both
// free now, and records both as taken.
func reservePort() (int, error) {
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return 0, err
		}
		p := l.Addr().(*net.TCPAddr).Port
		ok := p+busOffset <= 65535
		if ok {
			bus, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p+busOffset)))
			ok = err == nil
			if ok {
				bus.Close()
			}
		}
		l.Close()
		if !ok {
			continue
		}
		portsMu.Lock()
		if !ports[p] && !ports[p+busOffset] {
			ports[p], ports[p+busOffset] = true, true
			portsMu.Unlock()
			return p, nil
		}
		portsMu.Unlock()
	}
	return 0, errors.New("no free loopback port pair (p, p+10000) found")
}

// releasePort forgets a port given by reservePort; 0 is ignored.
func releasePort(p int) {
	if p == 0 {
		return
	}
	portsMu.Lock()
	delete(ports, p)
	delete(ports, p+busOffset)
	portsMu.Unlock()
}

// waitPing polls addr with a raw PING until it answers +PONG. It gives up after timeout, or
// as soon as exited is closed (the process died). exited may be nil.
func waitPing(addr string, exited <-chan struct{}, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var err error
	for {
		select {
		case <-exited:
			return errors.New("redis-server exited before answering PING")
		default:
		}
		if err = ping(addr); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no PONG from %s after %v: %w", addr, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ping sends an inline PING and expects +PONG.
func ping(addr string) error {
	conn, err := net.DialTimeout("tcp", addr, 500*time.Millisecond)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Second))
	if _, err := io.WriteString(conn, "PING\r\n"); err != nil {
		return err
	}
	line, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", strings.TrimSpace(line))
	}
	return nil
}

// do sends args as a RESP array on a new connection and reads one reply.
func do(addr string, args ...string) (string, error) {
	if len(args) == 0 {
		return "", errors.New("redistest: Do needs a command")
	}
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "", fmt.Errorf("redistest: %w", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	return roundTrip(conn, bufio.NewReader(conn), args...)
}

// writeAcked sends the write command args to addr and then, on the same connection, WAIT
// replicas timeout, and returns how many replicas acknowledged the write. (WAIT counts the
// replicas that have everything its own connection wrote: after a write sent on another
// connection, as [Server.Do] sends each command, it answers at once.)
func writeAcked(addr string, replicas int, timeout time.Duration, args ...string) (int, error) {
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return 0, fmt.Errorf("redistest: %w", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout + 10*time.Second))
	r := bufio.NewReader(conn)
	if _, err := roundTrip(conn, r, args...); err != nil {
		return 0, err
	}
	reply, err := roundTrip(conn, r, "WAIT", strconv.Itoa(replicas), strconv.FormatInt(timeout.Milliseconds(), 10))
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(reply)
}

// readyProbe is how long a readiness check waits for replicas to acknowledge its write.
const readyProbe = 100 * time.Millisecond

// replicasAck checks that replicas replicas acknowledge a write of master, which must serve
// key: INFO can show a replica online and in sync while the master does not stream to it
// yet. (After a diskless sync, Redis 7.0 starts the stream on the replica's first REPLCONF
// ACK; an ACK that arrives before the master has reaped the RDB child is spent without
// starting it, and the next comes a second later: until then no WAIT succeeds.) The key
// is deleted afterwards.
func replicasAck(master *Server, key string, replicas int) error {
	n, err := writeAcked(master.Addr(), replicas, readyProbe, "SET", key, "redistest")
	if err != nil {
		return fmt.Errorf("write and WAIT on %s: %w", master.Addr(), err)
	}
	_, _ = master.Do("DEL", key)
	if n < replicas {
		return fmt.Errorf("master %s: %d of %d replicas acknowledged a write within %v", master.Addr(), n, replicas, readyProbe)
	}
	return nil
}

// roundTrip sends args as a RESP array on conn and reads one reply from r,
// which reads conn.
func roundTrip(conn net.Conn, r *bufio.Reader, args ...string) (string, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write(b.Bytes()); err != nil {
		return "", fmt.Errorf("redistest: %w", err)
	}
	return readReply(r)
}

// readReply reads one RESP2 reply.
func readReply(r *bufio.Reader) (string, error) {
	line, err := r.ReadString('\n')
	if err != nil {
		return "", fmt.Errorf("redistest: %w", err)
	}
	if len(line) < 3 || !strings.HasSuffix(line, "\r\n") {
		return "", fmt.Errorf("redistest: malformed reply %q", line)
	}
	kind, body := line[0], line[1:len(line)-2]
	switch kind {
	case '+', ':':
		return body, nil
	case '-':
		return "", errors.New(body)
	case '$', '*':
		n, err := strconv.Atoi(body)
		if err != nil || n > 512<<20 {
			return "", fmt.Errorf("redistest: malformed reply %q", line)
		}
		if n < 0 {
			return "", ErrNil
		}
		if kind == '$' {
			buf := make([]byte, n+2)
			if _, err := io.ReadFull(r, buf); err != nil {
				return "", fmt.Errorf("redistest: %w", err)
			}
			return string(buf[:n]), nil
		}
		parts := make([]string, n)
		for i := range parts {
			p, err := readReply(r)
			if err != nil && !errors.Is(err, ErrNil) {
				return "", err
			}
			parts[i] = p
		}
		return strings.Join(parts, "\n"), nil
	}
	return "", fmt.Errorf("redistest: unsupported reply %q", line)
}

// infoField returns the value of "name:value" in an INFO-style reply, or "".
func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), name+":"); ok {
			return v
		}
	}
	return ""
}

// logTail returns what redis-server wrote to its log since offset, at most the last 2 KiB.
func logTail(path string, offset int64) string {
	b, err := os.ReadFile(path)
	if err != nil || offset > int64(len(b)) {
		return ""
	}
	b = b[offset:]
	if len(b) > 2048 {
		b = b[len(b)-2048:]
	}
	return "redis-server log:\n" + string(b)
}
