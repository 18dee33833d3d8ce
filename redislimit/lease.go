package redislimit

import (
	"context"
	"errors"
	"hash/maphash"
	"math"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
)

// Lease defaults: see [LeaseConfig].
const (
	// DefaultLeaseTarget is the traffic a lease covers unless
	// [LeaseConfig.Target] says otherwise.
	DefaultLeaseTarget = 10 * time.Millisecond
	// DefaultLeaseLifetime is the longest a lease is used unless
	// [LeaseConfig.Lifetime] says otherwise.
	DefaultLeaseLifetime = 50 * time.Millisecond
	// DefaultLeaseKeys is the number of keys whose rate and lease a
	// Limiter tracks unless [LeaseConfig.MaxKeys] says otherwise.
	DefaultLeaseKeys = 10000
	// DefaultLeaseShare is [LeaseConfig.MaxShare] unless it says otherwise:
	// a lease holds at most a sixteenth of the policy's limit.
	DefaultLeaseShare = 16
)

// maxLeaseLifetime bounds [LeaseConfig.Lifetime]: a lease must be short.
const maxLeaseLifetime = time.Second

// minLease is the smallest lease worth taking: a key whose observed rate
// times Target is below it is cold and decided one script per decision.
const minLease = 2

// LeaseConfig configures lease mode ([WithLeases]). The zero value takes
// every default.
type LeaseConfig struct {
	// Target is the traffic a lease should cover: a hot key's lease is its
	// observed rate (events asked per second, admitted or not) times
	// Target, at least the n asked and at most Limit/MaxShare. A key gets
	// leases once that product reaches 2 events; below, each decision is
	// one script as without leases. 0 means [DefaultLeaseTarget]; it must
	// not exceed Lifetime.
	Target time.Duration
	// Lifetime is the longest a lease is used, counted from the moment
	// its grant was sent to Redis: at most 1s, 0 means
	// [DefaultLeaseLifetime]. A lease of a windowed policy (fixed window,
	// sliding counter, quota) also ends with the window it was charged in.
	Lifetime time.Duration
	// MaxKeys bounds the keys whose rate and lease the Limiter tracks
	// (about 250 bytes each, plus the key): a key is tracked from its
	// second decision within Target; keys beyond MaxKeys are decided one
	// script per decision. 0 means [DefaultLeaseKeys].
	MaxKeys int
	// MaxShare caps a lease at Limit/MaxShare events (at least 1, and
	// never less than the n asked): with P processes leasing one key, at
	// most P*Limit/MaxShare events are parked in leases. 0 means
	// [DefaultLeaseShare].
	MaxShare int
}

// WithLeases turns lease mode on (see docs/redis.md,
// "Leases"): a hot key's decisions are served in memory from a share of
// its quota that one script took from Redis, pre-charged there exactly as
// an AllowN of that share would be, so that nothing is admitted that
// Redis did not grant. Unused events are given back when the lease ends.
// Cold keys keep one script per decision.
//
// The price is coarser Decisions (Remaining, ResetAfter) and quota parked
// in the leases of other processes (under-admission), bounded per
// algorithm in docs/redis.md ("Leases"). New returns an error wrapping
// [ratelimit.ErrInvalidConfig] for a sliding log policy, which cannot be
// leased exactly, and for invalid cfg fields (the error names the field).
// Call [Limiter.ReleaseLeases] at shutdown to give back what is held.
func WithLeases(cfg LeaseConfig) Option {
	return optionFunc(func(c *config) { c.leases = &cfg })
}

// checkLeases fills in cfg's defaults and validates it.
func checkLeases(cfg *LeaseConfig) error {
	if cfg.Target == 0 {
		cfg.Target = DefaultLeaseTarget
	}
	if cfg.Lifetime == 0 {
		cfg.Lifetime = DefaultLeaseLifetime
	}
	if cfg.MaxKeys == 0 {
		cfg.MaxKeys = DefaultLeaseKeys
	}
	if cfg.MaxShare == 0 {
		cfg.MaxShare = DefaultLeaseShare
	}
	switch {
	case cfg.Target < 0:
		return invalid("WithLeases: LeaseConfig.Target must be positive, got %v", cfg.Target)
	case cfg.Lifetime < 0 || cfg.Lifetime > maxLeaseLifetime:
		return invalid("WithLeases: LeaseConfig.Lifetime must be positive and at most %v, got %v", maxLeaseLifetime, cfg.Lifetime)
	case cfg.Target > cfg.Lifetime:
		return invalid("WithLeases: LeaseConfig.Target (%v) must not exceed LeaseConfig.Lifetime (%v)", cfg.Target, cfg.Lifetime)
	case cfg.MaxKeys < 0:
		return invalid("WithLeases: LeaseConfig.MaxKeys must not be negative, got %d", cfg.MaxKeys)
	case cfg.MaxShare < 0:
		return invalid("WithLeases: LeaseConfig.MaxShare must not be negative, got %d", cfg.MaxShare)
	}
	return nil
}

