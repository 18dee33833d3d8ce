package pacer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit/internal/hints"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/rlkit/ratelimit/internal/timesrc"
)

var errPause = errors.New("ratelimit: test pause sentinel")

var start = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func testConfig() Config {
	return Config{MaxPause: time.Hour, First: time.Second, Cap: 8 * time.Second}
}

// answer builds hints from (remaining, reset) pairs.
func answer(items ...Item) *hints.Hints {
	h := &hints.Hints{}
	for _, it := range items {
		h.Items[h.NItems] = hints.Item(it)
		h.NItems++
	}
	return h
}

// Item is hints.Item, short for the tests.
type Item hints.Item

func item(r int64, reset time.Duration) Item { return Item{Remaining: r, Reset: reset} }

type fixture struct {
	t   *testing.T
	clk *fakeclock.Mock
	src timesrc.Source
	p   *Pacer
}

func newFixture(t *testing.T, cfg Config) *fixture {
	clk := fakeclock.NewAnnouncing(start)
	return &fixture{t: t, clk: clk, src: timesrc.New(clk), p: New(cfg)}
}

// now acquires key, failing if it has to wait.
func (f *fixture) now(key string) Ticket {
	f.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second) // a wait fails at once
	defer cancel()
	tk, err := f.p.Acquire(ctx, &f.src, key, errPause)
	require.NoError(f.t, err, "Acquire(%q) must not wait", key)
	f.clk.None(f.t)
	return tk
}

// after acquires key in a goroutine and checks that it waits exactly want
// (in one or more timers) before the ticket is granted.
func (f *fixture) after(key string, want time.Duration) Ticket {
	f.t.Helper()
	got := make(chan Ticket, 1)
	go func() {
		tk, err := f.p.Acquire(context.Background(), &f.src, key, errPause)
		assert.NoError(f.t, err)
		got <- tk
	}()
	var waited time.Duration
	for waited < want {
		d := f.clk.Next(f.t)
		waited += d
		f.clk.Add(d)
	}
	assert.Equal(f.t, want, waited, "wait of %q", key)
	return <-got
}

func (f *fixture) done(tk Ticket, refused bool, h *hints.Hints) Outcome {
	return f.p.Done(tk, f.clk.Now(), Answer{Refused: refused, Hints: h})
}

// TestQuotaBoundsSends: an answer reporting r left until t lets exactly r
// more sends go before t, on a 200 as on a refusal.
func TestQuotaBoundsSends(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig())
	out := f.done(f.now("k"), false, answer(item(2, 10*time.Second)))
	assert.Equal(t, Outcome{}, out, "a quota with room left pauses nothing")
	f.done(f.now("k"), false, nil) // an answer without fields keeps the quota
	f.now("k")
	assert.Equal(t, 10*time.Second, f.p.PausedFor("k", f.clk.Now()), "the quota is spent")
	f.after("k", 10*time.Second)
	assert.Zero(t, f.p.PausedFor("other", f.clk.Now()), "another key is not held")
}

// TestSpentQuotaPauses: remaining 0 holds the key until the reset, and
// reports the pause.
func TestSpentQuotaPauses(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig())
	out := f.done(f.now("k"), false, answer(item(5, time.Minute), item(0, 3*time.Second)))
	assert.Equal(t, Outcome{Pause: 3 * time.Second}, out)
	f.after("k", 3*time.Second)
}

// TestInFlightUseUpQuota: calls in flight when an answer arrives may have
// been counted before it: they use up what it reports left.
func TestInFlightUseUpQuota(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig())
	a, b, c := f.now("k"), f.now("k"), f.now("k")
	f.done(a, false, answer(item(2, 10*time.Second))) // b and c in flight: 0 left
	assert.Equal(t, 10*time.Second, f.p.PausedFor("k", f.clk.Now()))
	f.done(c, false, answer(item(1, 10*time.Second))) // b in flight, a answered since c was sent
	assert.Equal(t, 10*time.Second, f.p.PausedFor("k", f.clk.Now()))
	f.done(b, false, answer(item(1, 10*time.Second))) // a and c answered since b was sent
	assert.Equal(t, 10*time.Second, f.p.PausedFor("k", f.clk.Now()), "an older answer must not free quota")
}

