package ratelimit

import (
	"context"
	"time"
)

// Limiter is implemented by every limiter in this package.
type Limiter interface {
	// Allow reports whether one event may happen now. It is shorthand for
	// AllowN(1).Allowed.
	Allow() bool
	// AllowN reports whether n events may happen now, and consumes them if
	// so: all n or nothing. It never blocks.
	AllowN(n int) Decision
	// Wait is shorthand for WaitN(ctx, 1).
	Wait(ctx context.Context) error
	// WaitN blocks until n events are admitted or ctx is done. It returns an
	// error at once when n can never be admitted, or when the wait would
	// outlast ctx's deadline.
	WaitN(ctx context.Context, n int) error
	// Peek reports the Decision AllowN(n) would return now, without
	// consuming anything. Peek(0) reports the current quota.
	Peek(n int) Decision
}

// KeyedLimiter limits events per key: per client, API key, IP address, user
// or endpoint, each key with its own state under one policy. It is
// implemented in memory by [*Keyed] and on Redis by package redislimit, so
// the HTTP middleware and the multi-limit helper [AllowAll] take either.
//
// Implementations are safe for concurrent use.
type KeyedLimiter interface {
	// AllowN reports whether n events may happen now for key, and consumes
	// them if so: all n or nothing. It never waits for quota, but it may
	// fail (a Redis error, too many keys); the Decision then says what the
	// implementation's failure policy decided.
	AllowN(ctx context.Context, key string, n int) (Decision, error)
	// WaitN blocks until n events are admitted for key or ctx is done. It
	// returns an error at once when n can never be admitted or the wait
	// would outlast ctx's deadline.
	WaitN(ctx context.Context, key string, n int) error
	// RefundN gives back n events that AllowN admitted for key just before,
	// as if they had not happened. [AllowAll] uses it to undo the limits
	// that admitted a request when a later one denies it.
	RefundN(ctx context.Context, key string, n int) error
	// Peek reports the Decision (and error) AllowN would return now for key
	// and n, without consuming anything. Peek(ctx, key, 0) reports the
	// key's current quota. [AllowAll] uses it, once a dimension has denied a
	// request, to learn the other dimensions' decisions without charging
	// them.
	Peek(ctx context.Context, key string, n int) (Decision, error)
}

// KeyAdmin is implemented by every keyed limiter of this repository ([*Keyed],
// [*Tiered] and the Redis limiter of package redislimit): the operations
// support staff and abuse handling need on one key, beside the decisions
// of [KeyedLimiter]. They are not decisions, so they report nothing to an
// [Observer].
type KeyAdmin interface {
	// Reset forgets key's state (under the current policy and any earlier
	// one not yet converted), and lifts any block on it: the key starts
	// over with a full quota.
	Reset(ctx context.Context, key string) error
	// Block denies every request for key for d from now, whatever the
	// policy would decide: while blocked, AllowN (1 <= n <= limit) and Peek
	// (0 <= n <= limit) return Decision{Allowed: false, Limit, Remaining:
	// 0, RetryAfter: the rest of the block, ResetAfter: the later of the
	// block's end and the key's own ResetAfter} and no error, charge
	// nothing, and report Denied to an [Observer]; any other n keeps its
	// usual [RetryNever] denial. A new Block replaces the one in force;
	// d <= 0 lifts it; a d above 100 years is an error. The key's state is
	// kept and applies again when the block ends; a change of policy keeps
	// the block.
	Block(ctx context.Context, key string, d time.Duration) error
	// Penalize charges n events to key without a decision, such as a
	// penalty for a failed login: min(n, r), where r is the Remaining
	// Peek(ctx, key, 0) would report now if key were not blocked, charged
	// as an admitted AllowN would. So it never overdraws: a penalty larger
	// than the key's remaining quota empties it. It creates the key if
	// absent. n <= 0 is an error wrapping [ErrInvalidN].
	Penalize(ctx context.Context, key string, n int) error
}
