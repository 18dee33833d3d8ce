package ratelimit

import (
	"errors"

	"github.com/rlkit/ratelimit/internal/errs"
)

var (
	// ErrInvalidConfig is wrapped by every constructor error; the message
	// names the offending argument.
	ErrInvalidConfig = errors.New("ratelimit: invalid configuration")
	// ErrInvalidN is returned by WaitN when n <= 0.
	ErrInvalidN = errors.New("ratelimit: n must be positive")
	// ErrExceedsLimit is returned by WaitN when n is greater than the
	// limiter's capacity or limit, so that no wait can ever admit it.
	ErrExceedsLimit = errors.New("ratelimit: n exceeds the limit")
	// ErrQueueFull is returned by LeakyBucket.WaitN when the queue has no
	// room for n more events: the caller is refused at once, not queued.
	ErrQueueFull = errors.New("ratelimit: queue is full")
	// ErrDeadline is returned by WaitN, without waiting, when the wait
	// would outlast the context's deadline. The error also matches
	// context.DeadlineExceeded with errors.Is.
	ErrDeadline = errors.New("ratelimit: wait would exceed context deadline")
)

// errNilContext is returned by the methods that take a context when given
// a nil one.
var errNilContext = errors.New("ratelimit: nil context")

// configError reports a bad constructor argument or option. The detail
// names it as package.Name, as in "ratelimit.WithMaxKeys must be positive,
// got -1".
func configError(format string, args ...any) error {
	return errs.Config(ErrInvalidConfig, format, args...)
}

// nError reports a WaitN call with an n that no wait can admit under limit.
func nError(n int, limit int64) error { return errs.N(ErrInvalidN, ErrExceedsLimit, n, limit) }

// ErrTooManyKeys is returned, with a denied Decision whose RetryAfter is one
// second, by a [Keyed] limiter that holds its maximum number of keys when a
// request for a new key finds no idle key to reclaim. Existing keys are
// unaffected.
var ErrTooManyKeys = errors.New("ratelimit: too many keys")

// ErrUnknownTier is returned by a [Tiered] limiter when its tier function
// names a tier it has no limiter for.
var ErrUnknownTier = errors.New("ratelimit: unknown tier")