// checkLeasable refuses a policy that cannot be leased exactly.
func checkLeasable(p ratelimit.Policy, op string) error {
	if p.Algorithm == ratelimit.SlidingLogAlgorithm {
		// The log stamps a grant's events with the grant's time, so they
		// would leave it up to Lifetime before a window has passed since
		// they really happened: another grant could then put more than
		// Limit events in one true window, which the sliding log promises
		// never to do.
		return invalid("%s: WithLeases cannot lease a sliding log: its events would be stamped with the lease's grant time and leave the log up to LeaseConfig.Lifetime early, breaking its exact window; use a sliding counter or run it without leases", op)
	}
	return nil
}

// leaseTable is a generation's leases and the rates they are sized by,
// one leaseKey per tracked key. A new generation (SetPolicy) starts a new
// table, so that no lease granted under the old policy admits under the
// new one.
type leaseTable struct {
	cfg   LeaseConfig
	limit int // the lease cap: max(1, Limit/MaxShare)
	keys  sync.Map
	size  atomic.Int64 // entries in keys
	swept atomic.Int64 // local ns of the last sweep made for want of room

	// mu guards ring and cursor: the entries in a slice that the sweep
	// walks a few at a time.
	mu     sync.Mutex
	ring   []*leaseKey
	cursor int

	// door is the doorkeeper: a key gets an entry only on its second
	// event within Target, so that keys decided once do not fill the
	// table. Each slot holds the local ns at which a key hashed to it
	// was first seen (0: never). Two keys sharing a slot may let one in
	// early: an entry too many, as before the doorkeeper, never a lease
	// that is not charged.
	door [leaseDoor]atomic.Int64
	seed maphash.Seed
}

// leaseDoor is the doorkeeper's size, a power of 2 (8 KiB a table).
const leaseDoor = 1024

func newLeaseTable(cfg LeaseConfig, p ratelimit.Policy) *leaseTable {
	return &leaseTable{cfg: cfg, limit: max(1, p.Limit/cfg.MaxShare), seed: maphash.MakeSeed()}
}

// leaseKey is what one process knows of one key: its rate and its lease.
type leaseKey struct {
	key string

	// ring is the entry's index in leaseTable.ring, guarded by
	// leaseTable.mu (not by mu).
	ring int

	// mu guards everything below.
	mu   sync.Mutex
	dead bool // removed from the table: look the key up again

	// The rate: asked events since since (local ns), and the lease size
	// they call for, the smoothed events per Target (0: cold).
	since int64
	asked int64
	want  float64
	used  int64 // local ns of the last decision

	lease  lease
	flight *leaseFlight // the grant in flight, nil: none

	// epoch is bumped by dropLease (an admin call changed the key's state
	// in Redis): a grant sent before installs no lease when its reply
	// comes after, so its events are neither admitted nor given back.
	epoch uint64
	// fence counts the admin calls in progress on the key: meanwhile its
	// decisions are exact and nothing is granted or given back.
	fence int
	// busy counts the key's grant and give-backs in flight; quiet is
	// closed when it drops to 0 (admin calls wait for it, so that no
	// give-back lands on the state they leave).
	busy  int
	quiet chan struct{}
}

// begin counts a grant or give-back of e in flight. Requires e.mu held.
func (e *leaseKey) begin() {
	if e.busy == 0 {
		e.quiet = make(chan struct{})
	}
	e.busy++
}

// end ends what begin counted.
func (e *leaseKey) end() {
	e.mu.Lock()
	e.busy--
	if e.busy == 0 {
		close(e.quiet)
		e.quiet = nil
	}
	e.mu.Unlock()
}

