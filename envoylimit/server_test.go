package envoylimit_test

// The server program, envoylimit/cmd/envoylimit-server, built and run as
// a process: it serves on a free port, answers the generated client,
// reloads a rewritten configuration, keeps the old one when a file is bad
// (logging the file and line), keeps its counters in Redis with -redis,
// and stops with exit status 0 on SIGTERM.
//
// The process runs on the real clock, so the limits are token buckets of
// a few requests a day: over the seconds a test lasts they refill by a
// hundred-thousandth of a request, which limit_remaining (whole requests)
// never shows, and no window boundary can fall inside a test.

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// serverPatience bounds every wait on the process: its start, a reload
// (every 50ms), its exit. Generous: it only keeps a broken server from
// hanging the test.
const serverPatience = 20 * time.Second

// buildServer builds the server program into a temporary directory of t
// (with -race when the tests run with it) and returns its path.
func buildServer(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "envoylimit-server")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, "./cmd/envoylimit-server")...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// serverProc is a running server process.
type serverProc struct {
	t    *testing.T
	cmd  *exec.Cmd
	addr string

	mu      sync.Mutex
	lines   []string      // stderr, line by line; guarded by mu
	changed chan struct{} // closed and replaced on each line or the exit; guarded by mu
	exited  bool          // guarded by mu
	waitErr error         // guarded by mu; the process's exit, once exited
}

// startServer runs bin with args, and waits until it prints "listening on
// ADDR" (then addr is ADDR) or exits. The process is killed when t ends if
// it still runs.
func startServer(t *testing.T, bin string, args ...string) *serverProc {
	t.Helper()
	p := runServer(t, bin, args...)
	line, ok := p.waitLog("listening on ")
	require.True(t, ok, "the server did not say it listens; its log:\n%s", p.log())
	p.addr = strings.TrimSpace(line[strings.Index(line, "listening on ")+len("listening on "):])
	return p
}

// runServer runs bin with args, reading its stderr.
func runServer(t *testing.T, bin string, args ...string) *serverProc {
	t.Helper()
	cmd := exec.Command(bin, args...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &serverProc{t: t, cmd: cmd, changed: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			p.mu.Lock()
			p.lines = append(p.lines, sc.Text())
			close(p.changed)
			p.changed = make(chan struct{})
			p.mu.Unlock()
		}
		err := cmd.Wait() // after the pipe's last read, as Wait wants
		p.mu.Lock()
		p.exited, p.waitErr = true, err
		close(p.changed)
		p.changed = make(chan struct{})
		p.mu.Unlock()
	}()
	t.Cleanup(func() {
		p.mu.Lock()
		exited := p.exited
		p.mu.Unlock()
		if !exited {
			_ = cmd.Process.Kill()
			p.waitExit()
		}
	})
	return p
}

// waitLog waits until a line of the log from now on or before contains
// substr (all of substrs) and returns it; false if the process exited
// first or serverPatience passed.
func (p *serverProc) waitLog(substrs ...string) (string, bool) {
	return p.waitLogFrom(0, substrs...)
}

// waitLogFrom is waitLog for the lines from index from on.
func (p *serverProc) waitLogFrom(from int, substrs ...string) (string, bool) {
	deadline := time.NewTimer(serverPatience)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		for _, l := range p.lines[min(from, len(p.lines)):] {
			all := true
			for _, s := range substrs {
				all = all && strings.Contains(l, s)
			}
			if all {
				p.mu.Unlock()
				return l, true
			}
		}
		exited, changed := p.exited, p.changed
		p.mu.Unlock()
		if exited {
			return "", false
		}
		select {
		case <-changed:
		case <-deadline.C:
			return "", false
		}
	}
}

// logLen is how many lines the process has logged.
func (p *serverProc) logLen() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.lines)
}

func (p *serverProc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.lines, "\n")
}

// waitExit waits for the process to exit and returns its error (nil for
// exit status 0); it fails the test after serverPatience.
func (p *serverProc) waitExit() error {
	p.t.Helper()
	deadline := time.NewTimer(serverPatience)
	defer deadline.Stop()
	for {
		p.mu.Lock()
		exited, err, changed := p.exited, p.waitErr, p.changed
		p.mu.Unlock()
		if exited {
			return err
		}
		select {
		case <-changed:
		case <-deadline.C:
			p.t.Fatalf("the server did not exit within %v; its log:\n%s", serverPatience, p.log())
		}
	}
}

