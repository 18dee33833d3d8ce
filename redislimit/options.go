package redislimit

import (
	"time"

	"github.com/rlkit/ratelimit"
)

// Defaults.
const (
	// DefaultPrefix is the key prefix unless [WithPrefix] says otherwise.
	DefaultPrefix = "ratelimit:"
	// DefaultTimeout bounds each call unless [WithTimeout] says otherwise.
	DefaultTimeout = 100 * time.Millisecond
	// DefaultDenyCacheKeys is the number of denied keys remembered
	// locally unless [WithDenyCache] says otherwise.
	DefaultDenyCacheKeys = 10000
)

// Option configures a [Limiter].
type Option interface {
	apply(*config)
}

type config struct {
	prefix    string
	timeout   time.Duration
	failure   FailurePolicy
	instances int
	onError   func(error)
	clock     ratelimit.Clock
	client    bool
	cacheKeys int
	breaker   time.Duration
	plain     bool
	// instancesSet says WithLocalFallback gave instances.
	instancesSet bool
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithPrefix sets the prefix of every Redis key (default [DefaultPrefix]).
// It must not contain '{' or '}', which would change the Cluster hash tag.
func WithPrefix(prefix string) Option {
	return optionFunc(func(c *config) { c.prefix = prefix })
}

// WithTimeout bounds each call to Redis (default [DefaultTimeout]); a
// call also ends at ctx's deadline when that comes first.
//
// Set ContextTimeoutEnabled in the go-redis options: callers are bounded
// either way, but with it go-redis also abandons I/O at the deadline
// (freeing connections stuck on a hung server), and a lone caller can run
// its round trip on its own goroutine, which saves two goroutine switches
// of latency. Without it go-redis bounds its I/O by ReadTimeout and
// WriteTimeout only, so each call is handed to a goroutine that may
// outlive the caller's deadline.
func WithTimeout(d time.Duration) Option {
	return optionFunc(func(c *config) { c.timeout = d })
}

// WithFailurePolicy sets what the limiter decides when Redis cannot:
// [FailOpen] (the default), [FailClosed] or [FailLocal]. FailLocal needs
// the number of instances that share the limit, which only
// [WithLocalFallback] gives (it selects FailLocal itself): New returns an
// error for FailLocal without it, rather than guess one instance and let
// every instance admit the whole limit.
func WithFailurePolicy(f FailurePolicy) Option {
	return optionFunc(func(c *config) { c.failure = f })
}

// WithLocalFallback makes the limiter decide in memory while Redis is
// unavailable ([FailLocal]), with the share of the policy that one of
// instances processes should admit, so that instances processes together
// admit about the limit rather than instances times it:
//
//   - token bucket: capacity/instances and refill rate/instances;
//   - leaky bucket: capacity/instances, draining instances times slower;
//   - window algorithms: limit/instances per window.
//
// Shares are rounded down but never below 1 (so with more instances than
// the limit, each instance still admits one). The fallback starts empty
// (full quota) and its state is not carried back to Redis.
func WithLocalFallback(instances int) Option {
	return optionFunc(func(c *config) { c.failure, c.instances, c.instancesSet = FailLocal, instances, true })
}

// WithErrorHandler sets a function called with the errors that made Redis
// unable to decide (each wraps [ErrUnavailable]), for logging and metrics:
// at most once a second per limiter, so that an outage does not log a line
// per request. Each call stands for 1 + [Suppressed](err) failed calls:
// the failures in between, and the calls the breaker answered, are
// counted, not reported. It is not called when the caller's own ctx ended
// the call. Errors name keys by a digest ([KeyDigest]), never the key. It
// must be safe for concurrent use and should return quickly: it runs on
// the caller's goroutine.
func WithErrorHandler(f func(error)) Option {
	return optionFunc(func(c *config) { c.onError = f })
}

// WithClock sets the limiter's local clock: it times the deny cache,
// WaitN's sleeps and the local fallback, and, with [WithClientTime], the
// decisions themselves. By default the real clock. Without
// WithClientTime, decisions use the Redis server's time whatever this
// clock says.
func WithClock(c ratelimit.Clock) Option {
	return optionFunc(func(o *config) { o.clock = c })
}

// WithClientTime makes the scripts decide at the limiter's clock's time
// (see [WithClock]), truncated to the microsecond, instead of the Redis
// server's TIME. Every process sharing keys must then have synchronized
// clocks. Useful for deterministic tests.
func WithClientTime() Option {
	return optionFunc(func(o *config) { o.client = true })
}

// WithDenyCache sets how many denied keys the limiter remembers locally
// (default [DefaultDenyCacheKeys]; 0 disables the cache). A request for n
// events on a key whose last request for the same n was denied with
// RetryAfter r is denied locally, without a round trip, until r has
// passed or, sooner, until the remembered Remaining may have grown. The
// local Decision's RetryAfter and ResetAfter count down from the
// remembered ones. Any admission or refund on the key through this
// limiter forgets what was remembered for it.
//
// This is exact — the Decision is the one the server would return — for
// the token bucket, leaky bucket, fixed window and sliding log, as long as
// no refund intervenes on another instance (the conformance tests run with
// the cache on). The sliding counter is not cached: its RetryAfter is
// documented as an estimate.
func WithDenyCache(maxKeys int) Option {
	return optionFunc(func(o *config) { o.cacheKeys = maxKeys })
}

// WithPlainKeys stores each key's state under a Redis key name holding the
// key as given (prefix + code + ":" + fingerprint + ":{" + key + "}")
// instead of its digest: readable with redis-cli, and the caller chooses
// the Cluster hash tag, but any secret in the key (an API key, a session
// token) is then visible to whoever can list Redis keys, and long keys make
// long names.
func WithPlainKeys() Option {
	return optionFunc(func(c *config) { c.plain = true })
}

// WithBreaker sets how long the limiter stops calling Redis after a call
// finds it unreachable or too slow (an error reply does not count; nor
// does a call ended by the caller's own ctx): meanwhile calls get the
// failure policy's Decision at once, with an error wrapping
// [ErrUnavailable] and [ErrBreakerOpen], and the error handler counts them
// without being called for each (see [Suppressed]). After cooldown, one
// call at a time tries Redis; the first success closes the breaker.
//
// On by default with [DefaultBreakerCooldown]: an outage costs one call
// the timeout, not every call. WithBreaker(0) turns it off, so that every
// call tries Redis and waits up to its timeout. One limiter spans every
// node of a Redis Cluster, so one unreachable node opens the breaker for
// the keys of the other nodes too.
func WithBreaker(cooldown time.Duration) Option {
	return optionFunc(func(o *config) { o.breaker = cooldown })
}

// DefaultBreakerCooldown is the breaker's cooldown unless [WithBreaker]
// says otherwise.
const DefaultBreakerCooldown = time.Second
