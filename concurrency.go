package ratelimit

import (
	"context"
	"hash/maphash"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlkit/ratelimit/internal/errs"
	"github.com/rlkit/ratelimit/internal/permit"
	"github.com/rlkit/ratelimit/internal/timesrc"
)

// ConcurrencyLimiter bounds how much work is in flight per key, where a
// rate limit bounds how often it starts: at most Limit permits held at
// once for each key, such as 20 requests in progress per customer. It is
// implemented in memory by [*Concurrency] and on Redis, across processes,
// by package redislimit's Concurrency; the servers of packages httplimit
// and grpclimit hold one for each request's (or stream's) life.
//
// Implementations are safe for concurrent use.
type ConcurrencyLimiter interface {
	// TryAcquire acquires n permits for key if they are free now, and
	// never waits: all n or nothing. The Decision says what is in flight
	// after it: Limit, and Remaining, the permits still free. A denied
	// request gets the zero Permit, whose Release does nothing.
	TryAcquire(ctx context.Context, key string, n int) (Permit, Decision, error)
	// Acquire waits until n permits for key are free and acquires them, or
	// until ctx is done. Waiters for a key in one process are served in
	// the order they arrived.
	Acquire(ctx context.Context, key string, n int) (Permit, error)
}

// Permit is what a [ConcurrencyLimiter] hands out: the permits one
// TryAcquire or Acquire acquired, held until Release. The zero Permit
// holds nothing.
//
// A Permit is a small value: copy it freely. Whichever copy releases it
// first releases it, once; every later Release, of any copy, does nothing,
// and can never release permits acquired by someone else.
type Permit struct {
	h   permit.Holder
	gen uint64
}

func init() {
	permit.Make = func(h permit.Holder, gen uint64) any { return Permit{h: h, gen: gen} }
}

// Release gives the permits back. It is idempotent: call it however the
// work ends, typically with defer. Releasing the zero Permit, or one no
// longer held, does nothing.
func (p Permit) Release() {
	if p.h != nil {
		p.h.Release(p.gen)
	}
}

// Lost returns a channel that is closed once p is no longer held: when it
// is released, when its key is [Concurrency.Reset], or, for a permit held
// on Redis, when it could not be renewed and may soon be given to another
// holder (closed before that can happen). Work that must never run
// without its permit selects on it. For the zero Permit it is closed.
func (p Permit) Lost() <-chan struct{} {
	if p.h == nil {
		return permit.Closed()
	}
	return p.h.Lost(p.gen)
}

// Concurrency is the in-memory [ConcurrencyLimiter]: at most limit permits
// in flight per key, in one process. A key with nothing in flight and
// nobody waiting costs nothing: it is forgotten (the most recently emptied
// key of each of its 32 shards is kept until a new key needs its room, so
// that a busy key is not stored anew on every request). [WithMaxKeys]
// caps the keys with permits in flight or waiters, exactly.
//
// Its decisions report to an [Observer] (Algorithm
// [ConcurrencyAlgorithm], Home [HomeKeyed]) as the rate limiters' do, and
// each Release reports one Event with Outcome [OutcomeReleased], so that
// an observer can count what is in flight.
type Concurrency struct {
	limit   int64
	maxKeys int64
	name    string
	obs     Observer
	ts      timesrc.Source
	seed    maphash.Seed
	// keys counts the keys stored, over all shards, parked ones
	// included.
	keys   atomic.Int64
	blocks blockTable
	// lift is closed, and replaced, when a block is lifted or replaced
	// (Block, Reset), to wake the Acquires waiting one out.
	liftMu sync.Mutex
	lift   chan struct{}
	shards [ccShards]ccShard
}

// ccShards is the number of shards of a Concurrency.
const ccShards = 32

// ccFreeMax caps the released permit records a shard keeps for reuse.
const ccFreeMax = 64

type ccShard struct {
	mu     sync.Mutex
	m      map[string]*ccKey // guarded by mu
	parked *ccKey            // an emptied key left in m
	last   *ccKey            // the key keyFor returned last, while in m
	spare  *ccKey            // a forgotten key's record, for the next
	free   *ccPermit         // released permit records, for reuse
	nfree  int
	_      [64]byte // keep shards on their own cache lines
}

// ccKey is one key's state: what is held and who waits.
type ccKey struct {
	key     string
	held    int64
	permits *ccPermit // the Permits held, linked by prev and next
	wHead   *ccWaiter // the waiters, oldest first
	wTail   *ccWaiter
}

