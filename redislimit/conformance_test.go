package redislimit

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// The conformance suite drives the in-memory reference (ratelimit.Keyed)
// and the Redis limiter on the same mock clock, with time passed to the
// scripts, and demands identical Decisions, durations rounded up to the
// microsecond.

// step is one operation of a timeline: move the clock by advance (which
// may be negative), then run kind for key: 'a' AllowN(n), 'r' RefundN(n),
// 'p' Peek(n), 'R' Reset, 'B' Block(d), 'P' Penalize(n), or 'S'
// SetPolicy(policy, mode) (key unused).
type step struct {
	advance time.Duration
	key     string
	kind    byte
	n       int
	d       time.Duration
	policy  ratelimit.Policy
	mode    ratelimit.Inheritance
}

// pair is the reference and the limiter under test on one clock.
type pair struct {
	mock *manualClock
	mem  *ratelimit.Keyed
	rl   *Limiter
}

func newPair(t *testing.T, c redis.UniversalClient, p ratelimit.Policy) *pair {
	t.Helper()
	return newPairAt(t, c, p, fakeclock.NewManual(mockStart).Now())
}

// newPairAt is newPair with the clock at start (whole microseconds).
func newPairAt(t *testing.T, c redis.UniversalClient, p ratelimit.Policy, start time.Time) *pair {
	t.Helper()
	mock := fakeclock.NewManual(start)
	mem, err := ratelimit.NewKeyed(p, ratelimit.WithClock(mock))
	if err != nil {
		t.Fatalf("NewKeyed(%v): %v", p, err)
	}
	// Default options otherwise: the deny cache is on, and must not change
	// a single Decision.
	rl := mustNew(t, c, p, WithClock(mock), WithPrefix(uniquePrefix(t)), WithTimeout(5*time.Second))
	return &pair{mock: mock, mem: mem, rl: rl}
}

// run applies st to both and fails t on any difference. i numbers the
// step in messages.
func (p *pair) run(t *testing.T, i int, st step) {
	t.Helper()
	if st.advance = st.advance.Truncate(time.Microsecond); st.advance != 0 {
		p.mock.Set(p.mock.Now().Add(st.advance))
	}
	ctx := bg()
	at := p.mock.Now().Format("15:04:05.000000")
	switch st.kind {
	case 'a':
		want, werr := p.mem.AllowN(ctx, st.key, st.n)
		got, err := p.rl.AllowN(ctx, st.key, st.n)
		if err != nil || werr != nil {
			t.Fatalf("step %d: AllowN(%q, %d) at %s: error %v (reference error %v)", i, st.key, st.n, at, err, werr)
		}
		if want = roundDecision(want); got != want {
			t.Fatalf("step %d: AllowN(%q, %d) at %s = %+v, want %+v", i, st.key, st.n, at, got, want)
		}
	case 'p':
		mem, werr := p.mem.Peek(ctx, st.key, st.n)
		if werr != nil {
			t.Fatalf("step %d: reference Peek(%q, %d) at %s: %v", i, st.key, st.n, at, werr)
		}
		want := roundDecision(mem)
		got, err := p.rl.Peek(ctx, st.key, st.n)
		if err != nil {
			t.Fatalf("step %d: Peek(%q, %d) at %s: %v", i, st.key, st.n, at, err)
		}
		if got != want {
			t.Fatalf("step %d: Peek(%q, %d) at %s = %+v, want %+v", i, st.key, st.n, at, got, want)
		}
	case 'r':
		werr := p.mem.RefundN(ctx, st.key, st.n)
		err := p.rl.RefundN(ctx, st.key, st.n)
		if (err == nil) != (werr == nil) {
			t.Fatalf("step %d: RefundN(%q, %d) at %s = %v, want %v", i, st.key, st.n, at, err, werr)
		}
	case 'R':
		werr := p.mem.Reset(ctx, st.key)
		err := p.rl.Reset(ctx, st.key)
		if err != nil || werr != nil {
			t.Fatalf("step %d: Reset(%q) at %s: %v (reference %v)", i, st.key, at, err, werr)
		}
	case 'B':
		werr := p.mem.Block(ctx, st.key, st.d)
		err := p.rl.Block(ctx, st.key, st.d)
		if (err == nil) != (werr == nil) || (err != nil && err.Error() != werr.Error()) {
			t.Fatalf("step %d: Block(%q, %v) at %s = %v, want %v", i, st.key, st.d, at, err, werr)
		}
	case 'P':
		werr := p.mem.Penalize(ctx, st.key, st.n)
		err := p.rl.Penalize(ctx, st.key, st.n)
		if (err == nil) != (werr == nil) {
			t.Fatalf("step %d: Penalize(%q, %d) at %s = %v, want %v", i, st.key, st.n, at, err, werr)
		}
	case 'S':
		werr := p.mem.SetPolicy(st.policy, st.mode)
		err := p.rl.SetPolicy(st.policy, st.mode)
		if (err == nil) != (werr == nil) {
			t.Fatalf("step %d: SetPolicy(%v, %v) at %s = %v, want %v", i, st.policy, st.mode, at, err, werr)
		}
	default:
		t.Fatalf("step %d: unknown kind %q", i, st.kind)
	}
}

