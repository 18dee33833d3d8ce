package redistest

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// ClusterNodeTimeout is the cluster-node-timeout of the nodes [StartClusterWithReplicas] starts:
// a master unreachable for this long is marked failing, and its replica is promoted a second or
// two later (the replica's election delay is 500 ms plus up to 500 ms at random).
const ClusterNodeTimeout = time.Second

// PromotionTimeout is a generous bound for [Cluster.WaitPromoted] and [Sentinel.WaitFailover]
// after a master is killed. Detection takes [ClusterNodeTimeout] (or [SentinelDownAfter]) and
// the election a second or two, but an election that fails is tried again only 4 s after it
// began (a Cluster replica's retry time is 2 x max(2 x node timeout, 2 s); a sentinel's,
// twice its failover-timeout of 2 s), and on a loaded machine one can fail: a vote that comes
// after the replica's 2 s, or a master refusing because it has not yet processed the FAIL
// message. A late vote can fail the next election too (a master must not vote again for a
// replica of the same master within 2 x node timeout): one master stopped for 3.5 s as the
// election began made a promotion take 12 s. The bound leaves room for five failed elections.
const PromotionTimeout = 30 * time.Second

// replicasTimeout bounds StartClusterWithReplicas's wait for a healthy cluster: more nodes
// take longer to sync on a loaded machine than the three of StartCluster.
const replicasTimeout = 30 * time.Second

// StartClusterWithReplicas starts a Redis Cluster of masters masters (at least 3, as redis-cli
// requires) with replicasPerMaster replicas each, every node a redis-server on a free loopback
// port with cluster-node-timeout [ClusterNodeTimeout], joined by redis-cli --cluster create
// --cluster-replicas. It returns once every node reports cluster_state:ok, every node agrees on
// who serves which slot, every replica's link to its master is up with its initial sync done,
// and every master's replicas acknowledge its writes (a write and WAIT on one connection).
// opts ([WithArgs]) are given to every node, after the defaults. All nodes are killed when the
// test ends. It needs redis-server and redis-cli in PATH (skip, or fail when CI is set) and
// ignores REDIS_ADDR.
//
// Which nodes are masters is for redis-cli to choose; ask [Cluster.MasterOf] and
// [Cluster.ReplicasOf]. The returned [Cluster]'s methods [Cluster.KillMaster],
// [Cluster.ManualFailover] and [Cluster.WaitPromoted] drive a failover.
func StartClusterWithReplicas(tb testing.TB, masters, replicasPerMaster int, opts ...Option) *Cluster {
	tb.Helper()
	if masters < 3 || replicasPerMaster < 0 || masters*(1+replicasPerMaster) > 60 {
		tb.Fatalf("redistest: StartClusterWithReplicas(%d, %d): want at least 3 masters, replicas >= 0, at most 60 nodes", masters, replicasPerMaster)
	}
	requireBinaries(tb, "redis-server", "redis-cli")
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	args := append([]string{
		"--cluster-enabled", "yes",
		"--cluster-config-file", "nodes.conf",
		"--cluster-node-timeout", strconv.Itoa(int(ClusterNodeTimeout / time.Millisecond)),
		// A replica's first sync starts at once, not after the default 5 s wait for
		// more replicas to share it.
		"--repl-diskless-sync-delay", "0",
	}, o.args...)
	c := &Cluster{}
	for range masters * (1 + replicasPerMaster) {
		c.nodes = append(c.nodes, start(tb, args))
	}
	// Registered after the nodes' cleanups, so it runs before they are killed.
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("redistest: the cluster's logs:\n%s", c.logs())
		}
	})

	c.create(tb, replicasPerMaster, replicasTimeout)
	if err := c.waitHealthy(time.Now().Add(replicasTimeout), masters, replicasPerMaster); err != nil {
		tb.Fatalf("redistest: cluster of %d masters and %d replicas each not ready after %v: %v", masters, replicasPerMaster, replicasTimeout, err)
	}
	return c
}

// logs returns the end of every node's log, for the message of a failed test: what each
// node saw of failures, elections and resyncs.
func (c *Cluster) logs() string {
	var b strings.Builder
	for _, n := range c.nodes {
		fmt.Fprintf(&b, "node %s:\n%s\n", n.Addr(), logTail(filepath.Join(n.dir, "redis.log"), 0))
	}
	return b.String()
}

// clusterNode is one line of CLUSTER NODES.
type clusterNode struct {
	id, addr string // addr is host:port, without the bus port
	myself   bool
	master   bool
	failing  bool   // flagged fail or fail? (pfail)
	masterID string // for a replica, its master's id
	slots    [][2]int
}

// serves reports whether the node owns slot.
func (n clusterNode) serves(slot int) bool {
	for _, r := range n.slots {
		if r[0] <= slot && slot <= r[1] {
			return true
		}
	}
	return false
}

