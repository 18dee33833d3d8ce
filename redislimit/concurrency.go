package redislimit

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/permit"
	"github.com/rlkit/ratelimit/internal/report"
	"github.com/rlkit/ratelimit/internal/typednil"
	"github.com/rlkit/ratelimit/redislimit/internal/exec"
)

// The defaults and bounds of WithPermitExpiry.
const (
	defaultPermitExpiry = 10 * time.Second
	minPermitExpiry     = time.Second
	maxPermitExpiry     = time.Hour
)

// The concurrency scripts (lua/concurrency/), each after the prelude.
var (
	ccAcquireScript  = newScript(assemble(nil, "prelude", "concurrency/acquire"))
	ccReleaseScript  = newScript(assemble(nil, "prelude", "concurrency/release"))
	ccRenewScript    = newScript(assemble(nil, "prelude", "concurrency/renew"))
	ccInFlightScript = newScript(assemble(nil, "prelude", "concurrency/inflight"))
)

// errClosed is returned by the acquisitions of a closed Concurrency.
var errClosed = errors.New("ratelimit: redislimit.Concurrency is closed")

// Concurrency is a [ratelimit.ConcurrencyLimiter] on Redis: at most limit
// permits in flight per key, shared by every process that uses the same
// Redis, prefix and limit. Each acquisition is one script, each release
// one script; both run on the Redis server's clock, and each key's
// permits live in one Redis key (one Cluster slot).
//
// Permits held on Redis expire unless renewed ([WithPermitExpiry],
// default 10s): a process that dies frees its permits within the expiry.
// While it lives, the Concurrency renews every permit it holds in one
// pipeline per renewal period (a third of the expiry). A permit it could
// not renew in time is lost: its Lost channel closes one fifth of the
// expiry before Redis could give it to another holder, and at once when a
// renewal finds it gone (after [Concurrency.Reset], or an expiry while the
// process was stopped). A process that is stopped (or starved) past that
// moment learns it when it runs again: work that must never run without
// its permit checks Lost before each step that matters.
//
// When Redis cannot decide, the failure policy does ([WithFailurePolicy]):
// with [FailOpen] TryAcquire admits with a Permit that holds nothing on
// Redis (its Lost channel closes only at its Release) and an error
// wrapping [ErrUnavailable], and Acquire returns such a Permit and no
// error; with [FailClosed] both deny with that error.
//
// Decisions report to an [Observer] as the in-memory
// [ratelimit.Concurrency]'s do, with Home [ratelimit.HomeRedis]; each
// Release reports an Event with Outcome [ratelimit.OutcomeReleased].
//
// Create one with [NewConcurrency] and Close it when done. It is safe for
// concurrent use.
type Concurrency struct {
	client      redis.UniversalClient
	wire        *exec.Wire
	limit       int
	base        string // key names up to the hash tag: prefix + "cc:" + limit + ":{"
	plain       bool
	expiry      time.Duration
	margin      time.Duration
	timeout     time.Duration
	failure     FailurePolicy
	observer    ratelimit.Observer
	name        string
	logger      report.Logger
	reportEvery time.Duration
	reports     report.Throttle
	epoch       time.Time

	mu       sync.Mutex
	held     map[string]map[*ccHolder]struct{} // renewable holders, by Redis key; guarded by mu
	queues   map[string]*ccQueue               // Acquires waiting, by Redis key; guarded by mu
	renewing bool                              // the renewal goroutine runs; guarded by mu
	orphans  []ccOrphan                        // members to remove at the next round; guarded by mu
	closed   bool                              // guarded by mu
	stop     chan struct{}                     // closed by Close
	wg       sync.WaitGroup                    // the renewal goroutine
	// lostHook, set by tests only, is called (under mu) when a holder's
	// permit is lost, with the local time its Lost closed.
	lostHook func(h *ccHolder, at time.Time)
}

var _ ratelimit.ConcurrencyLimiter = (*Concurrency)(nil)

