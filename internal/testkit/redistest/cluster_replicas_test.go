package redistest

import (
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestParseClusterNodes(t *testing.T) {
	t.Parallel()
	reply := "07c37dfeb235213a872192d90877d0cd55635b91 127.0.0.1:30004@31004,host1 slave e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 0 1426238317239 4 connected\n" +
		"67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1 127.0.0.1:30002@31002 master - 0 1426238316232 2 connected 5461-10922\n" +
		"e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca 127.0.0.1:30001@31001 myself,master - 0 0 1 connected 0-5460 10923 [5461->-67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1]\n" +
		"6ec23923021cf3ffec47632106199cb7f496ce01 127.0.0.1:30005@31005 master,fail - 1426238316232 0 5 disconnected\n"
	got, err := parseClusterNodes(reply)
	if err != nil {
		t.Fatal(err)
	}
	want := []clusterNode{
		{id: "07c37dfeb235213a872192d90877d0cd55635b91", addr: "127.0.0.1:30004", masterID: "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca"},
		{id: "67ed2db8d677e59ec4a4cefb06858cf2a1a89fa1", addr: "127.0.0.1:30002", master: true, slots: [][2]int{{5461, 10922}}},
		{id: "e7d1eecce10fd6bb5eb35b9f99a514335d9ba9ca", addr: "127.0.0.1:30001", myself: true, master: true, slots: [][2]int{{0, 5460}, {10923, 10923}}},
		{id: "6ec23923021cf3ffec47632106199cb7f496ce01", addr: "127.0.0.1:30005", master: true, failing: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parseClusterNodes =\n%+v\nwant\n%+v", got, want)
	}
	if !got[2].serves(10923) || !got[2].serves(0) || got[2].serves(5461) {
		t.Errorf("serves: wrong ranges for %+v", got[2])
	}
	for _, bad := range []string{"abc def", "id 127.0.0.1:1@2 master - 0 0 1 connected x-y"} {
		if _, err := parseClusterNodes(bad); err == nil {
			t.Errorf("parseClusterNodes(%q): want error", bad)
		}
	}
}

func TestStartClusterWithReplicasBadArgs(t *testing.T) {
	t.Parallel()
	for _, a := range [][2]int{{2, 1}, {3, -1}, {31, 1}} {
		tb := &fakeTB{TB: t}
		tb.run(func() { StartClusterWithReplicas(tb, a[0], a[1]) })
		if !tb.failed || !strings.Contains(tb.msg, "want at least 3 masters") {
			t.Errorf("StartClusterWithReplicas(%d, %d): failed=%v msg=%q; want a failure naming the bounds", a[0], a[1], tb.failed, tb.msg)
		}
	}
}

// TestClusterWithReplicasFailover starts 3 masters with a replica each, then fails the master
// of one key by SIGKILL and of another by CLUSTER FAILOVER: each time a replica takes the slot
// over, every node agrees, and a write the old master had replicated (WAIT) is on the new one.
func TestClusterWithReplicasFailover(t *testing.T) {
	t.Parallel()
	began := time.Now()
	c := StartClusterWithReplicas(t, 3, 1)
	t.Logf("cluster of 6 up in %v", time.Since(began))
	if n := len(c.Nodes()); n != 6 {
		t.Fatalf("%d nodes, want 6", n)
	}
	masters := map[*Server]bool{}
	for _, n := range c.Nodes() {
		info, err := n.Do("CLUSTER", "INFO")
		if err != nil || infoField(info, "cluster_known_nodes") != "6" || infoField(info, "cluster_size") != "3" {
			t.Errorf("CLUSTER INFO on %s: %v\n%s", n.Addr(), err, info)
		}
		if got, err := n.Do("CONFIG", "GET", "cluster-node-timeout"); err != nil || got != "cluster-node-timeout\n1000" {
			t.Errorf("%s: CONFIG GET cluster-node-timeout = %q, %v", n.Addr(), got, err)
		}
	}
	for _, key := range []string{"{a}", "{b}", "{c}", "{d}", "{e}", "{f}", "{g}"} {
		m, err := c.MasterOf(key)
		if err != nil {
			t.Fatal(err)
		}
		masters[m] = true
		reps, err := c.ReplicasOf(m)
		if err != nil || len(reps) != 1 || reps[0] == m {
			t.Fatalf("ReplicasOf(%s) = %v, %v; want one other node", m.Addr(), reps, err)
		}
		if _, err := m.Do("SET", key, "v"); err != nil {
			t.Errorf("SET %s on its master %s: %v", key, m.Addr(), err)
		}
	}
	if len(masters) < 2 {
		t.Errorf("7 keys on %d masters, want at least 2", len(masters))
	}

	failover := func(t *testing.T, key string, kill bool) {
		old, err := c.MasterOf(key)
		if err != nil {
			t.Fatal(err)
		}
		reps, err := c.ReplicasOf(old)
		if err != nil || len(reps) != 1 {
			t.Fatalf("ReplicasOf(%s) = %v, %v; want one replica", old.Addr(), reps, err)
		}
		// WAIT on the connection of the SET: the replica has the write.
		// WAIT on a connection of its own, as Do sends it, answers 1 at
		// once; it did so here while the master was not yet streaming to
		// its just-synced replica (Redis 7.0 starts on the replica's next
		// REPLCONF ACK, up to a second later), and the kill took the
		// write along: the promoted replica was empty. A generous
		// timeout: the replica only has to be scheduled.
		if n, err := writeAcked(old.Addr(), 1, 30*time.Second, "SET", key, "replicated"); err != nil || n != 1 {
			t.Fatalf("SET %s and WAIT 1 on its master %s = %d, %v; want 1 replica", key, old.Addr(), n, err)
		}
		began := time.Now()
		if kill {
			if got := c.KillMaster(t, key); got != old {
				t.Errorf("KillMaster killed %s, want %s", got.Addr(), old.Addr())
			}
		} else {
			gotOld, rep := c.ManualFailover(t, key)
			if gotOld != old || rep != reps[0] {
				t.Errorf("ManualFailover = %s, %s; want %s, %s", gotOld.Addr(), rep.Addr(), old.Addr(), reps[0].Addr())
			}
		}
		m := c.WaitPromoted(t, key, old, PromotionTimeout)
		t.Logf("kill=%v: %s took over from %s in %v", kill, m.Addr(), old.Addr(), time.Since(began))
		if m != reps[0] {
			t.Errorf("new master %s, want the replica %s", m.Addr(), reps[0].Addr())
		}
		if got, err := m.Do("GET", key); err != nil || got != "replicated" {
			t.Errorf("GET %s on the new master = %q, %v", key, got, err)
		}
		if kill {
			if _, err := old.Do("PING"); err == nil {
				t.Error("the killed master still answers")
			}
			return
		}
		if _, err := old.Do("SET", key, "x"); err == nil || !strings.HasPrefix(err.Error(), "MOVED ") {
			t.Errorf("SET on the old master after a manual failover: %v, want MOVED", err)
		}
		if r, err := c.ReplicasOf(m); err != nil || len(r) != 1 || r[0] != old {
			t.Errorf("ReplicasOf(new master) = %v, %v; want the old master", r, err)
		}
	}
	// Kill one master, then fail over another gracefully.
	failover(t, "{a}", true)
	other := "{b}"
	for _, k := range []string{"{b}", "{c}", "{d}", "{e}", "{f}", "{g}"} {
		m, _ := c.MasterOf(k)
		a, _ := c.MasterOf("{a}")
		if m != a {
			other = k
			break
		}
	}
	failover(t, other, false)

	if _, err := c.Slot("{a}"); err != nil {
		t.Errorf("Slot: %v", err)
	}
	if c.Node("nowhere:1") != nil {
		t.Error(`Node("nowhere:1") != nil`)
	}
	if _, err := (&Cluster{}).MasterOf("k"); err == nil || errors.Is(err, ErrNil) {
		t.Errorf("MasterOf on an empty cluster: %v, want an error", err)
	}
}
