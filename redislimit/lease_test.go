package redislimit

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

func TestLeaseConfigErrors(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { _ = c.Close() })
	fw := ratelimit.FixedWindowPolicy(100, time.Second)
	tests := []struct {
		name string
		p    ratelimit.Policy
		cfg  LeaseConfig
		want string // "" means no error
	}{
		{"defaults", fw, LeaseConfig{}, ""},
		{"negative target", fw, LeaseConfig{Target: -time.Millisecond}, "redislimit.WithLeases: LeaseConfig.Target must be positive, got -1ms"},
		{"negative lifetime", fw, LeaseConfig{Lifetime: -time.Millisecond}, "LeaseConfig.Lifetime must be positive and at most 1s, got -1ms"},
		{"long lifetime", fw, LeaseConfig{Lifetime: 2 * time.Second}, "LeaseConfig.Lifetime must be positive and at most 1s, got 2s"},
		{"target beyond lifetime", fw, LeaseConfig{Target: 80 * time.Millisecond}, "LeaseConfig.Target (80ms) must not exceed LeaseConfig.Lifetime (50ms)"},
		{"negative keys", fw, LeaseConfig{MaxKeys: -1}, "LeaseConfig.MaxKeys must not be negative, got -1"},
		{"negative share", fw, LeaseConfig{MaxShare: -2}, "LeaseConfig.MaxShare must not be negative, got -2"},
		{"sliding log", ratelimit.SlidingLogPolicy(10, time.Second), LeaseConfig{}, "redislimit.New: WithLeases cannot lease a sliding log"},
		{"token bucket", ratelimit.TokenBucketPolicy(ratelimit.Per(10, time.Second), 10), LeaseConfig{}, ""},
		{"leaky bucket", ratelimit.LeakyBucketPolicy(10, time.Second), LeaseConfig{}, ""},
		{"sliding counter", ratelimit.SlidingCounterPolicy(10, time.Second), LeaseConfig{}, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(c, tt.p, WithLeases(tt.cfg))
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("New(%v, WithLeases(%+v)) = %v, want no error", tt.p, tt.cfg, err)
			case tt.want == "":
			case err == nil || !strings.Contains(err.Error(), tt.want) || !errors.Is(err, ratelimit.ErrInvalidConfig):
				t.Fatalf("New(%v, WithLeases(%+v)) = %v, want an ErrInvalidConfig containing %q", tt.p, tt.cfg, err, tt.want)
			case !strings.HasPrefix(err.Error(), "ratelimit: "):
				t.Fatalf("error %q does not start with \"ratelimit: \"", err)
			}
		})
	}
	l, err := New(c, fw, WithLeases(LeaseConfig{}))
	if err != nil {
		t.Fatal(err)
	}
	err = l.SetPolicy(ratelimit.SlidingLogPolicy(10, time.Second), ratelimit.KeepUsed)
	if err == nil || !errors.Is(err, ratelimit.ErrInvalidConfig) || !strings.Contains(err.Error(), "redislimit.SetPolicy: WithLeases cannot lease a sliding log") {
		t.Fatalf("SetPolicy(sliding log) with leases = %v, want a config error", err)
	}
	if got := l.Policy(); got != fw {
		t.Fatalf("after a refused SetPolicy, Policy() = %v, want %v", got, fw)
	}
}

// leaseRig is a limiter with leases on the manual clock, deciding at that
// clock's time (WithClock), and a second limiter without leases on
// the same keys, whose Peek shows what Redis holds.
type leaseRig struct {
	t     *testing.T
	c     *redis.Client
	mock  *manualClock
	l     *Limiter
	exact *Limiter
	key   string
}

func newLeaseRig(t *testing.T, p ratelimit.Policy, cfg LeaseConfig, opts ...Option) *leaseRig {
	t.Helper()
	_, c := startRedis(t)
	mock := fakeclock.NewManual(mockStart)
	prefix := uniquePrefix(t)
	opts = append([]Option{WithPrefix(prefix), WithClock(mock), WithLeases(cfg)}, opts...)
	return &leaseRig{
		t:     t,
		c:     c,
		mock:  mock,
		l:     mustNew(t, c, p, opts...),
		exact: mustNew(t, c, p, WithPrefix(prefix), WithClock(mock), WithDenyCache(0)),
		key:   "hot",
	}
}