// ccHolder is the record behind one Permit of a Concurrency. Records are
// not reused: the Permit's generation is always 0.
type ccHolder struct {
	c        *Concurrency
	key      string // the client's key, for error digests
	rkey     string // its Redis key
	member   string
	n        int
	fallback bool          // admitted by FailOpen: holds nothing on Redis
	lost     chan struct{} // closed when lost or released
	// guarded by c.mu:
	released   bool
	lostClosed bool
	deadline   time.Time // when Lost closes unless renewed before
	timer      *time.Timer
}

// ccQueue is the Acquires of one process waiting for one key, oldest
// first: the oldest polls Redis, the others wait for their turn.
type ccQueue struct{ w []*ccWaiter }

type ccWaiter struct{ turn chan struct{} } // closed when it is the oldest

// ccOrphan is a member that may be held on Redis for no one: an
// acquisition whose reply was lost, or a release that failed. The next
// renewal round removes it; it is forgotten once it must have expired.
type ccOrphan struct {
	rkey, member string
	until        time.Time // when Redis has expired it for sure
}

// maxOrphans bounds the orphans kept: beyond, the oldest are left to
// their expiry.
const maxOrphans = 4096

// NewConcurrency returns a limiter that lets at most limit permits be in
// flight per key across every process sharing client's Redis, prefix and
// limit. It accepts [WithPrefix], [WithTimeout], [WithFailurePolicy]
// ([FailOpen] or [FailClosed]), [WithObserver], [WithName], [WithLogger],
// [WithErrorReportInterval], [WithPlainKeys], [WithBreaker] and
// [WithPermitExpiry]; any other option is a configuration error naming
// it, as are a limit that is not positive and a nil client. It does not
// contact Redis.
//
// The permits of key K live in the sorted set prefix + "cc:" + limit +
// ":{" + digest(K) + "}" (K itself with WithPlainKeys), see docs/redis.md.
func NewConcurrency(client redis.UniversalClient, limit int, opts ...Option) (*Concurrency, error) {
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if bad := cfg.misapplied("WithPrefix", "WithTimeout", "WithFailurePolicy", "WithObserver", "WithName",
		"WithLogger", "WithErrorReportInterval", "WithPlainKeys", "WithBreaker", "WithPermitExpiry"); bad != "" {
		return nil, invalid("NewConcurrency: %s does not apply to a concurrency limit", bad)
	}
	if typednil.Is(client) {
		return nil, invalid("NewConcurrency: client is nil (%T)", client)
	}
	if limit <= 0 || int64(limit) > maxState {
		return nil, invalid("NewConcurrency: limit must be positive and at most 2^52, got %d", limit)
	}
	expiry := cfg.expiry
	if !cfg.gave("WithPermitExpiry") {
		expiry = defaultPermitExpiry
	}
	if expiry < minPermitExpiry || expiry > maxPermitExpiry || expiry%time.Millisecond != 0 {
		return nil, invalid("WithPermitExpiry must be a whole number of milliseconds from 1s to 1h, got %v", expiry)
	}
	c := &Concurrency{
		client:      client,
		limit:       limit,
		base:        cfg.prefix + "cc:" + strconv.Itoa(limit) + ":{",
		plain:       cfg.plain,
		expiry:      expiry,
		margin:      expiry / 5,
		timeout:     cfg.timeout,
		failure:     cfg.failure,
		observer:    cfg.observer,
		name:        cfg.name,
		logger:      cfg.logger,
		reportEvery: cfg.reportEvery,
		epoch:       time.Now(),
		held:        make(map[string]map[*ccHolder]struct{}),
		queues:      make(map[string]*ccQueue),
		stop:        make(chan struct{}),
	}
	if c.wire, err = exec.New(exec.Config{
		Client:  client,
		Timeout: cfg.timeout,
		Breaker: cfg.breaker,
		Now:     func() int64 { return int64(time.Since(c.epoch)) },
	}); err != nil {
		return nil, invalid("%v", err)
	}
	return c, nil
}