// TestReorderedAnswers: the server counted b before a, and a's answer came
// back first. b's answer, reporting more left than a's, must not free the
// one a took after it (a was answered while b was in flight).
func TestReorderedAnswers(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig())
	a, b := f.now("k"), f.now("k")
	// Server: b (4 left), then a (3 left).
	f.done(a, false, answer(item(3, 10*time.Second))) // b in flight: 2 left
	c := f.now("k")                                   // 1 left; server: c (2 left)
	f.done(b, false, answer(item(4, 10*time.Second))) // c in flight, a answered since: 2 left
	f.now("k")
	f.now("k")
	assert.Equal(t, 10*time.Second, f.p.PausedFor("k", f.clk.Now()), "the server has 0 left: a, b, c and two more")
	f.p.Lost(c)
}

// TestOlderAnswerReplaces: the newest answer replaces the quotas, whichever
// send it answers: what it reports left, less the sends that may have been
// counted after it, is a floor of what is left.
func TestOlderAnswerReplaces(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig())
	a, b := f.now("k"), f.now("k")
	f.done(b, false, answer(item(3, 10*time.Second)))
	f.done(a, false, answer(item(0, 4*time.Second)))
	assert.Equal(t, 4*time.Second, f.p.PausedFor("k", f.clk.Now()))
}

// TestResetRenewsQuota: once a quota's reset has passed, it gains the
// limit the answers stated less the remaining count reported, up to the
// limit less the sends in flight (which the new period may count), so
// that callers released together at the reset do not all go; without a
// stated limit, one send probes and the others wait for its answer.
func TestResetRenewsQuota(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig())
	h := answer(item(1, 3*time.Second))
	h.Limit = 5
	f.done(f.now("k"), false, h)
	flying := f.now("k") // the last of the period, in flight at the reset
	f.clk.Add(3 * time.Second)
	for range 4 {
		f.now("k")
	}
	assert.Equal(t, 3*time.Second, f.p.PausedFor("k", f.clk.Now()), "5 less the one in flight, then the next period")
	f.p.Lost(flying)

	g := newFixture(t, testConfig())
	g.done(g.now("k"), false, answer(item(0, 3*time.Second)))
	g.clk.Add(3 * time.Second)
	probe := g.now("k") // no limit stated: what the reset restores is not known
	assert.Equal(t, 3*time.Second, g.p.PausedFor("k", g.clk.Now()), "the others wait for the probe")
	g.done(probe, false, nil)
	for range 10 {
		g.now("k") // its answer said nothing: unbounded
	}
}

// TestTokenBucketAnswersInAnyOrder: a token bucket of 5 refilling 1 a
// second counts five sends (4 left, full in 1 s; ... 0 left, full in 5 s)
// and its answers come back in any order. However they come back, the
// pacer never lets more go than the bucket holds: at 1 s one token, one
// more each second, never above 5. Before, with the answers in reverse
// order, the last read (4 left, full in 1 s) restored all 5 at 1 s.
func TestTokenBucketAnswersInAnyOrder(t *testing.T) {
	t.Parallel()
	for _, order := range [][]int{{0, 1, 2, 3, 4}, {4, 3, 2, 1, 0}, {2, 4, 0, 3, 1}} {
		t.Run(fmt.Sprint(order), func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, testConfig())
			var tks [5]Ticket
			for i := range tks {
				tks[i] = f.now("k")
			}
			for _, i := range order { // send i was counted i-th: 4-i left, full in i+1 s
				h := answer(item(int64(4-i), time.Duration(i+1)*time.Second))
				h.Limit = 5
				f.done(tks[i], false, h)
			}
			// The bucket: 0 tokens now, 1 a second. The pacer may be
			// slower, never faster.
			bucket := 0.0
			last := f.clk.Now()
			for step := range 12 {
				f.clk.Add(500 * time.Millisecond)
				now := f.clk.Now()
				bucket = min(5, bucket+now.Sub(last).Seconds())
				last = now
				sent := 0
				for f.p.PausedFor("k", now) == 0 {
					f.done(f.now("k"), false, nil) // answers without fields: the pacer's own count binds
					sent++
					require.LessOrEqual(t, float64(sent), bucket, "step %d: sent %d, the bucket holds %.1f", step, sent, bucket)
				}
				bucket -= float64(sent)
			}
		})
	}
}