// stop sends SIGTERM and requires exit status 0.
func (p *serverProc) stop() {
	p.t.Helper()
	require.NoError(p.t, p.cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(p.t, p.waitExit(), "exit after SIGTERM; the log:\n%s", p.log())
}

// client returns the generated client of the process.
func (p *serverProc) client() rlspb.RateLimitServiceClient {
	p.t.Helper()
	conn, err := grpc.NewClient(p.addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(p.t, err)
	p.t.Cleanup(func() { _ = conn.Close() })
	return rlspb.NewRateLimitServiceClient(conn)
}

// rpc sends one request of hits to c (0: hits_addend unset).
func rpc(t *testing.T, c rlspb.RateLimitServiceClient, hits uint32, descs ...*rlcommon.RateLimitDescriptor) *rlspb.RateLimitResponse {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), serverPatience)
	defer cancel()
	resp, err := c.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "d", HitsAddend: hits, Descriptors: descs})
	require.NoError(t, err)
	return resp
}

// serverConf is the configuration the server tests write: a user limit
// of n, a token bucket of n a day.
func serverConf(n int) string {
	return fmt.Sprintf(`domain: d
descriptors:
  - key: user
    rate_limit:
      unit: day
      requests_per_unit: %d
      algorithm: tokenbucket
`, n)
}

// badConf has an unknown key on line 6.
const badConf = `domain: d
descriptors:
  - key: user
    rate_limit:
      unit: day
      requests_per_unt: 9
`

// writeFile writes data to path, by a rename over it as editors and
// configuration managers do (the server may read it at any moment).
func writeFile(t *testing.T, path, data string) {
	t.Helper()
	tmp := filepath.Join(filepath.Dir(path), "."+filepath.Base(path)+".tmp")
	require.NoError(t, os.WriteFile(tmp, []byte(data), 0o644))
	require.NoError(t, os.Rename(tmp, path))
}

// checkRPC sends a check (hits_addend 0: nothing charged) of the user to
// c until one is answered, up to serverPatience, and returns its status.
// A check may be sent again: the server's Redis limiters have
// redislimit's default timeout, 100ms, which a loaded machine can miss.
func checkRPC(t *testing.T, c rlspb.RateLimitServiceClient) *rlspb.RateLimitResponse_DescriptorStatus {
	t.Helper()
	var st *rlspb.RateLimitResponse_DescriptorStatus
	var last error
	ok := pollUntil(func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), serverPatience)
		defer cancel()
		resp, err := c.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{withHits(desc("user", "u"), 0)}})
		last = err
		if err != nil {
			return false
		}
		st = resp.GetStatuses()[0]
		return true
	})
	require.True(t, ok, "no answer to a check within %v: %v", serverPatience, last)
	return st
}

// pollUntil calls cond every 10ms until it is true (then it returns
// true) or serverPatience has passed (false).
func pollUntil(cond func() bool) bool {
	deadline := time.Now().Add(serverPatience)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		<-tick.C
	}
	return true
}

// waitLimit polls c until the user's current limit is n (a reload took
// effect), up to serverPatience, and returns the check's status.
func waitLimit(t *testing.T, c rlspb.RateLimitServiceClient, n uint32) *rlspb.RateLimitResponse_DescriptorStatus {
	t.Helper()
	var st *rlspb.RateLimitResponse_DescriptorStatus
	ok := pollUntil(func() bool {
		st = checkRPC(t, c)
		return st.GetCurrentLimit().GetRequestsPerUnit() == n
	})
	require.True(t, ok, "the limit did not become %d: %v", n, st)
	return st
}

// runServerScenario: serve, charge, reload a raised limit (the used count
// kept), a bad file (the old configuration kept, the error naming
// file:line), a good file again, SIGTERM.
func runServerScenario(t *testing.T, bin string, extra ...string) (dir string) {
	dir = t.TempDir()
	file := filepath.Join(dir, "rls.yaml")
	writeFile(t, file, serverConf(2))
	p := startServer(t, bin, append([]string{"-config", dir, "-listen", "127.0.0.1:0", "-reload", "50ms"}, extra...)...)
	c := p.client()

	u := desc("user", "u")
	assert.Equal(t, []string{"OK", "OK"}, codesOf(rpc(t, c, 0, u)))
	assert.Equal(t, []string{"OK", "OK"}, codesOf(rpc(t, c, 0, u)))
	resp := rpc(t, c, 0, u)
	assert.Equal(t, []string{"OVER_LIMIT", "OVER_LIMIT"}, codesOf(resp))
	assert.Equal(t, uint32(2), resp.Statuses[0].GetCurrentLimit().GetRequestsPerUnit())

	// A raised limit: the user keeps its 2 used.
	from := p.logLen()
	writeFile(t, file, serverConf(5))
	st := waitLimit(t, c, 5)
	assert.Equal(t, uint32(3), st.GetLimitRemaining(), "2 used of the new 5")
	_, ok := p.waitLogFrom(from, "configuration reloaded")
	assert.True(t, ok, "the reload is logged; the log:\n%s", p.log())
	assert.Equal(t, []string{"OK", "OK"}, codesOf(rpc(t, c, 3, u)))
	assert.Equal(t, []string{"OVER_LIMIT", "OVER_LIMIT"}, codesOf(rpc(t, c, 0, u)))

	// A bad file: logged with its file and line, the old configuration
	// kept.
	from = p.logLen()
	writeFile(t, file, badConf)
	line, ok := p.waitLogFrom(from, "not reloaded")
	require.True(t, ok, "the bad file is logged; the log:\n%s", p.log())
	assert.Contains(t, line, file+":6:", "names the file and line")
	assert.Contains(t, line, "requests_per_unt")
	st = checkRPC(t, c)
	assert.Equal(t, uint32(5), st.GetCurrentLimit().GetRequestsPerUnit(), "the old configuration stays")
	assert.Equal(t, uint32(0), st.GetLimitRemaining())

	// Fixed: reloaded, 5 used of 7.
	writeFile(t, file, serverConf(7))
	st = waitLimit(t, c, 7)
	assert.Equal(t, uint32(2), st.GetLimitRemaining())

	p.stop()
	return dir
}