// String describes st for failure messages.
func (st step) String() string {
	switch st.kind {
	case 'R':
		return fmt.Sprintf("+%v Reset(%s)", st.advance, st.key)
	case 'B':
		return fmt.Sprintf("+%v Block(%s, %v)", st.advance, st.key, st.d)
	case 'P':
		return fmt.Sprintf("+%v Penalize(%s, %d)", st.advance, st.key, st.n)
	case 'S':
		return fmt.Sprintf("+%v SetPolicy(%v, %v)", st.advance, st.policy, st.mode)
	}
	return fmt.Sprintf("+%v %c(%s, %d)", st.advance, st.kind, st.key, st.n)
}

// runSeed is run with the seed in the failure message.
func (p *pair) runSeed(t *testing.T, seed uint64, i int, st step) {
	t.Helper()
	defer func() {
		if t.Failed() {
			t.Logf("seed %d, step %d: %v", seed, i, st)
		}
	}()
	p.run(t, i, st)
}

// timeline returns a scripted timeline for p that reaches its
// boundaries: a burst to the limit, denials, invalid n, partial waits,
// refunds, whole periods and idle keys.
func timeline(p ratelimit.Policy) []step {
	per, lim := p.Period, p.Limit
	var s []step
	for range lim + 1 {
		s = append(s, step{key: "a", kind: 'a', n: 1})
	}
	s = append(s,
		step{key: "a", kind: 'a', n: 0},
		step{key: "a", kind: 'a', n: -1},
		step{key: "a", kind: 'a', n: lim + 1},
		step{key: "a", kind: 'p', n: 0},
		step{key: "a", kind: 'p', n: 1},
		step{advance: per / 3, key: "a", kind: 'a', n: 1},
		step{advance: time.Microsecond, key: "a", kind: 'a', n: 1},
		step{key: "a", kind: 'r', n: 2},
		step{key: "a", kind: 'a', n: 2},
		step{key: "a", kind: 'a', n: 1},
		step{advance: per, key: "a", kind: 'a', n: lim},
		step{key: "a", kind: 'a', n: 1},
		step{advance: per / 2, key: "a", kind: 'a', n: 1},
		step{advance: per/2 - time.Microsecond, key: "a", kind: 'a', n: 1},
		step{advance: time.Microsecond, key: "a", kind: 'a', n: 1},
		step{key: "b", kind: 'a', n: lim},
		step{key: "b", kind: 'r', n: lim + 5},
		step{key: "b", kind: 'p', n: 0},
		step{key: "c", kind: 'r', n: 1},
		step{key: "c", kind: 'a', n: lim + 1},
		step{advance: 3 * per, key: "a", kind: 'p', n: 0},
		step{key: "a", kind: 'a', n: lim},
		step{advance: -per / 4, key: "a", kind: 'a', n: 1},
		step{advance: per / 5, key: "a", kind: 'a', n: 1},
	)
	// Wait exactly RetryAfter-like spans: many small steps.
	for i := range 3 * lim {
		s = append(s, step{advance: per / time.Duration(lim+1), key: "d", kind: 'a', n: 1 + i%2})
	}
	return s
}

func TestConformanceTimelines(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for _, p := range policies() {
		t.Run(name(p), func(t *testing.T) {
			t.Parallel()
			pr := newPair(t, c, p)
			for i, st := range timeline(p) {
				pr.run(t, i, st)
			}
		})
	}
}

// TestConformanceRandom is the differential test: seeded random operation
// sequences over a few keys, with advances from zero to several periods
// (whole microseconds), weighted n including invalid ones, refunds and
// peeks.
//
// Time never runs backwards here. When it does, both homes stay safe but
// may differ: the in-memory limiter writes back state it advanced during a
// denial and keeps idle state until reclaimed, while Redis stores nothing on
// a denial and deletes state once idle.
func TestConformanceRandom(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	const seeds, steps = 4, 250
	for _, p := range policies() {
		t.Run(name(p), func(t *testing.T) {
			t.Parallel()
			for seed := range uint64(seeds) {
				pr := newPair(t, c, p)
				rng := rand.New(rand.NewPCG(seed, uint64(p.Period)))
				for i := range steps {
					st := randomStep(rng, p)
					pr.runSeed(t, seed, i, st)
				}
			}
		})
	}
}

func randomStep(rng *rand.Rand, p ratelimit.Policy) step {
	us := int64(p.Period / time.Microsecond)
	var adv time.Duration
	switch r := rng.IntN(20); {
	case r < 6: // same microsecond
	case r < 8:
		adv = time.Microsecond
	case r < 15:
		adv = time.Duration(rng.Int64N(us/4+1)) * time.Microsecond
	case r < 18:
		adv = time.Duration(rng.Int64N(3*us+1)) * time.Microsecond
	case r < 19:
		adv = p.Period
	default:
		adv = time.Duration(rng.Int64N(us/2+1)) * time.Microsecond
	}
	st := step{advance: adv, key: fmt.Sprint("k", rng.IntN(3))}
	switch r := rng.IntN(20); {
	case r < 15:
		st.kind = 'a'
	case r < 17:
		st.kind = 'p'
	default:
		st.kind = 'r'
	}
	switch r := rng.IntN(20); {
	case r < 12:
		st.n = 1
	case r < 18:
		st.n = 1 + rng.IntN(p.Limit)
	case r < 19:
		st.n = 0
	default:
		st.n = p.Limit + 1
	}
	if st.kind == 'r' && st.n <= 0 {
		st.n = 1
	}
	return st
}