// ccPermit is the record behind one Permit, reused under a new generation
// once released.
type ccPermit struct {
	c          *Concurrency
	sh         *ccShard
	k          *ccKey
	n          int64
	gen        uint64        // guarded by sh.mu
	lost       chan struct{} // made by the first Lost; guarded by sh.mu
	prev, next *ccPermit
}

// ccWaiter is one Acquire waiting in its key's queue.
type ccWaiter struct {
	n          int64
	ready      chan struct{} // closed when granted (p set) or evicted (p nil)
	p          *ccPermit
	gen        uint64
	prev, next *ccWaiter
}

// NewConcurrency returns a limiter that lets at most limit permits be in
// flight per key. It accepts [WithMaxKeys] (the keys in flight at once;
// default 1<<20), [WithObserver], [WithName], and [WithClock], which times
// [Concurrency.Block]. It returns an error wrapping [ErrInvalidConfig]
// when limit is not positive or an option is invalid.
func NewConcurrency(limit int, opts ...Option) (*Concurrency, error) {
	o, err := buildOptions("NewConcurrency", optClock|optMaxKeys|optObserver|optName, opts)
	if err != nil {
		return nil, err
	}
	if limit <= 0 {
		return nil, configError("ratelimit.NewConcurrency limit must be positive, got %d", limit)
	}
	maxKeys := o.maxKeys
	if o.given&optMaxKeys == 0 {
		maxKeys = defaultMaxKeys
	}
	c := &Concurrency{
		limit:   int64(limit),
		maxKeys: int64(maxKeys),
		name:    o.name,
		obs:     o.observer,
		ts:      timesrc.New(o.clock),
		seed:    maphash.MakeSeed(),
	}
	c.blocks.init(int64(maxKeys))
	for i := range c.shards {
		c.shards[i].m = make(map[string]*ccKey)
	}
	return c, nil
}

// Limit returns the number of permits each key may have in flight.
func (c *Concurrency) Limit() int { return int(c.limit) }

// Len returns the number of keys with permits in flight or Acquires
// waiting.
func (c *Concurrency) Len() int {
	n := 0
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		if sh.parked != nil {
			n--
		}
		sh.mu.Unlock()
	}
	return n
}

