package redistest

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestStartSentinel(t *testing.T) {
	t.Parallel()
	began := time.Now()
	sn := StartSentinel(t, SentinelReplicas(2), SentinelMasterArgs("--maxmemory", "12345678"))
	t.Logf("sentinel setup up in %v", time.Since(began))
	if sn.MasterName() == "" || len(sn.SentinelAddrs()) != 3 || len(sn.Servers()) != 3 {
		t.Fatalf("MasterName %q, %d sentinels, %d servers; want a name, 3 and 3", sn.MasterName(), len(sn.SentinelAddrs()), len(sn.Servers()))
	}
	master, err := sn.Master()
	if err != nil || master != sn.Servers()[0].Addr() {
		t.Fatalf("Master() = %s, %v; want %s", master, err, sn.Servers()[0].Addr())
	}
	m := sn.Servers()[0]
	if got, err := m.Do("CONFIG", "GET", "maxmemory"); err != nil || got != "maxmemory\n12345678" {
		t.Errorf("master's maxmemory = %q, %v: SentinelMasterArgs not applied", got, err)
	}
	for _, r := range sn.Servers()[1:] {
		if got, _ := r.Do("CONFIG", "GET", "maxmemory"); got == "maxmemory\n12345678" {
			t.Errorf("replica %s got the master's arguments", r.Addr())
		}
	}
	// Replicated: a write the replicas acknowledge is on both.
	if n, err := writeAcked(m.Addr(), 2, 30*time.Second, "SET", "k", "v"); err != nil || n != 2 {
		t.Fatalf("SET and WAIT 2 on the master = %d, %v; want both replicas", n, err)
	}
	for _, r := range sn.Servers()[1:] {
		if got, err := r.Do("GET", "k"); err != nil || got != "v" {
			t.Errorf("GET k on replica %s = %q, %v", r.Addr(), got, err)
		}
		if _, err := r.Do("SET", "k", "w"); err == nil || !strings.HasPrefix(err.Error(), "READONLY") {
			t.Errorf("SET on replica %s: %v, want READONLY", r.Addr(), err)
		}
	}

	killed, at := sn.KillMaster(t)
	if killed != m {
		t.Errorf("KillMaster killed %s, want the master %s", killed.Addr(), m.Addr())
	}
	if _, err := m.Do("PING"); err == nil {
		t.Error("the old master answers PING after KillMaster")
	}
	next := sn.WaitFailover(t, master, PromotionTimeout)
	t.Logf("failover to %s %v after the kill", next, time.Since(at))
	if next == master || (next != sn.Servers()[1].Addr() && next != sn.Servers()[2].Addr()) {
		t.Fatalf("WaitFailover = %s, want one of the replicas", next)
	}
	if got, err := sn.Master(); err != nil || got != next {
		t.Errorf("Master() after failover = %s, %v; want %s", got, err, next)
	}
	// The other replica follows the new master (parallel-syncs).
	if got, _ := sn.WaitHealthy(t, 1, time.Second, PromotionTimeout); got != next {
		t.Errorf("WaitHealthy = %s, want the new master %s", got, next)
	}
	nm := sn.server(next)
	if got, err := nm.Do("GET", "k"); err != nil || got != "v" {
		t.Errorf("GET k on the new master = %q, %v; want the acknowledged write", got, err)
	}
	if _, err := nm.Do("SET", "k", "w"); err != nil {
		t.Errorf("SET on the new master: %v", err)
	}
}

func TestStartSentinelMissingBinary(t *testing.T) {
	// Not parallel: it sets environment variables.
	server, err := exec.LookPath("redis-server")
	if err != nil {
		t.Skip("redis-server " + installHint)
	}
	dir := t.TempDir() // redis-server without redis-sentinel
	if err := os.Symlink(server, filepath.Join(dir, "redis-server")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	warnOut = io.Discard
	t.Cleanup(func() { warnOut = os.Stderr })
	for _, ci := range []string{"", "true"} {
		t.Setenv("CI", ci)
		tb := &fakeTB{TB: t}
		tb.run(func() { StartSentinel(tb) })
		if ci == "" && !tb.skipped || ci != "" && !tb.failed {
			t.Errorf("CI=%q: skipped=%v failed=%v; want skip without CI, failure with it", ci, tb.skipped, tb.failed)
		}
		if want := "redis-sentinel not found in PATH; install with: apt-get install redis-sentinel"; !strings.Contains(tb.msg, want) {
			t.Errorf("CI=%q: message %q does not contain %q", ci, tb.msg, want)
		}
	}
}