// TestFixedWindowAnswersReorderedAcrossItsBoundary: a fixed window of 5
// per 10 s (RateLimit-Policy q=5;w=10); send A, the last of one window
// (r=0, t=1), is answered after send B, the first of the next (r=4,
// t=10). The pacer never sends more in a window than the server has
// left. It used to add the whole limit again at every t after A's reset,
// one second apart, so a burst 2 s later found 5 where the window had 4
// (one refused, after both answers had been read).
func TestFixedWindowAnswersReorderedAcrossItsBoundary(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig())
	const window = 10 * time.Second
	fw := func(r int64, reset time.Duration) *hints.Hints {
		h := answer(item(r, reset))
		h.Policies[0], h.NPolicies = hints.Policy{Quota: 5, Window: window}, 1
		h.Limit = 5
		return h
	}
	f.clk.Add(8 * time.Second)
	for r := int64(4); r >= 1; r-- {
		f.done(f.now("k"), false, fw(r, 2*time.Second))
	}
	f.clk.Add(time.Second)
	a := f.now("k") // counted at +9 s: the window's last
	f.clk.Add(1500 * time.Millisecond)
	b := f.now("k") // counted at +10.5 s: the next window's first
	f.done(b, false, fw(4, 10*time.Second))
	f.done(a, false, fw(0, time.Second))
	sent := map[int64]int{1: 1} // per window: B in window 1
	for range 60 {
		f.clk.Add(500 * time.Millisecond)
		now := f.clk.Now()
		k := int64(now.Sub(start) / window)
		for f.p.PausedFor("k", now) == 0 {
			f.done(f.now("k"), false, nil) // no fields: the pacer's own count binds
			sent[k]++
			require.LessOrEqual(t, sent[k], 5, "window %d at +%v: sent %d of 5", k, now.Sub(start), sent[k])
		}
	}
	assert.Equal(t, 5, sent[1], "window 1 used in full")
}

// TestRefusalPauses: a refusal's positive Retry-After, else its spent
// quotas' reset (remaining 0 or unknown), pauses the key; no backoff.
func TestRefusalPauses(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		h    *hints.Hints
		want time.Duration
	}{
		{"retry-after", &hints.Hints{RetryAfter: 7 * time.Second, HasRetryAfter: true}, 7 * time.Second},
		{"retry-after over a longer quota", func() *hints.Hints {
			h := answer(item(0, 30*time.Second))
			h.RetryAfter, h.HasRetryAfter = 2*time.Second, true
			return h
		}(), 2 * time.Second}, // Retry-After takes precedence (every draft)
		{"spent quota", answer(item(0, 5*time.Second), item(9, time.Hour)), 5 * time.Second},
		{"unknown remaining", answer(item(-1, 6*time.Second)), 6 * time.Second},
		{"capped", &hints.Hints{RetryAfter: 100 * time.Hour, HasRetryAfter: true}, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := newFixture(t, testConfig())
			out := f.done(f.now("k"), true, tc.h)
			assert.False(t, out.Backoff)
			assert.Equal(t, tc.want, f.p.PausedFor("k", f.clk.Now()))
		})
	}
}

// TestBackoff: refusals naming no usable pause back off exponentially
// with jitter within [First/2, min(Cap, First·2^k)]; a success starts
// again. Retry-After 0, and quotas with room left, are not usable.
func TestBackoff(t *testing.T) {
	t.Parallel()
	for _, draw := range []string{"low", "high"} {
		t.Run(draw, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			cfg.Rand = func(n int64) int64 {
				if draw == "low" {
					return 0
				}
				return n - 1
			}
			f := newFixture(t, cfg)
			unusable := []*hints.Hints{nil, {HasRetryAfter: true}, answer(item(1000, time.Minute)), answer(item(0, 0))}
			var highs []time.Duration
			tk := f.now("k")
			for k := range 6 {
				out := f.done(tk, true, unusable[k%len(unusable)])
				require.True(t, out.Backoff, "refusal %d", k)
				hi := min(8*time.Second, time.Second<<k)
				want := hi
				if draw == "low" {
					want = 500 * time.Millisecond
				}
				assert.Equal(t, want, out.Pause, "refusal %d", k)
				highs = append(highs, hi)
				tk = f.after("k", out.Pause) // the probe after the pause
			}
			assert.Equal(t, []time.Duration{1, 2, 4, 8, 8, 8}, func() []time.Duration {
				s := make([]time.Duration, len(highs))
				for i, h := range highs {
					s[i] = h / time.Second
				}
				return s
			}())
			f.done(tk, false, nil)
			out := f.done(f.now("k"), true, nil)
			if draw == "high" {
				assert.Equal(t, time.Second, out.Pause, "a success starts the backoff again")
			}
		})
	}
}