// allow runs AllowN(n) and checks that it is admitted or not as want says.
func (r *leaseRig) allow(n int, want bool) ratelimit.Decision {
	r.t.Helper()
	d, err := r.l.AllowN(bg(), r.key, n)
	if err != nil || d.Allowed != want {
		r.t.Fatalf("AllowN(%d) at %v = %+v, %v; want Allowed %v", n, r.mock.Now().Format("15:04:05.000000"), d, err, want)
	}
	return d
}

// redis returns the key's Remaining on Redis (charged leases included).
func (r *leaseRig) redis() int {
	r.t.Helper()
	d, err := r.exact.Peek(bg(), r.key, 0)
	if err != nil {
		r.t.Fatal(err)
	}
	return d.Remaining
}

func (r *leaseRig) wantRedis(want int, when string) {
	r.t.Helper()
	if got := r.redis(); got != want {
		r.t.Fatalf("%s: Redis Remaining = %d, want %d", when, got, want)
	}
}

// heat makes the key hot: count decisions now, then Target later one
// more, which takes the first lease: count events per Target, a lease of
// count (under the cap) of which the call takes one.
func (r *leaseRig) heat(count int) ratelimit.Decision {
	r.t.Helper()
	for range count {
		r.allow(1, true)
	}
	r.mock.Add(10 * time.Millisecond)
	return r.allow(1, true)
}

func TestLeaseColdKeyIsExact(t *testing.T) {
	t.Parallel()
	r := newLeaseRig(t, ratelimit.FixedWindowPolicy(100, time.Second), LeaseConfig{})
	// One decision per Target: rate x Target is 1, below 2, so the key
	// stays cold and every decision is one script, exact.
	for i := 1; i <= 30; i++ {
		d := r.allow(1, true)
		if d.Remaining != 100-i {
			t.Fatalf("decision %d: Remaining = %d, want %d", i, d.Remaining, 100-i)
		}
		r.wantRedis(100-i, "cold key")
		r.mock.Add(10 * time.Millisecond)
	}
}

func TestLeaseHotKey(t *testing.T) {
	t.Parallel()
	r := newLeaseRig(t, ratelimit.FixedWindowPolicy(1000, time.Second), LeaseConfig{MaxShare: 10})
	for i := 1; i <= 20; i++ {
		r.allow(1, true)
	}
	r.wantRedis(980, "20 exact decisions")
	// 20 asked in the first Target: a lease of 20, of which this call takes 1.
	r.mock.Add(10 * time.Millisecond)
	d := r.allow(1, true)
	r.wantRedis(960, "first lease of 20")
	if d.Remaining != 960+19 {
		t.Fatalf("first leased decision: Remaining = %d, want %d (19 left in the lease + 960 on Redis)", d.Remaining, 979)
	}
	// The next 19 come from the lease: Redis does not move.
	for i := 1; i <= 19; i++ {
		d = r.allow(1, true)
		if d.Remaining != 960+19-i {
			t.Fatalf("leased decision %d: Remaining = %d, want %d", i, d.Remaining, 960+19-i)
		}
	}
	r.wantRedis(960, "the lease used up")
	// The lease is empty: the next decision takes another of 20.
	r.allow(1, true)
	r.wantRedis(940, "second lease")
	// The lease is capped at Limit/MaxShare = 100.
	for range 400 {
		r.allow(1, true)
	}
	if err := r.l.ReleaseLeases(bg()); err != nil {
		t.Fatal(err)
	}
	r.mock.Add(10 * time.Millisecond)
	before := r.redis()
	r.allow(1, true)
	if got := before - r.redis(); got != 100 {
		t.Fatalf("a lease after 400 asked in a Target charged %d, want the cap 100", got)
	}
}

