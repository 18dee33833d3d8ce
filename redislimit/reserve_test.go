package redislimit

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/stretchr/testify/require"
)

// The reservation part of the differential suite (issue 27): random
// reserve / settle timelines on ratelimit.Keyed and on Redis, on one mock
// clock, demanding identical Decisions and identical Settle errors.

// resPair is a pair with the reservations each side holds, by slot.
type resPair struct {
	*pair
	mem, rl []*ratelimit.Reservation
	log     []string
}

// resStep is one step of a reservation timeline: advance the clock, then
// 'v' reserve n with expiry, 's' settle slot at actual, 'a' AllowN(n),
// 'p' Peek(n), or 'S' SetPolicy(policy, mode).
type resStep struct {
	advance time.Duration
	key     string
	kind    byte
	n       int
	slot    int
	expiry  time.Duration
	policy  ratelimit.Policy
	mode    ratelimit.Inheritance
}

func (st resStep) String() string {
	switch st.kind {
	case 'v':
		return fmt.Sprintf("+%v Reserve(%s, %d, %v) -> #%d", st.advance, st.key, st.n, st.expiry, st.slot)
	case 's':
		return fmt.Sprintf("+%v Settle(#%d, %d)", st.advance, st.slot, st.n)
	case 'S':
		return fmt.Sprintf("+%v SetPolicy(%v, %v)", st.advance, st.policy, st.mode)
	}
	return fmt.Sprintf("+%v %c(%s, %d)", st.advance, st.kind, st.key, st.n)
}

// run applies st to both sides and fails t on any difference.
func (p *resPair) run(t *testing.T, i int, st resStep) {
	t.Helper()
	p.log = append(p.log, st.String())
	if msg := p.apply(st); msg != "" {
		t.Fatalf("step %d: %s\ntimeline:\n%s", i, msg, strings.Join(p.log, "\n"))
	}
}

// apply applies st to both sides and describes the first difference ("":
// none).
func (p *resPair) apply(st resStep) string {
	if st.advance = st.advance.Truncate(time.Microsecond); st.advance != 0 {
		p.mock.Set(p.mock.Now().Add(st.advance))
	}
	ctx := bg()
	switch st.kind {
	case 'v':
		wr, werr := p.pair.mem.ReserveN(ctx, st.key, st.n, st.expiry)
		gr, err := p.pair.rl.ReserveN(ctx, st.key, st.n, st.expiry)
		if (err == nil) != (werr == nil) {
			return fmt.Sprintf("ReserveN error %v, want %v", err, werr)
		}
		for len(p.mem) <= st.slot {
			p.mem, p.rl = append(p.mem, nil), append(p.rl, nil)
		}
		p.mem[st.slot], p.rl[st.slot] = wr, gr
		if want := roundDecision(wr.Decision); gr.Decision != want {
			return fmt.Sprintf("ReserveN = %+v, want %+v", gr.Decision, want)
		}
	case 's':
		if st.slot >= len(p.mem) || p.mem[st.slot] == nil {
			return ""
		}
		werr := p.mem[st.slot].Settle(ctx, st.n)
		err := p.rl[st.slot].Settle(ctx, st.n)
		if !sameSettleError(err, werr) {
			return fmt.Sprintf("Settle error %v, want %v", err, werr)
		}
	case 'a':
		want, werr := p.pair.mem.AllowN(ctx, st.key, st.n)
		got, err := p.pair.rl.AllowN(ctx, st.key, st.n)
		if err != nil || werr != nil {
			return fmt.Sprintf("AllowN error %v (reference %v)", err, werr)
		}
		if want = roundDecision(want); got != want {
			return fmt.Sprintf("AllowN = %+v, want %+v", got, want)
		}
	case 'p':
		want, werr := p.pair.mem.Peek(ctx, st.key, st.n)
		got, err := p.pair.rl.Peek(ctx, st.key, st.n)
		if err != nil || werr != nil {
			return fmt.Sprintf("Peek error %v (reference %v)", err, werr)
		}
		if want = roundDecision(want); got != want {
			return fmt.Sprintf("Peek = %+v, want %+v", got, want)
		}
	case 'R':
		werr := p.pair.mem.Reset(ctx, st.key)
		err := p.pair.rl.Reset(ctx, st.key)
		if err != nil || werr != nil {
			return fmt.Sprintf("Reset error %v (reference %v)", err, werr)
		}
	case 'S':
		werr := p.pair.mem.SetPolicy(st.policy, st.mode)
		err := p.pair.rl.SetPolicy(st.policy, st.mode)
		if (err == nil) != (werr == nil) {
			return fmt.Sprintf("SetPolicy = %v, want %v", err, werr)
		}
	}
	return ""
}

