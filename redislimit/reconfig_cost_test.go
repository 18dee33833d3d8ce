package redislimit

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/stretchr/testify/require"
)

// commandCalls returns how many times run made Redis run each command
// (INFO commandstats, which counts the commands scripts call too), and
// resets the statistics first. The server must be the test's own.
func commandCalls(t *testing.T, c *redis.Client, run func()) map[string]int {
	t.Helper()
	require.NoError(t, c.ConfigResetStat(bg()).Err())
	run()
	info, err := c.Info(bg(), "commandstats").Result()
	require.NoError(t, err)
	calls := map[string]int{}
	for _, line := range strings.Split(info, "\n") {
		name, stats, ok := strings.Cut(strings.TrimSpace(line), ":")
		name, found := strings.CutPrefix(name, "cmdstat_")
		if !ok || !found || name == "info" || strings.HasPrefix(name, "config") {
			continue
		}
		for _, f := range strings.Split(stats, ",") {
			if v, ok := strings.CutPrefix(f, "calls="); ok {
				calls[name], _ = strconv.Atoi(v)
			}
		}
	}
	return calls
}

// TestDecisionWorkIndependentOfChanges: a decision's Redis work does not
// grow with the number of policy changes. For every algorithm, a limiter
// changed once and one changed 1,000 times (within the old policies' idle
// time, so none is forgotten for idleness) run the same commands for a
// new key, and for a key holding state under the policy before the last
// change. Before the fix every previous policy was probed with an EXISTS
// on every decision of a key with nothing used under the current one:
// 1,000 EXISTS after 1,000 changes, against 1 after one.
func TestDecisionWorkIndependentOfChanges(t *testing.T) {
	s, c := startRedis(t)
	if s.PID() == 0 {
		t.Skip("counts every command the server runs: needs a server of its own, not REDIS_ADDR")
	}
	for _, algo := range allAlgorithms {
		t.Run(algo.String(), func(t *testing.T) {
			counts := map[int][2]map[string]int{}
			for _, changes := range []int{1, 1000} {
				l, _ := clientLimiter(t, c, reconfigPolicy(algo, 10), WithDenyCache(0))
				for i := range changes {
					if i == changes-1 {
						require.True(t, allowed(t, l, "held", 3))
					}
					require.NoError(t, l.SetPolicy(reconfigPolicy(algo, 10+(i+1)%3), ratelimit.KeepUsed))
				}
				require.True(t, allowed(t, l, "warm", 1)) // the scripts loaded (a first EVAL)
				var fresh, held map[string]int
				fresh = commandCalls(t, c, func() { require.True(t, allowed(t, l, "new", 1)) })
				held = commandCalls(t, c, func() { require.True(t, allowed(t, l, "held", 1)) })
				counts[changes] = [2]map[string]int{fresh, held}
				d, err := l.Peek(bg(), "held", 0)
				require.NoError(t, err)
				require.Equal(t, d.Limit-4, d.Remaining, "the held key's 3 events carried over (KeepUsed), then 1")
			}
			t.Logf("a new key: %v; a converted key: %v", counts[1000][0], counts[1000][1])
			require.Equal(t, fmt.Sprint(counts[1][0]), fmt.Sprint(counts[1000][0]), "a new key's decision: after 1 change, after 1,000")
			require.Equal(t, fmt.Sprint(counts[1][1]), fmt.Sprint(counts[1000][1]), "a converted key's decision: after 1 change, after 1,000")
		})
	}
}

