package redislimit

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// serverMicros returns the server time per EVALSHA call (µs, from INFO
// commandstats) that run spent, and resets the statistics.
func serverMicros(t *testing.T, c *redis.Client, calls int, run func()) float64 {
	t.Helper()
	if err := c.ConfigResetStat(bg()).Err(); err != nil {
		t.Fatal(err)
	}
	run()
	info, err := c.Info(bg(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_evalsha:") {
			continue
		}
		for _, f := range strings.Split(strings.TrimSpace(strings.TrimPrefix(line, "cmdstat_evalsha:")), ",") {
			if v, ok := strings.CutPrefix(f, "usec="); ok {
				us, _ := strconv.ParseFloat(v, 64)
				return us / float64(calls)
			}
		}
	}
	t.Fatalf("no evalsha in commandstats:\n%s", info)
	return 0
}

// slCost fills a sliding log of limit L (window 1s) with L one-event
// entries at consecutive microseconds, moves half of them out of the
// window, and returns the server µs per call of a denial of n = L (which
// must look past the live half), of a denial of n = 1 on a full log, and
// of an admission.
func slCost(t *testing.T, c *redis.Client, limit int) (denyBig, deny1, admit float64) {
	t.Helper()
	ctx := context.Background()
	w := int64(time.Second / time.Microsecond)
	key := fmt.Sprintf("cost:%d:{k}", limit)
	t0 := int64(1_800_000_000_000_000)
	args := func(now int64, n int, commit string) []any {
		return []any{now, n, limit, w, commit}
	}
	if err := slidingLogScripts.decide.Load(ctx, c).Err(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < limit; i += 10_000 {
		pipe := c.Pipeline()
		for j := i; j < min(i+10_000, limit); j++ {
			slidingLogScripts.decide.EvalSha(ctx, pipe, []string{key}, args(t0+int64(j), 1, "1")...)
		}
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// A slow fill on a loaded machine must not let the key's TTL (real
	// server time, while decisions run on the times passed here) run out.
	if err := c.Persist(ctx, key).Err(); err != nil {
		t.Fatal(err)
	}
	const calls = 200
	// A full log, nothing expired: deny n = 1.
	deny1 = serverMicros(t, c, calls, func() {
		for range calls {
			v, err := slidingLogScripts.decide.EvalSha(ctx, c, []string{key}, args(t0+int64(limit), 1, "1")...).Int64Slice()
			if err != nil || v[0] != 0 {
				t.Fatalf("deny1: %v %v", v, err)
			}
		}
	})
	// Half the log expired: deny n = L repeatedly.
	now := t0 + w + int64(limit/2)
	denyBig = serverMicros(t, c, calls, func() {
		for range calls {
			v, err := slidingLogScripts.decide.EvalSha(ctx, c, []string{key}, args(now, limit, "1")...).Int64Slice()
			if err != nil || v[0] != 0 {
				t.Fatalf("denyBig: %v %v", v, err)
			}
		}
	})
	// Admissions, one microsecond apart.
	n := min(calls, limit/2)
	admit = serverMicros(t, c, n, func() {
		for i := range n {
			v, err := slidingLogScripts.decide.EvalSha(ctx, c, []string{key}, args(now+int64(i), 1, "1")...).Int64Slice()
			if err != nil || v[0] != 1 {
				t.Fatalf("admit: %v %v", v, err)
			}
		}
	})
	return denyBig, deny1, admit
}

// TestSlidingLogDecisionCost measures the Redis server time of sliding log
// decisions at limits 10, 10k and 200k, and checks that no decision,
// denials included, costs time proportional to the limit (before the fix
// a denial of n = limit at 200k rescanned the log: tens of milliseconds).
func TestSlidingLogDecisionCost(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a 200k-entry log")
	}
	t.Parallel()
	_, c := startRedis(t)
	var worst float64
	for _, limit := range []int{10, 10_000, 200_000} {
		denyBig, deny1, admit := slCost(t, c, limit)
		t.Logf("limit %7d: deny n=limit %7.1f µs, deny n=1 %5.1f µs, admit %5.1f µs (server time per call)", limit, denyBig, deny1, admit)
		worst = max(worst, denyBig, deny1, admit)
	}
	// O(log limit) server time is tens of µs; O(limit) was 25 ms at 10k and
	// 1.8 s at 200k on a loaded machine. The bound leaves room for load.
	if worst > 5000 {
		t.Errorf("a sliding log decision took %.0f µs of server time, want well under 5ms", worst)
	}
}