func TestLeaseWindowBoundary(t *testing.T) {
	t.Parallel()
	// Windows of 100ms; the manual clock starts at .123456, so the window
	// ends at .200, before the lease's Lifetime (500ms).
	r := newLeaseRig(t, ratelimit.FixedWindowPolicy(1000, 100*time.Millisecond), LeaseConfig{Lifetime: 500 * time.Millisecond, MaxShare: 10})
	r.heat(29) // a lease of 29 at .133456, 28 left
	r.wantRedis(1000-29-29, "hot")
	r.allow(1, true) // from the lease: 27 left
	r.wantRedis(942, "a leased decision")
	// Just before the window ends the lease still admits; at its end it
	// must not (its events were counted in the window that ended).
	r.mock.Set(time.Date(2026, 11, 30, 15, 0, 0, 199_999_000, time.UTC))
	r.allow(1, true)
	r.wantRedis(942, "the last microsecond of the window")
	r.mock.Set(time.Date(2026, 11, 30, 15, 0, 0, 200_000_000, time.UTC))
	r.allow(1, true) // a new lease in the new window
	got := r.redis()
	if got == 1000 || got < 1000-100 {
		t.Fatalf("new window: Redis Remaining = %d, want a fresh window charged one lease (900..999)", got)
	}
	// The 26 events left in the old lease were not given back to the new
	// window: a give-back runs at the grant's time and finds another window.
	if err := r.l.ReleaseLeases(bg()); err != nil {
		t.Fatal(err)
	}
	r.wantRedis(999, "after ReleaseLeases in the new window: only the one admitted event charged")
}

func TestLeaseGiveBack(t *testing.T) {
	t.Parallel()
	// A bucket that does not refill during the test (one token an hour).
	p := ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 1000)
	r := newLeaseRig(t, p, LeaseConfig{MaxShare: 10})
	r.heat(29) // a lease of 29, 28 left
	r.wantRedis(1000-29-29, "hot")
	for range 9 {
		r.allow(1, true)
	}
	r.wantRedis(942, "from the lease")
	// The lease ends after Lifetime (50ms); the next decision gives back
	// its 19 unused events and takes a new lease. The rate measured by
	// then is 10 events in 50ms, 2 per Target (not smoothed with the
	// first 29 across so long a measurement): a lease of 2, still hot.
	r.mock.Add(50 * time.Millisecond)
	d := r.allow(1, true)
	admitted := 29 + 1 + 9 + 1
	r.wantRedis(1000-admitted-1, "19 given back, a lease of 2 taken")
	if d.Remaining != 1000-admitted {
		t.Fatalf("after expiry: Decision.Remaining = %d, want %d", d.Remaining, 1000-admitted)
	}
	// ReleaseLeases gives back what is left: Redis charged exactly what
	// was admitted.
	if err := r.l.ReleaseLeases(bg()); err != nil {
		t.Fatal(err)
	}
	r.wantRedis(1000-admitted, "after ReleaseLeases")
	// The limiter stays usable.
	r.allow(1, true)
	if err := r.l.ReleaseLeases(bg()); err != nil {
		t.Fatal(err)
	}
	r.wantRedis(1000-admitted-1, "after a second ReleaseLeases")
}

func TestLeasePartialGrantAndDenial(t *testing.T) {
	t.Parallel()
	r := newLeaseRig(t, ratelimit.FixedWindowPolicy(60, time.Second), LeaseConfig{MaxShare: 1})
	r.heat(39) // a lease of 39 wanted, 21 remain: a partial lease of 21
	r.wantRedis(0, "a partial lease took what remained")
	// The partial lease held 21, the caller took 1: 20 more admitted
	// locally, then Redis's exact denial.
	for range 20 {
		r.allow(1, true)
	}
	d := r.allow(1, false)
	want, err := r.exact.Peek(bg(), r.key, 1)
	if err != nil {
		t.Fatal(err)
	}
	if d != want {
		t.Fatalf("denial with no lease left = %+v, want Redis's exact %+v", d, want)
	}
	// A larger n than the lease covers, with Redis unable to grant it, is
	// Redis's denial too.
	d = r.allow(5, false)
	if want, _ := r.exact.Peek(bg(), r.key, 5); d != want {
		t.Fatalf("AllowN(5) = %+v, want Redis's exact %+v", d, want)
	}
}

