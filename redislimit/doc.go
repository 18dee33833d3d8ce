// Package redislimit runs the rate-limiting policies of package ratelimit on
// Redis, so that every instance of a service shares one limit per key
// instead of each counting alone (N instances counting alone admit N times
// the limit).
//
// It is a module of its own, so that go-redis comes only to the programs
// that use Redis (go get github.com/rlkit/ratelimit/redislimit).
//
// A [Limiter] implements [ratelimit.KeyedLimiter] and [ratelimit.KeyAdmin]
// for any [ratelimit.Policy] with the same Decisions as the in-memory
// [ratelimit.Keyed]. It accepts any [redis.UniversalClient]: a single node,
// a Sentinel failover client, a Cluster or a Ring.
//
//	rdb := redis.NewClient(&redis.Options{Addr: "localhost:6379", ContextTimeoutEnabled: true})
//	l, err := redislimit.New(rdb, ratelimit.TokenBucketPolicy(ratelimit.Per(100, time.Minute), 20))
//	...
//	d, err := l.AllowN(ctx, userID, 1)
//
// # Decisions
//
// Each decision is one Lua script, run atomically by Redis in one round
// trip, so the check and the consumption cannot interleave with another
// client's. A denied request stores nothing, so a flood of denials is no
// flood of writes. Concurrent calls share round trips (one pipeline), and
// denials that leave nothing are remembered locally until their RetryAfter
// ([WithDenyCache]).
//
// Time comes from the Redis server's clock (TIME), so clock skew between
// application servers does not matter; [WithClock] decides on the
// limiter's own clock instead (for tests). Redis keeps time in integer
// microseconds: a Policy's Period must be whole microseconds, and
// RetryAfter and ResetAfter are the in-memory durations rounded up to the
// microsecond, never shorter. A step of the server's wall clock mints at
// most one fresh quota per key and never locks a key out.
//
// # Keys
//
// The state of a key lives in one Redis key named after the algorithm, a
// fingerprint of the policy and a digest of the key ([Limiter.Key] returns
// it): limiters with different policies never read each other's state, a
// key that is an API key never appears in Redis (unless [WithPlainKeys]),
// and the digest is the Cluster hash tag, so no script fails with
// CROSSSLOT. Every key has a TTL that ends when its state is idle. Run Redis
// with maxmemory-policy noeviction: an evicted key is a fresh, full quota.
//
// [Limiter.SetPolicy] changes the policy of a running limiter, converting
// each key's state lazily as the [ratelimit.Inheritance] mode says;
// [WithPrevious] tells a process started after a change which policies came
// before. Switch every process at once: until all run the new policy, a key
// may admit up to one more quota of the old one.
//
// # Failures
//
// When Redis cannot decide (down, slow, overloaded, an error reply), a call
// returns within the limiter's timeout ([WithTimeout]) or ctx's deadline,
// whichever is first, with the failure policy's Decision and an error
// wrapping [ErrUnavailable] and the cause (never the key, only a digest).
// The failure policy is [FailOpen] (the default), [FailClosed] or an
// in-memory fallback holding a share of the limit ([WithLocalFallback]).
// Act on the Decision whatever the error says, and count the error:
//
//	d, err := l.AllowN(ctx, key, 1)
//	if err != nil {
//		unavailable.Add(1) // a metric (or use WithObserver)
//	}
//	if !d.Allowed {
//		return tooManyRequests(d.RetryAfter)
//	}
//	serve()
//
// The failure policy is for Redis failures only: a caller whose ctx is done
// first gets a denial and ctx.Err(). A breaker ([WithBreaker], on by
// default) answers with the failure policy at once while Redis is known to
// be unreachable, so an outage costs one call the timeout, not every call.
//
// The limiter never lets go-redis retry a script (a script whose reply was
// lost may have run, and running it again would charge twice): it retries
// itself, within the timeout, only the errors that prove the script did not
// run. A lost reply thus costs at most an under-admission, never an
// over-admission. [WithReplicaAck] makes each admission wait until replicas
// hold it, which bounds what a failover can lose.
//
// # Observing
//
// [WithObserver] reports one [ratelimit.Event] per decision, with the name
// given by [WithName]; behind the servers of packages httplimit and
// grpclimit, give the observer to them instead. [WithLogger] logs, at most
// once per interval, that Redis could not decide; without it the limiter
// logs nothing and leaves that to whoever handles the error.
//
// # Hot keys
//
// One script per decision caps a hot key at what one Redis core runs.
// [WithLeases] lifts that for the keys that need it: a process takes a
// share of a hot key's quota from Redis in one script and serves decisions
// from it in memory, at the price of coarser Remaining and a bounded
// under-admission (never an over-admission on Redis's clock for the
// windows).
//
// # Reservations
//
// [Limiter.ReserveN] reserves an estimated cost; its Settle charges the
// actual one, once: one script each, with a record in the key's Cluster
// slot that expires at the estimate. Decisions are memory's
// ([ratelimit.Keyed.ReserveN]); docs/redis.md has the design.
//
// # Concurrency limits
//
// [NewConcurrency] bounds how many permits are in flight per key across
// processes ([ratelimit.ConcurrencyLimiter]): one script per acquire and
// per release, on the server's clock, one Redis key per client key.
// Permits expire unless renewed ([WithPermitExpiry]); each process renews
// all of its permits in one pipeline per period, and a permit it could
// not renew is lost (Permit.Lost closes) before Redis can hand it on.
//
// docs/redis.md in the repository is the design behind all this: the key
// names and their memory, time steps, calendar quotas, policy changes,
// the retries, replication, what leases cost, reservations and the
// concurrency limits, in detail. The scripts
// need Redis 3.2 or later (tested with Redis 7).
package redislimit
