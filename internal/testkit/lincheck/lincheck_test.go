package lincheck

import (
	"math/rand/v2"
	"os"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 11, 30, 15, 0, 0, 0, time.UTC)

// ref returns the Decisions of a fresh limiter of p created at t0 for
// the inputs run in order, to build histories from.
func ref(t *testing.T, p ratelimit.Policy, ins ...Input) []ratelimit.Decision {
	t.Helper()
	clk := fakeclock.NewManual(t0)
	lim, err := p.NewLimiter(ratelimit.WithClock(clk))
	require.NoError(t, err)
	r := &replayer{lim: lim, clk: clk}
	ds := make([]ratelimit.Decision, len(ins))
	for i, in := range ins {
		ds[i] = r.apply(in)
	}
	return ds
}

func op(client int, in Input, d ratelimit.Decision, call, ret int64) Op {
	return Op{Client: client, Input: in, Output: Output{Decision: d}, Call: call, Return: ret}
}

func check(t *testing.T, p ratelimit.Policy, ops []Op, opts ...Option) Result {
	t.Helper()
	m, err := NewModel(p, t0, opts...)
	require.NoError(t, err)
	return Check(t, t.Name(), m, ops, 10*time.Second)
}

func allowAt(key string, n int, d time.Duration) Input {
	return Input{Key: key, N: n, T: t0.Add(d).UnixNano()}
}

// TestSequentialHistoryPasses: one client's calls, one after the other,
// with the reference's own Decisions (admissions, a denial, a refill
// across a phase, a Peek) are linearizable.
func TestSequentialHistoryPasses(t *testing.T) {
	for _, p := range []ratelimit.Policy{
		ratelimit.TokenBucketPolicy(ratelimit.Per(2, time.Second), 3),
		ratelimit.LeakyBucketPolicy(3, 500*time.Millisecond),
		ratelimit.FixedWindowPolicy(3, time.Second),
		ratelimit.SlidingLogPolicy(3, time.Second),
		ratelimit.SlidingCounterPolicy(3, time.Second),
		ratelimit.QuotaPolicy(3, ratelimit.Calendar{Unit: ratelimit.Daily, Location: time.UTC}),
	} {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			ins := []Input{allowAt("k", 1, 0), allowAt("k", 2, 0), allowAt("k", 1, 0),
				{Key: "k", N: 0, T: t0.UnixNano(), Kind: Peek}, allowAt("k", 1, 700*time.Millisecond), allowAt("k", 3, 2*time.Second)}
			ds := ref(t, p, ins...)
			require.False(t, ds[2].Allowed, "the third call must be a denial for this test to mean anything")
			var ops []Op
			for i, in := range ins {
				ops = append(ops, op(0, in, ds[i], int64(10*i), int64(10*i+5)))
			}
			require.Equal(t, porcupine.Ok, check(t, p, ops).Verdict)
		})
	}
}

// TestConcurrentHistoryPassesOutOfCallOrder: two overlapping calls that
// are linearizable only in the order opposite to their calls.
func TestConcurrentHistoryPassesOutOfCallOrder(t *testing.T) {
	p := ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 2)
	ds := ref(t, p, allowAt("k", 1, 0), allowAt("k", 1, 0)) // remaining 1, then 0
	ops := []Op{
		op(0, allowAt("k", 1, 0), ds[1], 0, 10), // called first, saw the second admission's state
		op(1, allowAt("k", 1, 0), ds[0], 1, 5),
	}
	require.Equal(t, porcupine.Ok, check(t, p, ops).Verdict)
}

// TestTwoTakeTheLastToken: two overlapping calls both admitted with
// Remaining 0 from a bucket of one token: not linearizable, and the
// visualisation is written.
func TestTwoTakeTheLastToken(t *testing.T) {
	p := ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 1)
	d := ref(t, p, allowAt("k", 1, 0))[0]
	require.True(t, d.Allowed)
	ops := []Op{op(0, allowAt("k", 1, 0), d, 0, 10), op(1, allowAt("k", 1, 0), d, 5, 15)}
	r := check(t, p, ops)
	require.Equal(t, porcupine.Illegal, r.Verdict)
	require.Equal(t, 2, r.Ops)
	require.Equal(t, 1, r.Histories)
	fi, err := os.Stat(r.File)
	require.NoError(t, err)
	require.Positive(t, fi.Size())
}