func TestLeasePartialGrantExactCount(t *testing.T) {
	t.Parallel()
	r := newLeaseRig(t, ratelimit.FixedWindowPolicy(50, time.Second), LeaseConfig{MaxShare: 1})
	for range 30 {
		r.allow(1, true)
	}
	r.mock.Add(10 * time.Millisecond)
	// 30 asked per Target: a lease of 30 wanted, 20 remain: granted 20.
	d := r.allow(3, true)
	if d.Remaining != 17 {
		t.Fatalf("AllowN(3) from a partial lease of 20: Remaining = %d, want 17", d.Remaining)
	}
	r.wantRedis(0, "partial lease")
	admitted := 3
	for r.l.Allow(bg(), r.key) {
		admitted++
	}
	if admitted != 20 {
		t.Fatalf("admitted %d from a partial lease of 20", admitted)
	}
}

func TestLeaseSetPolicy(t *testing.T) {
	t.Parallel()
	r := newLeaseRig(t, ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 1000), LeaseConfig{MaxShare: 10})
	r.heat(29)
	r.wantRedis(942, "hot")
	p2 := ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 500)
	if err := r.l.SetPolicy(p2, ratelimit.KeepUsed); err != nil {
		t.Fatal(err)
	}
	if err := r.exact.SetPolicy(p2, ratelimit.KeepUsed); err != nil {
		t.Fatal(err)
	}
	// The 28 left in the lease granted under the old policy do not admit
	// under the new one: the key is cold again under the new generation,
	// and its first decision is exact: the used 58 were kept.
	d := r.allow(1, true)
	if d.Remaining != 500-58-1 {
		t.Fatalf("first decision under the new policy: Remaining = %d, want %d", d.Remaining, 500-59)
	}
	r.wantRedis(441, "new policy")
	// Hot again under the new policy: its leases are granted by the
	// scripts that know the previous policy (the chain).
	for range 19 {
		r.allow(1, true)
	}
	r.mock.Add(10 * time.Millisecond)
	d = r.allow(1, true)
	r.wantRedis(441-19-20, "a lease under the new policy")
	if d.Remaining != 441-20 {
		t.Fatalf("first leased decision under the new policy: Remaining = %d, want %d", d.Remaining, 441-20)
	}
}

func TestLeaseBlockDropsLease(t *testing.T) {
	t.Parallel()
	r := newLeaseRig(t, ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 1000), LeaseConfig{MaxShare: 10})
	r.heat(29)
	if err := r.l.Block(bg(), r.key, time.Second); err != nil {
		t.Fatal(err)
	}
	d := r.allow(1, false)
	if d.RetryAfter != time.Second {
		t.Fatalf("blocked key: %+v, want RetryAfter 1s", d)
	}
}

func TestLeaseCanceledContext(t *testing.T) {
	t.Parallel()
	r := newLeaseRig(t, ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 1000), LeaseConfig{MaxShare: 10})
	r.heat(29) // 28 left in the lease
	ctx, cancel := context.WithCancel(bg())
	cancel()
	d, err := r.l.AllowN(ctx, r.key, 1)
	if d.Allowed || d.RetryAfter != FailClosedRetryAfter || !errors.Is(err, context.Canceled) {
		t.Fatalf("AllowN with a done ctx = %+v, %v; want the canceled denial", d, err)
	}
	// The lease is untouched: 28 more from it, then a grant.
	for range 28 {
		r.allow(1, true)
	}
	r.wantRedis(942, "the lease used up")
	r.allow(1, true)
	if got := r.redis(); got >= 942 {
		t.Fatalf("after the lease: Redis Remaining = %d, want a new lease charged", got)
	}
}

func TestLeaseSweepGivesBackColdKeys(t *testing.T) {
	t.Parallel()
	r := newLeaseRig(t, ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 1000), LeaseConfig{MaxShare: 10})
	r.heat(29) // "hot" holds 28 unused events
	r.wantRedis(942, "hot")
	// "hot" goes quiet; after its Lifetime another key's grant sweeps it
	// and gives its 28 back.
	r.mock.Add(60 * time.Millisecond)
	other := *r
	other.key = "other"
	other.heat(9)
	r.wantRedis(1000-30, "after the sweep: only the 30 admitted charged")
}