// The server in memory.
func TestServerMemory(t *testing.T) {
	bin := buildServer(t)
	runServerScenario(t, bin)
}

// The server with -redis: the same, its keys under -redis-prefix.
func TestServerRedis(t *testing.T) {
	bin := buildServer(t)
	home := startRedisHome(t)
	runServerScenario(t, bin, "-redis", home.srv.Addr(), "-redis-prefix", home.prefix, "-redis-timeout", "10s")
	keys, err := home.srv.Do("KEYS", home.prefix+"*")
	require.NoError(t, err)
	assert.NotEmpty(t, keys, "the keys are under -redis-prefix")
	all, err := home.srv.Do("KEYS", "*")
	require.NoError(t, err)
	assert.Equal(t, keys, all, "no key outside -redis-prefix")
}

// restartRedis runs the server on dir's configuration and home's Redis,
// charges the user hits (when not 0), and returns the user's status
// before stopping it with SIGTERM.
func restartRedis(t *testing.T, bin, dir string, home *redisHome, hits uint32) *rlspb.RateLimitResponse_DescriptorStatus {
	t.Helper()
	p := startServer(t, bin, "-config", dir, "-listen", "127.0.0.1:0", "-reload", "0", "-redis", home.srv.Addr(), "-redis-prefix", home.prefix, "-redis-timeout", "10s")
	c := p.client()
	if hits > 0 {
		require.Equal(t, "OK", codesOf(rpc(t, c, hits, desc("user", "u")))[0])
	}
	st := checkRPC(t, c)
	p.stop()
	return st
}

// With -redis the counts outlive the process: a server started again on
// the same configuration finds what the first one used.
func TestServerRedisRestartKeepsCounts(t *testing.T) {
	bin := buildServer(t)
	home := startRedisHome(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "rls.yaml"), serverConf(5))
	assert.Equal(t, uint32(3), restartRedis(t, bin, dir, home, 2).GetLimitRemaining())
	assert.Equal(t, uint32(3), restartRedis(t, bin, dir, home, 0).GetLimitRemaining(), "the second process finds the 2 used")
	assert.Equal(t, uint32(2), restartRedis(t, bin, dir, home, 1).GetLimitRemaining())
}

// A server started after its configuration's limit changed (the file was
// edited while it was down; or a new replica, or a restarted one, after a
// change that the running ones reloaded) keeps the keys' counts, as a
// running server's reload does (SetConfig: KeepUsed), and as
// envoyproxy/ratelimit, whose Redis keys do not depend on the limit, does.
// The server program makes its redislimit limiters without
// redislimit.WithPrevious, so a limiter made for the new policy names
// its keys by that policy's fingerprint and finds every key fresh: each
// may admit a whole new quota beyond what it used.
func TestServerRedisRestartAfterLimitChangeKeepsCounts(t *testing.T) {
	bin := buildServer(t)
	home := startRedisHome(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "rls.yaml"), serverConf(5))
	assert.Equal(t, uint32(1), restartRedis(t, bin, dir, home, 4).GetLimitRemaining())
	writeFile(t, filepath.Join(dir, "rls.yaml"), serverConf(6))
	st := restartRedis(t, bin, dir, home, 0)
	assert.Equal(t, uint32(6), st.GetCurrentLimit().GetRequestsPerUnit())
	assert.Equal(t, uint32(2), st.GetLimitRemaining(), "4 used of the new 6, as a reload would keep them")
}