// lease is a grant in use.
type lease struct {
	left      int   // events not yet admitted
	expires   int64 // local ns: not used from then on
	at        int64 // the grant's time on Redis's clock, µs: the give-back's time
	remaining int   // Redis's Remaining after the grant
	resetAt   int64 // local ns at which Redis's ResetAfter at the grant ends
}

// leaseFlight is a grant in flight; the others asking for the key wait
// for it and then use its lease, or share its denial.
type leaseFlight struct {
	done   chan struct{}
	n      int
	d      ratelimit.Decision // the asker's Decision: the denial of n, when denied
	at     int64              // the script's time on Redis's clock, Unix ns
	denied bool
	err    error
	// owner is the asker's claim on its n events of the lease: 0 until
	// either side moves, ownerGone when the asker's ctx ended first (the
	// n go back into the lease), ownerServed when the lease was
	// installed with the n taken.
	owner atomic.Int32
}

const (
	ownerGone int32 = 1 + iota
	ownerServed
)

// get returns the entry of key, making one when there is room and the
// key was seen within Target before (the doorkeeper); nil, with full
// when the table has no room, otherwise.
func (t *leaseTable) get(key string, now int64) (e *leaseKey, full bool) {
	if v, ok := t.keys.Load(key); ok {
		return v.(*leaseKey), false
	}
	if t.size.Load() >= int64(t.cfg.MaxKeys) {
		return nil, true
	}
	slot := &t.door[maphash.String(t.seed, key)&(leaseDoor-1)]
	first := slot.Load()
	if first == 0 || now-first >= int64(t.cfg.Target) || now < first {
		slot.Store(now)
		return nil, false
	}
	// The rate counts the event the doorkeeper saw (as one event).
	e, full = t.add(&leaseKey{key: key, since: first, used: now, asked: 1})
	return e, full
}

// add puts e in the table unless its key is there (then it returns that
// entry) or the table is full.
func (t *leaseTable) add(e *leaseKey) (*leaseKey, bool) {
	key := e.key
	t.mu.Lock()
	defer t.mu.Unlock()
	if v, ok := t.keys.Load(key); ok {
		return v.(*leaseKey), false
	}
	if t.size.Load() >= int64(t.cfg.MaxKeys) {
		return nil, true
	}
	e.ring = len(t.ring)
	t.ring = append(t.ring, e)
	t.keys.Store(key, e)
	t.size.Add(1)
	return e, false
}

// note counts n events asked at now and, once per Target, updates the
// lease size they call for. Requires e.mu held.
func (e *leaseKey) note(now int64, n int, target time.Duration) {
	e.used = now
	el := now - e.since
	if el < int64(target) {
		e.asked += int64(n)
		return
	}
	// The events asked in [since, now): one per Target is a rate of one
	// per Target, not two.
	m := float64(e.asked) * float64(target) / float64(el)
	if e.want > 0 && el < 2*int64(target) {
		// Smoothed over consecutive measurements; after a pause the
		// rate is what the pause says, so that a key that went quiet
		// gets no lease sized by its old traffic.
		m = (m + e.want) / 2
	}
	e.want = m
	e.since, e.asked = now, int64(n)
}

// size returns the lease to ask for n events, 0 when the key is cold.
// Requires e.mu held.
func (e *leaseKey) size(n, capped int) int {
	if e.want < minLease {
		return 0
	}
	k := capped
	if e.want < float64(capped) {
		k = int(math.Ceil(e.want))
	}
	return max(k, n)
}

// drop forgets e's lease without giving it back and bumps e's epoch, so
// that a grant in flight installs no lease either: the key's state in
// Redis changed under it. Requires e.mu held.
func (e *leaseKey) drop() {
	e.epoch++
	e.lease = lease{}
}

// take removes the unused part of e's lease and returns it. Requires e.mu
// held.
func (e *leaseKey) take() lease {
	back := e.lease
	e.lease = lease{}
	return back
}

// decision is the Decision of an admission from e's lease at now.
// Requires e.mu held.
func (e *leaseKey) decision(limit int, now int64) ratelimit.Decision {
	return ratelimit.Decision{
		Allowed:    true,
		Limit:      limit,
		Remaining:  e.lease.left + e.lease.remaining,
		ResetAfter: time.Duration(max(e.lease.resetAt-now, 0)),
	}
}