func TestLeaseMaxKeys(t *testing.T) {
	t.Parallel()
	r := newLeaseRig(t, ratelimit.FixedWindowPolicy(1000, time.Second), LeaseConfig{MaxKeys: 1, MaxShare: 10})
	r.heat(29)
	r.wantRedis(942, "tracked key")
	// The table is full: "other" is decided one script per decision.
	other := *r
	other.key = "other"
	for i := 1; i <= 30; i++ {
		other.allow(1, true)
		other.wantRedis(1000-i, "untracked key")
	}
	other.mock.Add(10 * time.Millisecond)
	other.allow(1, true)
	other.wantRedis(1000-31, "untracked key, hot")
}

func TestLeaseFailurePolicy(t *testing.T) {
	t.Parallel()
	c := refusedClient(t, true)
	mock := fakeclock.NewManual(mockStart)
	// No breaker: every call, the grant included, tries Redis.
	l := mustNew(t, c, ratelimit.FixedWindowPolicy(1000, time.Second), WithClock(mock),
		WithTimeout(100*time.Millisecond), WithFailurePolicy(FailClosed), WithLogger(nil), WithLeases(LeaseConfig{}), WithBreaker(0))
	g := l.acquire()
	grants := &countScript{hash: g.leaseScript.Hash()}
	g.release()
	c.AddHook(grants)
	check := func(when string) {
		t.Helper()
		d, err := l.AllowN(bg(), "k", 1)
		if d.Allowed || !errors.Is(err, ErrUnavailable) {
			t.Fatalf("%s: AllowN = %+v, %v; want FailClosed's denial and ErrUnavailable", when, d, err)
		}
	}
	for range 10 {
		check("cold")
	}
	if got := grants.n.Load(); got != 0 {
		t.Fatalf("cold: %d grants tried, want 0", got)
	}
	mock.Add(10 * time.Millisecond)
	check("hot: the grant fails")
	if got := grants.n.Load(); got < 1 {
		t.Fatalf("hot: %d grants tried, want at least 1", got)
	}
}

// countScript is a go-redis hook that counts the runs of one script.
type countScript struct {
	hash string
	n    atomic.Int64
}

func (h *countScript) count(cmds []redis.Cmder) {
	for _, c := range cmds {
		if a := c.Args(); len(a) > 1 && (a[0] == "evalsha" || a[0] == "eval") && a[1] == h.hash {
			h.n.Add(1)
		}
	}
}

func (h *countScript) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countScript) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count([]redis.Cmder{cmd})
		return next(ctx, cmd)
	}
}

func (h *countScript) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds)
		return next(ctx, cmds)
	}
}

func TestLeaseObserver(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	mock := fakeclock.NewManual(mockStart)
	var events, allowed atomic.Int64
	obs := ratelimit.ObserverFunc(func(_ context.Context, e ratelimit.Event) {
		events.Add(1)
		if e.Outcome == ratelimit.OutcomeAllowed && e.Home == ratelimit.HomeRedis {
			allowed.Add(1)
		}
	})
	l := mustNew(t, c, ratelimit.FixedWindowPolicy(100, time.Second), WithPrefix(uniquePrefix(t)), WithClock(mock),
		WithObserver(obs), WithLeases(LeaseConfig{MaxShare: 1}))
	for range 10 {
		l.Allow(bg(), "k")
	}
	mock.Add(10 * time.Millisecond)
	for range 120 {
		l.Allow(bg(), "k")
	}
	if events.Load() != 130 || allowed.Load() != 100 {
		t.Fatalf("observer saw %d events, %d allowed; want 130, 100", events.Load(), allowed.Load())
	}
}

