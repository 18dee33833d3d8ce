package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"github.com/rlkit/ratelimit/internal/testkit/reliability"
)

// modulePath is the root module's path: the repository root is the directory whose go.mod
// declares it.
const modulePath = "github.com/rlkit/ratelimit"

// FindRoot returns the repository root: dir or its nearest parent holding a go.mod of
// github.com/rlkit/ratelimit and a go.work.
func FindRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", fmt.Errorf("ratelimit: reliability: %w", err)
	}
	for d := dir; ; d = filepath.Dir(d) {
		if isRoot(d) {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("ratelimit: reliability: no repository root (a go.mod of %s and a go.work) in %s or above it; use -repo", modulePath, dir)
		}
	}
}

func isRoot(d string) bool {
	b, err := os.ReadFile(filepath.Join(d, "go.mod"))
	if err != nil {
		return false
	}
	if _, err := os.Stat(filepath.Join(d, "go.work")); err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "module" && strings.Trim(f[1], `"`) == modulePath {
			return true
		}
	}
	return false
}

// TestEvent is the part of a `go test -json` event this command reads.
type TestEvent struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// Stream is what ReadEvents learnt from a `go test -json` stream.
type Stream struct {
	Packages map[string][]string // test name (subtests included) -> import paths that ran it
	Failed   []string            // "pkg TestName" of every failed test, "pkg" for a failed package
}

// ReadEvents reads a `go test -json` stream from r, writes the test output to w as `go test -v`
// would print it (lines that are not JSON are copied as they are) and records which package ran
// each test and what failed.
func ReadEvents(r io.Reader, w io.Writer) (Stream, error) {
	st := Stream{Packages: map[string][]string{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line := sc.Bytes()
		var ev TestEvent
		if len(line) == 0 || line[0] != '{' || json.Unmarshal(line, &ev) != nil {
			w.Write(append(line, '\n'))
			continue
		}
		switch ev.Action {
		case "output", "build-output":
			io.WriteString(w, ev.Output)
		case "run":
			if ps := st.Packages[ev.Test]; !slices.Contains(ps, ev.Package) {
				st.Packages[ev.Test] = append(ps, ev.Package)
			}
		case "fail", "build-fail":
			what := ev.Package
			if ev.Test != "" {
				what += " " + ev.Test
			}
			st.Failed = append(st.Failed, what)
		}
	}
	if err := sc.Err(); err != nil {
		return st, fmt.Errorf("ratelimit: reliability: reading go test output: %w", err)
	}
	return st, nil
}

// RelPackage turns an import path of the repository into the path go test takes from the root:
// "github.com/rlkit/ratelimit/redislimit" -> "./redislimit", the root module itself -> ".".
func RelPackage(importPath string) string {
	if importPath == modulePath {
		return "."
	}
	if rest, ok := strings.CutPrefix(importPath, modulePath+"/"); ok {
		return "./" + rest
	}
	return importPath
}

// RunOptions are the settings of one run of the scenario tests.
type RunOptions struct {
	Root    string // repository root
	OutDir  string // RLKIT_RELIABILITY_OUT
	Long    bool
	Seed    string // RLKIT_RELIABILITY_SEED when not ""
	Timeout string // go test -timeout
}

// TestArgs returns the arguments of the go command that runs every TestProof test of the root
// and redislimit modules: without -race (the figures must be the real speed), one package at a
// time (so that scenarios of two packages do not share the CPUs).
func TestArgs(o RunOptions) []string {
	return append([]string{"test", "-json", "-count=1", "-p=1", "-timeout=" + o.Timeout, "-run", "^TestProof", "-v"},
		proofPackages...)
}

// proofPackages are the packages whose TestProof tests the report runs, as
// go test patterns from the repository's root.
var proofPackages = []string{"./...", "./redislimit/..."}

// TestEnv returns the environment of that go command: the workspace of the root, and the
// reliability variables (set or removed as the options say).
func TestEnv(base []string, o RunOptions) []string {
	drop := []string{"GOWORK", "GOFLAGS", reliability.EnvOut, reliability.EnvLong, reliability.EnvSeed}
	var env []string
	for _, kv := range base {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(drop, k) {
			env = append(env, kv)
		}
	}
	return append(env, runEnv(o)...)
}

// runEnv is what TestEnv adds to the environment.
func runEnv(o RunOptions) []string {
	env := []string{"GOWORK=" + filepath.Join(o.Root, "go.work"), reliability.EnvOut + "=" + o.OutDir}
	if o.Long {
		env = append(env, reliability.EnvLong+"=1")
	}
	if o.Seed != "" {
		env = append(env, reliability.EnvSeed+"="+o.Seed)
	}
	return env
}

// RunTests runs the scenario tests, streaming their output to w. It fails when go test fails,
// naming the failed tests.
func RunTests(o RunOptions, w io.Writer) (Stream, error) {
	cmd := exec.Command("go", TestArgs(o)...)
	cmd.Dir = o.Root
	cmd.Env = TestEnv(os.Environ(), o)
	cmd.Stderr = w
	out, err := cmd.StdoutPipe()
	if err != nil {
		return Stream{}, fmt.Errorf("ratelimit: reliability: %w", err)
	}
	fmt.Fprintf(w, "reliability: in %s: %s go %s\n", o.Root, strings.Join(runEnv(o), " "), strings.Join(cmd.Args[1:], " "))
	if err := cmd.Start(); err != nil {
		return Stream{}, fmt.Errorf("ratelimit: reliability: go test: %w", err)
	}
	st, rerr := ReadEvents(out, w)
	if rerr != nil {
		_, _ = io.Copy(io.Discard, out)
	}
	werr := cmd.Wait()
	if werr != nil || len(st.Failed) > 0 {
		var b bytes.Buffer
		fmt.Fprintf(&b, "ratelimit: reliability: go test failed")
		if werr != nil {
			fmt.Fprintf(&b, " (%v)", werr)
		}
		if len(st.Failed) > 0 {
			fmt.Fprintf(&b, ": %s", strings.Join(st.Failed, "; "))
		}
		return st, errors.New(b.String())
	}
	return st, rerr
}

// commandLine returns the first line of the output of name args, or a note saying it failed.
func commandLine(name string, args ...string) string {
	out, err := exec.Command(name, args...).Output()
	if err != nil {
		return name + " not available (" + err.Error() + ")"
	}
	line, _, _ := strings.Cut(strings.TrimSpace(string(out)), "\n")
	return line
}

// GoVersion shortens the output of `go version` to the toolchain: "go1.26.8".
func GoVersion(line string) string {
	f := strings.Fields(line)
	if len(f) >= 3 && f[0] == "go" && f[1] == "version" {
		return f[2]
	}
	return line
}

// RedisVersion shortens the output of `redis-server --version` to "redis-server 7.0.15".
func RedisVersion(line string) string {
	for _, f := range strings.Fields(line) {
		if v, ok := strings.CutPrefix(f, "v="); ok && strings.HasPrefix(line, "Redis server ") {
			return "redis-server " + v
		}
	}
	return line
}
