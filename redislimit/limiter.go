// Package redislimit runs the rate-limiting policies of package ratelimit on
// Redis, so that every instance of a service shares one limit per key
// instead of each counting alone (N instances counting alone admit N times
// the limit).
//
// A [Limiter] implements [ratelimit.KeyedLimiter] for any [ratelimit.Policy]
// (token bucket, leaky bucket, fixed window, sliding log, sliding counter)
// with the same Decisions as the in-memory [ratelimit.Keyed]. Each decision
// is one Lua script, run atomically by Redis in one round trip: the check
// and the consumption cannot interleave with another client's, and a denied
// request stores nothing.
//
// # Time
//
// By default the scripts read the Redis server's clock (TIME), so clock skew
// between application servers does not matter. [WithClientTime] passes the
// limiter's own [ratelimit.Clock] instead (for tests, or to decide on the
// callers' clocks). Redis Lua numbers are doubles, exact for integers below
// 2^53, so the scripts work in integer microseconds: Unix time in
// microseconds (about 1.8e15) fits, nanoseconds would not. As a consequence:
//
//   - a Policy's Period must be a whole number of microseconds, and its
//     arithmetic must fit in 2^53 ([New] checks both and names the limit);
//   - Decisions equal the in-memory ones whenever event times are whole
//     microseconds (they always are with server time), except that
//     RetryAfter and ResetAfter are rounded up to the microsecond: by the
//     nested-ceiling identity ceil(ceil(a/b)/1000) = ceil(a/(1000b)), they
//     are exactly the in-memory durations rounded up, never shorter.
//
// Unlike the in-memory limiters, which measure on the monotonic clock,
// Redis limiters decide on the Redis server's wall clock (TIME), or with
// [WithClientTime] on the callers' wall clocks: a step of that clock is
// seen as time passing. A forward step refills buckets, ends windows and
// ages sliding logs at once, so it mints at most one fresh quota per key
// (the capacity, or one window's limit) however large the step: no state
// holds more than that. A backward step of at most the policy's idle time
// or one minute, whichever is less, mints nothing — windows do not reopen,
// the scripts never move a key's state back in time — but withholds quota
// until the clock has caught up with the state's time. Stored state
// further ahead than that reads as fresh, as does state that is garbage,
// of another Redis type or beyond the policy's bounds: a larger backward
// step admits at most one fresh quota, and no stored state locks a key out
// or keeps it longer than the policy's idle time plus that allowance. Run
// Redis servers on NTP that slews rather than steps.
//
// The two homes agree while time does not run backwards. When it does,
// both stay safe but may differ in detail: the in-memory limiter keeps
// state that Redis has already let expire or never stored (a denial stores
// nothing).
//
// # Keys
//
// The state of key K lives in one Redis key named
// prefix + code + ":" + fingerprint + ":{" + digest(K) + "}", for example
// "ratelimit:tb:53a22938:{6j_UO-HlfWLhY9rhn8dAvQ}" for the key "user:42"
// under TokenBucketPolicy(Per(100, time.Minute), 20) ([Limiter.Key] returns
// it). The code names the algorithm (tb, lb, fw, sl, sc) and the
// fingerprint, 8 hex digits of SHA-256 over the policy's numbers, the
// policy: limiters with different policies never read each other's state,
// even on one prefix, and a changed policy starts every key fresh (with a
// full quota) instead of misreading state kept under the old numbers.
//
// The digest is the first 128 bits of SHA-256(K), base64url (22
// characters): keys are often API keys or session tokens, and whoever can
// list Redis keys (a MONITOR, a backup, a shared instance) should not read
// them; the names have a fixed length whatever the key. Note that a digest
// hides a secret, not a guessable key: an IP address can be recovered from
// its digest by trying them all. [WithPlainKeys] keeps K as given, for
// readable names. The braces make the digest (or K) the Cluster hash tag:
// it depends on K only, so one client's state under several limiters lands
// on one node, and no script can fail with CROSSSLOT: every script touches
// one key only. Every key carries a TTL that ends when its state becomes
// idle (a full bucket, passed windows), so idle clients vanish from Redis
// without changing any decision.
//
// A key takes about 88 bytes (leaky bucket) to 120 bytes (token bucket)
// of Redis memory with a short prefix (the hashed name is 36 bytes plus
// the prefix); a sliding log takes about 14 bytes per distinct microsecond
// with events up to 128 of them, then about 125 (a sorted set, which keeps
// every decision at O(log limit)), so at most about 125 x limit bytes.
// Give Redis the memory, or run it with maxmemory-policy noeviction
// (scripts then fail with OOM and the failure policy applies): an evicted
// key would hand its client a fresh, full quota.
//
// # Failures
//
// When Redis cannot decide (down, slow, overloaded, a script error), a call
// returns within the limiter's timeout ([WithTimeout], default 100ms) or
// ctx's deadline, whichever is first, never later and never with a panic.
// The Decision is then what the failure policy chose — [FailOpen] (the
// default), [FailClosed] or a local in-memory fallback with a share of the
// limit ([WithLocalFallback]) — and the error, wrapping [ErrUnavailable] and
// the cause (a refused connection is reported as such, a timeout as a
// timeout; never the key itself, only a digest), is returned and reported
// to the [WithErrorHandler] hook, at most once a second (with the number of
// failures not reported, see [Suppressed]).
//
// The breaker is on by default ([WithBreaker], [DefaultBreakerCooldown]):
// the first call that finds Redis unreachable pays the timeout, and the
// following calls get the failure policy at once until a probe finds Redis
// back. WithBreaker(0) makes every call try Redis and wait.
//
// Under FailOpen, AllowN returns an error and Allowed=true. The one correct
// way to handle that is to act on Decision.Allowed whatever err says (the
// Decision already applies the failure policy: serve the request) and to
// count or log err, rate-limited (the hook already is), never to turn err
// into a failure of the request:
//
//	d, err := l.AllowN(ctx, key, 1)
//	if err != nil {
//		unavailable.Add(1) // a metric; the error handler logs
//	}
//	if !d.Allowed {
//		return tooManyRequests(d.RetryAfter)
//	}
//	serve()
//
// A Decision made by the failure policy has made-up Remaining and
// ResetAfter (Redis did not say); errors.Is(err, ErrUnavailable) tells the
// two apart, for headers for example. A caller that wants its own policy
// can branch on it too.
//
// The failure policy is for Redis failures only. A caller whose ctx is
// done before Redis decides (it went away, or its deadline passed) gets a
// denial with RetryAfter [CanceledRetryAfter] and ctx.Err(), whatever the
// failure policy: nothing is admitted, reported or counted against Redis
// by the breaker. So give ctx more time than the limiter's timeout, or a
// slow Redis becomes a denial rather than the failure policy. A call
// abandoned while in flight may still have been charged (see below).
// Refunds ([Limiter.RefundN]) do not depend on ctx at all.
//
// A call that timed out may still have run on Redis, consuming its events;
// so may a script go-redis retried after a lost reply (its MaxRetries): set
// MaxRetries to -1 in the client options when exact accounting matters more
// than riding out a dropped connection.
//
// # Throughput
//
// Concurrent decisions of one Limiter share round trips: calls that arrive
// while a round trip is in flight go together in the next pipeline of
// EVALSHAs (each script still atomic on its own). A lone caller pays one
// round trip. Denials are remembered locally until their RetryAfter
// ([WithDenyCache]), so a client hammering a denied key costs no round
// trips. Create the go-redis client with ContextTimeoutEnabled: see
// [WithTimeout] (on a loaded two-CPU machine it took a lone caller's
// decision from about 80µs to 43µs).
//
// The scripts need Redis 5 or later (3.2 and 4 work too: the scripts ask for
// effects replication themselves), standalone, Sentinel or Cluster.
package redislimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/typednil"
)