// Limit returns the number of permits each key may have in flight.
func (c *Concurrency) Limit() int { return c.limit }

// Close stops renewing the permits held: they stay held on Redis until
// released or expired, and are lost (their Lost channels close) when their
// last renewal runs out. Acquisitions after Close return an error. Close
// releases nothing and always returns nil.
func (c *Concurrency) Close() error {
	c.mu.Lock()
	if !c.closed {
		c.closed = true
		close(c.stop)
	}
	c.mu.Unlock()
	c.wg.Wait()
	return nil
}

// TryAcquire acquires n permits for key if they are free now: one script
// on Redis, never waiting (and not behind this process's Acquires). It
// returns the Permit and Decision{Allowed: true, Limit, Remaining: the
// permits of key still free}; denied, the zero Permit, Decision{Limit,
// Remaining} and no error. An n that can never be admitted (n <= 0 or n >
// limit) is an error wrapping [ratelimit.ErrInvalidN] or
// [ratelimit.ErrExceedsLimit], with RetryAfter [ratelimit.RetryNever].
// When Redis cannot decide, the failure policy does, and the error wraps
// [ErrUnavailable]; when ctx is done first, it denies with ctx.Err().
func (c *Concurrency) TryAcquire(ctx context.Context, key string, n int) (ratelimit.Permit, ratelimit.Decision, error) {
	if c.observer == nil {
		return c.try(ctx, key, n)
	}
	start := time.Now()
	p, d, err := c.try(ctx, key, n)
	c.observe(ctx, n, d, err, false, start)
	return p, d, err
}

// try is TryAcquire with nothing reported.
func (c *Concurrency) try(ctx context.Context, key string, n int) (ratelimit.Permit, ratelimit.Decision, error) {
	if ctx == nil {
		return ratelimit.Permit{}, ratelimit.Decision{Limit: c.limit, RetryAfter: FailClosedRetryAfter}, errNilContext
	}
	if n <= 0 || n > c.limit {
		return ratelimit.Permit{}, ratelimit.Decision{Limit: c.limit, RetryAfter: ratelimit.RetryNever}, nError(n, c.limit)
	}
	c.mu.Lock()
	closed := c.closed
	c.mu.Unlock()
	if closed {
		return ratelimit.Permit{}, ratelimit.Decision{Limit: c.limit, RetryAfter: ratelimit.RetryNever}, errClosed
	}
	if err := ctx.Err(); err != nil {
		return ratelimit.Permit{}, ratelimit.Decision{Limit: c.limit, RetryAfter: FailClosedRetryAfter}, err
	}
	rkey := c.key(key)
	member := newMember(n)
	var allowed, held int64
	sent := time.Now()
	err := c.wire.Run(ctx, ccAcquireScript, []string{rkey}, []any{"", n, c.limit, c.expiry.Milliseconds(), member}, false,
		func(cmd *redis.Cmd) error {
			v, err := cmd.Int64Slice()
			if err != nil {
				return err
			}
			if len(v) != 2 {
				return &scriptError{values: len(v)}
			}
			allowed, held = v[0], v[1]
			return nil
		})
	if err != nil {
		// A reply lost after the script ran leaves member held on Redis
		// for no one: never renewed, it expires, and the next renewal
		// round removes it sooner.
		c.orphan(rkey, member, sent, err)
		if ctx.Err() != nil {
			return ratelimit.Permit{}, ratelimit.Decision{Limit: c.limit, RetryAfter: FailClosedRetryAfter}, ctx.Err()
		}
		err = c.unavailable(ctx, "TryAcquire", key, err)
		if c.failure == FailClosed {
			return ratelimit.Permit{}, ratelimit.Decision{Limit: c.limit, RetryAfter: FailClosedRetryAfter}, err
		}
		h := &ccHolder{c: c, key: key, n: n, fallback: true, lost: make(chan struct{})}
		return permitOf(h), ratelimit.Decision{Allowed: true, Limit: c.limit, Remaining: c.limit - n}, err
	}
	remaining := max(c.limit-int(held), 0)
	if allowed != 1 {
		return ratelimit.Permit{}, ratelimit.Decision{Limit: c.limit, Remaining: remaining}, nil
	}
	h := &ccHolder{c: c, key: key, rkey: rkey, member: member, n: n, lost: make(chan struct{})}
	c.hold(h, sent)
	return permitOf(h), ratelimit.Decision{Allowed: true, Limit: c.limit, Remaining: remaining}, nil
}