// TestLeaseConcurrentAccounting hammers one key from 64 goroutines on the
// real clock, then gives the leases back: the key's quota on Redis is then
// charged exactly what was admitted, and never more than the limit was.
func TestLeaseConcurrentAccounting(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	prefix := uniquePrefix(t)
	// A token an hour: at most one arrives during the test.
	p := ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 20000)
	l := mustNew(t, c, p, WithPrefix(prefix), WithLeases(LeaseConfig{}))
	exact := mustNew(t, c, p, WithPrefix(prefix), WithDenyCache(0))
	var admitted atomic.Int64
	var wg sync.WaitGroup
	stop := time.Now().Add(300 * time.Millisecond)
	for range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for time.Now().Before(stop) {
				d, err := l.AllowN(bg(), "hot", 1)
				if err != nil {
					t.Error(err)
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if err := l.ReleaseLeases(bg()); err != nil {
		t.Fatal(err)
	}
	d, err := exact.Peek(bg(), "hot", 0)
	if err != nil {
		t.Fatal(err)
	}
	n := int(admitted.Load())
	t.Logf("%d admitted, Redis Remaining %d", n, d.Remaining)
	// A token may have arrived meanwhile: one more admitted, or left.
	if n > p.Limit+1 || d.Remaining+n < p.Limit || d.Remaining+n > p.Limit+1 {
		t.Fatalf("%d admitted, Redis Remaining %d after ReleaseLeases; want at most %d admitted and Remaining %d (or one more)", n, d.Remaining, p.Limit, p.Limit-n)
	}
}

// TestLeaseReplicaAck: under WithReplicaAck a lease is used only once its
// grant was acknowledged by a replica; while the replica is stopped, the
// lease in hand still admits, and the next grant gets the failure policy
// with ErrNotReplicated.
func TestLeaseReplicaAck(t *testing.T) {
	t.Parallel()
	master, replica := startReplicated(t)
	c := redis.NewClient(&redis.Options{Addr: master.Addr(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	mock := fakeclock.NewManual(mockStart)
	// WAIT's timeout bounds how long a healthy replica may take to
	// acknowledge; 2 s, as in TestReplicaAck, is far above what a loaded
	// machine takes (tens of ms) and is paid once, by the grant with the
	// replica stopped.
	l := mustNew(t, c, ratelimit.FixedWindowPolicy(1000, time.Hour), WithPrefix(uniquePrefix(t)), WithClock(mock),
		WithFailurePolicy(FailClosed), WithBreaker(0), WithLogger(nil), WithReplicaAck(1, 2*time.Second),
		WithLeases(LeaseConfig{MaxShare: 10}))
	for range 9 {
		if d, err := l.AllowN(bg(), "k", 1); err != nil || !d.Allowed {
			t.Fatalf("cold AllowN = %+v, %v", d, err)
		}
	}
	mock.Add(10 * time.Millisecond)
	if d, err := l.AllowN(bg(), "k", 1); err != nil || !d.Allowed {
		t.Fatalf("grant of a lease of 9 = %+v, %v", d, err)
	}
	resume := stop(t, replica)
	for range 8 {
		if d, err := l.AllowN(bg(), "k", 1); err != nil || !d.Allowed {
			t.Fatalf("from the lease with the replica stopped = %+v, %v", d, err)
		}
	}
	d, err := l.AllowN(bg(), "k", 1)
	if d.Allowed || !errors.Is(err, ErrNotReplicated) {
		t.Fatalf("a grant with the replica stopped = %+v, %v; want FailClosed's denial and ErrNotReplicated", d, err)
	}
	resume()
}

// TestLeaseGiveBackEveryAlgorithm: for every leasable algorithm, a lease
// that ends unused is given back in the script that grants the next one,
// and ReleaseLeases gives back the rest: Redis then holds exactly the
// events admitted.
func TestLeaseGiveBackEveryAlgorithm(t *testing.T) {
	t.Parallel()
	for _, p := range []ratelimit.Policy{
		ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 1000),
		ratelimit.LeakyBucketPolicy(1000, time.Hour),
		ratelimit.FixedWindowPolicy(1000, time.Hour),
		ratelimit.SlidingCounterPolicy(1000, time.Hour),
		ratelimit.QuotaPolicy(1000, ratelimit.Calendar{Unit: ratelimit.Daily}),
	} {
		t.Run(p.Algorithm.String(), func(t *testing.T) {
			t.Parallel()
			r := newLeaseRig(t, p, LeaseConfig{MaxShare: 10})
			r.heat(29) // a lease of 29, 28 left
			r.wantRedis(1000-29-29, "hot")
			for range 20 {
				r.allow(1, true) // 8 left
			}
			// After Lifetime, still hot (21 events in 50ms: a lease of
			// 5): one script gives back the 8 and grants 5, 4 left.
			r.mock.Add(50 * time.Millisecond)
			r.allow(1, true)
			r.wantRedis(1000-51-4, "the ended lease given back by the script granting the next")
			// After another Lifetime the key is cold (one event in 50ms):
			// the 4 are given back, then one exact decision.
			r.mock.Add(50 * time.Millisecond)
			r.allow(1, true)
			r.wantRedis(1000-52, "the ended lease given back before an exact decision")
			for range 30 {
				r.allow(1, true)
			}
			if err := r.l.ReleaseLeases(bg()); err != nil {
				t.Fatal(err)
			}
			r.wantRedis(1000-82, "after ReleaseLeases")
		})
	}
}

// TestLeaseBucketGiveBackAfterRefill: a bucket's give-back must not
// return what refill has already cancelled. Limiter A (leases) takes a
// lease of 6 and uses 1; the bucket then refills to full, limiter B
// (exact) drains it, and 1ms later A gives back its 5 unused events. A
// true bucket has refilled 0.1 token since B drained it: B must be
// denied. Given back at the grant's time, the 5 were taken off B's later
// state again and B was admitted 5 more. Both ways a give-back is made:
// ReleaseLeases (the refund script; the sweep and a cold key's give-back
// run the same) and the script that grants the next lease.
func TestLeaseBucketGiveBackAfterRefill(t *testing.T) {
	t.Parallel()
	for _, p := range []ratelimit.Policy{
		ratelimit.TokenBucketPolicy(ratelimit.Per(100, time.Second), 100),
		ratelimit.LeakyBucketPolicy(100, 10*time.Millisecond),
	} {
		t.Run(p.Algorithm.String()+"/release", func(t *testing.T) {
			t.Parallel()
			r := newLeaseRig(t, p, LeaseConfig{}) // leases of 100/16 = 6
			r.heat(10)                            // a lease of 6, 5 left
			r.mock.Add(300 * time.Millisecond)    // full again
			r.drainExact(100)
			r.mock.Add(time.Millisecond)
			if err := r.l.ReleaseLeases(bg()); err != nil {
				t.Fatal(err)
			}
			r.wantExactDenied("after ReleaseLeases")
		})
		t.Run(p.Algorithm.String()+"/grant", func(t *testing.T) {
			t.Parallel()
			// A Target of 400ms keeps the key hot across the test, so
			// that A's next decision is a grant that gives the 5 back.
			r := newLeaseRig(t, p, LeaseConfig{Target: 400 * time.Millisecond, Lifetime: time.Second})
			for range 10 {
				r.allow(1, true)
			}
			r.mock.Add(400 * time.Millisecond)
			r.allow(1, true) // a lease of 6 granted at 400ms, 5 left
			r.mock.Add(100 * time.Millisecond)
			r.drainExact(100)
			r.mock.Add(time.Millisecond)
			r.allow(6, false) // 5 left do not cover 6: a grant, denied
			r.wantExactDenied("after the grant that gave back")
		})
	}
}

// drainExact admits n events through the exact limiter.
func (r *leaseRig) drainExact(n int) {
	r.t.Helper()
	for i := range n {
		if d, err := r.exact.AllowN(bg(), r.key, 1); err != nil || !d.Allowed {
			r.t.Fatalf("exact AllowN #%d = %+v, %v; want admitted", i, d, err)
		}
	}
}

// wantExactDenied checks that the exact limiter is denied one event.
func (r *leaseRig) wantExactDenied(when string) {
	r.t.Helper()
	if d, err := r.exact.AllowN(bg(), r.key, 1); err != nil || d.Allowed {
		r.t.Fatalf("%s: exact AllowN = %+v, %v; want denied (the bucket refilled 0.1 token since it was drained)", when, d, err)
	}
}
