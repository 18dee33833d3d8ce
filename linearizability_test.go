package ratelimit_test

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/rlkit/ratelimit/internal/testkit/lincheck"
	"github.com/rlkit/ratelimit/internal/testkit/reliability"
	"github.com/stretchr/testify/require"
)

// The linearizability proofs of issue 12: concurrent histories of
// decisions, recorded on many goroutines in phases of fixed limiter time,
// checked with porcupine against the in-memory limiter of the same policy
// replayed (internal/testkit/lincheck).

// linStart is the limiter time of the first phase: whole microseconds.
var linStart = time.Date(2026, 11, 30, 15, 0, 0, 123456000, time.UTC)

// linPolicy returns the policy of algo used by the proofs: a limit a phase
// of 32 goroutines can exhaust, periods that the phase steps partly or
// wholly refill, and a New York day for the quota.
func linPolicy(algo ratelimit.Algorithm) ratelimit.Policy {
	ny, err := time.LoadLocation("America/New_York")
	if err != nil {
		panic(err)
	}
	switch algo {
	case ratelimit.TokenBucketAlgorithm:
		return ratelimit.TokenBucketPolicy(ratelimit.Per(20, time.Second), 30)
	case ratelimit.LeakyBucketAlgorithm:
		return ratelimit.LeakyBucketPolicy(30, 40*time.Millisecond)
	case ratelimit.FixedWindowAlgorithm:
		return ratelimit.FixedWindowPolicy(30, time.Second)
	case ratelimit.SlidingLogAlgorithm:
		return ratelimit.SlidingLogPolicy(30, time.Second)
	case ratelimit.SlidingCounterAlgorithm:
		return ratelimit.SlidingCounterPolicy(30, time.Second)
	case ratelimit.QuotaAlgorithm:
		return ratelimit.QuotaPolicy(60, ratelimit.Calendar{Unit: ratelimit.Daily, Location: ny})
	}
	panic(fmt.Sprint("no policy for ", algo))
}

var linAlgorithms = []ratelimit.Algorithm{
	ratelimit.TokenBucketAlgorithm, ratelimit.LeakyBucketAlgorithm, ratelimit.FixedWindowAlgorithm,
	ratelimit.SlidingLogAlgorithm, ratelimit.SlidingCounterAlgorithm, ratelimit.QuotaAlgorithm,
}

// linRun runs phases of w on the limiter behind do, which reads clk, and
// returns the recorded operations: clk is set to each phase's time while
// no call is in flight.
func linRun(w lincheck.Workload, phases []time.Time, clk *fakeclock.Manual, do func(lincheck.Input) (ratelimit.Decision, error)) []lincheck.Op {
	var rec lincheck.Recorder
	for k, at := range phases {
		clk.Set(at)
		w.Run(&rec, k, 0, at, do)
	}
	return rec.Ops()
}

// linVerdict is the verdict to record: linearizable unless t failed.
func linVerdict(t *testing.T) string {
	if t.Failed() {
		return "FAILED: not linearizable (see the test log)"
	}
	return "linearizable"
}

// linShape is the load of the in-memory proofs.
func linShape(seed uint64, keys ...string) (lincheck.Workload, int) {
	w := lincheck.Workload{
		Clients:  reliability.Pick(32, 64),
		PerPhase: reliability.Pick(2, 4),
		Keys:     keys,
		MaxN:     3,
		Peeks:    10,
		Seed:     seed,
	}
	return w, reliability.Pick(5, 40)
}

// TestProofLinearizableMemory: one in-memory limiter of each algorithm,
// called by many goroutines at once, returns Decisions that are
// linearizable against its own sequential semantics.
func TestProofLinearizableMemory(t *testing.T) {
	t.Parallel()
	seed := reliability.Seed(t)
	var st lincheck.Stats
	for _, algo := range linAlgorithms {
		t.Run(algo.String(), func(t *testing.T) {
			p := linPolicy(algo)
			w, phases := linShape(seed+uint64(algo), "k")
			clk := fakeclock.NewManual(linStart)
			lim, err := p.NewLimiter(ratelimit.WithClock(clk))
			require.NoError(t, err)
			ops := linRun(w, lincheck.Schedule(seed, linStart, phases, p.WindowAt(linStart)), clk, func(in lincheck.Input) (ratelimit.Decision, error) {
				if in.Kind == lincheck.Peek {
					return lim.Peek(in.N), nil
				}
				return lim.AllowN(in.N), nil
			})
			m, err := lincheck.NewModel(p, linStart)
			require.NoError(t, err)
			st.Add(algo.String(), lincheck.Require(t, "linearizability-memory-"+algo.String(), m, ops))
		})
	}
	w, phases := linShape(seed)
	reliability.Record(t, reliability.Result{
		Group: "linearizability", Scenario: "linearizability-memory",
		Title: "In-memory limiter, every algorithm, concurrent goroutines",
		How: fmt.Sprintf("one limiter per algorithm (%d algorithms) on a manual clock; %d goroutines released together, "+
			"%d calls each per phase (AllowN n=1..%d, %d%% Peek), %d phases with the clock moved between them by seeded steps; "+
			"checked with porcupine against the same policy's limiter replayed sequentially", len(linAlgorithms), w.Clients, w.PerPhase, w.MaxN, w.Peeks, phases),
		Ops: st.Ops, Histories: st.Histories, Verdict: linVerdict(t), Seed: int64(seed), Notes: st.Notes,
	})
}