func permitOf(h *ccHolder) ratelimit.Permit { return permit.Make(h, 0).(ratelimit.Permit) }

// newMember returns a new member of a key's sorted set for n permits.
func newMember(n int) string {
	var id [16]byte
	_, _ = rand.Read(id[:]) // never fails (crypto/rand)
	b := make([]byte, 0, 32+1+20)
	b = hex.AppendEncode(b, id[:])
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(n), 10)
	return string(b)
}

// hold registers h, acquired by a script sent at sent, for renewal, and
// arms its loss at sent + expiry - margin.
func (c *Concurrency) hold(h *ccHolder, sent time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	h.deadline = sent.Add(c.expiry - c.margin)
	h.timer = time.AfterFunc(time.Until(h.deadline), h.expire)
	if c.closed {
		return // not renewed: lost at its deadline
	}
	hs := c.held[h.rkey]
	if hs == nil {
		hs = make(map[*ccHolder]struct{})
		c.held[h.rkey] = hs
	}
	hs[h] = struct{}{}
	c.startRenewing()
}

// startRenewing starts the renewal goroutine unless it runs. Requires
// c.mu held.
func (c *Concurrency) startRenewing() {
	if !c.renewing && !c.closed {
		c.renewing = true
		c.wg.Add(1)
		go c.renew()
	}
}

// orphan records member of rkey, sent at sent by a call that failed with
// err, for removal at the next renewal round, unless err says it was
// never sent (the open breaker).
func (c *Concurrency) orphan(rkey, member string, sent time.Time, err error) {
	if errors.Is(err, ErrBreakerOpen) {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.orphans) >= maxOrphans {
		c.orphans = append(c.orphans[:0], c.orphans[1:]...)
	}
	c.orphans = append(c.orphans, ccOrphan{rkey: rkey, member: member, until: sent.Add(c.expiry + c.timeout)})
	c.startRenewing()
}

// expire runs at h's deadline: h is lost unless renewed meanwhile.
func (h *ccHolder) expire() {
	c := h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if h.released || h.lostClosed {
		return
	}
	if d := time.Until(h.deadline); d > 0 {
		h.timer.Reset(d) // renewed since the timer was set
		return
	}
	c.lose(h)
}

// lose closes h's Lost channel and stops renewing it. Requires c.mu held.
func (c *Concurrency) lose(h *ccHolder) {
	if h.lostClosed {
		return
	}
	h.lostClosed = true
	close(h.lost)
	if h.timer != nil {
		h.timer.Stop()
	}
	c.forget(h)
	if c.lostHook != nil {
		c.lostHook(h, time.Now())
	}
}

// forget stops renewing h. Requires c.mu held.
func (c *Concurrency) forget(h *ccHolder) {
	if hs := c.held[h.rkey]; hs != nil {
		delete(hs, h)
		if len(hs) == 0 {
			delete(c.held, h.rkey)
		}
	}
}

