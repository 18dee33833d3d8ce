package redislimit

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
)

// scriptHold is a go-redis hook that holds one run of a script: before it
// is sent (before) or after its reply came (after), until release is
// closed. held is closed when it holds.
type scriptHold struct {
	hash    string
	before  bool
	armed   atomic.Bool
	held    chan struct{}
	release chan struct{}
}

// holdScript adds to r's client a hook that holds the next run of the
// lease script (lease: true) or of the refund script.
func (r *leaseRig) holdScript(lease, before bool) *scriptHold {
	g := r.l.acquire()
	sc := g.refundScript
	if lease {
		sc = g.leaseScript
	}
	g.release()
	h := &scriptHold{hash: sc.Hash(), before: before, held: make(chan struct{}), release: make(chan struct{})}
	h.armed.Store(true)
	r.c.AddHook(h)
	r.t.Cleanup(func() {
		select {
		case <-h.release:
		default:
			close(h.release)
		}
	})
	return h
}

func (h *scriptHold) hold(cmds []redis.Cmder) {
	for _, c := range cmds {
		a := c.Args()
		if len(a) > 1 && a[0] == "evalsha" && a[1] == h.hash && h.armed.CompareAndSwap(true, false) {
			close(h.held)
			<-h.release
			return
		}
	}
}

func (h *scriptHold) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptHold) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if h.before {
			h.hold([]redis.Cmder{cmd})
			return next(ctx, cmd)
		}
		err := next(ctx, cmd)
		h.hold([]redis.Cmder{cmd})
		return err
	}
}

func (h *scriptHold) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.before {
			h.hold(cmds)
			return next(ctx, cmds)
		}
		err := next(ctx, cmds)
		h.hold(cmds)
		return err
	}
}

// waitFlight waits until the key has no grant in flight.
func (r *leaseRig) waitFlight() {
	r.t.Helper()
	g := r.l.acquire()
	defer g.release()
	v, ok := g.leases.keys.Load(r.key)
	if !ok {
		return
	}
	e := v.(*leaseKey)
	for {
		e.mu.Lock()
		f := e.flight
		e.mu.Unlock()
		if f == nil {
			return
		}
		<-f.done
	}
}

// The Redis state of the rigs below does not refill during a test.
var holdPolicy = ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 1000)

// TestLeaseResetRacesGrant: a Reset while a grant's reply is on its way
// must not let the grant install its lease afterwards: the post-Reset
// state never charged it.
func TestLeaseResetRacesGrant(t *testing.T) {
	t.Parallel()
	r := newLeaseRig(t, holdPolicy, LeaseConfig{MaxShare: 10}, WithTimeout(5*time.Second))
	r.heat(29) // a lease of 29, 28 left
	for range 28 {
		r.allow(1, true)
	}
	h := r.holdScript(true, false)
	allowed := make(chan error, 1)
	go func() {
		d, err := r.l.AllowN(bg(), r.key, 1) // a grant, held after it ran
		if err == nil && !d.Allowed {
			err = errors.New("denied")
		}
		allowed <- err
	}()
	<-h.held
	reset := make(chan error, 1)
	go func() { reset <- r.l.Reset(bg(), r.key) }()
	time.Sleep(30 * time.Millisecond)
	close(h.release)
	if err := <-allowed; err != nil {
		t.Fatalf("the held grant: %v", err)
	}
	if err := <-reset; err != nil {
		t.Fatal(err)
	}
	r.waitFlight()
	// After the Reset Redis holds a full bucket; every admission from
	// now on must be charged there.
	for i := 1; i <= 5; i++ {
		r.allow(1, true)
		if got := r.redis(); got > 1000-i {
			t.Fatalf("%d admissions after the Reset: Redis Remaining = %d, want at most %d (a lease granted before the Reset admits what the reset state never charged)", i, got, 1000-i)
		}
	}
}

