package ratelimit

import (
	"context"
	"errors"
)

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

// ErrTooManyKeys is returned, with a denied Decision whose RetryAfter is one
// second, by a [Keyed] limiter that holds its maximum number of keys when a
// request for a new key finds no idle key to reclaim. Existing keys are
// unaffected.
var ErrTooManyKeys = errors.New("ratelimit: too many keys")

// ErrUnknownTier is returned by a [Tiered] limiter when its tier function
// names a tier it has no limiter for.
var ErrUnknownTier = errors.New("ratelimit: unknown tier")