// sameSettleError reports whether two Settle errors say the same: none,
// already settled, or the same configuration error.
func sameSettleError(got, want error) bool {
	switch {
	case want == nil || got == nil:
		return got == want
	case errors.Is(want, ratelimit.ErrReservationSettled):
		return errors.Is(got, ratelimit.ErrReservationSettled)
	}
	return got.Error() == want.Error()
}

// reservationAlgorithms are the algorithms that can settle.
var reservationAlgorithms = []ratelimit.Algorithm{
	ratelimit.TokenBucketAlgorithm, ratelimit.LeakyBucketAlgorithm, ratelimit.FixedWindowAlgorithm,
	ratelimit.SlidingCounterAlgorithm, ratelimit.QuotaAlgorithm,
}

// randomResStep returns a random step for keys k0-k1 and reservation slots
// 0-5: estimates within the limit (now and then out of range), actuals
// from 0 to three limits, settles at once, within the window, in the
// next, later, after the expiry, twice; AllowN and Peek between; with
// policies, SetPolicy to a random policy that settles, in any mode.
func randomResStep(rng *rand.Rand, limit int, period time.Duration, policies bool) resStep {
	var adv time.Duration
	switch r := rng.IntN(20); {
	case r < 6: // same microsecond
	case r < 14:
		adv = time.Duration(rng.Int64N(int64(period/3)/1000)) * time.Microsecond
	case r < 18:
		adv = time.Duration(rng.Int64N(int64(3*period)/1000)) * time.Microsecond
	case r < 19:
		adv = 2 * time.Second // exactly an expiry below
	default:
		adv = time.Duration(rng.Int64N(30)) * time.Hour
	}
	st := resStep{advance: adv, key: fmt.Sprint("k", rng.IntN(2)), slot: rng.IntN(6)}
	switch r := rng.IntN(20); {
	case r < 8:
		st.kind, st.n = 'v', 1+rng.IntN(limit/2)
		if rng.IntN(15) == 0 {
			st.n = []int{0, -1, limit + 1}[rng.IntN(3)]
		}
		st.expiry = []time.Duration{2 * time.Second, 500 * time.Millisecond, 10 * time.Second, 48 * time.Hour}[rng.IntN(4)]
	case r < 15:
		st.kind, st.n = 's', rng.IntN(limit/2+1) // about the estimates: as often less as more
		if rng.IntN(4) == 0 {
			st.n = rng.IntN(3*limit + 1) // far more, now and then
		}
	case r < 17:
		st.kind, st.n = 'a', 1+rng.IntN(limit/3)
	case r < 18 && policies:
		algo := windowAlgorithms[rng.IntN(len(windowAlgorithms))]
		st.kind, st.policy, st.mode = 'S', reconfigPolicy(algo, 8+rng.IntN(5)), allModes[rng.IntN(len(allModes))]
	default:
		st.kind, st.n = 'p', rng.IntN(limit+1)
	}
	return st
}

// TestDifferentialReservations runs seeded random reservation timelines
// on every algorithm that settles.
func TestDifferentialReservations(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	const seeds, steps = 12, 300
	for _, algo := range reservationAlgorithms {
		t.Run(algo.String(), func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(seeds) {
				p := reconfigPolicy(algo, 10)
				pr := &resPair{pair: newPair(t, c, p)}
				rng := rand.New(rand.NewPCG(seed, uint64(algo)+100))
				period := p.Period
				if algo == ratelimit.QuotaAlgorithm {
					period = 24 * time.Hour
				}
				for i := range steps {
					pr.run(t, i, randomResStep(rng, p.Limit, period, false))
				}
			}
		})
	}
}

// windowAlgorithms are the algorithms that settle whose state is idle
// one window (or period) after its last change whatever an overrun did.
var windowAlgorithms = []ratelimit.Algorithm{
	ratelimit.FixedWindowAlgorithm, ratelimit.SlidingCounterAlgorithm, ratelimit.QuotaAlgorithm,
}

