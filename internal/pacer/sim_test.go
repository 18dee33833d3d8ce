package pacer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit/internal/hints"
	"github.com/rlkit/ratelimit/internal/timesrc"
)

// simServer is a rate-limited server as the pacer sees it: it decides each
// send when it is made, and writes the answer's fields at that time.
type simServer interface {
	decide(now time.Time) (ok bool, h *hints.Hints)
	// most is how many sends the server can admit from the start to now
	// at most, for a check that the pacer is not stuck.
	most(elapsed time.Duration) int
}

// simBucket is a token bucket of limit tokens refilling one a second, as
// this library's middleware answers for it: r left, t seconds until full
// (rounded up), the limit stated. A refusal carries Retry-After (the time
// until one token, rounded up) and an item with r=0 whose t is that time
// (retryT) or the time until full (the draft's definition).
type simBucket struct {
	limit  int64
	level  int64 // in thousandths of a token
	last   time.Time
	retryT bool
}

func (b *simBucket) decide(now time.Time) (bool, *hints.Hints) {
	if b.last.IsZero() {
		b.last, b.level = now, b.limit*1000
	}
	b.level = min(b.limit*1000, b.level+now.Sub(b.last).Milliseconds())
	b.last = now
	untilFull := func() time.Duration { return ceilSec(b.limit*1000 - b.level) }
	h := &hints.Hints{Limit: b.limit}
	if b.level >= 1000 {
		b.level -= 1000
		r := b.level / 1000
		h.Items[0] = hints.Item{Remaining: r, Reset: untilFull()} // RateLimit
		h.Items[1] = hints.Item{Remaining: r, Reset: untilFull()} // X-RateLimit-Reset
		h.NItems = 2
		return true, h
	}
	retry := ceilSec(1000 - b.level)
	t := untilFull()
	if b.retryT {
		t = retry
	}
	h.Items[0] = hints.Item{Remaining: 0, Reset: t}
	h.Items[1] = hints.Item{Remaining: 0, Reset: untilFull()}
	h.NItems = 2
	h.RetryAfter, h.HasRetryAfter = retry, true
	return false, h
}

func (b *simBucket) most(elapsed time.Duration) int {
	return int(b.limit) + int(elapsed/time.Second)
}

// simWindow is a fixed window of limit per window, aligned to start,
// counting refusals or not.
type simWindow struct {
	limit         int64
	window        time.Duration
	start         time.Time
	end           time.Time
	count         int64
	countRefusals bool
}

func (w *simWindow) decide(now time.Time) (bool, *hints.Hints) {
	if w.end.IsZero() {
		w.end = w.start.Add(w.window)
	}
	for !now.Before(w.end) {
		w.end, w.count = w.end.Add(w.window), 0
	}
	ok := w.count < w.limit
	if ok || w.countRefusals {
		w.count++
	}
	h := &hints.Hints{Limit: w.limit, NItems: 1}
	t := ceilSec(w.end.Sub(now).Milliseconds())
	h.Items[0] = hints.Item{Remaining: max(w.limit-w.count, 0), Reset: t}
	if !ok {
		h.RetryAfter, h.HasRetryAfter = t, true
	}
	return ok, h
}

func (w *simWindow) most(elapsed time.Duration) int {
	return int(w.limit) * (int(elapsed/w.window) + 1)
}

// stepClock is a clock the simulation moves by hand; nothing waits on it
// (the simulation sends only when the pacer says it may).
type stepClock struct{ now time.Time }

func (c *stepClock) Now() time.Time                       { return c.now }
func (c *stepClock) After(time.Duration) <-chan time.Time { panic("the simulation never waits") }

func ceilSec(ms int64) time.Duration {
	return time.Duration((ms+999)/1000) * time.Second
}

// TestPacingSimulatedServers: clients wanting to send all the time, through
// one pacer, to simulated servers whose answers come back late and out of
// order (each held 0 to 3 steps of 250 ms, then delivered in random order).
// Once an answer has been read, the server never refuses a send; and the
// pacer is not stuck (it sends at least a third of what the server could
// admit).
func TestPacingSimulatedServers(t *testing.T) {
	t.Parallel()
	servers := map[string]func() simServer{
		"bucket":         func() simServer { return &simBucket{limit: 5} },
		"bucket retry t": func() simServer { return &simBucket{limit: 5, retryT: true} },
		"bucket of 20":   func() simServer { return &simBucket{limit: 20} },
		"window":         func() simServer { return &simWindow{limit: 5, window: 3 * time.Second, start: start} },
		"window counting": func() simServer {
			return &simWindow{limit: 5, window: 3 * time.Second, start: start, countRefusals: true}
		},
	}
	for name, mk := range servers {
		for seed := range uint64(20) {
			t.Run(fmt.Sprintf("%s/seed=%d", name, seed), func(t *testing.T) {
				t.Parallel()
				rng := rand.New(rand.NewPCG(seed, 7))
				srv := mk()
				clk := &stepClock{now: start}
				src := timesrc.New(clk)
				p := New(testConfig())
				acquire := func() Ticket {
					tk, err := p.Acquire(context.Background(), &src, "k", errPause)
					require.NoError(t, err)
					return tk
				}
				type held struct {
					tk      Ticket
					refused bool
					h       *hints.Hints
					due     int
				}
				var out []held
				read, sent, refusedAfter := false, 0, 0
				const steps = 240 // a minute
				for step := range steps {
					now := clk.now
					// Deliver the answers that are due, in random order.
					rng.Shuffle(len(out), func(i, j int) { out[i], out[j] = out[j], out[i] })
					kept := out[:0]
					for _, a := range out {
						if a.due > step {
							kept = append(kept, a)
							continue
						}
						p.Done(a.tk, now, Answer{Refused: a.refused, Hints: a.h})
						read = true
					}
					out = kept
					// Send while the pacer allows (up to 8 a step).
					for range 8 {
						if p.PausedFor("k", now) > 0 {
							break
						}
						tk := acquire()
						ok, h := srv.decide(now)
						if !ok && read {
							refusedAfter++
						}
						if ok {
							sent++
						}
						out = append(out, held{tk: tk, refused: !ok, h: h, due: step + rng.IntN(4)})
					}
					clk.now = clk.now.Add(250 * time.Millisecond)
				}
				assert.Zero(t, refusedAfter, "sends refused after an answer was read")
				assert.GreaterOrEqual(t, sent*3, srv.most(steps*250*time.Millisecond), "admitted %d", sent)
			})
		}
	}
}
