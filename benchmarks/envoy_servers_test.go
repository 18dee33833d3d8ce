package benchmarks

// Helpers shared by TestEnvoyDifferential and BenchmarkEnvoyRLS: they build
// the two Envoy rate limit services as programs and run them as
// subprocesses on loopback ports.
//
//   - theirs: envoyproxy/ratelimit, built from the nested module envoyrls/
//     (its own go.mod pins the upstream version and the dependency versions
//     its authors chose), configured by environment variables.
//   - ours: envoylimit/cmd/envoylimit-server of this repository, built from
//     ../envoylimit (or $ENVOYLIMIT_DIR), configured by flags.
//
// Both are built with GOWORK=off into one temporary directory per test
// binary run (the Go build cache makes a second build a link), and every
// server is killed and reaped when the test or benchmark that started it
// ends.

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

const (
	// rlsBuildTimeout bounds one `go build` of a server (the first build of
	// envoyproxy/ratelimit compiles a few hundred packages).
	rlsBuildTimeout = 5 * time.Minute
	// rlsStartTimeout bounds the wait for a started server to serve.
	rlsStartTimeout = 30 * time.Second
)

// rlsBins holds the servers built by this test binary, by name, and the
// directory they are in (removed by TestMain).
var rlsBins struct {
	mu   sync.Mutex
	dir  string
	bins map[string]rlsBuild
}

type rlsBuild struct {
	path string
	err  error
}

// removeRLSBins removes the directory of the built servers.
func removeRLSBins() {
	rlsBins.mu.Lock()
	defer rlsBins.mu.Unlock()
	if rlsBins.dir != "" {
		_ = os.RemoveAll(rlsBins.dir)
	}
}

// buildRLS builds the main package pkg of the module in dir as name, once
// per test binary run, and returns the program's path. It returns the build's
// error (with its output) when the build fails.
func buildRLS(name, dir, pkg string) (string, error) {
	rlsBins.mu.Lock()
	defer rlsBins.mu.Unlock()
	if b, ok := rlsBins.bins[name]; ok {
		return b.path, b.err
	}
	if rlsBins.bins == nil {
		rlsBins.bins = map[string]rlsBuild{}
	}
	if rlsBins.dir == "" {
		d, err := os.MkdirTemp("", "envoy-rls-")
		if err != nil {
			return "", err
		}
		rlsBins.dir = d
	}
	out := filepath.Join(rlsBins.dir, name)
	ctx, cancel := context.WithTimeout(context.Background(), rlsBuildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, pkg)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	b := rlsBuild{path: out}
	if msg, err := cmd.CombinedOutput(); err != nil {
		b = rlsBuild{err: fmt.Errorf("go build %s in %s: %v\n%s", pkg, dir, err, msg)}
	}
	rlsBins.bins[name] = b
	return b.path, b.err
}

// theirsBinary builds envoyproxy/ratelimit (envoyrls/) or skips tb.
func theirsBinary(tb testing.TB) string {
	tb.Helper()
	path, err := buildRLS("envoyrls", "envoyrls", ".")
	if err != nil {
		tb.Skipf("envoyproxy/ratelimit cannot be built (it needs the Go module proxy): %v", err)
	}
	return path
}

// oursBinary builds envoylimit-server from ../envoylimit, or from
// $ENVOYLIMIT_DIR, or skips tb.
func oursBinary(tb testing.TB) string {
	tb.Helper()
	dir := os.Getenv("ENVOYLIMIT_DIR")
	if dir == "" {
		dir = filepath.Join("..", "envoylimit")
	}
	if _, err := os.Stat(filepath.Join(dir, "cmd", "envoylimit-server")); err != nil {
		tb.Skipf("envoylimit-server not found (%v): it is module envoylimit of this repository; set ENVOYLIMIT_DIR to another copy", err)
	}
	path, err := buildRLS("envoylimit-server", dir, "./cmd/envoylimit-server")
	if err != nil {
		tb.Skipf("envoylimit-server cannot be built: %v", err)
	}
	return path
}

// rlsServer is a rate limit service running as a subprocess.
type rlsServer struct {
	name string
	addr string // gRPC, host:port on loopback
	pid  int
	log  string // its stdout and stderr
}

// freePort returns a loopback port that was free a moment ago.
func freePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// rlsServerCPUs, when not empty, is the CPU list (taskset -c) every server
// started by runRLS is confined to; BenchmarkEnvoyRLS sets it for its
// pinned mode.
var rlsServerCPUs string