// TestLeaseResetRacesGiveBack: a give-back sent after a Reset would take
// its events off the post-Reset state, which never charged them. Reset
// waits for the key's give-back in flight.
func TestLeaseResetRacesGiveBack(t *testing.T) {
	t.Parallel()
	r := newLeaseRig(t, holdPolicy, LeaseConfig{MaxShare: 10}, WithTimeout(5*time.Second))
	r.heat(29) // a lease of 29, 28 left
	h := r.holdScript(false, true)
	released := make(chan error, 1)
	go func() { released <- r.l.ReleaseLeases(bg()) }()
	<-h.held // the give-back of 28, not sent yet
	reset := make(chan error, 1)
	go func() { reset <- r.l.Reset(bg(), r.key) }()
	select {
	case err := <-reset:
		// The Reset did not wait: 50 admissions after it, then the
		// give-back lands.
		if err != nil {
			t.Fatal(err)
		}
		r.drainExact(50)
		close(h.release)
	case <-time.After(50 * time.Millisecond):
		close(h.release)
		if err := <-reset; err != nil {
			t.Fatal(err)
		}
		r.drainExact(50)
	}
	if err := <-released; err != nil {
		t.Fatal(err)
	}
	r.wantRedis(950, "50 admitted after the Reset")
}

// TestLeaseGrantOutlivesCanceledCaller: a caller whose ctx is done while
// its grant is on its way gets the canceled denial, and the grant is
// not lost: the lease is installed when the reply comes (the caller's
// event back in it) and its events are admitted.
func TestLeaseGrantOutlivesCanceledCaller(t *testing.T) {
	t.Parallel()
	r := newLeaseRig(t, holdPolicy, LeaseConfig{MaxShare: 10}, WithTimeout(5*time.Second))
	r.heat(29) // a lease of 29, 28 left
	for range 28 {
		r.allow(1, true)
	}
	r.wantRedis(942, "the lease used up")
	h := r.holdScript(true, false)
	ctx, cancel := context.WithCancel(bg())
	type result struct {
		d   ratelimit.Decision
		err error
	}
	res := make(chan result, 1)
	go func() {
		d, err := r.l.AllowN(ctx, r.key, 1)
		res <- result{d, err}
	}()
	<-h.held
	cancel()
	select {
	case got := <-res:
		if got.d.Allowed || !errors.Is(got.err, context.Canceled) {
			t.Fatalf("AllowN canceled during its grant = %+v, %v; want the canceled denial", got.d, got.err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("AllowN did not return when its ctx was canceled")
	}
	close(h.release)
	r.waitFlight()
	charged := r.redis()
	if charged >= 942 {
		t.Fatalf("after the grant: Redis Remaining = %d, want the lease charged", charged)
	}
	r.allow(1, true)
	r.wantRedis(charged, "an admission from the lease the canceled caller's grant installed")
	if err := r.l.ReleaseLeases(bg()); err != nil {
		t.Fatal(err)
	}
	r.wantRedis(941, "after ReleaseLeases: only the 59 admitted charged")
}

// failLeases makes every lease script's reply an error from now on.
type failLeases struct{ hash string }

func (h failLeases) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h failLeases) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		return h.fail([]redis.Cmder{cmd}, err)
	}
}

func (h failLeases) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		return h.fail(cmds, err)
	}
}

func (h failLeases) fail(cmds []redis.Cmder, err error) error {
	for _, c := range cmds {
		if a := c.Args(); len(a) > 1 && a[0] == "evalsha" && a[1] == h.hash {
			c.SetErr(errors.New("injected lease failure"))
			err = c.Err()
		}
	}
	return err
}