// TestStaleReadAfterAdmission: a call made after an admission returned
// must see it. The same outputs with the calls overlapping are fine.
func TestStaleReadAfterAdmission(t *testing.T) {
	p := ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 2)
	peek := Input{Key: "k", N: 0, T: t0.UnixNano(), Kind: Peek}
	ds := ref(t, p, peek, allowAt("k", 1, 0)) // Remaining 2, then admitted with 1
	for _, tc := range []struct {
		name       string
		call, ret  int64
		verdict    porcupine.CheckResult
		allowAgain bool
	}{
		{"after", 20, 30, porcupine.Illegal, false},
		{"overlapping", 5, 30, porcupine.Ok, false},
		{"after-allow", 20, 30, porcupine.Illegal, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			second := op(1, peek, ds[0], tc.call, tc.ret)
			if tc.allowAgain { // an AllowN that sees the pre-admission bucket
				second = op(1, allowAt("k", 1, 0), ds[1], tc.call, tc.ret)
			}
			ops := []Op{op(0, allowAt("k", 1, 0), ds[1], 0, 10), second}
			require.Equal(t, tc.verdict, check(t, p, ops).Verdict)
		})
	}
}

// TestPhaseOrder: a call of a later phase (a later T) cannot be linearized
// before one of an earlier phase, even where its Decision would fit there.
func TestPhaseOrder(t *testing.T) {
	p := ratelimit.FixedWindowPolicy(1, time.Second)
	later := allowAt("k", 1, time.Second) // the next window
	ds := ref(t, p, later, allowAt("k", 1, 0))
	// Overlapping in real time, but the T order forces "first" first, and
	// then it must have been admitted.
	ops := []Op{op(0, allowAt("k", 1, 0), ds[1], 0, 10), op(1, later, ds[0], 5, 15)}
	require.Equal(t, porcupine.Illegal, check(t, p, ops).Verdict)
}

// TestPrecision: Redis's durations, rounded up to the microsecond, match
// at that precision only.
func TestPrecision(t *testing.T) {
	p := ratelimit.TokenBucketPolicy(ratelimit.Per(3, 10*time.Microsecond), 1)
	ds := ref(t, p, allowAt("k", 1, 0), allowAt("k", 1, 0))
	require.False(t, ds[1].Allowed)
	require.NotZero(t, ds[1].RetryAfter%time.Microsecond, "the test needs a duration that is not whole microseconds")
	round := func(d ratelimit.Decision) ratelimit.Decision {
		d.RetryAfter = roundUp(d.RetryAfter, time.Microsecond)
		d.ResetAfter = roundUp(d.ResetAfter, time.Microsecond)
		return d
	}
	ops := []Op{op(0, allowAt("k", 1, 0), round(ds[0]), 0, 10), op(0, allowAt("k", 1, 0), round(ds[1]), 20, 30)}
	require.Equal(t, porcupine.Ok, check(t, p, ops, WithPrecision(time.Microsecond)).Verdict)
	require.Equal(t, porcupine.Illegal, check(t, p, ops).Verdict)
}

// TestErrorNeverMatches: an operation that failed is not a Decision of the
// reference.
func TestErrorNeverMatches(t *testing.T) {
	p := ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 1)
	d := ref(t, p, allowAt("k", 1, 0))[0]
	o := op(0, allowAt("k", 1, 0), d, 0, 10)
	o.Output.Err = "ratelimit: boom"
	require.Equal(t, porcupine.Illegal, check(t, p, []Op{o}).Verdict)
}

// TestPartitionedByKey: keys are separate histories; a violation on one
// key is found among linearizable others.
func TestPartitionedByKey(t *testing.T) {
	p := ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 1)
	d := ref(t, p, allowAt("a", 1, 0))[0]
	ops := []Op{op(0, allowAt("a", 1, 0), d, 0, 10), op(1, allowAt("b", 1, 0), d, 5, 15)}
	r := check(t, p, ops)
	require.Equal(t, porcupine.Ok, r.Verdict)
	require.Equal(t, 2, r.Histories)
	ops = append(ops, op(2, allowAt("b", 1, 0), d, 20, 30))
	require.Equal(t, porcupine.Illegal, check(t, p, ops).Verdict)
}

func TestNewModelRejectsInvalidPolicy(t *testing.T) {
	_, err := NewModel(ratelimit.Policy{}, t0)
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
}

// TestWorkloadDeterministic: the inputs depend on seed, phase and client
// only.
func TestWorkloadDeterministic(t *testing.T) {
	w := Workload{Clients: 2, PerPhase: 5, Keys: []string{"a", "b"}, MaxN: 3, Peeks: 20, Seed: 7}
	require.Equal(t, w.Inputs(1, 1, t0), w.Inputs(1, 1, t0))
	require.NotEqual(t, w.Inputs(1, 1, t0), w.Inputs(1, 0, t0))
	require.Equal(t, Schedule(3, t0, 5, time.Second), Schedule(3, t0, 5, time.Second))
	ts := Schedule(3, t0, 50, time.Second)
	for i := 1; i < len(ts); i++ {
		require.False(t, ts[i].Before(ts[i-1]))
		require.Zero(t, ts[i].Sub(t0)%time.Microsecond)
	}
}