// renew is the renewal goroutine: one round per third of the expiry while
// any permit is held and c is not closed.
func (c *Concurrency) renew() {
	defer c.wg.Done()
	t := time.NewTimer(c.expiry / 3)
	defer t.Stop()
	for {
		select {
		case <-c.stop:
			c.mu.Lock()
			c.renewing = false
			c.mu.Unlock()
			return
		case <-t.C:
		}
		c.renewRound()
		c.mu.Lock()
		if (len(c.held) == 0 && len(c.orphans) == 0) || c.closed {
			c.renewing = false
			c.mu.Unlock()
			return
		}
		c.mu.Unlock()
		t.Reset(c.expiry / 3)
	}
}

// renewRound renews every permit held, one script per Redis key, all in
// one pipeline (which go-redis splits per node on a Cluster).
func (c *Concurrency) renewRound() {
	type group struct {
		rkey string
		hs   []*ccHolder
		cmd  *redis.Cmd
	}
	c.mu.Lock()
	groups := make([]*group, 0, len(c.held))
	for rkey, hs := range c.held {
		g := &group{rkey: rkey, hs: make([]*ccHolder, 0, len(hs))}
		for h := range hs {
			g.hs = append(g.hs, h)
		}
		groups = append(groups, g)
	}
	now := time.Now()
	orphans := make([]ccOrphan, 0, len(c.orphans))
	for _, o := range c.orphans {
		if now.Before(o.until) {
			orphans = append(orphans, o)
		}
	}
	c.orphans = c.orphans[:0]
	c.mu.Unlock()
	if len(groups) == 0 && len(orphans) == 0 {
		return
	}
	args := func(g *group) []any {
		a := make([]any, 0, 2+len(g.hs))
		a = append(a, "", c.expiry.Milliseconds())
		for _, h := range g.hs {
			a = append(a, h.member)
		}
		return a
	}
	sent := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	dels := make([]*redis.IntCmd, len(orphans))
	_, _ = c.client.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, g := range groups {
			g.cmd = ccRenewScript.EvalSha(ctx, p, []string{g.rkey}, args(g)...)
		}
		for i, o := range orphans {
			dels[i] = p.ZRem(ctx, o.rkey, o.member)
		}
		return nil
	})
	var again []*group
	for _, g := range groups {
		if err := g.cmd.Err(); err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			again = append(again, g)
		}
	}
	if len(again) > 0 {
		_, _ = c.client.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, g := range again {
				g.cmd = ccRenewScript.Eval(ctx, p, []string{g.rkey}, args(g)...)
			}
			return nil
		})
	}
	deadline := sent.Add(c.expiry - c.margin)
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, o := range orphans {
		if dels[i].Err() != nil && len(c.orphans) < maxOrphans {
			c.orphans = append(c.orphans, o) // again next round
		}
	}
	var failed error
	for _, g := range groups {
		v, err := g.cmd.Int64Slice()
		if err != nil || len(v) != len(g.hs) {
			if failed == nil {
				failed = err
				if failed == nil {
					failed = &scriptError{values: len(v)}
				}
			}
			continue // each is lost at its deadline unless a later round renews it
		}
		for i, h := range g.hs {
			switch {
			case h.released || h.lostClosed:
			case v[i] == 1:
				if deadline.After(h.deadline) {
					h.deadline = deadline
				}
			default:
				c.lose(h) // gone from Redis
			}
		}
	}
	if failed != nil && !c.closed {
		c.reportErr(context.Background(), &unavailableError{op: "renew", digest: "(all)", err: failed}, false)
	}
}

