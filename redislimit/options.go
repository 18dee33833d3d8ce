package redislimit

import (
	"log/slog"
	"strings"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/errs"
	"github.com/rlkit/ratelimit/internal/report"
	"github.com/rlkit/ratelimit/internal/typednil"
	"github.com/rlkit/ratelimit/redislimit/internal/exec"
)

// The defaults, each stated in its option's documentation.
const (
	defaultPrefix              = "ratelimit:"
	defaultTimeout             = 100 * time.Millisecond
	defaultDenyCacheKeys       = 10000
	defaultBreakerCooldown     = time.Second
	defaultErrorReportInterval = 10 * time.Second
)

// Option configures a [Limiter]; pass options to [New].
type Option interface {
	apply(*config)
}

// config is what the options set; newConfig fills in the defaults and
// checks it.
type config struct {
	prefix      string
	timeout     time.Duration
	failure     FailurePolicy
	instances   int // WithLocalFallback's
	clock       ratelimit.Clock
	clientTime  bool // WithClock: the scripts decide at clock's time
	cacheKeys   int
	breaker     time.Duration
	plain       bool
	logger      report.Logger
	reportEvery time.Duration
	observer    ratelimit.Observer
	name        string
	previous    []previous // WithPrevious, oldest first
	ackReplicas int        // WithReplicaAck: replicas, 0 off
	ackTimeout  time.Duration
	ackSet      bool
	leases      *LeaseConfig  // WithLeases; nil: off
	expiry      time.Duration // WithPermitExpiry (NewConcurrency only)
	given       []string      // the names of the options given, in order
	err         error         // the first invalid option
}

// namedOption is an option with its name, which the constructors that
// refuse options that do not apply to them name in their errors.
type namedOption struct {
	name string
	f    func(*config)
}

func (o namedOption) apply(c *config) {
	c.given = append(c.given, o.name)
	o.f(c)
}

// gave reports whether the option called name was given.
func (c *config) gave(name string) bool {
	for _, g := range c.given {
		if g == name {
			return true
		}
	}
	return false
}

// named returns the option called name that applies f.
func named(name string, f func(*config)) Option { return namedOption{name, f} }

// misapplied returns the first of the options given that is not among
// allowed, or "".
func (c *config) misapplied(allowed ...string) string {
	for _, g := range c.given {
		ok := false
		for _, a := range allowed {
			ok = ok || a == g
		}
		if !ok {
			return g
		}
	}
	return ""
}

// setErr records err unless an earlier option was already invalid.
func (c *config) setErr(err error) {
	if c.err == nil {
		c.err = err
	}
}

// invalid returns a configuration error whose detail, format, starts with
// the name of an option or argument of New: "ratelimit: invalid
// configuration: redislimit.WithTimeout must be positive, got 0s".
func invalid(format string, args ...any) error {
	return errs.Config(ratelimit.ErrInvalidConfig, "redislimit."+format, args...)
}