// allowLeased is allowN for a limiter with leases; n is valid and ctx is
// not done.
func (l *Limiter) allowLeased(ctx context.Context, g *generation, key string, n int) (ratelimit.Decision, error) {
	t := g.leases
	seen := l.ts.Now()
	e, full := t.get(key, seen)
	if e == nil {
		if full {
			t.makeRoom(ctx, l, g, seen)
		}
		return l.allowExact(ctx, g, key, n)
	}
	var waited *leaseFlight
	for {
		e.mu.Lock()
		if e.dead {
			e.mu.Unlock()
			if e, _ = t.get(key, l.ts.Now()); e == nil {
				return l.allowExact(ctx, g, key, n)
			}
			continue
		}
		// Read under the lock, so that a lease installed meanwhile was
		// granted before now.
		now := l.ts.Now()
		if waited == nil {
			e.note(now, n, t.cfg.Target)
		}
		if e.fence > 0 {
			// An admin call is changing the key's state in Redis.
			e.mu.Unlock()
			return l.allowExact(ctx, g, key, n)
		}
		if e.lease.left >= n && now < e.lease.expires {
			e.lease.left -= n
			d := e.decision(g.policy.Limit, now)
			e.mu.Unlock()
			if l.decideHook != nil {
				l.decideHook(d, now, now)
			}
			return d, nil
		}
		if f := e.flight; f != nil {
			e.mu.Unlock()
			select {
			case <-f.done:
			case <-ctx.Done():
				return l.canceled(ctx)
			}
			switch {
			case f.err != nil:
				return l.failed(ctx, g, key, n, f.err)
			case f.denied && f.n == n:
				if l.decideHook != nil {
					l.decideHook(f.d, f.at, f.at)
				}
				return f.d, nil
			}
			waited = f
			continue
		}
		k := e.size(n, t.limit)
		var cached ratelimit.Decision
		hit := false
		if k > 0 && g.cache != nil {
			cached, _, hit = g.cache.get(g.cache.hash(key), key, n, now, g.policy.Limit)
		}
		if k == 0 || hit {
			// Cold (one script per decision, as without leases) or a
			// remembered denial: the lease, ended or too short, is given
			// back on its own when the caller can afford the round trip;
			// otherwise it stays for a later decision, a sweep or
			// ReleaseLeases.
			var back lease
			if e.lease.left > 0 && l.mayGiveBack(ctx) {
				back = e.take()
				e.begin()
			}
			e.mu.Unlock()
			if back.left > 0 {
				l.giveBackKey(ctx, g, e, back)
			}
			if hit {
				if l.decideHook != nil {
					l.decideHook(cached, now, now)
				}
				return cached, nil
			}
			return l.allowExact(ctx, g, key, n)
		}
		back := e.take()
		f := &leaseFlight{done: make(chan struct{}), n: n}
		e.flight = f
		e.begin()
		epoch := e.epoch
		e.mu.Unlock()

		// The grant does not depend on ctx (bounded by the limiter's
		// timeout, as a give-back): a caller that stops waiting must not
		// lose the lease, nor the previous lease's events it gives back.
		// The flight counts as a use of g (SetPolicy waits for it) even
		// when the caller has gone.
		g.inflight.Add(1)
		go l.fly(context.WithoutCancel(ctx), g, e, f, k, back, epoch)
		select {
		case <-f.done:
		case <-ctx.Done():
			if f.owner.CompareAndSwap(0, ownerGone) {
				return l.canceled(ctx)
			}
			<-f.done // served meanwhile: the n are the caller's
		}
		if f.err != nil {
			// No sweep: Redis is failing, and the caller has waited.
			return l.failed(ctx, g, key, n, f.err)
		}
		t.sweep(ctx, l, g, l.ts.Now(), 4)
		if l.decideHook != nil {
			l.decideHook(f.d, f.at, f.at)
		}
		return f.d, nil
	}
}