// TestBackoffJitters: with the real random source the draws spread over
// the window (clients refused together do not come back together).
func TestBackoffJitters(t *testing.T) {
	t.Parallel()
	p := New(Config{MaxPause: time.Hour, First: time.Second, Cap: time.Minute})
	seen := map[time.Duration]bool{}
	for range 200 {
		d := p.backoff(3)
		require.GreaterOrEqual(t, d, 500*time.Millisecond)
		require.LessOrEqual(t, d, 8*time.Second)
		seen[d] = true
	}
	assert.Greater(t, len(seen), 150, "200 draws from a 7.5 s window should nearly all differ")
	for k := range 200 {
		d := p.backoff(k) // no overflow for any k
		require.GreaterOrEqual(t, d, 500*time.Millisecond, "k=%d", k)
		require.LessOrEqual(t, d, time.Minute, "k=%d", k)
	}
}

// TestShaping: advertised policies space the sends by the slowest w/q.
func TestShaping(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.Shape = true
	f := newFixture(t, cfg)
	h := &hints.Hints{NPolicies: 2}
	h.Policies[0] = hints.Policy{Quota: 5, Window: 3 * time.Second}
	h.Policies[1] = hints.Policy{Quota: 1000, Window: time.Hour}
	f.done(f.now("k"), false, h)
	f.after("k", 3600*time.Millisecond) // 3.6 s: 1000 per hour binds
	f.done(f.after("k", 3600*time.Millisecond), false, nil)

	off := newFixture(t, testConfig())
	off.done(off.now("k"), false, h)
	off.now("k") // shaping off: no spacing
}

// TestLostKeepsCharge: a send that got no answer is not given back.
func TestLostKeepsCharge(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig())
	f.done(f.now("k"), false, answer(item(1, 10*time.Second)))
	f.p.Lost(f.now("k"))
	assert.Equal(t, 10*time.Second, f.p.PausedFor("k", f.clk.Now()))
}

func TestCaps(t *testing.T) {
	t.Parallel()
	cfg := testConfig()
	cfg.MaxPause = 10 * time.Second
	cfg.Shape = true
	f := newFixture(t, cfg)
	h := answer(item(0, hints.MaxSeconds*time.Second))
	h.Policies[0] = hints.Policy{Quota: 1, Window: hints.MaxSeconds * time.Second}
	h.NPolicies = 1
	out := f.done(f.now("k"), true, h)
	assert.Equal(t, 10*time.Second, out.Pause)
	assert.Equal(t, 10*time.Second, f.p.Longest(f.clk.Now()))
	f.after("k", 10*time.Second)
}

func TestWaitDoesNotReserve(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig())
	ctx := context.Background()
	require.NoError(t, f.p.Wait(ctx, &f.src, "k", errPause), "an idle pacer")
	f.done(f.now("k"), false, answer(item(1, 10*time.Second)))
	for range 3 {
		require.NoError(t, f.p.Wait(ctx, &f.src, "k", errPause))
	}
	f.clk.None(t)
	f.now("k")
	done := make(chan error, 1)
	go func() { done <- f.p.Wait(ctx, &f.src, "k", errPause) }()
	assert.Equal(t, 10*time.Second, f.clk.Next(t))
	f.clk.Add(10 * time.Second)
	require.NoError(t, <-done)
}

func TestDeadlineAndDoneContext(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig())
	f.done(f.now("k"), true, &hints.Hints{RetryAfter: time.Hour, HasRetryAfter: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := f.p.Acquire(ctx, &f.src, "k", errPause)
	assert.ErrorIs(t, err, errPause)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.ErrorIs(t, f.p.Wait(ctx, &f.src, "k", errPause), errPause)
	f.clk.None(t)

	canceled, cancel2 := context.WithCancel(context.Background())
	cancel2()
	tk, err := f.p.Acquire(canceled, &f.src, "free", errPause)
	assert.ErrorIs(t, err, context.Canceled)
	assert.Nil(t, tk.st, "no ticket for a done context")
	assert.Equal(t, Outcome{}, f.p.Done(tk, f.clk.Now(), Answer{Refused: true}), "a zero ticket is ignored")
}

// TestSweep: once many keys are held, a new key drops those that hold
// nothing live, and never one that does.
func TestSweep(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig())
	var flying Ticket
	for i := range SweepAbove {
		k := fmt.Sprint(i)
		switch i {
		case 0:
			f.done(f.now(k), true, &hints.Hints{RetryAfter: time.Hour, HasRetryAfter: true})
		case 1:
			f.done(f.now(k), false, answer(item(5, time.Hour)))
		case 2:
			flying = f.now(k)
		case 3:
			f.done(f.now(k), true, nil) // backing off
		default:
			f.done(f.now(k), false, nil)
		}
	}
	f.clk.Add(2 * time.Second)
	f.now("new")
	f.p.mu.Lock()
	var held []string
	for k := range f.p.keys {
		held = append(held, k)
	}
	f.p.mu.Unlock()
	assert.ElementsMatch(t, []string{"0", "1", "2", "3", "new"}, held)
	f.p.Lost(flying)
}