// runRLS starts cmd with its output in a file, and kills and reaps it when
// tb ends. The returned channel is closed when the process has exited.
func runRLS(tb testing.TB, name string, cmd *exec.Cmd) (*rlsServer, <-chan struct{}) {
	tb.Helper()
	if rlsServerCPUs != "" {
		// taskset execs the server: the process (and its pid) is the server's.
		pinned := exec.Command("taskset", append([]string{"-c", rlsServerCPUs, cmd.Path}, cmd.Args[1:]...)...)
		pinned.Env = cmd.Env
		cmd = pinned
	}
	logPath := filepath.Join(tb.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		tb.Fatalf("starting %s: %v", name, err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		f.Close()
		close(exited)
	}()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	return &rlsServer{name: name, pid: cmd.Process.Pid, log: logPath}, exited
}

// logTail is the end of s's output, for failure messages.
func (s *rlsServer) logTail() string {
	b, _ := os.ReadFile(s.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// theirsOptions are the environment variables of one envoyproxy/ratelimit
// server beyond the ones startTheirs always sets (pipelining, pool size).
type theirsOptions []string

// startTheirs starts envoyproxy/ratelimit on the Redis at redisAddr with
// the configuration directory cfgDir (files *.yaml, one domain each) and
// waits until it answers probe.
func startTheirs(tb testing.TB, name, cfgDir, redisAddr string, probe *rlspb.RateLimitRequest, extra theirsOptions) *rlsServer {
	tb.Helper()
	bin := theirsBinary(tb)
	// Its runtime layout: $RUNTIME_ROOT/$RUNTIME_SUBDIRECTORY/config/*.yaml.
	root := tb.TempDir()
	conf := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(conf, 0o755); err != nil {
		tb.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(cfgDir, "*.yaml"))
	if err != nil || len(files) == 0 {
		tb.Fatalf("no *.yaml in %s", cfgDir)
	}
	for _, p := range files {
		b, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(conf, filepath.Base(p)), b, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	grpcPort := freePort(tb)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(),
		"HOST=127.0.0.1", "PORT="+strconv.Itoa(freePort(tb)),
		"DEBUG_HOST=127.0.0.1", "DEBUG_PORT="+strconv.Itoa(freePort(tb)),
		"GRPC_HOST=127.0.0.1", "GRPC_PORT="+strconv.Itoa(grpcPort),
		"USE_STATSD=false", "USE_PROMETHEUS=false", "TRACING_ENABLED=false",
		"LOG_LEVEL=warn",
		"BACKEND_TYPE=redis", "REDIS_SOCKET_TYPE=tcp", "REDIS_TYPE=SINGLE", "REDIS_URL="+redisAddr,
		"RUNTIME_ROOT="+root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
		"RUNTIME_IGNOREDOTFILES=true",
	)
	cmd.Env = append(cmd.Env, extra...)
	s, exited := runRLS(tb, name, cmd)
	s.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(grpcPort))
	waitServing(tb, s, exited, probe)
	return s
}

// startOurs starts envoylimit-server with the configuration directory
// cfgDir, on the Redis at redisAddr or in memory when it is empty, and waits
// until it answers probe.
func startOurs(tb testing.TB, name, cfgDir, redisAddr string, probe *rlspb.RateLimitRequest) *rlsServer {
	tb.Helper()
	bin := oursBinary(tb)
	args := []string{"-config", cfgDir, "-listen", "127.0.0.1:0"}
	if redisAddr != "" {
		args = append(args, "-redis", redisAddr)
	}
	s, exited := runRLS(tb, name, exec.Command(bin, args...))
	deadline := time.Now().Add(rlsStartTimeout)
	for s.addr == "" {
		b, _ := os.ReadFile(s.log)
		if _, rest, ok := strings.Cut(string(b), "listening on "); ok {
			if line, _, ok := strings.Cut(rest, "\n"); ok {
				s.addr = strings.TrimSpace(line)
				break
			}
		}
		select {
		case <-exited:
			tb.Fatalf("%s exited before it served:\n%s", name, s.logTail())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s did not print \"listening on\" within %v:\n%s", name, rlsStartTimeout, s.logTail())
		}
	}
	waitServing(tb, s, exited, probe)
	return s
}

// waitServing polls s with probe until it answers, the process exits or
// rlsStartTimeout passes.
func waitServing(tb testing.TB, s *rlsServer, exited <-chan struct{}, probe *rlspb.RateLimitRequest) {
	tb.Helper()
	conn := dialRLS(tb, s.addr)
	defer conn.Close()
	client := rlspb.NewRateLimitServiceClient(conn)
	deadline := time.Now().Add(rlsStartTimeout)
	var lastErr error
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := client.ShouldRateLimit(ctx, probe)
		cancel()
		if err == nil {
			return
		}
		lastErr = err
		select {
		case <-exited:
			tb.Fatalf("%s exited before it served (%v):\n%s", s.name, lastErr, s.logTail())
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s did not serve within %v (%v):\n%s", s.name, rlsStartTimeout, lastErr, s.logTail())
		}
	}
}

// dialRLS opens a client connection to a server on loopback.
func dialRLS(tb testing.TB, addr string) *grpc.ClientConn {
	tb.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		tb.Fatalf("dial %s: %v", addr, err)
	}
	return conn
}

// writeRLSConfig writes files (name -> YAML) into a fresh directory.
func writeRLSConfig(tb testing.TB, files map[string]string) string {
	tb.Helper()
	dir := tb.TempDir()
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	return dir
}

// rlsRequest builds a request of one descriptor per entries list, each
// entries list "k1=v1,k2=v2".
func rlsRequest(domain string, descriptors ...string) *rlspb.RateLimitRequest {
	req := &rlspb.RateLimitRequest{Domain: domain}
	for _, d := range descriptors {
		var desc rlcommon.RateLimitDescriptor
		for _, kv := range strings.Split(d, ",") {
			k, v, _ := strings.Cut(kv, "=")
			desc.Entries = append(desc.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: k, Value: v})
		}
		req.Descriptors = append(req.Descriptors, &desc)
	}
	return req
}
