package redistest

import (
	"net"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestWriteAckedWaitsForTheReplica: with the replica stopped (SIGSTOP, as a
// machine too loaded to run it), writeAcked reports no acknowledgement, and
// one once the replica runs again; WAIT sent by Do on a connection of its
// own answers 1 at once whatever the replica holds (the trap that made
// TestClusterWithReplicasFailover's "WAIT 1 returned 1" prove nothing).
func TestWriteAckedWaitsForTheReplica(t *testing.T) {
	t.Parallel()
	requireBinaries(t, "redis-server")
	m := start(t, []string{"--repl-diskless-sync-delay", "0"}) // the replica syncs at once
	host, port, _ := net.SplitHostPort(m.Addr())
	replica := start(t, []string{"--replicaof", host, port})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		info, err := m.Do("INFO", "replication")
		if err == nil && strings.Contains(infoField(info, "slave0"), "state=online") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("replica not online after 30s: %v\n%s", err, info)
		}
	}
	pid := replica.PID()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			_ = syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	t.Cleanup(resume)

	if _, err := m.Do("SET", "k", "v"); err != nil {
		t.Fatal(err)
	}
	if got, err := m.Do("WAIT", "1", "10000"); err != nil || got != "1" {
		t.Errorf(`Do("WAIT", "1", ...) with the replica stopped = %q, %v; want "1" at once (it counts the replica's ack of nothing)`, got, err)
	}
	if n, err := writeAcked(m.Addr(), 1, 300*time.Millisecond, "SET", "k", "w"); err != nil || n != 0 {
		t.Errorf("writeAcked with the replica stopped = %d, %v; want 0", n, err)
	}
	resume()
	// A generous bound: the replica only has to be scheduled again.
	if n, err := writeAcked(m.Addr(), 1, 30*time.Second, "SET", "k", "x"); err != nil || n != 1 {
		t.Fatalf("writeAcked with the replica running = %d, %v; want 1", n, err)
	}
	if got, err := replica.Do("GET", "k"); err != nil || got != "x" {
		t.Errorf("GET k on the replica after writeAcked = %q, %v; want the acknowledged x", got, err)
	}
}