// newConfig applies opts over the defaults and checks the result.
func newConfig(opts []Option) (config, error) {
	cfg := config{
		prefix:      defaultPrefix,
		timeout:     defaultTimeout,
		failure:     FailOpen,
		cacheKeys:   defaultDenyCacheKeys,
		breaker:     defaultBreakerCooldown,
		logger:      report.To(nil), // no reports without WithLogger
		reportEvery: defaultErrorReportInterval,
	}
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	if cfg.err != nil {
		return cfg, cfg.err
	}
	var err error
	switch {
	case strings.ContainsAny(cfg.prefix, "{}"):
		err = invalid("WithPrefix must not contain '{' or '}', got %q", cfg.prefix)
	case cfg.timeout <= 0:
		err = invalid("WithTimeout must be positive, got %v", cfg.timeout)
	case cfg.cacheKeys < 0:
		err = invalid("WithDenyCache must not be negative, got %d", cfg.cacheKeys)
	case cfg.breaker < 0:
		err = invalid("WithBreaker must not be negative, got %v", cfg.breaker)
	case cfg.failure == failLocal && cfg.instances <= 0:
		err = invalid("WithLocalFallback instances must be positive, got %d", cfg.instances)
	case cfg.failure != FailOpen && cfg.failure != FailClosed && cfg.failure != failLocal:
		err = invalid("WithFailurePolicy must be FailOpen or FailClosed (or use WithLocalFallback), got %v", cfg.failure)
	case cfg.ackSet && cfg.ackReplicas < 1:
		err = invalid("WithReplicaAck replicas must be at least 1, got %d", cfg.ackReplicas)
	case cfg.ackSet && cfg.ackTimeout <= 0:
		err = invalid("WithReplicaAck timeout must be positive, got %v", cfg.ackTimeout)
	case cfg.ackSet && cfg.ackTimeout >= cfg.timeout:
		err = invalid("WithReplicaAck timeout (%v) must be shorter than WithTimeout (%v)", cfg.ackTimeout, cfg.timeout)
	case cfg.ackSet && exec.AckMillis(cfg.ackTimeout)*int64(time.Millisecond) >= int64(cfg.timeout):
		err = invalid("WithReplicaAck timeout (%v, in whole milliseconds for WAIT: %dms) must be shorter than WithTimeout (%v)", cfg.ackTimeout, exec.AckMillis(cfg.ackTimeout), cfg.timeout)
	}
	if err == nil && cfg.leases != nil {
		err = checkLeases(cfg.leases)
	}
	return cfg, err
}

// WithPrefix sets the prefix of every Redis key (default "ratelimit:").
// It must not contain '{' or '}', which would change the Cluster hash tag.
func WithPrefix(prefix string) Option {
	return named("WithPrefix", func(c *config) { c.prefix = prefix })
}

// WithTimeout bounds each call to Redis (default 100ms); a
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
	return named("WithTimeout", func(c *config) { c.timeout = d })
}

// WithFailurePolicy sets what the limiter decides when Redis cannot:
// [FailOpen] (the default) or [FailClosed]. For a local in-memory
// fallback, use [WithLocalFallback] instead. The last of these options
// given wins.
func WithFailurePolicy(f FailurePolicy) Option {
	return named("WithFailurePolicy", func(c *config) {
		if f == failLocal {
			// The local fallback needs the instances sharing the limit,
			// which only WithLocalFallback gives: guessing one would let
			// every instance admit the whole limit.
			c.setErr(invalid("WithFailurePolicy(%v): use WithLocalFallback(instances) for a local fallback", f))
			return
		}
		c.failure = f
	})
}

// WithLocalFallback makes the limiter decide in memory while Redis is
// unavailable, with an in-memory [ratelimit.Keyed] holding the share of the policy that one of
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
	return named("WithLocalFallback", func(c *config) { c.failure, c.instances = failLocal, instances })
}

// WithLogger makes the limiter report to logger that Redis could not
// decide (nil: no reports, the default). Without it the limiter logs
// nothing: every call Redis could not decide returns its error with the
// failure policy's Decision, and the error is logged once, by whoever does
// not hand it on: the servers of packages httplimit and grpclimit log the
// errors of the limits they serve, under the limit's name, and leave them
// to a limiter given a logger of its own. A Redis that is down fails every
// call, so the reports are throttled: at most one per
// [WithErrorReportInterval], at level Error, with the message "ratelimit:
// redis unavailable" and the attributes limit (the [WithName] name),
// algorithm, error (the error the caller got, wrapping [ErrUnavailable];
// it names the key by a digest, "sha256:" and the first 12 hex digits
// of the key's SHA-256, never the key) and suppressed
// (how many failed calls were not reported since the previous report,
// those the breaker answered included). The caller's own cancellation is
// not reported. To see every decision, errors included, use
// [WithObserver].
func WithLogger(logger *slog.Logger) Option {
	return named("WithLogger", func(c *config) { c.logger = report.To(logger) })
}