// TestProofLinearizableKeyed: the in-memory keyed limiter, several keys
// (each its own history), many goroutines.
func TestProofLinearizableKeyed(t *testing.T) {
	t.Parallel()
	seed := reliability.Seed(t)
	keys := []string{"alice", "bob", "carol", "dave", "erin", "frank"}
	var st lincheck.Stats
	for _, algo := range linAlgorithms {
		t.Run(algo.String(), func(t *testing.T) {
			p := linPolicy(algo)
			// Fewer events per key than the single limiter gets: keep each
			// key busy by lowering its limit.
			p.Limit = max(p.Limit/3, 4)
			if algo == ratelimit.TokenBucketAlgorithm {
				p.Refill = p.Limit / 2
			}
			w, phases := linShape(seed+uint64(algo), keys...)
			w.PerPhase *= 2
			clk := fakeclock.NewManual(linStart)
			k, err := ratelimit.NewKeyed(p, ratelimit.WithClock(clk))
			require.NoError(t, err)
			ctx := context.Background()
			ops := linRun(w, lincheck.Schedule(seed, linStart, phases, p.WindowAt(linStart)), clk, func(in lincheck.Input) (ratelimit.Decision, error) {
				if in.Kind == lincheck.Peek {
					return k.Peek(ctx, in.Key, in.N)
				}
				return k.AllowN(ctx, in.Key, in.N)
			})
			m, err := lincheck.NewModel(p, linStart)
			require.NoError(t, err)
			st.Add(algo.String(), lincheck.Require(t, "linearizability-keyed-"+algo.String(), m, ops))
		})
	}
	w, phases := linShape(seed, keys...)
	reliability.Record(t, reliability.Result{
		Group: "linearizability", Scenario: "linearizability-keyed",
		Title: "In-memory keyed limiter, every algorithm, several keys",
		How: fmt.Sprintf("ratelimit.NewKeyed per algorithm on a manual clock, %d keys (one history each); %d goroutines released together, "+
			"%d calls each per phase on random keys (AllowN n=1..%d, %d%% Peek), %d phases with seeded clock steps between them; "+
			"each key checked with porcupine against a fresh limiter of the policy replayed", len(keys), w.Clients, 2*w.PerPhase, w.MaxN, w.Peeks, phases),
		Ops: st.Ops, Histories: st.Histories, Verdict: linVerdict(t), Seed: int64(seed), Notes: st.Notes,
	})
}

// racyBucket is a deliberately broken limiter: it reads the quota (Peek),
// lets other goroutines run, then charges on the strength of what it read
// without holding anything across the two, as check-then-act limiters do.
// Called by one goroutine at a time it is exactly the limiter it wraps.
type racyBucket struct {
	inner ratelimit.Limiter
}

func (b racyBucket) AllowN(n int) ratelimit.Decision {
	d := b.inner.Peek(n) // the read
	time.Sleep(20 * time.Microsecond)
	if d.Allowed {
		b.inner.AllowN(n) // the write, on a stale read: its own verdict is ignored
	}
	return d
}

// TestProofLinearizableCatchesBrokenLimiter: the checker is not vacuous
// on real concurrent histories: a check-then-act limiter run by many
// goroutines is caught (porcupine says Illegal and writes the
// visualisation), while the same limiter called sequentially passes.
func TestProofLinearizableCatchesBrokenLimiter(t *testing.T) {
	t.Parallel()
	seed := reliability.Seed(t)
	p := ratelimit.TokenBucketPolicy(ratelimit.Per(20, time.Second), 30)
	phases := reliability.Pick(4, 20)
	run := func(clients int) ([]lincheck.Op, porcupine.Model) {
		clk := fakeclock.NewManual(linStart)
		inner, err := p.NewLimiter(ratelimit.WithClock(clk))
		require.NoError(t, err)
		b := racyBucket{inner: inner}
		w := lincheck.Workload{Clients: clients, PerPhase: 64 / clients, Keys: []string{"k"}, MaxN: 3, Seed: seed}
		ops := linRun(w, lincheck.Schedule(seed, linStart, phases, p.WindowAt(linStart)), clk, func(in lincheck.Input) (ratelimit.Decision, error) {
			return b.AllowN(in.N), nil
		})
		m, err := lincheck.NewModel(p, linStart)
		require.NoError(t, err)
		return ops, m
	}

	ops, m := run(1)
	lincheck.Require(t, "linearizability-broken-sequential", m, ops)

	var r lincheck.Result
	attempts := 0
	for attempts < 5 {
		attempts++
		ops, m = run(32)
		r = lincheck.Check(t, "linearizability-broken", m, ops, 60*time.Second)
		if r.Verdict == porcupine.Illegal {
			break
		}
	}
	require.Equal(t, porcupine.Illegal, r.Verdict, "the racy limiter was not caught in %d runs", attempts)
	fi, err := os.Stat(r.File)
	require.NoError(t, err, "visualisation")
	require.Positive(t, fi.Size(), "visualisation %s is empty", r.File)
	reliability.Record(t, reliability.Result{
		Group: "linearizability", Scenario: "linearizability-broken",
		Title: "A deliberately broken (check-then-act) limiter is caught",
		How: fmt.Sprintf("a token bucket wrapped to Peek, sleep 20µs, then AllowN ignoring its verdict and returning the Peek's Decision; "+
			"32 goroutines x 2 calls per phase, %d phases; the same wrapper run by one goroutine passes the check", phases),
		Ops: r.Ops, Histories: r.Histories, Verdict: "caught", Seed: int64(seed),
		Notes: []string{fmt.Sprintf("caught on attempt %d; porcupine took %v", attempts, r.Elapsed.Round(time.Millisecond))},
	})
}