// parseClusterNodes parses a CLUSTER NODES reply. Slots in migration ("[...]") are skipped.
func parseClusterNodes(reply string) ([]clusterNode, error) {
	var nodes []clusterNode
	for _, line := range strings.Split(strings.TrimSpace(reply), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("redistest: malformed CLUSTER NODES line %q", line)
		}
		n := clusterNode{id: f[0], addr: f[1]}
		if i := strings.IndexAny(n.addr, "@,"); i >= 0 {
			n.addr = n.addr[:i]
		}
		for _, flag := range strings.Split(f[2], ",") {
			switch flag {
			case "myself":
				n.myself = true
			case "master":
				n.master = true
			case "fail", "fail?":
				n.failing = true
			}
		}
		if f[3] != "-" {
			n.masterID = f[3]
		}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				continue
			}
			lo, hi, ok := strings.Cut(s, "-")
			if !ok {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("redistest: malformed slot range %q in CLUSTER NODES line %q", s, line)
			}
			n.slots = append(n.slots, [2]int{a, b})
		}
		nodes = append(nodes, n)
	}
	return nodes, nil
}

// clusterView returns node s's CLUSTER NODES, with the line of s itself first.
func (s *Server) clusterView() ([]clusterNode, error) {
	reply, err := s.Do("CLUSTER", "NODES")
	if err != nil {
		return nil, err
	}
	nodes, err := parseClusterNodes(reply)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(nodes, func(n clusterNode) bool { return n.myself })
	if i < 0 {
		return nil, fmt.Errorf("redistest: CLUSTER NODES of %s has no myself line", s.Addr())
	}
	nodes[0], nodes[i] = nodes[i], nodes[0]
	return nodes, nil
}

// live returns the nodes whose process is running (not killed).
func (c *Cluster) live() []*Server {
	var live []*Server
	for _, n := range c.nodes {
		if n.PID() != 0 {
			live = append(live, n)
		}
	}
	return live
}

// Node returns the node with address addr, or nil.
func (c *Cluster) Node(addr string) *Server {
	for _, n := range c.nodes {
		if n.Addr() == addr {
			return n
		}
	}
	return nil
}

// Slot returns the hash slot of key (CLUSTER KEYSLOT, asked of a running node).
func (c *Cluster) Slot(key string) (int, error) {
	var err error
	for _, n := range c.live() {
		var reply string
		if reply, err = n.Do("CLUSTER", "KEYSLOT", key); err == nil {
			return strconv.Atoi(reply)
		}
	}
	if err == nil {
		err = errors.New("no node is running")
	}
	return 0, fmt.Errorf("redistest: CLUSTER KEYSLOT: %w", err)
}

// MasterOf returns the running node that serves key's slot as a master in its own view
// (CLUSTER NODES asked of each node: the node itself says it is a master holding the slot). It
// returns an error when no running node does, as while a failover is under way.
func (c *Cluster) MasterOf(key string) (*Server, error) {
	slot, err := c.Slot(key)
	if err != nil {
		return nil, err
	}
	return c.masterOfSlot(slot)
}

// masterOfSlot is MasterOf for a slot already known.
func (c *Cluster) masterOfSlot(slot int) (*Server, error) {
	for _, n := range c.live() {
		view, err := n.clusterView()
		if err != nil {
			continue
		}
		if me := view[0]; me.master && me.serves(slot) {
			return n, nil
		}
	}
	return nil, fmt.Errorf("redistest: no running node is master of slot %d", slot)
}

// ReplicasOf returns the running nodes that replicate master, each in its own view.
func (c *Cluster) ReplicasOf(master *Server) ([]*Server, error) {
	id, err := master.Do("CLUSTER", "MYID")
	if err != nil {
		return nil, err
	}
	var replicas []*Server
	for _, n := range c.live() {
		view, err := n.clusterView()
		if err != nil {
			return nil, err
		}
		if me := view[0]; !me.master && me.masterID == id {
			replicas = append(replicas, n)
		}
	}
	return replicas, nil
}

// KillMaster kills (SIGKILL) the master of key's slot and returns it. The cluster notices after
// [ClusterNodeTimeout] and promotes one of its replicas; [Cluster.WaitPromoted] waits for that.
func (c *Cluster) KillMaster(tb testing.TB, key string) *Server {
	tb.Helper()
	m, err := c.MasterOf(key)
	if err != nil {
		tb.Fatal(err)
	}
	m.Kill()
	return m
}

// ManualFailover runs CLUSTER FAILOVER on a replica of key's master, the graceful failover:
// the master stops accepting writes, the replica catches up with its replication stream, then
// takes the slots over, and the old master becomes its replica. It returns the old master and the
// replica, which becomes the master once the failover completes ([Cluster.WaitPromoted]).
func (c *Cluster) ManualFailover(tb testing.TB, key string) (oldMaster, replica *Server) {
	tb.Helper()
	m, err := c.MasterOf(key)
	if err != nil {
		tb.Fatal(err)
	}
	replicas, err := c.ReplicasOf(m)
	if err != nil || len(replicas) == 0 {
		tb.Fatalf("redistest: master %s of %q has no replica: %v", m.Addr(), key, err)
	}
	if reply, err := replicas[0].Do("CLUSTER", "FAILOVER"); err != nil || reply != "OK" {
		tb.Fatalf("redistest: CLUSTER FAILOVER on %s = %q, %v", replicas[0].Addr(), reply, err)
	}
	return m, replicas[0]
}