// Limiter is a [ratelimit.KeyedLimiter] whose state lives in Redis: one
// policy, one state per key, shared by every process that uses the same
// Redis, prefix and policy. Most callers want [Limiter.AllowN].
//
// Create one with [New]; the zero value is not usable. A Limiter is safe
// for concurrent use and holds no goroutine while idle, so it needs no
// Close.
type Limiter struct {
	policy   ratelimit.Policy
	scripts  scripts
	prefix   string
	timeout  time.Duration
	failure  FailurePolicy
	fallback *ratelimit.Keyed // FailLocal only
	onError  func(error)
	clock    ratelimit.Clock // nil: the real clock
	base     time.Time       // local monotonic origin for the deny cache
	client   bool            // pass the local clock's time to the scripts
	plain    bool            // key names hold keys as given, not digests
	cache    *denyCache      // nil: disabled
	dials    *dialRecorder   // nil: the client cannot be hooked
	rep      reporter
	latest   atomic.Int64 // with client time: the latest decision time seen (local mono)
	brk      breaker
	batch    batcher
}

var _ ratelimit.KeyedLimiter = (*Limiter)(nil)

// FailurePolicy says what a [Limiter] decides when Redis cannot.
type FailurePolicy uint8

const (
	// FailOpen admits every request while Redis is unavailable: the
	// Decision is allowed, with Remaining = Limit - n. The default: a
	// Redis outage does not become an outage of the service.
	FailOpen FailurePolicy = iota + 1
	// FailClosed denies every request while Redis is unavailable, with
	// Remaining 0 and RetryAfter [FailClosedRetryAfter].
	FailClosed
	// FailLocal decides with an in-memory [ratelimit.Keyed] limiter
	// holding a share of the limit; see [WithLocalFallback], which
	// selects it and gives the share.
	FailLocal
)