// fly runs the grant of f for e, and installs its lease when it is
// granted and no admin call dropped the key's lease since the flight
// began (epoch). The asker's n stay in the lease if it stopped waiting.
func (l *Limiter) fly(ctx context.Context, g *generation, e *leaseKey, f *leaseFlight, k int, back lease, epoch uint64) {
	defer g.release()
	defer close(f.done)
	var ls lease
	var err error
	defer func() {
		e.mu.Lock()
		if err == nil && f.d.Allowed && e.epoch == epoch {
			if !f.owner.CompareAndSwap(0, ownerServed) {
				ls.left += f.n // the asker is gone: its events stay leased
			}
			e.lease = ls
		}
		e.flight = nil
		e.mu.Unlock()
		e.end()
	}()
	f.d, ls, f.at, err = l.grant(ctx, g, e.key, k, f.n, back)
	f.denied, f.err = err == nil && !f.d.Allowed, err
}

// giveBackKey is giveBack of e's lease back, which begin counted.
func (l *Limiter) giveBackKey(ctx context.Context, g *generation, e *leaseKey, back lease) {
	defer e.end()
	l.giveBack(ctx, g, e.key, back)
}

// allowExact is allowN's one script per decision.
func (l *Limiter) allowExact(ctx context.Context, g *generation, key string, n int) (ratelimit.Decision, error) {
	var sent int64
	if l.decideHook != nil {
		sent = l.ts.Now()
	}
	now, local := l.times(g)
	var d ratelimit.Decision
	var err error
	if g.cache != nil {
		d, err = l.allowCached(ctx, g, key, n, now, local)
	} else if d, err = l.decide(ctx, g, key, now, n, commit); err != nil {
		return l.failed(ctx, g, key, n, err)
	}
	if err == nil && l.decideHook != nil {
		l.decideHook(d, sent, l.ts.Now())
	}
	return d, err
}

// grant asks Redis for a lease of k events, of which the caller takes n
// at once: one decision script in lease mode, which charges k as an
// AllowN of k would, or when k does not fit what remains if that covers
// n, or else answers the exact denial of n. The same script first gives
// back the unused events of the key's previous lease, back, as giveBack
// would. It returns the caller's Decision, the lease (the rest), and the
// script's time on Redis's clock in Unix ns, of a denial too (for the
// decision hook).
func (l *Limiter) grant(ctx context.Context, g *generation, key string, k, n int, back lease) (ratelimit.Decision, lease, int64, error) {
	sent := l.ts.Now()
	sent -= sent % 1000 // the script's microsecond, and never later than its now
	var now any = ""
	if l.clientTime {
		now = sent / 1000
	}
	args := g.args(l, now, k, commitMode("l"+strconv.Itoa(n)))
	args = append(args, back.at, back.left)
	var h, gen uint64
	if g.cache != nil {
		// The deny cache's generation before the request: a denial that
		// may predate an admission or refund since is not remembered.
		h = g.cache.hash(key)
		gen = g.cache.gen(h).Load()
	}
	var v []int64
	ack := l.wire.Acks()
	err := l.runCall(ctx, g, g.leaseScript, g.keys(l, key), args, ack, func(cmd *redis.Cmd) (err error) {
		v, err = cmd.Int64Slice()
		return err
	})
	if err != nil {
		var nr *notReplicatedError
		if !errors.As(err, &nr) || len(v) != 7 || v[0] == 1 {
			// A grant that was not replicated stays charged but unused:
			// an under-admission, as a lost reply.
			return ratelimit.Decision{}, lease{}, 0, err
		}
		// A denial wrote nothing: it stands, replicated or not.
	}
	if len(v) != 7 {
		return ratelimit.Decision{}, lease{}, 0, &scriptError{values: len(v)}
	}
	if back.left > 0 && l.giveBackHook != nil {
		l.giveBackHook(back.left, back.at*1000, v[5]*1000, v[5]*1000, nil)
	}
	limit := g.policy.Limit
	if v[0] != 1 {
		d := ratelimit.Decision{
			Limit:      limit,
			Remaining:  int(v[1]),
			RetryAfter: time.Duration(v[2]) * time.Microsecond,
			ResetAfter: time.Duration(v[3]) * time.Microsecond,
		}
		if g.cache != nil && v[0] == 0 && d.Remaining == 0 && l.ordered(sent) {
			g.cache.put(h, key, n, sent, g.cacheSpan(n, d), gen, d)
		}
		return d, lease{}, v[5] * 1000, nil
	}
	if g.cache != nil {
		g.cache.invalidate(h, key)
	}
	granted, at := int(v[4]), v[5]
	life := int64(g.leases.cfg.Lifetime)
	if v[6] >= 0 {
		// A windowed policy: the lease ends with the window it was
		// charged in. sent is not later than the script's now, so
		// sent + (end - now) is not later than the window's end.
		life = min(life, (v[6]-at)*1000)
	}
	reset := time.Duration(v[3]) * time.Microsecond
	ls := lease{
		left:      granted - n,
		expires:   sent + life,
		at:        at,
		remaining: int(v[1]),
		resetAt:   sent + int64(reset),
	}
	d := ratelimit.Decision{Allowed: true, Limit: limit, Remaining: ls.left + ls.remaining, ResetAfter: reset}
	return d, ls, at * 1000, nil
}