// WithErrorReportInterval sets how often, at most, the limiter reports to
// its logger ([WithLogger]) that Redis could not decide (default 10s). d <= 0 reports every failed call but those
// the breaker answered, which are counted in the next report.
func WithErrorReportInterval(d time.Duration) Option {
	return named("WithErrorReportInterval", func(c *config) { c.reportEvery = max(d, 0) })
}

// WithObserver makes the limiter report every decision to o: one
// [ratelimit.Event] per AllowN or Allow call (Redis's, the deny cache's or
// the failure policy's, see [ratelimit.Outcome]) and one per WaitN or Wait
// call when it returns, with Home [ratelimit.HomeRedis], the name from
// [WithName], and Latency measured on the real clock, round trip
// included. Peek and RefundN are not decisions and report nothing. Events
// never hold the key. Observe runs on the caller's goroutine: it must be
// fast and safe for concurrent use. A nil o reports nothing (the default);
// a typed nil is an error.
func WithObserver(o ratelimit.Observer) Option {
	return named("WithObserver", func(c *config) {
		if o != nil && typednil.Is(o) {
			c.setErr(invalid("WithObserver: observer is a nil %T", o))
			return
		}
		c.observer = o
	})
}

// WithName names the limiter in the Events its observer receives and in
// its error reports, such as "per-user" or "login". The name should come
// from a small, fixed set: it becomes a metric attribute.
func WithName(name string) Option {
	return named("WithName", func(c *config) { c.name = name })
}

// WithClock makes the limiter decide at c's time instead of the Redis
// server's TIME (by default, the server's clock decides and the real clock
// times the rest): the scripts get c's time at [New] plus the time elapsed
// since on c, truncated to the microsecond (on the real clock, the
// monotonic time: a step of the wall clock after New does not move it).
// c also times the deny cache, the breaker's cooldown, the error reports'
// interval, WaitN's sleeps and the local fallback. Every process sharing
// keys must then have synchronized clocks: this is for deterministic tests
// (a *clock.Mock of github.com/benbjohnson/clock), or to decide on the
// callers' own clocks (clock.New()). The observer's Latency is always
// measured on the real clock. A typed nil clock is an error.
func WithClock(c ratelimit.Clock) Option {
	return named("WithClock", func(o *config) {
		if c != nil && typednil.Is(c) {
			o.setErr(invalid("WithClock: clock is a nil %T", c))
			return
		}
		o.clock, o.clientTime = c, c != nil
	})
}

// withLocalClock is WithClock for the local timing only: decisions stay on
// the server's TIME. Tests use it to drive the breaker, the reports and
// the application's view of a calendar without moving Redis's time.
func withLocalClock(c ratelimit.Clock) Option {
	return named("withLocalClock", func(o *config) { o.clock, o.clientTime = c, false })
}

// WithDenyCache sets how many denied keys the limiter remembers locally
// (default 10000; 0 disables the cache). A request for n
// events on a key whose last request for the same n was denied with
// nothing remaining (Remaining 0) and RetryAfter r is denied locally,
// without a round trip, until r has passed or, sooner, until the quota may
// have grown. Only such denials are remembered: while nothing remains, no
// instance can admit anything on the key, so admissions elsewhere cannot
// make the copy stale (a denial with some left, for an n larger than that,
// is asked of Redis each time). The
// local Decision's RetryAfter and ResetAfter count down from the
// remembered ones. Any admission or refund on the key through this
// limiter forgets what was remembered for it.
//
// This is exact — the Decision is the one the server would return — for
// the token bucket, leaky bucket, fixed window, sliding log and quota, as
// long as no refund or admin call (Reset, Penalize) intervenes on another
// instance: only a denial that leaves nothing is remembered, and while
// nothing remains no instance can admit anything on the key. The sliding
// counter is not cached: its RetryAfter is documented as an estimate.
func WithDenyCache(maxKeys int) Option {
	return named("WithDenyCache", func(o *config) { o.cacheKeys = maxKeys })
}

