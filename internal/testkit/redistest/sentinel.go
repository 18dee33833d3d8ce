package redistest

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Sentinel timings: short enough that a failover takes a second or two.
const (
	// SentinelDownAfter is the sentinels' down-after-milliseconds: how long
	// the master must be unreachable before a sentinel deems it down. At
	// 500ms a loaded two-CPU machine (four -race load processes) made a
	// sentinel deem a just-promoted master down and fail over twice.
	SentinelDownAfter = time.Second
	// sentinelFailoverTimeout is the sentinels' failover-timeout; a
	// sentinel that fails to get elected retries after twice this.
	sentinelFailoverTimeout = 2 * time.Second
	// sentinelSetupTimeout bounds StartSentinel's wait for the sentinels
	// to find the replicas and each other (they announce themselves every
	// 2 s on the master's hello channel).
	sentinelSetupTimeout = 30 * time.Second
)

// SentinelOption configures [StartSentinel].
type SentinelOption func(*sentinelOptions)

type sentinelOptions struct {
	replicas   int
	masterArgs []string
	dataArgs   []string
}

// SentinelReplicas sets the number of replicas (default 1).
func SentinelReplicas(n int) SentinelOption {
	return func(o *sentinelOptions) { o.replicas = n }
}

// SentinelMasterArgs appends redis-server arguments for the first master
// only, for example SentinelMasterArgs("--min-replicas-to-write", "1").
func SentinelMasterArgs(args ...string) SentinelOption {
	return func(o *sentinelOptions) { o.masterArgs = append(o.masterArgs, args...) }
}

// SentinelDataArgs appends redis-server arguments for the master and every
// replica (any of which may become the master).
func SentinelDataArgs(args ...string) SentinelOption {
	return func(o *sentinelOptions) { o.dataArgs = append(o.dataArgs, args...) }
}

// Sentinel is a Redis master, its replicas and three redis-sentinel
// processes monitoring it, all on 127.0.0.1, started by [StartSentinel].
// Its methods are safe for concurrent use.
type Sentinel struct {
	name      string
	data      []*Server // the first master, then the replicas
	sentinels []*sentinelProc
}