func TestConcurrent(t *testing.T) {
	t.Parallel()
	f := newFixture(t, Config{MaxPause: time.Hour, First: time.Second, Cap: time.Minute})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				k := fmt.Sprint(g*1000 + i%100)
				tk, err := f.p.Acquire(context.Background(), &f.src, k, errPause)
				if !assert.NoError(t, err) {
					return
				}
				switch i % 3 {
				case 0:
					f.p.Done(tk, start, Answer{Hints: answer(item(1000, time.Second))})
				case 1:
					f.p.Lost(tk)
				default:
					f.p.Lost(tk)
				}
				_ = f.p.Longest(start)
			}
		}()
	}
	wg.Wait()
}

// TestExtremeConfigAndPolicies: the largest backoff cap, a first delay of
// 1ns and policies of huge quotas neither panic nor overflow.
func TestExtremeConfigAndPolicies(t *testing.T) {
	t.Parallel()
	p := New(Config{MaxPause: math.MaxInt64, First: 1, Cap: math.MaxInt64})
	for k := range 70 {
		d := p.backoff(k)
		require.GreaterOrEqual(t, d, time.Duration(0), "k=%d", k)
	}
	assert.Equal(t, time.Duration(1), ceilDiv(hints.MaxSeconds*time.Second, math.MaxInt64))
	assert.Equal(t, 600*time.Millisecond, ceilDiv(3*time.Second, 5))
	assert.Equal(t, time.Duration(334), ceilDiv(1000, 3))
}

// TestProbeAfterPause: a refusal's pause, and a reset capped at MaxPause,
// end with one probe: the next send goes alone, the others wait for its
// answer (as long again as the pause at most), and a probe that gets none
// (lost, or out of time) hands the probe on to the next send.
func TestProbeAfterPause(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		refused bool
		h       *hints.Hints
		pause   time.Duration
	}{
		{"retry-after", true, &hints.Hints{RetryAfter: 5 * time.Second, HasRetryAfter: true}, 5 * time.Second},
		{"capped retry-after", true, &hints.Hints{RetryAfter: 100 * time.Hour, HasRetryAfter: true}, time.Hour},
		{"backoff", true, nil, time.Second},
		{"capped spent quota", false, answer(item(0, 30*time.Hour)), time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := testConfig()
			cfg.Rand = func(n int64) int64 { return n - 1 } // the first backoff at its longest: 1 s
			f := newFixture(t, cfg)
			out := f.done(f.now("k"), tc.refused, tc.h)
			require.Equal(t, tc.pause, out.Pause)
			probe := f.after("k", tc.pause)

			// Another send waits for the probe's answer, at most the pause.
			got := make(chan Ticket, 1)
			go func() {
				tk, err := f.p.Acquire(context.Background(), &f.src, "k", errPause)
				assert.NoError(t, err)
				got <- tk
			}()
			assert.Equal(t, tc.pause, f.clk.Next(t))
			assert.Equal(t, tc.pause, f.p.PausedFor("k", f.clk.Now()), "waiting for the probe, at most")
			f.done(probe, false, nil)
			next := <-got
			f.now("k") // the probe answered: sends go by what it said (nothing)
			f.done(next, false, nil)
		})
	}
	t.Run("lost", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, testConfig())
		f.done(f.now("k"), true, &hints.Hints{RetryAfter: 5 * time.Second, HasRetryAfter: true})
		probe := f.after("k", 5*time.Second)
		got := make(chan Ticket, 2)
		for range 2 {
			go func() {
				tk, err := f.p.Acquire(context.Background(), &f.src, "k", errPause)
				assert.NoError(t, err)
				got <- tk
			}()
			assert.Equal(t, 5*time.Second, f.clk.Next(t))
		}
		f.p.Lost(probe)
		second := <-got // the next probe, alone
		assert.Equal(t, 5*time.Second, f.clk.Next(t), "the other waits for the second probe")
		select {
		case <-got:
			t.Fatal("two sends after a lost probe")
		default:
		}
		f.done(second, false, nil)
		f.done(<-got, false, nil)
	})
	t.Run("out of time", func(t *testing.T) {
		t.Parallel()
		f := newFixture(t, testConfig())
		f.done(f.now("k"), true, &hints.Hints{RetryAfter: 5 * time.Second, HasRetryAfter: true})
		probe := f.after("k", 5*time.Second)
		second := f.after("k", 5*time.Second) // waited the probe's time: probes in turn
		assert.Equal(t, 5*time.Second, f.p.PausedFor("k", f.clk.Now()), "the second probe is waited for")
		f.done(probe, false, nil) // an old probe's answer does not end the new one
		assert.Equal(t, 5*time.Second, f.p.PausedFor("k", f.clk.Now()))
		f.done(second, false, nil)
		f.now("k")
	})
}