// A bad configuration at start, or a bad flag: exit status 1, the error
// on stderr (a bad file's naming its file and line).
func TestServerRefusesToStart(t *testing.T) {
	bin := buildServer(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "rls.yaml")
	writeFile(t, file, badConf)
	good := filepath.Join(t.TempDir(), "good.yaml")
	writeFile(t, good, serverConf(1))
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"bad file", []string{"-config", dir, "-listen", "127.0.0.1:0"}, []string{"envoylimit-server:", file + ":6:", "requests_per_unt"}},
		{"no config", []string{"-listen", "127.0.0.1:0"}, []string{"-config is required"}},
		{"bad failure", []string{"-config", good, "-listen", "127.0.0.1:0", "-failure", "sometimes"}, []string{"-failure", "sometimes"}},
		{"bad headers", []string{"-config", good, "-listen", "127.0.0.1:0", "-headers", "all"}, []string{"-headers", "all"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := runServer(t, bin, tc.args...)
			err := p.waitExit()
			var ee *exec.ExitError
			require.True(t, errors.As(err, &ee), "exit status: %v; log:\n%s", err, p.log())
			assert.Equal(t, 1, ee.ExitCode())
			_, ok := p.waitLog(tc.want...)
			assert.True(t, ok, "want %q in the log:\n%s", tc.want, p.log())
		})
	}
}

// -failure with Redis down: to-envoy answers UNAVAILABLE (prefixed
// "ratelimit:"), as-limiter answers redislimit's default, fail open (OK),
// but for a key Redis last denied with nothing left (its deny cache);
// once Redis is back, both decide on it again.
func TestServerRedisDown(t *testing.T) {
	bin := buildServer(t)
	home := startRedisHome(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "rls.yaml"), serverConf(1))
	start := func(failure string) rlspb.RateLimitServiceClient {
		p := startServer(t, bin, "-config", dir, "-listen", "127.0.0.1:0", "-redis", home.srv.Addr(), "-redis-prefix", home.prefix, "-failure", failure)
		t.Cleanup(p.stop)
		return p.client()
	}
	toEnvoy, asLimiter := start("to-envoy"), start("as-limiter")
	u := desc("user", "u")
	assert.Equal(t, "OK", codesOf(rpc(t, toEnvoy, 0, u))[0])
	assert.Equal(t, "OVER_LIMIT", codesOf(rpc(t, asLimiter, 0, u))[0], "one limit of 1 shared through Redis")

	home.srv.Kill()
	for range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), serverPatience)
		_, err := toEnvoy.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{u}})
		cancel()
		requireUnavailable(t, err, "d.user")
		assert.Equal(t, "OK", codesOf(rpc(t, asLimiter, 0, desc("user", "v")))[0], "fail open")
		// The key Redis last denied with nothing left stays denied: the
		// limiter's deny cache answers for it, exactly, without Redis.
		assert.Equal(t, "OVER_LIMIT", codesOf(rpc(t, asLimiter, 0, u))[0], "the deny cache")
	}

	home.srv.Restart(t) // empty: persistence is off
	for _, c := range []rlspb.RateLimitServiceClient{toEnvoy, asLimiter} {
		require.Eventually(t, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), serverPatience)
			defer cancel()
			resp, err := c.ShouldRateLimit(ctx, &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{withHits(desc("user", "probe"), 0)}})
			return err == nil && resp.GetStatuses()[0].GetLimitRemaining() == 1
		}, serverPatience, 10*time.Millisecond, "Redis back")
	}
	assert.Equal(t, "OK", codesOf(rpc(t, toEnvoy, 0, u))[0])
	assert.Equal(t, "OVER_LIMIT", codesOf(rpc(t, asLimiter, 0, u))[0], "decided on Redis again")
}

// -headers envoy adds the RateLimit fields; -shadow answers OK to a
// request over its limit.
func TestServerHeadersShadow(t *testing.T) {
	bin := buildServer(t)
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "rls.yaml"), serverConf(1))
	p := startServer(t, bin, "-config", dir, "-listen", "127.0.0.1:0", "-headers", "envoy", "-shadow")
	c := p.client()
	u := desc("user", "u")
	for range 3 {
		assert.Equal(t, "OK", codesOf(rpc(t, c, 0, u))[0], "shadow")
	}
	resp := rpc(t, c, 0, u)
	assert.Equal(t, []string{"OK", "OVER_LIMIT"}, codesOf(resp), "the status still says")
	headers := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		headers[h.GetKey()] = h.GetValue()
	}
	assert.Equal(t, "1", headers["RateLimit-Limit"])
	assert.Equal(t, "0", headers["RateLimit-Remaining"])
	assert.NotEmpty(t, headers["RateLimit-Reset"])
	p.stop()
}