// StartSentinel starts a master, its replicas (one unless
// [SentinelReplicas] says otherwise; each started with --replicaof the
// master) and three redis-sentinel processes monitoring the master under
// the name "rlkit" with quorum 2, down-after-milliseconds
// [SentinelDownAfter], failover-timeout 2 s and parallel-syncs 1. It
// returns once every replica is in sync (it acknowledges a write of the
// master: a write and WAIT on one connection) and every sentinel knows the
// master, every replica and the other two sentinels (so that a failover
// can be authorized at once). Everything is killed when the test ends.
//
// Replication is diskless with no delay (repl-diskless-sync-delay 0), so
// that replicas sync in milliseconds. It needs redis-server and
// redis-sentinel in PATH (skip, or fail when CI is set) and ignores
// REDIS_ADDR.
func StartSentinel(tb testing.TB, opts ...SentinelOption) *Sentinel {
	tb.Helper()
	requireBinaries(tb, "redis-server", "redis-sentinel")
	o := sentinelOptions{replicas: 1}
	for _, opt := range opts {
		opt(&o)
	}
	if o.replicas < 0 {
		tb.Fatalf("redistest: SentinelReplicas(%d): must not be negative", o.replicas)
	}
	data := append([]string{"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"}, o.dataArgs...)
	sn := &Sentinel{name: "rlkit"}
	master := start(tb, append(append([]string(nil), data...), o.masterArgs...))
	sn.data = append(sn.data, master)
	host, port, _ := net.SplitHostPort(master.Addr())
	for range o.replicas {
		sn.data = append(sn.data, start(tb, append(append([]string(nil), data...), "--replicaof", host, port)))
	}
	for range 3 {
		sn.sentinels = append(sn.sentinels, startSentinelProc(tb, sn.name, master.Addr()))
	}

	deadline := time.Now().Add(sentinelSetupTimeout)
	var err error
	for {
		if err = sn.ready(master, o.replicas); err == nil {
			return sn
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: sentinel setup not ready after %v: %v", sentinelSetupTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ready reports why the setup is not ready yet, or nil.
func (sn *Sentinel) ready(master *Server, replicas int) error {
	info, err := master.Do("INFO", "replication")
	if err != nil {
		return err
	}
	if got := infoField(info, "connected_slaves"); got != strconv.Itoa(replicas) {
		return fmt.Errorf("master has %s connected replicas, want %d", got, replicas)
	}
	for i := range replicas {
		if v := infoField(info, "slave"+strconv.Itoa(i)); !strings.Contains(v, "state=online") {
			return fmt.Errorf("replica %d: %s", i, v)
		}
	}
	for _, r := range sn.data[1:] {
		info, err := r.Do("INFO", "replication")
		if err != nil {
			return err
		}
		if got := infoField(info, "master_link_status"); got != "up" {
			return fmt.Errorf("replica %s: master_link_status %s", r.Addr(), got)
		}
	}
	if replicas > 0 {
		if err := replicasAck(master, sentinelReadyKey, replicas); err != nil {
			return err
		}
	}
	for _, s := range sn.sentinels {
		reply, err := do(s.addr, "SENTINEL", "MASTER", sn.name)
		if err != nil {
			return fmt.Errorf("sentinel %s: %v", s.addr, err)
		}
		m := pairs(reply)
		if got := net.JoinHostPort(m["ip"], m["port"]); got != master.Addr() {
			return fmt.Errorf("sentinel %s: master %s, want %s", s.addr, got, master.Addr())
		}
		if m["flags"] != "master" {
			return fmt.Errorf("sentinel %s: master flags %q", s.addr, m["flags"])
		}
		if m["num-slaves"] != strconv.Itoa(replicas) || m["num-other-sentinels"] != "2" {
			return fmt.Errorf("sentinel %s: %s replicas and %s other sentinels known, want %d and 2",
				s.addr, m["num-slaves"], m["num-other-sentinels"], replicas)
		}
	}
	return nil
}

// pairs reads a flat field, value, field, value... reply (as [Server.Do]
// joins it) into a map.
func pairs(reply string) map[string]string {
	f := strings.Split(reply, "\n")
	m := make(map[string]string, len(f)/2)
	for i := 0; i+1 < len(f); i += 2 {
		m[f[i]] = f[i+1]
	}
	return m
}

// MasterName returns the name the sentinels monitor the master under, for
// go-redis's FailoverOptions.MasterName.
func (sn *Sentinel) MasterName() string { return sn.name }

// SentinelAddrs returns the sentinels' addresses, for
// FailoverOptions.SentinelAddrs.
func (sn *Sentinel) SentinelAddrs() []string {
	addrs := make([]string, len(sn.sentinels))
	for i, s := range sn.sentinels {
		addrs[i] = s.addr
	}
	return addrs
}

// Servers returns the data servers: the first master, then the replicas
// (whatever their roles are now).
func (sn *Sentinel) Servers() []*Server {
	return append([]*Server(nil), sn.data...)
}

// Master asks the sentinels, in turn until one answers, for the current
// master's address.
func (sn *Sentinel) Master() (string, error) {
	var errs []error
	for _, s := range sn.sentinels {
		addr, err := sn.masterOf(s.addr)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		return addr, nil
	}
	return "", fmt.Errorf("redistest: no sentinel answered: %w", errors.Join(errs...))
}

// masterOf asks the sentinel at addr for the current master's address.
func (sn *Sentinel) masterOf(addr string) (string, error) {
	reply, err := do(addr, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", sn.name)
	if err != nil {
		return "", fmt.Errorf("sentinel %s: %w", addr, err)
	}
	host, port, ok := strings.Cut(reply, "\n")
	if !ok {
		return "", fmt.Errorf("sentinel %s: GET-MASTER-ADDR-BY-NAME answered %q", addr, reply)
	}
	return net.JoinHostPort(host, port), nil
}

// server returns the data server at addr, or nil.
func (sn *Sentinel) server(addr string) *Server {
	for _, s := range sn.data {
		if s.Addr() == addr {
			return s
		}
	}
	return nil
}

// KillMaster sends SIGKILL to the current master (as the sentinels name it)
// and waits until it has exited. It returns the killed server and the time
// just before the signal.
func (sn *Sentinel) KillMaster(tb testing.TB) (*Server, time.Time) {
	tb.Helper()
	addr, err := sn.Master()
	if err != nil {
		tb.Fatal(err)
	}
	s := sn.server(addr)
	if s == nil {
		tb.Fatalf("redistest: the sentinels name %s as master, which is not one of ours", addr)
	}
	at := time.Now()
	s.Kill()
	return s, at
}

// WaitFailover waits until every sentinel that answers names a master other
// than old and that master answers with role:master, then returns its
// address. It fails tb after timeout.
func (sn *Sentinel) WaitFailover(tb testing.TB, old string, timeout time.Duration) string {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for {
		var addr string
		if addr, err = sn.switched(old); err == nil {
			return addr
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: no failover away from %s after %v: %v", old, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// switched returns the new master if the failover away from old is done.
func (sn *Sentinel) switched(old string) (string, error) {
	var addr string
	for _, s := range sn.sentinels {
		got, err := sn.masterOf(s.addr)
		if err != nil {
			continue // a sentinel may be down on purpose
		}
		switch {
		case got == old:
			return "", fmt.Errorf("sentinel %s still names %s", s.addr, old)
		case addr != "" && got != addr:
			return "", fmt.Errorf("sentinels name %s and %s", addr, got)
		}
		addr = got
	}
	if addr == "" {
		return "", errors.New("no sentinel answered")
	}
	info, err := do(addr, "INFO", "replication")
	if err != nil {
		return "", err
	}
	if role := infoField(info, "role"); role != "master" {
		return "", fmt.Errorf("%s has role %s", addr, role)
	}
	return addr, nil
}

// sentinelProc is one redis-sentinel process.
type sentinelProc struct {
	addr string
	dir  string
	done chan struct{}
	cmd  *exec.Cmd
}

// startSentinelProc starts a redis-sentinel monitoring master as name, on a
// fresh port with its configuration in a fresh temporary directory, and
// kills it when tb ends.
func startSentinelProc(tb testing.TB, name, master string) *sentinelProc {
	tb.Helper()
	dir := tb.TempDir()
	host, mport, _ := net.SplitHostPort(master)
	var err error
	for range startAttempts {
		port, perr := reservePort()
		if perr != nil {
			tb.Fatalf("redistest: %v", perr)
		}
		conf := filepath.Join(dir, "sentinel.conf")
		text := strings.Join([]string{
			"port " + strconv.Itoa(port),
			"bind 127.0.0.1",
			"protected-mode no",
			"dir " + dir,
			"logfile " + filepath.Join(dir, "sentinel.log"),
			fmt.Sprintf("sentinel monitor %s %s %s 2", name, host, mport),
			fmt.Sprintf("sentinel down-after-milliseconds %s %d", name, SentinelDownAfter.Milliseconds()),
			fmt.Sprintf("sentinel failover-timeout %s %d", name, sentinelFailoverTimeout.Milliseconds()),
			fmt.Sprintf("sentinel parallel-syncs %s 1", name),
			"",
		}, "\n")
		if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
			tb.Fatalf("redistest: %v", err)
		}
		p := &sentinelProc{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: dir}
		if err = p.launch(dir, conf); err == nil {
			tb.Cleanup(func() {
				p.stop()
				releasePort(port)
			})
			return p
		}
		p.stop()
		releasePort(port)
	}
	tb.Fatalf("redistest: redis-sentinel did not start after %d attempts: %v", startAttempts, err)
	return nil
}

// launch starts the process and waits until it answers PING.
func (p *sentinelProc) launch(dir, conf string) error {
	cmd := exec.Command("redis-sentinel", conf)
	cmd.Dir = dir
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting redis-sentinel: %w", err)
	}
	p.cmd, p.done = cmd, make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(p.done)
	}()
	if err := waitPing(p.addr, p.done, startTimeout); err != nil {
		return fmt.Errorf("%v\n%s", err, logTail(filepath.Join(dir, "sentinel.log"), 0))
	}
	return nil
}

// stop kills the process, if any, and waits until it has been reaped.
func (p *sentinelProc) stop() {
	if p.done == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	<-p.done
	p.done = nil
}

// Logs returns the end of every sentinel's log (at most 4 KiB each), for
// the message of a failed failover test.
func (sn *Sentinel) Logs() string {
	var b strings.Builder
	for _, s := range sn.sentinels {
		data, err := os.ReadFile(filepath.Join(s.dir, "sentinel.log"))
		if err != nil {
			fmt.Fprintf(&b, "sentinel %s: %v\n", s.addr, err)
			continue
		}
		if len(data) > 4096 {
			data = data[len(data)-4096:]
		}
		fmt.Fprintf(&b, "sentinel %s:\n%s\n", s.addr, data)
	}
	return b.String()
}

// WaitHealthy waits until the sentinels agree on a master that answers with
// role:master and has at least replicas replicas online that acknowledge
// its writes (a write and WAIT on one connection), and that has held
// (same master) for stable; it returns that master and when the stable
// period began. It fails tb after timeout. After a failover this is when
// the setup can acknowledge writes again; it also sees a second failover
// (a sentinel deeming the just-promoted master down) through to its end.
func (sn *Sentinel) WaitHealthy(tb testing.TB, replicas int, stable, timeout time.Duration) (string, time.Time) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	var (
		since time.Time
		addr  string
		err   error
	)
	for {
		var got string
		if got, err = sn.healthy(replicas); err != nil || got != addr {
			since, addr = time.Time{}, got
		}
		if err == nil && since.IsZero() {
			since = time.Now()
		}
		if err == nil && time.Since(since) >= stable {
			return addr, since
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: sentinel setup not healthy for %v within %v: %v", stable, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// healthy returns the master if the setup is healthy now.
func (sn *Sentinel) healthy(replicas int) (string, error) {
	addr, err := sn.switched("")
	if err != nil {
		return "", err
	}
	info, err := do(addr, "INFO", "replication")
	if err != nil {
		return "", err
	}
	if online := onlineReplicas(info); online < replicas {
		return "", fmt.Errorf("master %s has %d replicas online, want %d", addr, online, replicas)
	}
	if m := sn.server(addr); m != nil && replicas > 0 {
		if err := replicasAck(m, sentinelReadyKey, replicas); err != nil {
			return "", err
		}
	}
	return addr, nil
}

// sentinelReadyKey is the key of the write that checks that the replicas acknowledge the
// master's writes; it is deleted afterwards.
const sentinelReadyKey = "redistest:ready"

// onlineReplicas counts the replicas an INFO replication reply shows online.
func onlineReplicas(info string) int {
	online := 0
	for i := 0; ; i++ {
		v := infoField(info, "slave"+strconv.Itoa(i))
		if v == "" {
			return online
		}
		if strings.Contains(v, "state=online") {
			online++
		}
	}
}