// giveBack returns a lease's unused events to Redis, when no grant follows
// (a grant gives back the previous lease itself). A windowed policy runs
// its refund script at the grant's time (on Redis's clock), so that it
// takes them back only from the window that was charged (once another
// window has begun they are gone, and must not be taken from the new
// one). A bucket runs it at Redis's current time in give-back mode
// ('g<at>'): it gives back only what refill since the grant has not
// cancelled, max(0, unused - refill x (now - at)), since the bucket may
// have been full meanwhile and later states must not lose what the lease
// no longer holds down (lua/prelude.lua, giveBackAt). The refund does not
// depend on ctx; a failure leaves the events charged (an
// under-admission).
func (l *Limiter) giveBack(ctx context.Context, g *generation, key string, back lease) {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx = context.WithoutCancel(ctx)
	var args []any
	switch g.policy.Algorithm {
	case ratelimit.TokenBucketAlgorithm, ratelimit.LeakyBucketAlgorithm:
		args = g.args(l, l.nowArg(), back.left, commitMode("g"+strconv.FormatInt(back.at, 10)))
	default:
		args = g.args(l, back.at, back.left, refund)
	}
	var sent int64
	if l.giveBackHook != nil {
		sent = l.ts.Now()
	}
	err := l.run(ctx, g, g.refundScript, g.keys(l, key), args, (*redis.Cmd).Err)
	if l.giveBackHook != nil {
		l.giveBackHook(back.left, back.at*1000, sent, l.ts.Now(), err)
	}
	if g.cache != nil {
		g.cache.invalidate(g.cache.hash(key), key)
	}
}

// leaseIdle is how long a key goes without a decision before the sweep
// forgets its rate (its lease has ended long before).
func (t *leaseTable) leaseIdle() int64 { return int64(max(10*t.cfg.Lifetime, time.Second)) }

// sweepBacks bounds the give-backs one sweep makes: they run on the
// caller's path (one round trip each, up to the limiter's timeout when
// Redis is slow). A background worker would take them off that path, but
// would need a lifecycle (a Close) that the Limiter does not have.
const sweepBacks = 1

// mayGiveBack reports whether a caller with ctx can afford a give-back on
// its path: its ctx is not done and its deadline, if any, is not nearer
// than the limiter's timeout.
func (l *Limiter) mayGiveBack(ctx context.Context) bool {
	if ctx.Err() != nil {
		return false
	}
	dl, ok := ctx.Deadline()
	return !ok || time.Until(dl) >= l.timeout
}

// sweep visits up to count entries from where the last sweep stopped:
// it gives back the unused events of up to sweepBacks leases that have
// ended (none when the caller cannot afford it: mayGiveBack), and forgets
// keys that have been idle for leaseIdle. Every successful grant runs it,
// so cold keys do not park quota while the process keeps deciding; a
// process that stops deciding altogether should call ReleaseLeases.
func (t *leaseTable) sweep(ctx context.Context, l *Limiter, g *generation, now int64, count int) {
	var backs []*leaseKey
	var leases []lease
	room := 0
	if l.mayGiveBack(ctx) {
		room = sweepBacks
	}
	t.mu.Lock()
	for i := 0; i < count && len(t.ring) > 0; i++ {
		if t.cursor >= len(t.ring) {
			t.cursor = 0
		}
		e := t.ring[t.cursor]
		e.mu.Lock()
		if len(backs) < room && e.flight == nil && e.lease.left > 0 && now >= e.lease.expires {
			backs = append(backs, e)
			leases = append(leases, e.take())
			e.begin()
		}
		if e.flight == nil && e.busy == 0 && e.fence == 0 && e.lease.left == 0 && now-e.used >= t.leaseIdle() {
			e.dead = true
			t.keys.Delete(e.key)
			last := t.ring[len(t.ring)-1]
			t.ring[t.cursor], last.ring = last, t.cursor
			t.ring[len(t.ring)-1] = nil
			t.ring = t.ring[:len(t.ring)-1]
			t.size.Add(-1)
			e.mu.Unlock()
			continue
		}
		e.mu.Unlock()
		t.cursor++
	}
	t.mu.Unlock()
	for i, e := range backs {
		l.giveBackKey(ctx, g, e, leases[i])
	}
}