// TestDifferentialReservationsSetPolicy is TestDifferentialReservations
// with SetPolicy steps: settles under the newest policy, converting the
// key's state, in memory and on Redis alike. Only between windowed
// policies: a bucket in debt beyond empty after an overrun is not idle
// one window later, and memory drops an older generation's states at
// that time (Keyed.prune, idleBy) while Redis keeps its key (TTL) and the
// link for a minute more: the two differ there (see the report of issue
// 27).
func TestDifferentialReservationsSetPolicy(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	const seeds, steps = 8, 300
	for _, algo := range windowAlgorithms {
		t.Run(algo.String(), func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(seeds) {
				p := reconfigPolicy(algo, 10)
				pr := &resPair{pair: newPair(t, c, p)}
				rng := rand.New(rand.NewPCG(seed, uint64(algo)+200))
				for i := range steps {
					lim := pr.pair.rl.Policy().Limit
					pr.run(t, i, randomResStep(rng, lim, time.Second, true))
				}
			}
		})
	}
}

// TestDifferentialReservationTimelines: scripted timelines that reach the
// edges: an overrun beyond the limit, a give-back in the same window and
// in the next, a settle exactly at expiry, a double settle, and settles
// across SetPolicy (the newest policy settles, as in memory).
func TestDifferentialReservationTimelines(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for _, algo := range reservationAlgorithms {
		p := reconfigPolicy(algo, 10)
		per := p.Period
		if algo == ratelimit.QuotaAlgorithm {
			per = 24 * time.Hour
		}
		timelines := map[string][]resStep{
			"overrun": {
				{key: "k", kind: 'v', n: 4, expiry: time.Minute, slot: 0},
				{key: "k", kind: 's', n: 35, slot: 0},
				{key: "k", kind: 'p', n: 0},
				{key: "k", kind: 'a', n: 1},
				{advance: per / 2, key: "k", kind: 'a', n: 1},
				{advance: per, key: "k", kind: 'p', n: 1},
				{advance: 2 * per, key: "k", kind: 'a', n: 3},
				{key: "k", kind: 's', n: 0, slot: 0},
			},
			"giveback": {
				{key: "k", kind: 'v', n: 8, expiry: 72 * time.Hour, slot: 0},
				{key: "k", kind: 'v', n: 2, expiry: 72 * time.Hour, slot: 1},
				{advance: per / 4, key: "k", kind: 's', n: 1, slot: 0},
				{key: "k", kind: 'p', n: 0},
				{advance: per, key: "k", kind: 'a', n: 4},
				{key: "k", kind: 's', n: 0, slot: 1},
				{key: "k", kind: 'p', n: 0},
				{key: "k", kind: 'v', n: 10, expiry: time.Hour, slot: 2},
				{advance: 3 * per, key: "k", kind: 's', n: 2, slot: 2},
				{key: "k", kind: 'a', n: 10},
			},
			"expiry": {
				{key: "k", kind: 'v', n: 5, expiry: 2 * time.Second, slot: 0},
				{key: "k", kind: 'v', n: 5, expiry: 2 * time.Second, slot: 1},
				{advance: 2*time.Second - time.Microsecond, key: "k", kind: 's', n: 0, slot: 0},
				{advance: time.Microsecond, key: "k", kind: 's', n: 0, slot: 1},
				{key: "k", kind: 's', n: 0, slot: 0},
				{key: "k", kind: 'p', n: 0},
			},
			"setpolicy": {
				{key: "k", kind: 'v', n: 6, expiry: time.Hour, slot: 0},
				{key: "k", kind: 'v', n: 3, expiry: time.Hour, slot: 1},
				{kind: 'S', policy: reconfigPolicy(ratelimit.FixedWindowAlgorithm, 8), mode: ratelimit.KeepUsed},
				{advance: 100 * time.Millisecond, key: "k", kind: 's', n: 1, slot: 0},
				{key: "k", kind: 'p', n: 0},
				{key: "k", kind: 'v', n: 2, expiry: time.Hour, slot: 3},
				{advance: 1500 * time.Millisecond, key: "k", kind: 'v', n: 2, expiry: time.Hour, slot: 4},
				{key: "k", kind: 's', n: 0, slot: 3},
				{key: "k", kind: 's', n: 9, slot: 4},
				{key: "k", kind: 'p', n: 0},
				{kind: 'S', policy: reconfigPolicy(ratelimit.TokenBucketAlgorithm, 12), mode: ratelimit.ScaleUsed},
				{key: "k", kind: 's', n: 20, slot: 1},
				{key: "k", kind: 'p', n: 0},
				{kind: 'S', policy: reconfigPolicy(ratelimit.SlidingLogAlgorithm, 12), mode: ratelimit.KeepUsed},
				{key: "k", kind: 'v', n: 1, expiry: time.Hour, slot: 2},
			},
		}
		for name, steps := range timelines {
			t.Run(algo.String()+"/"+name, func(t *testing.T) {
				t.Parallel()
				pr := &resPair{pair: newPair(t, c, p)}
				for i, st := range steps {
					pr.run(t, i, st)
				}
			})
		}
	}
}

