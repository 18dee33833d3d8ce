package redislimit

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit/internal/redistest"
)

// TestCluster runs the conformance timelines of all five algorithms on a
// 3-master Redis Cluster through redis.NewClusterClient, with keys spread
// over slots on every master, and checks that no script fails (CROSSSLOT
// or otherwise) and that every master holds state.
func TestCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	for _, p := range policies() {
		t.Run(name(p), func(t *testing.T) {
			t.Parallel()
			pr := newPair(t, c, p)
			for i := range 24 {
				key := "user" + strconv.Itoa(i)
				for j, st := range timeline(p)[:12] {
					st.key = key
					pr.run(t, i*100+j, st)
				}
			}
		})
	}
	t.Cleanup(func() {
		for _, n := range cl.Nodes() {
			size, err := n.Do("DBSIZE")
			if err != nil || size == "0" {
				t.Errorf("cluster node %s: DBSIZE %s, %v: want keys on every master", n.Addr(), size, err)
			}
		}
	})
}

// cmdCalls returns the number of calls of a command from INFO
// commandstats of the server at addr.
func cmdCalls(t *testing.T, addr, cmd string) int {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":calls="); ok {
			n, _ := strconv.Atoi(strings.SplitN(rest, ",", 2)[0])
			return n
		}
	}
	return 0
}