// TestDifferentialManyChanges: chains of 14 changes among three policies
// (so that names recur, salted, and are forgotten while their states are
// not idle), with keys touched between changes at random and others left
// for up to all 14, in every mode: memory and Redis decide alike, and a
// key whose state is more than four changes old starts fresh in both.
// A process started after the changes with them all in WithPrevious names
// the keys as the one that went through them, and counts in the same
// state.
func TestDifferentialManyChanges(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for seed := range uint64(24) {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			t.Parallel()
			rng := newRand(seed)
			algos := []ratelimit.Algorithm{allAlgorithms[rng.IntN(len(allAlgorithms))], allAlgorithms[rng.IntN(len(allAlgorithms))]}
			pool := []ratelimit.Policy{reconfigPolicy(algos[0], 8), reconfigPolicy(algos[1], 5), reconfigPolicy(algos[0], 12)}
			first := pool[rng.IntN(len(pool))]
			pr := newPair(t, c, first)
			var previous []Option
			cur := first
			keys := []string{"k0", "k1", "k2", "k3"}
			i := 0
			run := func(st step) {
				t.Helper()
				pr.run(t, i, st)
				i++
			}
			for _, k := range keys {
				run(step{key: k, kind: 'a', n: 1 + rng.IntN(4)})
			}
			for range 14 {
				p, mode := pool[rng.IntN(len(pool))], allModes[rng.IntN(len(allModes))]
				run(step{advance: time.Duration(rng.IntN(20)) * time.Millisecond, kind: 'S', policy: p, mode: mode})
				previous = append(previous, WithPrevious(cur, mode))
				cur = p
				for range rng.IntN(3) {
					k := keys[rng.IntN(len(keys)-1)] // k3 is never touched again
					switch rng.IntN(3) {
					case 0:
						run(step{key: k, kind: 'p', n: 0})
					default:
						run(step{key: k, kind: 'a', n: 1 + rng.IntN(3)})
					}
				}
			}
			for _, k := range keys {
				run(step{key: k, kind: 'p', n: 0})
			}
			// k3 was last written 14 changes ago: fresh.
			d, err := pr.rl.Peek(bg(), "k3", 0)
			require.NoError(t, err)
			require.Equal(t, cur.Limit, d.Remaining, "a key untouched across 14 changes starts fresh")
			later := mustNew(t, c, cur, append(previous, WithClock(pr.mock), WithPrefix(pr.rl.base))...)
			for _, k := range keys {
				require.Equal(t, pr.rl.Key(k), later.Key(k), "WithPrevious names keys as SetPolicy did")
				want, err := pr.rl.Peek(bg(), k, 0)
				require.NoError(t, err)
				got, err := later.Peek(bg(), k, 0)
				require.NoError(t, err)
				require.Equal(t, want, got, "the later process reads %s's state alike", k)
			}
			require.Len(t, pr.rl.cur.Load().prev, len(later.cur.Load().prev))
			require.LessOrEqual(t, len(later.cur.Load().prev), keptPolicies)
		})
	}
}

// BenchmarkDecisionAfterChanges measures a decision of a new key (which
// has nothing under the current policy, so the script looks for state
// under the previous ones) after 0, 1 and 1,000 changes of policy, one
// caller on a local Redis, with the server's time per script
// (server-µs/op, INFO commandstats). Before the fix it grew with every
// change kept (an EXISTS and five arguments each); now it is flat after
// the first.
func BenchmarkDecisionAfterChanges(b *testing.B) {
	_, c := startRedis(b)
	for _, changes := range []int{0, 1, 1000} {
		b.Run("changes="+strconv.Itoa(changes), func(b *testing.B) {
			l := mustNew(b, c, ratelimit.FixedWindowPolicy(1_000_000, time.Hour), WithPrefix(uniquePrefix(b)), WithDenyCache(0))
			for i := range changes {
				if err := l.SetPolicy(ratelimit.FixedWindowPolicy(1_000_000+(i+1)%3, time.Hour), ratelimit.KeepUsed); err != nil {
					b.Fatal(err)
				}
			}
			ctx := bg()
			if _, err := l.AllowN(ctx, "warm", 1); err != nil {
				b.Fatal(err)
			}
			if err := c.ConfigResetStat(ctx).Err(); err != nil {
				b.Fatal(err)
			}
			i := 0
			for b.Loop() {
				i++
				if _, err := l.AllowN(ctx, "new"+strconv.Itoa(i), 1); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(usecPerCall(b, c, "evalsha"), "server-µs/op")
		})
	}
}