// Release implements permit.Holder.
func (h *ccHolder) Release(uint64) {
	c := h.c
	c.mu.Lock()
	if h.released {
		c.mu.Unlock()
		return
	}
	h.released = true
	if h.timer != nil {
		h.timer.Stop()
	}
	if !h.lostClosed {
		h.lostClosed = true
		close(h.lost)
	}
	c.forget(h)
	c.mu.Unlock()
	if h.fallback {
		if c.observer != nil {
			c.observeReleased(h.n, c.limit-h.n)
		}
		return
	}
	// Even a lost permit's member is removed: it is this holder's own,
	// which frees it before its expiry if it is still there.
	count := "0"
	if c.observer != nil {
		count = "1"
	}
	held := int64(-1)
	ctx := context.Background()
	err := c.wire.Run(ctx, ccReleaseScript, []string{h.rkey}, []any{"", count, h.member}, false, func(cmd *redis.Cmd) error {
		v, err := cmd.Int64Slice()
		if err == nil && len(v) == 2 {
			held = v[1]
		}
		return err
	})
	if err != nil {
		// Removed by the next renewal round, or expired.
		c.orphan(h.rkey, h.member, time.Now(), err)
		_ = c.unavailable(ctx, "Release", h.key, err)
	}
	if c.observer != nil {
		remaining := c.limit
		if held >= 0 {
			remaining = max(c.limit-int(held), 0)
		}
		c.observeReleased(h.n, remaining)
	}
}

// Lost implements permit.Holder.
func (h *ccHolder) Lost(uint64) <-chan struct{} { return h.lost }

// Acquire waits until n permits for key are free and acquires them, or
// until ctx is done (then it returns ctx's error and holds nothing). It
// polls Redis with TryAcquire's script, 1ms after a denial, then twice as
// long each time up to the smaller of a twentieth of the expiry and 100ms;
// the Acquires of this process for one key are served in the order they
// arrived (the oldest polls, the others wait behind it). It returns at
// once an error wrapping [ratelimit.ErrInvalidN] or
// [ratelimit.ErrExceedsLimit] when n can never be admitted. When Redis
// cannot decide, [FailOpen] returns a Permit that holds nothing and no
// error, [FailClosed] the error wrapping [ErrUnavailable]. With an
// [Observer] it reports one Event when it returns.
func (c *Concurrency) Acquire(ctx context.Context, key string, n int) (ratelimit.Permit, error) {
	if c.observer == nil {
		p, d, err := c.acquire(ctx, key, n)
		if d.Allowed {
			err = nil
		}
		return p, err
	}
	start := time.Now()
	p, d, err := c.acquire(ctx, key, n)
	c.observe(ctx, n, d, err, true, start)
	if d.Allowed {
		err = nil
	}
	return p, err
}

// acquire is Acquire with nothing reported. An admission by the failure
// policy returns the Permit with its Decision and error: Acquire drops
// the error.
func (c *Concurrency) acquire(ctx context.Context, key string, n int) (ratelimit.Permit, ratelimit.Decision, error) {
	fail := func(err error) (ratelimit.Permit, ratelimit.Decision, error) {
		return ratelimit.Permit{}, ratelimit.Decision{Limit: c.limit, RetryAfter: ratelimit.RetryNever}, err
	}
	if ctx == nil {
		return fail(errNilContext)
	}
	if n <= 0 || n > c.limit {
		return fail(nError(n, c.limit))
	}
	rkey := c.key(key)
	w := c.enqueue(rkey)
	defer c.dequeue(rkey, w)
	select {
	case <-w.turn:
	case <-ctx.Done():
		return fail(ctx.Err())
	}
	wait := time.Millisecond
	longest := min(c.expiry/20, 100*time.Millisecond)
	var t *time.Timer
	for {
		p, d, err := c.try(ctx, key, n)
		if d.Allowed {
			return p, d, err
		}
		if err != nil {
			return fail(err)
		}
		if t == nil {
			t = time.NewTimer(wait)
			defer t.Stop()
		} else {
			t.Reset(wait)
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return fail(ctx.Err())
		}
		wait = min(2*wait, longest)
	}
}

// enqueue adds an Acquire for rkey to its queue; its turn channel is
// closed when it is the oldest.
func (c *Concurrency) enqueue(rkey string) *ccWaiter {
	w := &ccWaiter{turn: make(chan struct{})}
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.queues[rkey]
	if q == nil {
		q = &ccQueue{}
		c.queues[rkey] = q
	}
	q.w = append(q.w, w)
	if len(q.w) == 1 {
		close(w.turn)
	}
	return w
}