// InFlight returns the number of permits held for key now.
func (c *Concurrency) InFlight(key string) int {
	sh := c.shardFor(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if k := sh.m[key]; k != nil {
		return int(k.held)
	}
	return 0
}

func (c *Concurrency) shardFor(key string) *ccShard {
	return &c.shards[maphash.String(c.seed, key)%ccShards]
}

// TryAcquire acquires n permits for key if they are free now and no
// Acquire is waiting for key ahead of it (waiters are served first); it
// never waits. Admitted, it returns the Permit and Decision{Allowed: true,
// Limit, Remaining: the permits of key still free}. Denied because key is
// full, it returns the zero Permit, Decision{Limit, Remaining} and no
// error: RetryAfter is 0, as no one can know when a holder will release.
// A key under [Concurrency.Block] is denied with RetryAfter and ResetAfter
// the rest of the block. An n that can never be admitted (n <= 0 or n >
// limit) is an error wrapping [ErrInvalidN] or [ErrExceedsLimit], with
// RetryAfter [RetryNever]; a new key when [WithMaxKeys] keys are in
// flight is [ErrTooManyKeys], with RetryAfter one second.
func (c *Concurrency) TryAcquire(ctx context.Context, key string, n int) (Permit, Decision, error) {
	if ctx == nil {
		return Permit{}, Decision{Limit: int(c.limit), RetryAfter: RetryNever}, errNilContext
	}
	if c.obs == nil {
		return c.try(key, n)
	}
	start := time.Now()
	p, d, err := c.try(key, n)
	c.report(ctx, Event{N: n, Decision: d, Err: err, Latency: time.Since(start)})
	return p, d, err
}

// try is TryAcquire with nothing reported.
func (c *Concurrency) try(key string, n int) (Permit, Decision, error) {
	if n <= 0 || int64(n) > c.limit {
		return Permit{}, Decision{Limit: int(c.limit), RetryAfter: RetryNever}, nError(n, c.limit)
	}
	if left, blocked := c.blocked(key); blocked {
		return Permit{}, Decision{Limit: int(c.limit), RetryAfter: time.Duration(left), ResetAfter: time.Duration(left)}, nil
	}
	sh := c.shardFor(key)
	sh.mu.Lock()
	k, err := c.keyFor(sh, key)
	if err != nil {
		sh.mu.Unlock()
		return Permit{}, Decision{Limit: int(c.limit), RetryAfter: time.Second}, err
	}
	if k.wHead != nil || k.held+int64(n) > c.limit {
		d := Decision{Limit: int(c.limit), Remaining: int(c.limit - k.held)}
		c.maybeForget(sh, k)
		sh.mu.Unlock()
		return Permit{}, d, nil
	}
	p := c.take(sh, k, int64(n))
	d := Decision{Allowed: true, Limit: int(c.limit), Remaining: int(c.limit - k.held)}
	sh.mu.Unlock()
	return Permit{h: p, gen: p.gen}, d, nil
}

// Acquire waits until n permits for key are free and acquires them, or
// until ctx is done (then it returns ctx's error and holds nothing).
// Waiters for a key are served in the order they arrived: a large n at the
// head of the queue holds back smaller ones behind it, so that it cannot
// starve. It returns at once an error wrapping [ErrInvalidN] or
// [ErrExceedsLimit] when n can never be admitted, [ErrTooManyKeys] when
// the key cannot be held, and [ErrDeadline] when key is blocked past ctx's
// deadline; a blocked key is otherwise waited out. With an [Observer] it
// reports one Event when it returns.
func (c *Concurrency) Acquire(ctx context.Context, key string, n int) (Permit, error) {
	if c.obs == nil {
		return c.acquire(ctx, key, n)
	}
	start := time.Now()
	p, err := c.acquire(ctx, key, n)
	e := Event{N: n, Wait: true, Err: err, Decision: Decision{Allowed: err == nil, Limit: int(c.limit)}}
	if err != nil {
		e.Decision.RetryAfter = RetryNever
	}
	e.Latency = time.Since(start)
	c.report(ctx, e)
	return p, err
}

// acquire is Acquire with nothing reported.
func (c *Concurrency) acquire(ctx context.Context, key string, n int) (Permit, error) {
	if ctx == nil {
		return Permit{}, errNilContext
	}
	if n <= 0 || int64(n) > c.limit {
		return Permit{}, nError(n, c.limit)
	}
	sh := c.shardFor(key)
	for {
		if err := ctx.Err(); err != nil {
			return Permit{}, err
		}
		sh.mu.Lock()
		k, err := c.keyFor(sh, key)
		if err != nil {
			sh.mu.Unlock()
			return Permit{}, err
		}
		// The block is read under the shard's lock, which Block holds
		// while it sets one and sends the key's waiters away: no waiter
		// queued before a block is granted during it.
		if left, blocked := c.blocked(key); blocked {
			c.maybeForget(sh, k)
			lifted := c.lifted() // under sh.mu, as Block and Reset lift
			sh.mu.Unlock()
			if timesrc.Outlasts(ctx, time.Duration(left)) {
				return Permit{}, errs.Deadline(ErrDeadline, time.Duration(left))
			}
			if err := timesrc.SleepOr(ctx, c.ts.Clock(), time.Duration(left), lifted); err != nil {
				return Permit{}, err
			}
			continue
		}
		if k.wHead == nil && k.held+int64(n) <= c.limit {
			p := c.take(sh, k, int64(n))
			sh.mu.Unlock()
			return Permit{h: p, gen: p.gen}, nil
		}
		w := &ccWaiter{n: int64(n), ready: make(chan struct{})}
		k.enqueue(w)
		sh.mu.Unlock()
		select {
		case <-w.ready:
			if w.p == nil {
				continue // sent away by Block
			}
			return Permit{h: w.p, gen: w.gen}, nil
		case <-ctx.Done():
			sh.mu.Lock()
			select {
			case <-w.ready:
				if w.p != nil {
					// Granted as ctx ended: give it back.
					c.releaseLocked(sh, w.p)
				}
			default:
				k.dequeue(w)
				c.grant(sh, k) // w may have held back those behind it
				c.maybeForget(sh, k)
			}
			sh.mu.Unlock()
			return Permit{}, ctx.Err()
		}
	}
}

// blocked returns how long key's block has to run, and whether it is
// blocked; it reads no time unless some key is.
func (c *Concurrency) blocked(key string) (int64, bool) {
	if c.blocks.count.Load() == 0 {
		return 0, false
	}
	return c.blocks.left(key, c.ts.Now())
}

// lifted returns the channel closed when a block is next lifted early.
func (c *Concurrency) lifted() <-chan struct{} {
	c.liftMu.Lock()
	defer c.liftMu.Unlock()
	if c.lift == nil {
		c.lift = make(chan struct{})
	}
	return c.lift
}

// liftBlock lifts key's block and wakes the Acquires waiting out a block.
// Requires the shard lock of key held.
func (c *Concurrency) liftBlock(key string) {
	c.blocks.remove(key)
	c.wakeBlocked()
}

// wakeBlocked wakes the Acquires waiting out a block, to look at it again.
// Requires the shard lock of the key whose block changed held.
func (c *Concurrency) wakeBlocked() {
	c.liftMu.Lock()
	if c.lift != nil {
		close(c.lift)
		c.lift = nil
	}
	c.liftMu.Unlock()
}

// keyFor returns key's state in sh, adding it if it is new and there is
// room. Requires sh.mu held; it may release and retake it (to make room).
func (c *Concurrency) keyFor(sh *ccShard, key string) (*ccKey, error) {
	if k := sh.last; k != nil && k.key == key {
		if k == sh.parked {
			sh.parked = nil
		}
		return k, nil
	}
	if k := sh.m[key]; k != nil {
		if k == sh.parked {
			sh.parked = nil
		}
		sh.last = k
		return k, nil
	}
	for try := 0; c.keys.Add(1) > c.maxKeys; try++ {
		c.keys.Add(-1)
		if try == 2 {
			return nil, ErrTooManyKeys
		}
		// Parked keys count against the cap: forget them all, then look
		// again (another caller may have added key meanwhile).
		sh.mu.Unlock()
		c.unparkAll()
		sh.mu.Lock()
		if k := sh.m[key]; k != nil {
			if k == sh.parked {
				sh.parked = nil
			}
			sh.last = k
			return k, nil
		}
	}
	k := sh.spare
	if k != nil {
		sh.spare = nil
	} else {
		k = new(ccKey)
	}
	k.key = key
	sh.m[key] = k
	sh.last = k
	return k, nil
}

// unparkAll forgets the parked key of every shard, one shard at a time.
func (c *Concurrency) unparkAll() {
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		c.unpark(sh)
		sh.mu.Unlock()
	}
}