// WaitPromoted waits, at most timeout, until a running node other than old serves key's slot as
// master, every running node agrees and reports cluster_state:ok, and every running replica is
// in sync with its master and acknowledges its writes. It returns the new master, or fails tb.
func (c *Cluster) WaitPromoted(tb testing.TB, key string, old *Server, timeout time.Duration) *Server {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	slot, err := c.Slot(key)
	if err != nil {
		tb.Fatal(err)
	}
	for {
		m, err := c.masterOfSlot(slot)
		if err == nil && m == old {
			err = fmt.Errorf("%s is still master of slot %d", old.Addr(), slot)
		}
		if err == nil {
			err = c.waitHealthy(time.Now(), -1, -1)
		}
		if err == nil {
			return m
		}
		if time.Now().After(deadline) {
			tb.Fatalf("redistest: no replica promoted for slot %d within %v: %v", slot, timeout, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitHealthy polls until every running node reports cluster_state:ok, every node's view of
// who serves each slot is the same, every running replica's link to its master is up with
// no sync in progress, and every master's online replicas acknowledge a write. With
// masters >= 0 it also wants exactly that many masters holding slots and replicas replicas of
// each. It returns the last reason for waiting once deadline passes.
func (c *Cluster) waitHealthy(deadline time.Time, masters, replicas int) error {
	for {
		err := c.healthy(masters, replicas)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// healthy checks once what waitHealthy waits for.
func (c *Cluster) healthy(masters, replicas int) error {
	live := c.live()
	var want string // slot owners as one node sees them, to compare with the others
	for _, n := range live {
		info, err := n.Do("CLUSTER", "INFO")
		if err != nil {
			return fmt.Errorf("CLUSTER INFO on %s: %w", n.Addr(), err)
		}
		if st := infoField(info, "cluster_state"); st != "ok" {
			return fmt.Errorf("%s: cluster_state:%s", n.Addr(), st)
		}
		view, err := n.clusterView()
		if err != nil {
			return err
		}
		var owners []string
		counts := map[string]int{} // master id -> replicas
		nmasters := 0
		for _, v := range view {
			if v.master && len(v.slots) > 0 {
				nmasters++
				owners = append(owners, fmt.Sprint(v.id, v.slots))
			}
			if !v.master && v.masterID != "" && !v.failing {
				counts[v.masterID]++
			}
		}
		slices.Sort(owners)
		got := strings.Join(owners, " ")
		if want == "" {
			want = got
		} else if got != want {
			return fmt.Errorf("nodes disagree on slot owners: %s sees %s, another %s", n.Addr(), got, want)
		}
		if masters >= 0 {
			if nmasters != masters {
				return fmt.Errorf("%s sees %d masters with slots, want %d", n.Addr(), nmasters, masters)
			}
			for _, v := range view {
				if v.master && len(v.slots) > 0 && counts[v.id] != replicas {
					return fmt.Errorf("%s sees %d replicas of %s, want %d", n.Addr(), counts[v.id], v.addr, replicas)
				}
			}
		}
		repl, err := n.Do("INFO", "replication")
		if err != nil {
			return fmt.Errorf("INFO replication on %s: %w", n.Addr(), err)
		}
		me := view[0]
		if !me.master {
			if st := infoField(repl, "master_link_status"); st != "up" {
				return fmt.Errorf("replica %s: master_link_status:%s", n.Addr(), st)
			}
			if infoField(repl, "master_sync_in_progress") != "0" {
				return fmt.Errorf("replica %s: initial sync in progress", n.Addr())
			}
			continue
		}
		if online := onlineReplicas(repl); online > 0 && len(me.slots) > 0 {
			key, err := keyIn(n, me)
			if err != nil {
				return err
			}
			if err := replicasAck(n, key, online); err != nil {
				return err
			}
		}
	}
	return nil
}

// keyIn returns a key of a slot that node n (whose CLUSTER NODES line is me) serves.
func keyIn(n *Server, me clusterNode) (string, error) {
	for i := range 1000 {
		key := "redistest:ready:" + strconv.Itoa(i)
		reply, err := n.Do("CLUSTER", "KEYSLOT", key)
		if err != nil {
			return "", fmt.Errorf("CLUSTER KEYSLOT on %s: %w", n.Addr(), err)
		}
		if slot, err := strconv.Atoi(reply); err == nil && me.serves(slot) {
			return key, nil
		}
	}
	return "", fmt.Errorf("no key of 1000 tried falls in a slot of %s", n.Addr())
}