// dequeue removes w from rkey's queue, giving the turn to the next when w
// had it.
func (c *Concurrency) dequeue(rkey string, w *ccWaiter) {
	c.mu.Lock()
	defer c.mu.Unlock()
	q := c.queues[rkey]
	for i, x := range q.w {
		if x != w {
			continue
		}
		q.w = append(q.w[:i], q.w[i+1:]...)
		if i == 0 && len(q.w) > 0 {
			close(q.w[0].turn)
		}
		break
	}
	if len(q.w) == 0 {
		delete(c.queues, rkey)
	}
}

// InFlight returns the number of permits held for key now, by every
// process, as Redis counts them. On failure it returns 0 and an error
// wrapping [ErrUnavailable] (or ctx's error).
func (c *Concurrency) InFlight(ctx context.Context, key string) (int, error) {
	if ctx == nil {
		return 0, errNilContext
	}
	var held int64
	err := c.wire.Run(ctx, ccInFlightScript, []string{c.key(key)}, []any{""}, false, func(cmd *redis.Cmd) error {
		var err error
		held, err = cmd.Int64()
		return err
	})
	if err != nil {
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		return 0, c.unavailable(ctx, "InFlight", key, err)
	}
	return int(held), nil
}

// Reset forgets every permit held for key, by every process (one DEL):
// use it to recover a key whose holders are known to be gone. The Permits
// this process holds for key are lost at once (their Lost channels
// close); those of other processes at their next renewal. On failure it
// returns an error wrapping [ErrUnavailable] (or ctx's error).
func (c *Concurrency) Reset(ctx context.Context, key string) error {
	if ctx == nil {
		return errNilContext
	}
	rkey := c.key(key)
	cctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if err := c.client.Del(cctx, rkey).Err(); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return c.unavailable(ctx, "Reset", key, err)
	}
	c.mu.Lock()
	for h := range c.held[rkey] {
		c.lose(h)
	}
	c.mu.Unlock()
	return nil
}

// unavailable returns the error of a call Redis could not decide, and
// reports it.
func (c *Concurrency) unavailable(ctx context.Context, op, key string, cause error) error {
	err := &unavailableError{op: op, digest: keyDigest(key), err: cause}
	c.reportErr(ctx, err, errors.Is(cause, ErrBreakerOpen))
	return err
}

// reportErr logs err at most once per reportEvery, or counts it.
func (c *Concurrency) reportErr(ctx context.Context, err error, quiet bool) {
	reportUnavailable(ctx, &c.logger, &c.reports, c.sinceEpoch, c.reportEvery, c.name, ratelimit.ConcurrencyAlgorithm, err, quiet)
}

// sinceEpoch is the time for the report throttle: ns since c was made,
// never 0.
func (c *Concurrency) sinceEpoch() int64 { return int64(time.Since(c.epoch)) + 1 }

// observe reports an acquisition to the observer.
func (c *Concurrency) observe(ctx context.Context, n int, d ratelimit.Decision, err error, wait bool, start time.Time) {
	if ctx == nil {
		ctx = context.Background()
	}
	c.observer.Observe(ctx, ratelimit.Event{
		Name: c.name, Algorithm: ratelimit.ConcurrencyAlgorithm, Home: ratelimit.HomeRedis,
		Outcome: outcome(d, err), N: n, Decision: d, Err: err, Wait: wait, Latency: time.Since(start),
	})
}

// observeReleased reports a Release to the observer.
func (c *Concurrency) observeReleased(n, remaining int) {
	c.observer.Observe(context.Background(), ratelimit.Event{
		Name: c.name, Algorithm: ratelimit.ConcurrencyAlgorithm, Home: ratelimit.HomeRedis,
		Outcome: ratelimit.OutcomeReleased, N: n,
		Decision: ratelimit.Decision{Allowed: true, Limit: c.limit, Remaining: remaining},
	})
}