// unpark forgets sh's parked key, if any. Requires sh.mu held.
func (c *Concurrency) unpark(sh *ccShard) {
	old := sh.parked
	if old == nil {
		return
	}
	delete(sh.m, old.key)
	if sh.last == old {
		sh.last = nil
	}
	*old = ccKey{}
	sh.spare, sh.parked = old, nil
	c.keys.Add(-1)
}

// maybeForget forgets k if nothing is in flight for it and nobody waits:
// it becomes sh's parked key (still stored, and counted against
// [WithMaxKeys] until a new key needs its room), and the key parked
// before is deleted. Requires sh.mu held.
func (c *Concurrency) maybeForget(sh *ccShard, k *ccKey) {
	if k.held != 0 || k.wHead != nil || k == sh.parked {
		return
	}
	c.unpark(sh)
	sh.parked = k
}

// take hands out n permits of k. Requires sh.mu held and room in k.
func (c *Concurrency) take(sh *ccShard, k *ccKey, n int64) *ccPermit {
	p := sh.free
	if p != nil {
		sh.free = p.next
		sh.nfree--
	} else {
		p = &ccPermit{c: c, sh: sh}
	}
	p.k, p.n = k, n
	p.prev, p.next = nil, k.permits
	if k.permits != nil {
		k.permits.prev = p
	}
	k.permits = p
	k.held += n
	return p
}

// drop ends p's generation: every Permit handed out under it is no longer
// held. It returns p to sh's free records. Requires sh.mu held.
func (c *Concurrency) drop(sh *ccShard, p *ccPermit) {
	k := p.k
	if p.prev != nil {
		p.prev.next = p.next
	} else {
		k.permits = p.next
	}
	if p.next != nil {
		p.next.prev = p.prev
	}
	k.held -= p.n
	p.gen++
	if p.lost != nil {
		close(p.lost)
		p.lost = nil
	}
	p.k, p.prev = nil, nil
	if sh.nfree < ccFreeMax {
		p.next = sh.free
		sh.free = p
		sh.nfree++
	} else {
		p.next = nil
	}
}

// releaseLocked releases p and serves the waiters its permits let in.
// Requires sh.mu held. It returns the permits released and what is free
// after.
func (c *Concurrency) releaseLocked(sh *ccShard, p *ccPermit) (n, remaining int64) {
	k := p.k
	n = p.n
	c.drop(sh, p)
	remaining = c.limit - k.held
	c.grant(sh, k)
	c.maybeForget(sh, k)
	return n, remaining
}

// grant serves k's waiters, oldest first, while the oldest fits. Requires
// sh.mu held.
func (c *Concurrency) grant(sh *ccShard, k *ccKey) {
	for w := k.wHead; w != nil && k.held+w.n <= c.limit; w = k.wHead {
		k.dequeue(w)
		w.p = c.take(sh, k, w.n)
		w.gen = w.p.gen
		close(w.ready)
	}
}