// WithPlainKeys stores each key's state under a Redis key name holding the
// key as given (prefix + code + ":" + fingerprint + ":{" + key + "}")
// instead of its digest: readable with redis-cli, and the caller chooses
// the Cluster hash tag, but any secret in the key (an API key, a session
// token) is then visible to whoever can list Redis keys, and long keys make
// long names.
func WithPlainKeys() Option {
	return named("WithPlainKeys", func(c *config) { c.plain = true })
}

// WithBreaker sets how long the limiter stops calling Redis after a call
// finds it unreachable or too slow (an error reply does not count; nor
// does a call ended by the caller's own ctx): meanwhile calls get the
// failure policy's Decision at once, with an error wrapping
// [ErrUnavailable] and [ErrBreakerOpen]; the observer ([WithObserver])
// sees each of them as a Fallback, and the error reports ([WithLogger])
// count them without logging each. After cooldown, one call at a time
// tries Redis; the first success closes the breaker.
//
// On by default with a cooldown of one second: an outage costs one call
// the timeout, not every call. WithBreaker(0) turns it off, so that every
// call tries Redis and waits up to its timeout. One limiter spans every
// node of a Redis Cluster, so one unreachable node opens the breaker for
// the keys of the other nodes too.
func WithBreaker(cooldown time.Duration) Option {
	return named("WithBreaker", func(o *config) { o.breaker = cooldown })
}

// WithReplicaAck makes every round trip of decisions wait until replicas
// replicas have acknowledged its writes, at most timeout: the round trip
// ends with Redis's WAIT replicas timeout-ms, in the same pipeline and on
// the same connection as the scripts (no extra round trip, only the wait
// for replication). When fewer replicas acknowledged in time, no
// admission of that round trip is returned: each such call gets the
// failure policy's Decision, with an error wrapping [ErrUnavailable] and
// [ErrNotReplicated] (its events were charged on the master, and may or
// may not survive a failover). Denials are returned as they are (they
// write nothing), as are Peeks, refunds and admin calls.
//
// It bounds what a failover can lose: an admission is returned only once
// replicas replicas hold it, so a replica promoted after the master fails
// knows it (pair it with the server setting min-replicas-to-write, which
// stops a master cut off from its replicas from admitting at all). It
// costs each round trip the replication delay, and a round trip whose
// replicas are gone the whole timeout. On a Redis Cluster the scripts are
// grouped per master and each group's WAIT runs on that master's
// connection.
//
// replicas must be at least 1, timeout positive and, rounded up to the
// millisecond (WAIT's unit), shorter than [WithTimeout]'s. The client must
// be a *redis.Client (standalone, or Sentinel's failover client) or a
// *redis.ClusterClient: WAIT must run on the connection that ran the
// scripts (New returns an error for a [redis.Ring] or another type).
// Without ContextTimeoutEnabled, go-redis reads the replies within its
// ReadTimeout (3 s by default): keep timeout below it, or a slow WAIT
// becomes a read timeout.
func WithReplicaAck(replicas int, timeout time.Duration) Option {
	return named("WithReplicaAck", func(c *config) { c.ackReplicas, c.ackTimeout, c.ackSet = replicas, timeout, true })
}

// WithPermitExpiry sets how long the permits of a [Concurrency] stay
// held on Redis without being renewed (default 10s, at least 1s, at most
// 1h): a process that dies holding permits frees them within d. The
// process holding them renews them every d/3, all of them in one pipeline,
// and a permit it could not renew in time is lost (its Lost channel
// closes) at d - d/5 after the last renewal was sent, before Redis can
// give it to another holder. It applies to [NewConcurrency] only; [New]
// refuses it.
func WithPermitExpiry(d time.Duration) Option {
	return named("WithPermitExpiry", func(c *config) { c.expiry = d })
}