// makeRoom sweeps the full table, at most once a millisecond, so that
// idle keys leave room for new ones even when no key takes leases (and so
// no grant sweeps).
func (t *leaseTable) makeRoom(ctx context.Context, l *Limiter, g *generation, now int64) {
	last := t.swept.Load()
	if now-last < int64(time.Millisecond) || !t.swept.CompareAndSwap(last, now) {
		return
	}
	t.sweep(ctx, l, g, now, 16)
}

// release takes every lease of the table and gives back its unused
// events, up to 16 at a time.
func (t *leaseTable) release(ctx context.Context, l *Limiter, g *generation) error {
	t.mu.Lock()
	type back struct {
		e  *leaseKey
		ls lease
	}
	var backs []back
	for _, e := range t.ring {
		e.mu.Lock()
		if e.lease.left > 0 {
			backs = append(backs, back{e, e.take()})
			e.begin()
		}
		e.mu.Unlock()
	}
	t.mu.Unlock()
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i, b := range backs {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			wg.Wait()
			for _, b := range backs[i:] {
				b.e.end() // not given back: charged until they expire
			}
			return ctx.Err()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			l.giveBackKey(ctx, g, b.e, b.ls)
		}()
	}
	wg.Wait()
	return nil
}

// ReleaseLeases gives back to Redis the unused events of every lease this
// Limiter holds ([WithLeases]), so that other processes may admit them;
// call it at shutdown, after the last decision. The Limiter stays usable:
// a later decision on a hot key takes a new lease. Each give-back is one
// refund script bounded by the limiter's timeout and does not depend on
// ctx; ctx only stops ReleaseLeases from starting more of them (it then
// returns ctx.Err(), and the leases not given back stay charged until
// their window ends or their bucket refills). A Limiter without leases
// has nothing to give back. A nil ctx is an error, with leases or not.
func (l *Limiter) ReleaseLeases(ctx context.Context) error {
	if ctx == nil {
		return errNilContext
	}
	g := l.acquire()
	defer g.release()
	if g.leases == nil {
		return nil
	}
	return g.leases.release(ctx, l, g)
}

// dropLease forgets key's lease without giving it back: an admin call
// (Reset, Block, Penalize) changed the key's state in Redis, and the lease
// must not admit on top of it. It bumps the key's epoch, so that a grant
// in flight installs no lease either.
func (t *leaseTable) dropLease(key string) {
	if v, ok := t.keys.Load(key); ok {
		e := v.(*leaseKey)
		e.mu.Lock()
		e.drop()
		e.mu.Unlock()
	}
}

// fence prepares an admin call on key: it drops the key's lease, makes
// its decisions exact (no grant, no give-back) until unfence, and waits
// for the grant and give-backs of the key in flight in this process, so
// that none lands on the state the admin call leaves. When ctx ends
// first it returns ctx.Err() (already unfenced).
func (t *leaseTable) fence(ctx context.Context, key string) (unfence func(), err error) {
	v, ok := t.keys.Load(key)
	if !ok {
		return func() { t.dropLease(key) }, nil
	}
	e := v.(*leaseKey)
	e.mu.Lock()
	e.fence++
	e.drop()
	quiet := e.quiet
	e.mu.Unlock()
	unfence = func() {
		e.mu.Lock()
		e.fence--
		e.drop()
		e.mu.Unlock()
	}
	if quiet != nil {
		select {
		case <-quiet:
		case <-ctx.Done():
			unfence()
			return nil, ctx.Err()
		}
	}
	return unfence, nil
}
