package redislimit

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/redistest"
)

// TestCluster runs the conformance timelines of every algorithm on a
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

// TestClusterAdmin runs blocks, resets, penalties, a change of policy with
// conversion (to every algorithm) and calendar quotas on a Redis Cluster
// through a ClusterClient, over keys in many slots: no script fails
// (CROSSSLOT or otherwise: each touches its key's state, its block and its
// state under previous policies, all with one hash tag), and the Decisions
// are the in-memory ones.
func TestClusterAdmin(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	for _, from := range allAlgorithms {
		t.Run(from.String(), func(t *testing.T) {
			t.Parallel()
			to := allAlgorithms[(int(from)+2)%len(allAlgorithms)]
			pr := newPair(t, c, reconfigPolicy(from, 6))
			var steps []step
			for i := range 24 {
				key := "user" + strconv.Itoa(i)
				steps = append(steps,
					step{key: key, kind: 'a', n: 1 + i%6},
					step{key: key, kind: 'P', n: 2},
				)
				switch i % 3 {
				case 0:
					steps = append(steps, step{key: key, kind: 'B', d: time.Second}, step{key: key, kind: 'a', n: 1})
				case 1:
					steps = append(steps, step{key: key, kind: 'R'}, step{key: key, kind: 'a', n: 2})
				}
			}
			steps = append(steps, step{advance: 100 * time.Millisecond, kind: 'S', policy: reconfigPolicy(to, 9), mode: ratelimit.ScaleUsed})
			for i := range 24 {
				key := "user" + strconv.Itoa(i)
				steps = append(steps,
					step{key: key, kind: 'p', n: 0},
					step{key: key, kind: 'a', n: 1},
					step{key: key, kind: 'r', n: 1},
					step{advance: 10 * time.Millisecond, key: key, kind: 'a', n: 3},
				)
				if i%4 == 0 {
					steps = append(steps, step{key: key, kind: 'R'}, step{key: key, kind: 'p', n: 0})
				}
			}
			for i, st := range steps {
				pr.run(t, i, st)
			}
		})
	}
	t.Run("calendar", func(t *testing.T) {
		t.Parallel()
		ny := mustZone("America/New_York")
		start := time.Date(2026, 3, 7, 23, 0, 0, 0, ny)
		pr := newPairAt(t, c, ratelimit.QuotaPolicy(5, ratelimit.Calendar{Unit: ratelimit.Daily, Location: ny}), start)
		var steps []step
		for _, adv := range []time.Duration{0, 59 * time.Minute, time.Hour, 22 * time.Hour, 2 * time.Hour} {
			steps = append(steps, step{advance: adv, key: "user0", kind: 'p', n: 0})
			for i := range 24 {
				steps = append(steps, step{key: "user" + strconv.Itoa(i), kind: 'a', n: 1 + i%3})
			}
		}
		for i, st := range steps {
			pr.run(t, i, st)
		}
	})
	t.Cleanup(func() {
		for _, n := range cl.Nodes() {
			size, err := n.Do("DBSIZE")
			if err != nil || size == "0" {
				t.Errorf("cluster node %s: DBSIZE %s, %v: want keys on every master", n.Addr(), size, err)
			}
		}
	})
}
