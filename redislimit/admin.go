package redislimit

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
)

var _ ratelimit.KeyAdmin = (*Limiter)(nil)

// maxBlock is the longest block: ratelimit's longest period, 100 years.
const maxBlock = 100 * 365 * 24 * time.Hour

// Reset forgets key's state under the current policy and every previous
// one kept ([Limiter.SetPolicy], [WithPrevious]; state older than that is
// never read again) and lifts any block on it: the
// key starts over with a full quota. It is one script on Redis; when Redis
// fails it returns an error wrapping [ErrUnavailable] (the failure policy
// does not apply to admin calls).
func (l *Limiter) Reset(ctx context.Context, key string) error {
	g := l.acquire()
	defer g.release()
	if ctx == nil {
		return errNilContext
	}
	unfence, err := l.fence(ctx, g, key)
	if err != nil {
		return err
	}
	defer unfence()
	keys := append(g.keys(l, key), l.resetMarker(key))
	err = l.run(ctx, g, resetScript, keys, []any{l.nowArg(), "m"}, (*redis.Cmd).Err)
	l.forget(g, key)
	if g.fallback != nil {
		_ = g.fallback.Reset(ctx, key)
	}
	return l.adminErr(ctx, "reset", key, err)
}

// Block denies every AllowN, Peek and WaitN for key for d from now (the
// Redis server's clock, or the client's with [WithClock]), whatever
// the policy would decide: Allowed false, Remaining 0, RetryAfter the rest
// of the block. A blocked decision charges nothing; the key's state is
// kept and applies again when the block ends, and the block survives
// [Limiter.SetPolicy]. A new Block replaces the one in force; d <= 0 lifts
// it. d above 100 years is an error. The block is kept in its own Redis
// key beside the state, with a TTL that ends with it. When Redis fails,
// Block returns an error wrapping [ErrUnavailable].
//
// A process's deny cache ([WithDenyCache]) forgets key on Block, so a
// lifted block is seen at once by the process that lifted it; other
// processes may keep answering a cached denial until its RetryAfter.
func (l *Limiter) Block(ctx context.Context, key string, d time.Duration) error {
	if ctx == nil {
		return errNilContext
	}
	if d > maxBlock {
		// The same error as ratelimit.Keyed.Block's.
		return fmt.Errorf("ratelimit: block duration %v must be at most %v", d, maxBlock)
	}
	g := l.cur.Load()
	us := int64(0)
	if d > 0 {
		us = int64((d + time.Microsecond - 1) / time.Microsecond)
	}
	keys := g.keys(l, key)[1:2]
	unfence, err := l.fence(ctx, g, key)
	if err != nil {
		return err
	}
	defer unfence()
	err = l.run(ctx, g, blockScript, keys, []any{l.nowArg(), us}, (*redis.Cmd).Err)
	l.forget(g, key)
	return l.adminErr(ctx, "block", key, err)
}

// Penalize charges n events to key without a decision, such as a penalty
// for a failed login: at most what key has left now (as Peek(ctx, key, 0)
// would report, a block ignored), so a penalty empties the key's quota at
// most and never overdraws it. The charge is what an admitted AllowN of as
// many events would store. n <= 0 is an error wrapping
// [ratelimit.ErrInvalidN]; when Redis fails, Penalize returns an error
// wrapping [ErrUnavailable].
func (l *Limiter) Penalize(ctx context.Context, key string, n int) error {
	g := l.acquire()
	defer g.release()
	if n <= 0 {
		return nError(n, g.policy.Limit)
	}
	if ctx == nil {
		return errNilContext
	}
	n = min(n, g.policy.Limit) // the charge is at most the remaining quota
	unfence, err := l.fence(ctx, g, key)
	if err != nil {
		return err
	}
	defer unfence()
	err = l.run(ctx, g, g.decideScript, g.keys(l, key), g.args(l, l.nowArg(), n, penalize), (*redis.Cmd).Err)
	l.forget(g, key)
	return l.adminErr(ctx, "penalize", key, err)
}

// fence readies key for an admin call with leases (leaseTable.fence):
// its lease dropped, its grant and give-backs in flight here waited for,
// none started until unfence. Without leases it does nothing.
func (l *Limiter) fence(ctx context.Context, g *generation, key string) (unfence func(), err error) {
	if g.leases == nil {
		return func() {}, nil
	}
	return g.leases.fence(ctx, key)
}

// forget drops what the deny cache holds for key, and its lease.
func (l *Limiter) forget(g *generation, key string) {
	if g.cache != nil {
		g.cache.invalidate(g.cache.hash(key), key)
	}
	if g.leases != nil {
		g.leases.dropLease(key)
	}
}

// adminErr returns the error of an admin call: ctx's when the caller gave
// up, else one wrapping ErrUnavailable and the cause.
func (l *Limiter) adminErr(ctx context.Context, op, key string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return l.unavailable(ctx, op, key, err)
}