// TestReserveSettleAcrossPolicyToSlidingLog: a reservation made under a
// bucket and settled after SetPolicy to the sliding log reports the
// log's error, in memory and on Redis alike.
func TestReserveSettleAcrossPolicyToSlidingLog(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	pr := &resPair{pair: newPair(t, c, reconfigPolicy(ratelimit.TokenBucketAlgorithm, 10))}
	for i, st := range []resStep{
		{key: "k", kind: 'v', n: 3, expiry: time.Hour, slot: 0},
		{kind: 'S', policy: reconfigPolicy(ratelimit.SlidingLogAlgorithm, 10), mode: ratelimit.KeepUsed},
		{key: "k", kind: 's', n: 1, slot: 0},
		{key: "k", kind: 's', n: 1, slot: 0},
	} {
		pr.run(t, i, st)
	}
}

// TestReserveGivesNothingBackAfterReset: a reservation made before its
// key's Reset gives nothing back (what it was charged went with the
// Reset), in both homes alike, while one made after gives back; and an
// overrun takes a key at most one limit beyond empty, however large.
func TestReserveGivesNothingBackAfterReset(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for _, alg := range []ratelimit.Algorithm{ratelimit.TokenBucketAlgorithm, ratelimit.LeakyBucketAlgorithm, ratelimit.FixedWindowAlgorithm, ratelimit.SlidingCounterAlgorithm} {
		t.Run(alg.String(), func(t *testing.T) {
			pr := &resPair{pair: newPair(t, c, reconfigPolicy(alg, 10))}
			for i, st := range []resStep{
				{key: "k", kind: 'v', n: 6, expiry: time.Hour, slot: 0},
				{key: "k", kind: 'R'},
				{key: "k", kind: 'v', n: 8, expiry: time.Hour, slot: 1},
				{key: "k", kind: 's', n: 0, slot: 0}, // before the Reset: nothing back
				{key: "k", kind: 'p', n: 0},
				{key: "k", kind: 's', n: 2, slot: 1}, // after it: 6 back
				{key: "k", kind: 'p', n: 0},
				{key: "k", kind: 'v', n: 1, expiry: time.Hour, slot: 2},
				{key: "k", kind: 's', n: 1 << 40, slot: 2}, // garbage: one limit over at most
				{key: "k", kind: 'p', n: 0},
				{key: "k", kind: 'a', n: 1},
			} {
				pr.run(t, i, st)
			}
		})
	}
}

// TestReserveNValidation: the errors of Keyed.ReserveN, on Redis.
func TestReserveNValidation(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	l := mustNew(t, c, ratelimit.FixedWindowPolicy(5, time.Second), WithPrefix(uniquePrefix(t)))
	for _, e := range []time.Duration{0, -time.Second, 25 * time.Hour} {
		r, err := l.ReserveN(bg(), "k", 1, e)
		require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
		require.False(t, r.Allowed)
		require.ErrorIs(t, r.Settle(bg(), 1), ratelimit.ErrReservationSettled)
	}
	//lint:ignore SA1012 the nil context is the point
	r, err := l.ReserveN(nil, "k", 1, time.Second) //nolint:staticcheck
	require.Error(t, err)
	require.False(t, r.Allowed)
	for _, n := range []int{0, -1, 6} {
		r, err := l.ReserveN(bg(), "k", n, time.Second)
		require.NoError(t, err)
		require.False(t, r.Allowed)
		require.Equal(t, ratelimit.RetryNever, r.RetryAfter)
	}
	r, err = l.ReserveN(bg(), "k", 2, time.Second)
	require.NoError(t, err)
	require.True(t, r.Allowed)
	require.ErrorIs(t, r.Settle(bg(), -1), ratelimit.ErrInvalidN)
	require.NoError(t, r.Settle(bg(), 1))
	require.ErrorIs(t, r.Settle(bg(), 1), ratelimit.ErrReservationSettled)

	sl := mustNew(t, c, ratelimit.SlidingLogPolicy(5, time.Second), WithPrefix(uniquePrefix(t)))
	mem, err := ratelimit.NewKeyed(ratelimit.SlidingLogPolicy(5, time.Second))
	require.NoError(t, err)
	_, werr := mem.ReserveN(bg(), "k", 1, time.Second)
	_, err = sl.ReserveN(bg(), "k", 1, time.Second)
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	require.Equal(t, werr.Error(), err.Error())
}