// TestLeaseSweepBounded: the sweep a grant runs gives back at most one
// ended lease per caller, none after a failed grant, and none when the
// caller's ctx is done or its deadline is nearer than the limiter's
// timeout (give-backs run on the caller's path).
func TestLeaseSweepBounded(t *testing.T) {
	t.Parallel()
	// setup leaves three keys each holding an ended lease with 28
	// unused events (Redis Remaining 942 each; 970 once given back).
	setup := func(t *testing.T, opts ...Option) *leaseRig {
		opts = append(opts, WithTimeout(5*time.Second))
		r := newLeaseRig(t, holdPolicy, LeaseConfig{MaxShare: 10}, opts...)
		for _, k := range []string{"a", "b", "c"} {
			kr := *r
			kr.key = k
			kr.heat(29)
		}
		r.mock.Add(60 * time.Millisecond)
		for range 29 {
			r.allow(1, true) // "hot" is cold so far: no grant, no sweep
		}
		r.mock.Add(10 * time.Millisecond)
		return r
	}
	given := func(r *leaseRig) int {
		count := 0
		for _, k := range []string{"a", "b", "c"} {
			kr := *r
			kr.key = k
			switch got := kr.redis(); got {
			case 970:
				count++
			case 942:
			default:
				r.t.Fatalf("key %s: Redis Remaining = %d, want 942 or 970", k, got)
			}
		}
		return count
	}
	t.Run("one per caller", func(t *testing.T) {
		t.Parallel()
		r := setup(t)
		r.allow(1, true) // the grant, then the sweep
		if got := given(r); got != 1 {
			t.Fatalf("one grant's sweep gave back %d ended leases, want 1", got)
		}
	})
	t.Run("deadline near", func(t *testing.T) {
		t.Parallel()
		r := setup(t)
		ctx, cancel := context.WithTimeout(bg(), time.Second) // < the 5s timeout
		defer cancel()
		if d, err := r.l.AllowN(ctx, r.key, 1); err != nil || !d.Allowed {
			t.Fatalf("AllowN = %+v, %v", d, err)
		}
		if got := given(r); got != 0 {
			t.Fatalf("a caller whose deadline is nearer than the timeout: its sweep gave back %d leases, want 0", got)
		}
	})
	t.Run("failed grant", func(t *testing.T) {
		t.Parallel()
		// No breaker: the failure must not stop the give-backs by itself.
		r := setup(t, WithBreaker(0), WithLogger(nil))
		g := r.l.acquire()
		r.c.AddHook(failLeases{hash: g.leaseScript.Hash()})
		g.release()
		if _, err := r.l.AllowN(bg(), r.key, 1); err == nil {
			t.Fatal("AllowN with the lease script failing: no error")
		}
		if got := given(r); got != 0 {
			t.Fatalf("after a failed grant the sweep gave back %d leases, want 0", got)
		}
	})
}

// TestReleaseLeasesNilContext: ReleaseLeases(nil) is the same error with
// leases on and off.
func TestReleaseLeasesNilContext(t *testing.T) {
	t.Parallel()
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1"}) // never dialled
	t.Cleanup(func() { _ = c.Close() })
	p := ratelimit.FixedWindowPolicy(100, time.Second)
	for _, opts := range [][]Option{nil, {WithLeases(LeaseConfig{})}} {
		l := mustNew(t, c, p, opts...)
		//lint:ignore SA1012 a nil ctx is what is tested
		if err := l.ReleaseLeases(nil); !errors.Is(err, errNilContext) { //nolint:staticcheck
			t.Fatalf("ReleaseLeases(nil) with %d options = %v, want %v", len(opts), err, errNilContext)
		}
	}
}

// TestLeaseColdKeysLeaveRoom: keys decided once (cold) do not take the
// table's entries, so a key that turns hot still gets leases.
func TestLeaseColdKeysLeaveRoom(t *testing.T) {
	t.Parallel()
	r := newLeaseRig(t, holdPolicy, LeaseConfig{MaxKeys: 2, MaxShare: 10})
	for i := range 50 {
		kr := *r
		kr.key = "cold" + string(rune('A'+i))
		kr.allow(1, true)
		r.mock.Add(10 * time.Millisecond) // a Target apart
	}
	r.heat(29)
	r.wantRedis(1000-29-29, "the hot key's first lease")
}

// TestLeaseColdGiveBackDeadline: a key gone cold gives its ended lease
// back on its next decision, but not on the path of a caller whose
// deadline is nearer than the limiter's timeout: the lease then waits
// for a later decision.
func TestLeaseColdGiveBackDeadline(t *testing.T) {
	t.Parallel()
	r := newLeaseRig(t, holdPolicy, LeaseConfig{MaxShare: 10}, WithTimeout(5*time.Second))
	r.heat(29) // a lease of 29, 28 left
	r.mock.Add(60 * time.Millisecond)
	ctx, cancel := context.WithTimeout(bg(), time.Second)
	defer cancel()
	if d, err := r.l.AllowN(ctx, r.key, 1); err != nil || !d.Allowed {
		t.Fatalf("AllowN = %+v, %v", d, err)
	}
	r.wantRedis(941, "cold, deadline near: exact, the lease kept")
	r.allow(1, true)
	r.wantRedis(941+28-1, "cold: exact, the lease given back")
}