func (k *ccKey) enqueue(w *ccWaiter) {
	w.prev = k.wTail
	if k.wTail != nil {
		k.wTail.next = w
	} else {
		k.wHead = w
	}
	k.wTail = w
}

func (k *ccKey) dequeue(w *ccWaiter) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		k.wHead = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		k.wTail = w.prev
	}
	w.prev, w.next = nil, nil
}

// Release implements permit.Holder.
func (p *ccPermit) Release(gen uint64) {
	sh, c := p.sh, p.c
	sh.mu.Lock()
	if p.gen != gen {
		sh.mu.Unlock()
		return
	}
	n, remaining := c.releaseLocked(sh, p)
	sh.mu.Unlock()
	if c.obs != nil {
		c.reportReleased(n, remaining)
	}
}

// Lost implements permit.Holder.
func (p *ccPermit) Lost(gen uint64) <-chan struct{} {
	p.sh.mu.Lock()
	defer p.sh.mu.Unlock()
	if p.gen != gen {
		return permit.Closed()
	}
	if p.lost == nil {
		p.lost = make(chan struct{})
	}
	return p.lost
}

// Reset forgets what is in flight for key and lifts any block on it: every
// Permit held for key is lost (its Lost channel closes, its Release does
// nothing more) and the waiters are served anew. Use it to recover a key
// whose holders are known to be gone. The Observer hears the permits
// dropped as one [OutcomeReleased] Event. It returns an error only for a
// nil ctx.
func (c *Concurrency) Reset(ctx context.Context, key string) error {
	if ctx == nil {
		return errNilContext
	}
	sh := c.shardFor(key)
	sh.mu.Lock()
	c.liftBlock(key)
	k := sh.m[key]
	if k == nil || k == sh.parked {
		sh.mu.Unlock()
		return nil
	}
	held := k.held
	for k.permits != nil {
		c.drop(sh, k.permits)
	}
	c.grant(sh, k)
	c.maybeForget(sh, k)
	remaining := c.limit - k.held
	sh.mu.Unlock()
	if c.obs != nil && held > 0 {
		c.reportReleased(held, remaining)
	}
	return nil
}

// Block refuses every new acquisition for key for d from now: TryAcquire
// is denied with RetryAfter the rest of the block, Acquire waits for its
// end, or until it is lifted (or returns [ErrDeadline] at once when the
// block would outlast ctx's deadline), and the Acquires already waiting
// for key go back to wait for the end of the block. Permits already held stay held. A new Block
// replaces the one in force; d <= 0 lifts it, and so does Reset. At most
// [WithMaxKeys] blocks are in force: beyond, Block returns
// [ErrTooManyKeys]. A d above 100 years, or a nil ctx, is an error.
func (c *Concurrency) Block(ctx context.Context, key string, d time.Duration) error {
	if ctx == nil {
		return errNilContext
	}
	if d > maxPeriod {
		return errBlockDuration(d)
	}
	sh := c.shardFor(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if d <= 0 {
		c.liftBlock(key)
		return nil
	}
	now := c.ts.Now()
	if err := c.blocks.set(key, now+int64(d), now); err != nil {
		return err
	}
	c.wakeBlocked() // a shorter block may have replaced a longer one
	if k := sh.m[key]; k != nil && k != sh.parked {
		for w := k.wHead; w != nil; w = k.wHead {
			k.dequeue(w)
			close(w.ready) // p nil: back to wait for the block's end
		}
		c.maybeForget(sh, k)
	}
	return nil
}

// report completes e and tells the Observer. Requires c.obs set.
func (c *Concurrency) report(ctx context.Context, e Event) {
	if ctx == nil {
		ctx = context.Background()
	}
	e.Name, e.Algorithm, e.Home = c.name, ConcurrencyAlgorithm, HomeKeyed
	if !e.Wait {
		e.Outcome, e.Err = outcome(e.N, e.Decision, e.Err)
	} else if e.Err == nil {
		e.Outcome = OutcomeAllowed
	} else {
		e.Outcome = OutcomeError
	}
	c.obs.Observe(ctx, e)
}

// reportReleased tells the Observer n permits were released, leaving
// remaining free. Requires c.obs set.
func (c *Concurrency) reportReleased(n, remaining int64) {
	c.obs.Observe(context.Background(), Event{
		Name: c.name, Algorithm: ConcurrencyAlgorithm, Home: HomeKeyed, Outcome: OutcomeReleased,
		N: int(n), Decision: Decision{Allowed: true, Limit: int(c.limit), Remaining: int(remaining)},
	})
}