// TestPruningLosesNoLinearizableHistory: histories built from a real
// sequential execution, each operation's interval stretched around its
// point in that execution (within its phase), are linearizable by
// construction; the search's pruning (equal states, the canonical-order
// rule) must find them all, quickly.
func TestPruningLosesNoLinearizableHistory(t *testing.T) {
	for _, p := range []ratelimit.Policy{
		ratelimit.TokenBucketPolicy(ratelimit.Per(10, time.Second), 12),
		ratelimit.LeakyBucketPolicy(12, 100*time.Millisecond),
		ratelimit.FixedWindowPolicy(12, time.Second),
		ratelimit.SlidingLogPolicy(12, time.Second),
		ratelimit.SlidingCounterPolicy(12, time.Second),
		ratelimit.QuotaPolicy(40, ratelimit.Calendar{Unit: ratelimit.Daily, Location: time.UTC}),
	} {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			const seeds = 8
			caught := 0
			for seed := range uint64(seeds) {
				rng := rand.New(rand.NewPCG(seed, uint64(p.Algorithm)))
				const phases, perPhase, width = 4, 30, 1000 // points 100 apart, intervals up to ±width
				var ins []Input
				var calls, rets []int64
				at := t0
				for k := range phases {
					at = at.Add(time.Duration(rng.IntN(700)) * time.Millisecond)
					lo, hi := int64(k*perPhase*100), int64((k+1)*perPhase*100-1)
					for i := range perPhase {
						in := Input{Key: "k", N: 1 + rng.IntN(3), T: at.UnixNano()}
						if rng.IntN(5) == 0 {
							in.Kind, in.N = Peek, rng.IntN(4)
						}
						pt := lo + int64(i*100)
						ins = append(ins, in)
						calls = append(calls, max(lo, pt-rng.Int64N(width)))
						rets = append(rets, min(hi, pt+rng.Int64N(width)))
					}
				}
				ds := ref(t, p, ins...)
				ops := make([]Op, len(ins))
				for i := range ins {
					ops[i] = op(rng.IntN(1000), ins[i], ds[i], calls[i], rets[i])
				}
				rng.Shuffle(len(ops), func(i, j int) { ops[i], ops[j] = ops[j], ops[i] })
				r := check(t, p, ops)
				require.Equal(t, porcupine.Ok, r.Verdict, "seed %d", seed)
				require.Less(t, r.Elapsed, 5*time.Second, "seed %d", seed)

				// One admission made to report one more remaining event
				// than it left: caught.
				var admitted []int
				for i, o := range ops {
					if o.Input.Kind == AllowN && o.Output.Decision.Allowed {
						admitted = append(admitted, i)
					}
				}
				i := admitted[rng.IntN(len(admitted))]
				ops[i].Output.Decision.Remaining++
				m, err := NewModel(p, t0)
				require.NoError(t, err)
				if porcupine.CheckOperationsTimeout(m, Operations(ops), 10*time.Second) == porcupine.Illegal {
					caught++
				}
			}
			require.GreaterOrEqual(t, caught, seeds-1, "mutated histories caught, of %d", seeds)
		})
	}
}

// BenchmarkCheck: porcupine with this model on a linearizable history of
// 2,000 operations of one key (20 phases of 100, intervals overlapping up
// to ±10 neighbours), per operation checked.
func BenchmarkCheck(b *testing.B) {
	p := ratelimit.TokenBucketPolicy(ratelimit.Per(10, time.Second), 12)
	rng := rand.New(rand.NewPCG(1, 2))
	const phases, perPhase, width = 20, 100, 1000
	var ins []Input
	var calls, rets []int64
	at := t0
	for k := range phases {
		at = at.Add(time.Duration(rng.IntN(700)) * time.Millisecond)
		lo, hi := int64(k*perPhase*100), int64((k+1)*perPhase*100-1)
		for i := range perPhase {
			ins = append(ins, Input{Key: "k", N: 1 + rng.IntN(3), T: at.UnixNano()})
			pt := lo + int64(i*100)
			calls = append(calls, max(lo, pt-rng.Int64N(width)))
			rets = append(rets, min(hi, pt+rng.Int64N(width)))
		}
	}
	clk := fakeclock.NewManual(t0)
	lim, _ := p.NewLimiter(ratelimit.WithClock(clk))
	r := &replayer{lim: lim, clk: clk}
	ops := make([]Op, len(ins))
	for i, in := range ins {
		ops[i] = op(i%32, in, r.apply(in), calls[i], rets[i])
	}
	m, err := NewModel(p, t0)
	if err != nil {
		b.Fatal(err)
	}
	history := Operations(ops)
	b.ResetTimer()
	for range b.N {
		if porcupine.CheckOperations(m, history) != true {
			b.Fatal("not linearizable")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(ops)), "ns/checked-op")
}