// String returns "open", "closed" or "local".
func (f FailurePolicy) String() string {
	switch f {
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	case FailLocal:
		return "local"
	}
	return fmt.Sprintf("FailurePolicy(%d)", uint8(f))
}

// FailClosedRetryAfter is the RetryAfter of the Decisions a [FailClosed]
// limiter returns while Redis is unavailable.
const FailClosedRetryAfter = time.Second

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

var (
	// ErrUnavailable is wrapped by every error a [Limiter] returns because
	// Redis could not decide: a network error, a timeout, an error reply.
	// The error also wraps the cause.
	ErrUnavailable = errors.New("redislimit: redis unavailable")
	// errOverloaded is the cause when too many calls are queued.
	errOverloaded = errors.New("redislimit: too many calls waiting for redis")
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

// New returns a Limiter running p for every key, with state in Redis
// through client: a *redis.Client, *redis.ClusterClient, *redis.Ring or a
// failover client (all are [redis.UniversalClient]s; the limiter needs
// their pipelines, which the narrower redis.Scripter lacks).
//
// It returns an error wrapping [ratelimit.ErrInvalidConfig] when p is
// invalid (see [ratelimit.Policy.Validate]), when p.Period is not a whole
// number of microseconds, when p's arithmetic would not be exact in
// Redis's 53-bit integers, or when an option is invalid. New does not
// contact Redis.
//
// New adds one go-redis hook to client (once per client, however many
// limiters share it; on a Cluster or Ring client, to each node's client as
// it is made). The hook only watches dials, so that an error can say
// "connection refused" rather than "no reply": it changes no command.
func New(client redis.UniversalClient, p ratelimit.Policy, opts ...Option) (*Limiter, error) {
	if typednil.Is(client) {
		return nil, configError("client is nil (%T)", client)
	}
	sc, err := compile(p)
	if err != nil {
		return nil, err
	}
	cfg := config{
		prefix:    DefaultPrefix,
		timeout:   DefaultTimeout,
		failure:   FailOpen,
		cacheKeys: DefaultDenyCacheKeys,
		breaker:   DefaultBreakerCooldown,
	}
	for _, o := range opts {
		if o != nil {
			o.apply(&cfg)
		}
	}
	switch {
	case strings.ContainsAny(cfg.prefix, "{}"):
		return nil, configError("WithPrefix %q must not contain '{' or '}'", cfg.prefix)
	case cfg.timeout <= 0:
		return nil, configError("WithTimeout must be positive, got %v", cfg.timeout)
	case cfg.cacheKeys < 0:
		return nil, configError("WithDenyCache must not be negative, got %d", cfg.cacheKeys)
	case cfg.breaker < 0:
		return nil, configError("WithBreaker must not be negative, got %v", cfg.breaker)
	case cfg.failure == FailLocal && !cfg.instancesSet:
		return nil, configError("FailLocal needs the number of instances sharing the limit: use WithLocalFallback(instances)")
	case cfg.failure == FailLocal && cfg.instances <= 0:
		return nil, configError("WithLocalFallback instances must be positive, got %d", cfg.instances)
	case cfg.failure != FailOpen && cfg.failure != FailClosed && cfg.failure != FailLocal:
		return nil, configError("unknown failure policy %v", cfg.failure)
	}
	l := &Limiter{
		policy:  p,
		scripts: sc,
		prefix:  cfg.prefix + sc.code + ":" + policyFingerprint(sc.code, p) + ":{",
		timeout: cfg.timeout,
		failure: cfg.failure,
		onError: cfg.onError,
		clock:   cfg.clock,
		client:  cfg.client,
		plain:   cfg.plain,
		dials:   recorderFor(client),
		batch: batcher{
			client:      client,
			timeout:     cfg.timeout,
			inline:      honoursDeadlines(client),
			maxFlushers: defaultFlushers,
			maxBatch:    defaultMaxBatch,
			maxQueue:    defaultMaxQueue,
		},
	}
	if l.clock == nil {
		l.base = time.Now()
	} else {
		l.base = l.clock.Now()
	}
	l.brk.cooldown = int64(cfg.breaker)
	if cfg.cacheKeys > 0 && sc.exactRetry {
		l.cache = newDenyCache(cfg.cacheKeys)
	}
	if cfg.failure == FailLocal {
		share, err := localShare(p, cfg.instances)
		if err != nil {
			return nil, err
		}
		if l.fallback, err = ratelimit.NewKeyed(share, ratelimit.WithClock(cfg.clock)); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// localShare returns the policy one of instances processes runs when
// Redis is down.
func localShare(p ratelimit.Policy, instances int) (ratelimit.Policy, error) {
	if instances == 1 {
		return p, nil
	}
	p.Limit = max(p.Limit/instances, 1)
	switch p.Algorithm {
	case ratelimit.TokenBucketAlgorithm:
		if p.Refill%instances == 0 {
			p.Refill /= instances
		} else {
			p.Period *= time.Duration(instances)
		}
	case ratelimit.LeakyBucketAlgorithm:
		p.Period *= time.Duration(instances)
	}
	if err := p.Validate(); err != nil {
		return p, configError("the local fallback's share of the policy for %d instances, %v, is invalid: %v", instances, p, err)
	}
	return p, nil
}

// Policy returns the policy l runs for every key.
func (l *Limiter) Policy() ratelimit.Policy { return l.policy }

// mono returns the local monotonic time in nanoseconds since l was made.
func (l *Limiter) mono() int64 {
	if l.clock == nil {
		return int64(time.Since(l.base))
	}
	return int64(l.clock.Now().Sub(l.base))
}

// nowArg is the script's time argument: "" for the server's clock.
func (l *Limiter) nowArg() any {
	if !l.client {
		return ""
	}
	return l.localNow().UnixMicro()
}

// localNow reads the local clock: l's, or the real one.
func (l *Limiter) localNow() time.Time {
	if l.clock == nil {
		return time.Now()
	}
	return l.clock.Now()
}

// times returns the script's time argument and, when the deny cache needs
// it, the local monotonic time the decision is made at. With
// [WithClientTime] both come from one reading, truncated to the
// microsecond as the script does, so that the cache does not deny past the
// moment the script would admit.
func (l *Limiter) times() (arg any, mono int64) {
	if !l.client {
		if l.cache == nil {
			return "", 0
		}
		return "", l.mono()
	}
	t := l.localNow()
	return t.UnixMicro(), int64(t.Sub(l.base)) - int64(t.Nanosecond()%1000)
}

// Allow is shorthand for AllowN(ctx, key, 1) that reports only whether the
// event was admitted (by Redis, or by the failure policy).
func (l *Limiter) Allow(ctx context.Context, key string) bool {
	d, _ := l.AllowN(ctx, key, 1)
	return d.Allowed
}

// AllowN reports whether n events may happen now for key, and consumes
// them if so: all n or nothing. A denied request stores nothing. When
// n <= 0 or n exceeds the limit the Decision is denied with RetryAfter
// [ratelimit.RetryNever].
//
// When Redis cannot decide within the timeout, AllowN returns the failure
// policy's Decision and an error wrapping [ErrUnavailable] and the cause;
// act on the Decision either way (see the package documentation). When
// ctx is done first, AllowN returns a denial with RetryAfter
// [CanceledRetryAfter] and ctx.Err(), never the failure policy's Decision.
func (l *Limiter) AllowN(ctx context.Context, key string, n int) (ratelimit.Decision, error) {
	if ctx.Err() != nil {
		return l.canceled(ctx)
	}
	valid := n > 0 && n <= l.policy.Limit
	var (
		h    uint64
		gen  uint64
		sent int64
	)
	now, mono := l.times()
	if valid && l.cache != nil {
		h = l.cache.hash(key)
		var d ratelimit.Decision
		var ok bool
		if d, gen, ok = l.cache.get(h, key, n, mono, l.policy.Limit); ok {
			return d, nil
		}
		sent = mono
	}
	m := n
	if !valid {
		m = 0
	}
	d, err := l.decide(ctx, key, now, m, valid)
	if err != nil {
		if ctx.Err() != nil {
			return l.canceled(ctx)
		}
		return l.fail(ctx, "allow", key, n, err)
	}
	if !valid {
		d.Allowed, d.RetryAfter = false, ratelimit.RetryNever
		return d, nil
	}
	if l.cache != nil {
		inOrder := l.ordered(sent)
		if d.Allowed {
			// What was cached for key predates this admission: a denial
			// of a larger n now has a longer wait.
			l.cache.invalidate(h, key)
		} else if inOrder {
			l.cache.put(h, key, n, sent, l.cacheSpan(n, d), gen, d)
		}
	}
	return d, nil
}

// cacheSpan returns how long the denial d of n events keeps its Remaining
// (at least; 0 when that is not known), so that a cached copy says exactly
// what Redis would. Remaining r < n grows by one when a token arrives or
// the bucket leaks one (every Period/Refill or Period), and n-r-1 such
// steps come before n fit at RetryAfter; a fixed window's Remaining holds
// until the window ends (its RetryAfter); a sliding log's grows whenever
// its oldest event leaves, which only RetryAfter says when r = n-1.
// RetryAfter was rounded up to the microsecond, hence the microsecond off.
func (l *Limiter) cacheSpan(n int, d ratelimit.Decision) int64 {
	k := int64(n - d.Remaining - 1)
	if k <= 0 || l.policy.Algorithm == ratelimit.FixedWindowAlgorithm {
		return int64(d.RetryAfter)
	}
	per := int64(l.policy.Period)
	if k > math.MaxInt64/per {
		return 0
	}
	var steps int64
	switch l.policy.Algorithm {
	case ratelimit.TokenBucketAlgorithm:
		r := int64(l.policy.Refill)
		steps = (k*per + r - 1) / r
	case ratelimit.LeakyBucketAlgorithm:
		steps = k * per
	default:
		return 0
	}
	return max(int64(d.RetryAfter)-steps-int64(time.Microsecond), 0)
}

// ordered reports whether mono is not earlier than any time a decision
// was made at. Only with client time can it be earlier (a clock that runs
// backwards, or callers racing): the script then decides at its stored
// state's later time and counts RetryAfter from there, which a cache entry
// counting from mono would get wrong, so such a denial is not cached.
func (l *Limiter) ordered(mono int64) bool {
	if !l.client {
		return true
	}
	for {
		last := l.latest.Load()
		if mono < last {
			return false
		}
		if mono == last || l.latest.CompareAndSwap(last, mono) {
			return true
		}
	}
}

// CanceledRetryAfter is the RetryAfter of the Decision a [Limiter] returns
// when the caller's ctx is done before Redis decides: nothing was decided,
// and a second is what a [FailClosed] limiter announces for the same
// reason (no answer).
const CanceledRetryAfter = FailClosedRetryAfter

// canceled is the answer to a caller whose ctx is done: a denial and
// ctx.Err(), never the failure policy (which is for Redis failures), and
// nothing reported: the caller gave up, Redis did not fail.
func (l *Limiter) canceled(ctx context.Context) (ratelimit.Decision, error) {
	return ratelimit.Decision{Limit: l.policy.Limit, RetryAfter: CanceledRetryAfter}, ctx.Err()
}

// Peek reports the Decision AllowN(ctx, key, n) would return now, without
// consuming anything. Peek(ctx, key, 0) reports the key's current quota.
// It always asks Redis; on failure it returns the error and a zero
// Decision, and when ctx is done first a denial and ctx.Err(), as AllowN.
func (l *Limiter) Peek(ctx context.Context, key string, n int) (ratelimit.Decision, error) {
	if ctx.Err() != nil {
		return l.canceled(ctx)
	}
	valid := n >= 0 && n <= l.policy.Limit
	m := n
	if !valid {
		m = 0
	}
	d, err := l.decide(ctx, key, l.nowArg(), m, false)
	if err != nil {
		if ctx.Err() != nil {
			return l.canceled(ctx)
		}
		err = l.unavailable("peek", key, err)
		return ratelimit.Decision{}, err
	}
	if !valid {
		d.Allowed, d.RetryAfter = false, ratelimit.RetryNever
	}
	return d, nil
}

// decide runs the decision script.
func (l *Limiter) decide(ctx context.Context, key string, now any, n int, commit bool) (ratelimit.Decision, error) {
	flag := "0"
	if commit {
		flag = "1"
	}
	args := make([]any, 0, 3+len(l.scripts.params))
	args = append(args, now, n, flag)
	args = append(args, l.scripts.params...)
	var v []int64
	err := l.run(ctx, l.scripts.decide, key, args, func(cmd *redis.Cmd) (err error) {
		v, err = cmd.Int64Slice()
		return err
	})
	if err != nil {
		return ratelimit.Decision{}, err
	}
	if len(v) != 4 {
		return ratelimit.Decision{}, fmt.Errorf("redislimit: script returned %d values, want 4", len(v))
	}
	return ratelimit.Decision{
		Allowed:    v[0] == 1,
		Limit:      l.policy.Limit,
		Remaining:  int(v[1]),
		RetryAfter: time.Duration(v[2]) * time.Microsecond,
		ResetAfter: time.Duration(v[3]) * time.Microsecond,
	}, nil
}

// run runs script on key with args through the batcher and the breaker,
// and hands the reply to read.
func (l *Limiter) run(ctx context.Context, script *redis.Script, key string, args []any, read func(*redis.Cmd) error) error {
	var now int64
	if l.brk.cooldown != 0 {
		now = l.mono()
	}
	ok, probe, err := l.brk.allow(now)
	if !ok {
		return err
	}
	c := getCall()
	c.script = script
	c.keys = []string{l.Key(key)}
	c.args = args
	if err = l.batch.do(ctx, c, l.timeout); err == nil {
		err = read(c.cmd)
		putCall(c)
	}
	callerDone := ctx.Err() != nil
	if err != nil && !callerDone {
		err = l.cause(err)
	}
	if l.brk.cooldown != 0 {
		l.brk.done(l.mono(), probe, err, callerDone)
	}
	return err
}

// fail applies the failure policy to a call Redis could not decide.
func (l *Limiter) fail(ctx context.Context, op, key string, n int, cause error) (ratelimit.Decision, error) {
	err := l.unavailable(op, key, cause)
	limit := l.policy.Limit
	if n <= 0 || n > limit {
		return ratelimit.Decision{Limit: limit, RetryAfter: ratelimit.RetryNever}, err
	}
	switch l.failure {
	case FailClosed:
		return ratelimit.Decision{Limit: limit, RetryAfter: FailClosedRetryAfter}, err
	case FailLocal:
		d, _ := l.fallback.AllowN(ctx, key, n)
		return d, err
	}
	return ratelimit.Decision{Allowed: true, Limit: limit, Remaining: limit - n}, err
}

// unavailable returns the error of a call Redis could not decide (not the
// caller's cancellation: callers check that first), with its truthful
// cause, and reports it.
func (l *Limiter) unavailable(op, key string, cause error) error {
	quiet := errors.Is(cause, ErrBreakerOpen)
	err := &unavailableError{op: op, digest: KeyDigest(key), err: cause}
	l.report(err, quiet)
	return err
}

// RefundN gives back n events that AllowN admitted for key just before, as
// if they had not happened, never raising the key above a fresh state:
// tokens go back to the bucket (capped at capacity), the leaky bucket's
// level drops, the window that holds them is decremented, or the sliding
// log's newest n events are removed (under concurrent traffic on the same
// key these may be another request's, a moment younger). A key with no
// state needs no refund.
//
// The refund does not depend on ctx: it is made even when ctx is done or
// ends meanwhile (a client that went away must not leave its charge in
// place), bounded by the limiter's timeout only; ctx's values are kept.
//
// With [WithLocalFallback], a refund that Redis cannot make is made in the
// local fallback, which most likely admitted the events. The error wraps
// [ErrUnavailable] then, or [ratelimit.ErrInvalidN] when n <= 0.
func (l *Limiter) RefundN(ctx context.Context, key string, n int) error {
	if n <= 0 {
		return fmt.Errorf("redislimit: refund of n=%d: %w", n, ratelimit.ErrInvalidN)
	}
	n = min(n, l.policy.Limit) // refunding more than the limit empties the state
	// A refund gives back what was charged: it must not depend on the
	// caller still waiting (a client that went away would leave the charge
	// in place). It runs bounded by the limiter's timeout only.
	ctx = context.WithoutCancel(ctx)
	var h uint64
	if l.cache != nil {
		h = l.cache.hash(key)
		l.cache.invalidate(h, key)
	}
	args := make([]any, 0, 2+len(l.scripts.params))
	args = append(args, l.nowArg(), n)
	args = append(args, l.scripts.params...)
	err := l.run(ctx, l.scripts.refund, key, args, (*redis.Cmd).Err)
	if l.cache != nil {
		// Again: a denial decided before the refund landed may have been
		// cached meanwhile.
		l.cache.invalidate(h, key)
	}
	if err != nil {
		err = l.unavailable("refund", key, err)
		if l.fallback != nil {
			_ = l.fallback.RefundN(ctx, key, n)
		}
		return err
	}
	return nil
}

// Wait is shorthand for WaitN(ctx, key, 1).
func (l *Limiter) Wait(ctx context.Context, key string) error {
	return l.WaitN(ctx, key, 1)
}

// WaitN blocks until n events are admitted for key or ctx is done,
// retrying after each denial's RetryAfter (so waiters on one key are not
// served in arrival order). It returns at once with an error wrapping
// [ratelimit.ErrInvalidN] or [ratelimit.ErrExceedsLimit] when n can never
// be admitted, and with one wrapping [ratelimit.ErrDeadline] (and
// context.DeadlineExceeded) when the wait would outlast ctx's deadline.
//
// When Redis is unavailable WaitN follows the failure policy: it returns
// nil when the policy admits (FailOpen, or the local fallback), waits as
// the local fallback says, and with FailClosed returns the error. When ctx
// is done it returns ctx.Err(), whatever the failure policy.
func (l *Limiter) WaitN(ctx context.Context, key string, n int) error {
	if n <= 0 {
		return fmt.Errorf("redislimit: n=%d: %w", n, ratelimit.ErrInvalidN)
	}
	if n > l.policy.Limit {
		return fmt.Errorf("redislimit: n=%d exceeds the limit %d: %w", n, l.policy.Limit, ratelimit.ErrExceedsLimit)
	}
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		d, err := l.AllowN(ctx, key, n)
		if err != nil && ctx.Err() != nil {
			return ctx.Err() // the caller gave up, whatever the failure policy says
		}
		if d.Allowed {
			return nil
		}
		if err != nil && l.failure != FailLocal {
			return err
		}
		if d.RetryAfter == ratelimit.RetryNever {
			return fmt.Errorf("redislimit: n=%d exceeds the limit %d: %w", n, d.Limit, ratelimit.ErrExceedsLimit)
		}
		if dl, ok := ctx.Deadline(); ok && d.RetryAfter > time.Until(dl) {
			return &deadlineError{d.RetryAfter}
		}
		if err := l.sleep(ctx, d.RetryAfter); err != nil {
			return err
		}
	}
}

// deadlineError reports a wait that would outlast ctx's deadline; it
// matches ratelimit.ErrDeadline and context.DeadlineExceeded.
type deadlineError struct{ wait time.Duration }

func (e *deadlineError) Error() string {
	return fmt.Sprintf("%v (needs %v)", ratelimit.ErrDeadline, e.wait)
}
func (e *deadlineError) Unwrap() []error {
	return []error{ratelimit.ErrDeadline, context.DeadlineExceeded}
}

// sleep waits d on the local clock, or until ctx is done.
func (l *Limiter) sleep(ctx context.Context, d time.Duration) error {
	var ch <-chan time.Time
	if l.clock == nil {
		t := time.NewTimer(d)
		defer t.Stop()
		ch = t.C
	} else {
		ch = l.clock.After(d)
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
