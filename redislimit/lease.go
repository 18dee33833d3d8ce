package redislimit

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
)

// The defaults of [LeaseConfig]'s fields.
const (
	defaultLeaseTarget   = 10 * time.Millisecond
	defaultLeaseLifetime = 50 * time.Millisecond
	defaultLeaseKeys     = 10000
	defaultLeaseShare    = 16 // a lease holds at most a sixteenth of the limit
)

// maxLeaseLifetime bounds [LeaseConfig.Lifetime]: a lease must be short.
const maxLeaseLifetime = time.Second

// LeaseConfig configures lease mode ([WithLeases]). The zero value takes
// every default.
type LeaseConfig struct {
	// Target is the traffic a lease should cover: a hot key's lease is its
	// observed rate (events asked per second, admitted or not) times
	// Target, at least the n asked and at most Limit/MaxShare. A key gets
	// leases once that product reaches 2 events; below, each decision is
	// one script as without leases. 0 means 10ms; it must not exceed
	// Lifetime.
	Target time.Duration
	// Lifetime is the longest a lease is used, counted from the moment
	// its grant was sent to Redis: at most 1s, 0 means 50ms. A lease of a windowed policy (fixed window,
	// sliding counter, quota) also ends with the window it was charged in.
	Lifetime time.Duration
	// MaxKeys bounds the keys whose rate and lease the Limiter tracks
	// (about 250 bytes each, plus the key): a key is tracked from its
	// second decision within Target; keys beyond MaxKeys are decided one
	// script per decision. 0 means 10000.
	MaxKeys int
	// MaxShare caps a lease at Limit/MaxShare events (at least 1, and
	// never less than the n asked): with P processes leasing one key, at
	// most P*Limit/MaxShare events are parked in leases. 0 means 16.
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
	return named("WithLeases", func(c *config) { c.leases = &cfg })
}

// newTable returns a table of leases sized by cfg for policy p.
func (cfg *LeaseConfig) newTable(p ratelimit.Policy) *leaseTable {
	return newLeaseTable(cfg.Target, cfg.Lifetime, cfg.MaxKeys, max(1, p.Limit/cfg.MaxShare))
}

// checkLeases fills in cfg's defaults and validates it.
func checkLeases(cfg *LeaseConfig) error {
	if cfg.Target == 0 {
		cfg.Target = defaultLeaseTarget
	}
	if cfg.Lifetime == 0 {
		cfg.Lifetime = defaultLeaseLifetime
	}
	if cfg.MaxKeys == 0 {
		cfg.MaxKeys = defaultLeaseKeys
	}
	if cfg.MaxShare == 0 {
		cfg.MaxShare = defaultLeaseShare
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

// allowLeased is allowN for a limiter with leases; n is valid and ctx is
// not done.
func (l *Limiter) allowLeased(ctx context.Context, g *generation, key string, n int) (ratelimit.Decision, error) {
	t := g.leases
	seen := l.ts.Now()
	e, full := t.get(key, seen)
	if e == nil {
		if full {
			l.makeRoom(ctx, g, seen)
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
			e.note(now, n, t.target)
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
		l.sweep(ctx, g, l.ts.Now(), 4)
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
	life := int64(g.leases.lifetime)
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

// sweep runs the table's sweep over up to count entries (see
// sweepTable) and gives back the unused events of up to sweepBacks leases
// that have ended (none when the caller cannot afford it: mayGiveBack).
// Every successful grant runs it, so cold keys do not park quota while
// the process keeps deciding; a process that stops deciding altogether
// should call ReleaseLeases.
func (l *Limiter) sweep(ctx context.Context, g *generation, now int64, count int) {
	room := 0
	if l.mayGiveBack(ctx) {
		room = sweepBacks
	}
	for _, b := range g.leases.sweepTable(now, count, room) {
		l.giveBackKey(ctx, g, b.e, b.ls)
	}
}

// makeRoom sweeps the full table when it is due (roomDue), so that idle
// keys leave room for new ones.
func (l *Limiter) makeRoom(ctx context.Context, g *generation, now int64) {
	if g.leases.roomDue(now) {
		l.sweep(ctx, g, now, 16)
	}
}

// releaseLeases takes every lease of g's table and gives back its unused
// events, up to 16 at a time.
func (l *Limiter) releaseLeases(ctx context.Context, g *generation) error {
	backs := g.leases.takeAll()
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
	return l.releaseLeases(ctx, g)
}