// TestProbeDeadline: a send waiting for a probe's answer is not refused
// for a deadline shorter than the probe may take; it waits until the
// deadline, or the answer.
func TestProbeDeadline(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig())
	f.done(f.now("k"), true, &hints.Hints{RetryAfter: time.Minute, HasRetryAfter: true})
	probe := f.after("k", time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := f.p.Acquire(ctx, &f.src, "k", errPause)
		done <- err
	}()
	assert.Equal(t, time.Minute, f.clk.Next(t))
	err := <-done // the real deadline, a second away
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.NotErrorIs(t, err, errPause)
	f.done(probe, false, nil)
}

// TestMaxKeys: at MaxKeys keys, each live, a new key is refused with an
// error matching Full, and no live key is forgotten; a key whose quota is
// full again (after the resets that give back what it lacks), or whose
// call in flight is answered with nothing to keep, makes room.
func TestMaxKeys(t *testing.T) {
	t.Parallel()
	errFull := errors.New("ratelimit: too many keys")
	cfg := testConfig()
	cfg.MaxKeys, cfg.Full = 3, errFull
	f := newFixture(t, cfg)
	h := answer(item(1, 10*time.Second)) // 1 left of 4: full after 10 s (gain 3)
	h.Limit = 4
	f.done(f.now("a"), false, h)
	h2 := answer(item(0, 10*time.Second)) // none left of 2: full after 10 s (gain 2)
	h2.Limit = 2
	f.done(f.now("b"), false, h2)
	flying := f.now("c")
	ctx := context.Background()
	for range 2 { // the second try finds the sweep fruitless and skips it
		_, err := f.p.Acquire(ctx, &f.src, "d", errPause)
		assert.ErrorIs(t, err, errFull)
		assert.ErrorContains(t, err, "ratelimit: too many keys: 3 held")
	}
	assert.Equal(t, 3, f.p.Keys())
	assert.Equal(t, 10*time.Second, f.p.PausedFor("b", f.clk.Now()), "b's spent quota is kept")

	f.p.Lost(flying) // c holds nothing live any more
	f.done(f.now("d"), false, nil)
	assert.Equal(t, 3, f.p.Keys())
	f.done(f.now("e"), false, nil) // d was answered with nothing to keep: e takes its room
	assert.Equal(t, 10*time.Second, f.p.PausedFor("b", f.clk.Now()), "b's spent quota is still kept")
	f.clk.Add(10 * time.Second) // a and b are full again
	f.now("f")
	f.now("g")
	assert.LessOrEqual(t, f.p.Keys(), 3)
}

// TestRollAddsEveryResetPassed: a quota that has passed several resets
// gains each one's share (not one, as if a single reset had passed), up to
// the limit less the sends in flight.
func TestRollAddsEveryResetPassed(t *testing.T) {
	t.Parallel()
	f := newFixture(t, testConfig())
	h := answer(item(0, time.Second)) // a token bucket of 10, 1/s: 0 left, 1 more each second
	h.Limit = 1
	f.done(f.now("k"), false, h)
	h = answer(item(0, 10*time.Second))
	h.Limit = 10
	f.done(f.after("k", time.Second), false, h) // now the bucket says: 10 s until full
	f.clk.Add(25 * time.Second)                 // two resets of 10 s passed: 10 (the limit) back
	for range 10 {
		f.now("k")
	}
	assert.Equal(t, 5*time.Second, f.p.PausedFor("k", f.clk.Now()), "the next reset, on the quota's own schedule")
}
