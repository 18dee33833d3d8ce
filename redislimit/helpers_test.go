package redislimit

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/rlkit/ratelimit/internal/testkit/redistest"
)

// startRedis starts a redis-server for t (or uses REDIS_ADDR) and returns a
// client closed when t ends.
func startRedis(t testing.TB) (*redistest.Server, *redis.Client) {
	t.Helper()
	s := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	return s, c
}

var prefixSeq atomic.Int64

// uniquePrefix returns a key prefix no other test uses, so that tests may
// share a REDIS_ADDR server.
func uniquePrefix(t testing.TB) string {
	return fmt.Sprintf("rltest:%d:%d:", time.Now().UnixNano(), prefixSeq.Add(1))
}

// mockStart is where the tests' manual clocks start: a whole-microsecond
// time of today's magnitude (Unix µs ~ 1.8e15).
var mockStart = time.Date(2026, 11, 30, 15, 0, 0, 123456000, time.UTC)

// manualClock is a ratelimit.Clock that moves only when told, without the
// millisecond sleep *clock.Mock takes on every move; its After answers at
// once (nothing here waits on it).
type manualClock = fakeclock.Manual

// roundUS rounds a duration up to a whole microsecond, keeping RetryNever.
func roundUS(d time.Duration) time.Duration {
	if d == ratelimit.RetryNever || d <= 0 {
		return d
	}
	return (d + time.Microsecond - 1) / time.Microsecond * time.Microsecond
}

// roundDecision rounds an in-memory Decision's durations as Redis does.
func roundDecision(d ratelimit.Decision) ratelimit.Decision {
	d.RetryAfter = roundUS(d.RetryAfter)
	d.ResetAfter = roundUS(d.ResetAfter)
	return d
}

// policies returns policies of every algorithm with whole-microsecond
// periods, small enough that short timelines reach every branch.
func policies() []ratelimit.Policy {
	return []ratelimit.Policy{
		ratelimit.TokenBucketPolicy(ratelimit.Per(10, time.Second), 10),
		ratelimit.TokenBucketPolicy(ratelimit.Per(3, 7*time.Millisecond), 5),
		ratelimit.TokenBucketPolicy(ratelimit.Per(7, 333*time.Microsecond), 3),
		ratelimit.LeakyBucketPolicy(5, 100*time.Millisecond),
		ratelimit.LeakyBucketPolicy(3, 7*time.Microsecond),
		ratelimit.FixedWindowPolicy(5, time.Second),
		ratelimit.FixedWindowPolicy(3, 7*time.Millisecond),
		ratelimit.SlidingLogPolicy(5, time.Second),
		ratelimit.SlidingLogPolicy(4, 7*time.Millisecond),
		ratelimit.SlidingCounterPolicy(10, time.Second),
		ratelimit.SlidingCounterPolicy(7, 13*time.Millisecond),
	}
}

// settleGoroutines waits until the number of goroutines is at most want,
// and fails t if it does not get there.
func settleGoroutines(t *testing.T, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := runtime.NumGoroutine()
		if got <= want {
			return
		}
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			n := runtime.Stack(buf, true)
			t.Fatalf("goroutines: %d, want <= %d\n%s", got, want, buf[:n])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mustNew is New that fails t on error. Its timeout is 5s unless opts say
// otherwise: tests that are not about timeouts must not fail because a
// loaded machine running -race took 100ms to answer.
func mustNew(t testing.TB, c redis.UniversalClient, p ratelimit.Policy, opts ...Option) *Limiter {
	t.Helper()
	l, err := New(c, p, append([]Option{WithTimeout(5 * time.Second)}, opts...)...)
	if err != nil {
		t.Fatalf("New(%v): %v", p, err)
	}
	return l
}

func bg() context.Context { return context.Background() }

func name(p ratelimit.Policy) string {
	return strings.NewReplacer(" ", "", "(", "_", ")", "", ",", "_", "=", "", "/", "per").Replace(p.String())
}

func runtimeGOMAXPROCS() int { return runtime.GOMAXPROCS(0) }

func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, 1)) }

// quietLogger drops go-redis's log lines: the fault tests make it log
// every failed dial.
type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}

// init quiets go-redis's logger and the default slog logger: the tests
// that make Redis fail would otherwise fill the output with reports. Tests
// that check the reports give their limiter a logger of their own.
func init() {
	redis.SetLogger(quietLogger{})
	slog.SetDefault(slog.New(slog.DiscardHandler))
}

// logRecorder is a slog.Handler that keeps every record it is given.
type logRecorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (h *logRecorder) Enabled(context.Context, slog.Level) bool { return true }

func (h *logRecorder) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	h.records = append(h.records, r.Clone())
	h.mu.Unlock()
	return nil
}

func (h *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *logRecorder) WithGroup(string) slog.Handler      { return h }

// logger returns a logger writing to h.
func (h *logRecorder) logger() *slog.Logger { return slog.New(h) }

// len returns the number of records.
func (h *logRecorder) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.records)
}

// attrs returns the attributes of record i by key.
func (h *logRecorder) attrs(i int) map[string]slog.Value {
	h.mu.Lock()
	defer h.mu.Unlock()
	m := map[string]slog.Value{}
	h.records[i].Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value
		return true
	})
	return m
}

// texts returns every record as text: the message and each attribute, its
// value formatted with %v, %+v and %#v.
func (h *logRecorder) texts() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, r := range h.records {
		out = append(out, r.Message)
		r.Attrs(func(a slog.Attr) bool {
			v := a.Value.Any()
			out = append(out, a.Key, fmt.Sprintf("%v", v), fmt.Sprintf("%+v", v), fmt.Sprintf("%#v", v))
			return true
		})
	}
	return out
}
