// Package redislimit runs the rate-limiting policies of package ratelimit on
// Redis, so that every instance of a service shares one limit per key
// instead of each counting alone (N instances counting alone admit N times
// the limit).
//
// It is a module of its own, so that go-redis comes only to the programs
// that use Redis:
//
//	go get github.com/rlkit/ratelimit/redislimit
//
// A [Limiter] implements [ratelimit.KeyedLimiter] for any [ratelimit.Policy]
// (token bucket, leaky bucket, fixed window, sliding log, sliding counter,
// calendar quota)
// with the same Decisions as the in-memory [ratelimit.Keyed]. Each decision
// is one Lua script, run atomically by Redis in one round trip: the check
// and the consumption cannot interleave with another client's, and a denied
// request stores nothing: no denial and no Peek writes to Redis (no key
// changed, no TTL refreshed, so a flood of denials is no flood of
// replicated writes), except the first AllowN of a key after a policy
// change, which stores the conversion of its old state (see "Changing the
// policy").
//
// # Time
//
// By default the scripts read the Redis server's clock (TIME), so clock skew
// between application servers does not matter. [WithClientTime] passes the
// limiter's own [ratelimit.Clock] instead (for tests, or to decide on the
// callers' clocks: the clock's time at [New] plus the monotonic time since,
// as the in-memory limiters read it). Redis Lua numbers are doubles, exact for integers below
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
// it). The code names the algorithm (tb, lb, fw, sl, sc, cq) and the
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
// # Calendar quotas
//
// A [ratelimit.QuotaPolicy] (N per day, week, month or year in an IANA
// zone) runs as one script like the fixed window's, with the state
// "<start> <end> <count>". The zone's rules stay in Go: each call passes
// the boundaries of four periods around the application's time, and the
// script counts in the one holding its own now — the Redis server's TIME
// unless [WithClientTime] — so the boundary comes from the server's clock.
// A server clock outside those periods ("Redis clock more than a period
// away from the application's") fails the call and the failure policy
// applies. The key's fingerprint covers the limit and the whole calendar
// (its normalized description, [ratelimit.Calendar.String]: unit, reset
// time, week start or month day, zone name).
//
// So the zone is known by its name, and [New], [Limiter.SetPolicy] and
// [WithPrevious] refuse a zone whose name does not say its rules: an
// unnamed one, one named "Local" (time.Local without TZ: each host's
// /etc/localtime) and one named after a zone of the zone database whose
// UTC offsets differ from that zone's within a year of the quota's
// periods (a time.FixedZone("UTC", 3600)); load zones by IANA name. Names
// the database does not know are taken as given. Processes that still
// disagree about a period (one name, two tzdata releases) converge instead
// of resetting each other: the stored state holds its period's bounds, and
// every process counts in the stored period while it holds now, whether
// or not it is its own; the first to count after it ends stores its own.
// A fresh count thus starts only when the stored period has ended, and two
// views of the zone admit at most twice the limit in one of their periods
// (before, each call could start fresh). Refusing the mismatch instead
// would hand it to the failure policy, which by default admits.
//
// # Reset, block, penalty
//
// [Limiter.Reset], [Limiter.Block] and [Limiter.Penalize] ([ratelimit.KeyAdmin])
// are one script each. A block lives in its own key, prefix + "blk:{" +
// digest + "}", beside the state and independent of the policy, with a TTL
// that ends with it; every decision script reads it. A blocked AllowN is
// answered from a Peek of the key's state and stores nothing, not even
// the conversion of state kept under an earlier policy (see below), as in
// memory. Admin calls return an error wrapping [ErrUnavailable] when Redis
// fails: no failure policy.
//
// # Changing the policy
//
// [Limiter.SetPolicy] changes the policy of a running limiter;
// [WithPrevious] tells a process started after a change which policies
// came before. Conversion is lazy, per key, inside the decision script:
// when a key has no state under the current policy, the script looks for
// its state under the previous ones (newest first; same hash tag, so the
// same Cluster slot), takes u = old limit - old remaining quota at now,
// applies each later change's mode (KeepUsed min(u, next limit), ScaleUsed
// ceil(u*next/previous), StartFresh 0), stores a fresh state of the new
// policy charged u, deletes the old keys and decides. A Peek converts
// without storing. A change never hands a key more than its mode defines
// and never locks it out (u is at most the new limit, so the key recovers
// within one window of the new policy). Token and leaky buckets keep the
// used amount exactly; fixed windows, sliding counters and quotas count it
// in the current window or period; a sliding log re-times it to the moment
// of conversion (it may recover up to one window later than the old
// timestamps would have). Every AllowN touches the key, even one of an n
// that can never be admitted; a Peek, and an AllowN of a blocked key,
// convert without storing (each at its own now).
//
// A limiter keeps the last four previous policies, as the in-memory one
// does: a decision probes at most four (one EXISTS over all their keys,
// then reads only those that exist), so its Redis work is the same after
// one change or a thousand. A key whose state was last written more than
// four changes ago, and is not idle yet, starts fresh under the current
// policy (in memory too); its old key expires with its TTL. The names of
// policies dropped that way stay taken until their states are idle, so no
// later policy reads such a key as its own.
//
// A change back to an earlier policy (or to the one in force) must not
// read the state kept under that earlier policy as its own: it converts
// step by step like any other (StartFresh forgets it, a sliding log is
// re-timed), exactly as in memory. So while a previous policy has the
// same fingerprint, the key names take a salt after it, one more than
// that policy's: "fw:1a2b3c4d.1:{...}". The salt depends only on the
// previous policies, so a process given them by [WithPrevious] (oldest
// first) names keys as the process that went through the changes; give
// every process the same list.
//
// Rolling a change out over several processes: every process converts
// only under the policies it knows. A process still on the old policy
// keeps counting under the old keys, and a key that a process on the new
// policy has converted is deleted there, so an old process sees that key
// fresh and may admit up to one more quota of the old policy for it, until
// it switches too. A change is therefore exact once every process runs it;
// keep the window short: switch every process at once (call SetPolicy in
// each when your configuration changes, or restart them together with the
// new policy and WithPrevious), rather than in a slow rolling deploy. A
// process started after the change needs WithPrevious with the same list
// of previous policies as the others. Within one process, SetPolicy lets
// calls under the old policy finish before any runs under the new one,
// and starts an empty deny cache and a new local fallback.
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
// timeout; never the key itself, only a digest), is returned; the
// middleware and interceptors of httplimit and grpclimit log it, once, for
// the limits they serve, and [WithLogger] makes the limiter log it itself,
// at most once per [WithErrorReportInterval] (with the number of failures
// not reported).
//
// # Metrics
//
// [WithObserver] reports every decision to a [ratelimit.Observer], one
// Event per AllowN and per WaitN: admitted, denied, decided by the failure
// policy (the breaker's answers included) or refused with an error, with
// the name given by [WithName], the algorithm, and the latency round trip
// included; never the key. Behind httplimit's middleware or grpclimit's
// interceptors, give the observer to them instead: they report the same
// Events under the limit's name, and refuse a limiter with its own.
//
// The breaker is on by default ([WithBreaker], [DefaultBreakerCooldown]):
// the first call that finds Redis unreachable pays the timeout, and the
// following calls get the failure policy at once until a probe finds Redis
// back. WithBreaker(0) makes every call try Redis and wait.
//
// Under FailOpen, AllowN returns an error and Allowed=true. The one correct
// way to handle that is to act on Decision.Allowed whatever err says (the
// Decision already applies the failure policy: serve the request) and to
// count err (or log it: the limiter logs only with [WithLogger]), never to turn
// err into a failure of the request:
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
// # Retries
//
// The limiter never lets go-redis retry a script: every script (decisions,
// refunds, admin calls) is sent as a command whose NoRetry is true, which
// Client, ClusterClient (commands and pipelines) and Ring honour, whatever
// the client's MaxRetries; a ClusterClient still follows MOVED and ASK
// (the script did not run there; with [WithReplicaAck] on a Cluster the
// limiter sends to each master's own client and retries MOVED and ASK
// itself, after asking for the topology to be reloaded, so for a moment
// after a slot moved, up to a fifth of a second, such calls may get the
// failure policy). A script whose reply was lost after its
// request was written (a connection reset or closed, a read that timed
// out) may have run, and running it again would charge its events twice.
// Such a call gets the failure policy at once, and may have been charged:
// a lost reply costs at most an under-admission (events charged that the
// caller did not get), never an over-admission. So may a call that timed
// out, or whose caller gave up, while its script was in flight.
//
// The limiter retries itself, within the call's timeout, after a short
// backoff (a twentieth of the timeout, then a fifth) and at most 3 attempts
// in all, only the errors that prove the script did not run: NOSCRIPT
// (sent again at once as EVAL), a failed dial, go-redis's pool timeout,
// and the error replies LOADING, READONLY, MASTERDOWN, CLUSTERDOWN,
// TRYAGAIN, NOREPLICAS and "ERR max number of clients" (LOADING,
// MASTERDOWN, CLUSTERDOWN and TRYAGAIN refuse the script before it runs;
// Redis 7 runs a script without flags until its first write call and fails
// there on a replica or without enough replicas, and the scripts read
// before they write, so nothing was written). When the condition clears
// in time, for example a replica promoted during a failover, the call
// succeeds; otherwise the failure policy applies.
//
// # Replication
//
// Redis replicates asynchronously: a master that fails may not have passed
// its latest writes to the replica promoted in its place, which then
// admits again events the old master had admitted (at most the writes of
// the replication lag). [WithReplicaAck](replicas, timeout) bounds that: each
// round trip of decisions ends with WAIT replicas timeout-ms on the same
// connection, in the same pipeline (on a Cluster, per master), and an
// admission is returned only once replicas replicas acknowledged it.
// Otherwise the call gets the failure policy, with an error wrapping
// [ErrUnavailable] and [ErrNotReplicated]; denials are returned as they
// are. Pair it with the server setting min-replicas-to-write (and
// min-replicas-max-lag), which stops an isolated master from accepting
// writes at all: on Redis 7 the scripts then fail with NOREPLICAS at their
// first write, before anything is written (older servers do not apply it
// to scripts). Measured on a loopback master and
// replica (BenchmarkReplicaAck, 6 runs on a quiet 2-CPU machine, medians),
// WithReplicaAck(1, 50ms) made a lone caller's decision 1.35 times as long
// (160 to 217 µs: the replica's acknowledgement) and gave 64 concurrent
// callers 0.71 times the decisions per second (23.7k to 16.8k: one WAIT
// covers a whole pipeline, but the next pipeline waits for it). On a
// heavily loaded machine a few admissions in a thousand missed the 50 ms.
// While no replica acknowledges, every admitting round trip waits the
// whole timeout and its admissions get the failure policy: under
// FailClosed a master whose only replica was promoted away admits nothing
// until a replica rejoins it (give it two replicas), under FailOpen they
// are admitted with ErrNotReplicated, and under FailLocal the local
// fallback decides.
//
// # Leases
//
// One script per decision caps a hot key at what one Redis core runs
// (50k to 78k decisions/s on one key from 64 goroutines of one process in
// BenchmarkRedisLease, below). [WithLeases]
// lifts that for the keys that need it: once a key is hot, a process
// takes a share of its quota from Redis in one script (a lease of k
// events, charged there at the grant's time t0 exactly as an AllowN of k
// at t0 would be, so Redis's accounting never exceeds the policy and
// nothing is admitted that Redis did not grant), serves decisions from it
// in memory, and gives back what is unused when the lease ends.
//
//   - A key is hot once the events asked for it (admitted or not) in one
//     [LeaseConfig.Target] reach 2. Until then, and again once its rate
//     drops, every decision is one script as without leases: the first
//     Target of a key's traffic is always decided exactly.
//   - A lease holds k = the key's rate x Target events (smoothed), at
//     least the n asked and at most Limit/[LeaseConfig.MaxShare]. When
//     Redis has fewer than k left but at least n, the same script grants
//     what is left (a partial lease); when it has fewer than n, the
//     answer is Redis's exact denial of n. One grant per key is in flight
//     at a time in a process; the callers that need it wait for it.
//   - A lease is used for at most [LeaseConfig.Lifetime] from the moment
//     its grant was sent, and, for a fixed window, sliding counter or
//     quota, never after the end of the window or period it was charged
//     in (measured locally from when the grant was sent, which is not
//     later than the script's time, so never later than on Redis's
//     clock). Its unused events are given back by the key's next
//     decision after it ends (in the script that grants the next lease,
//     so renewing costs one round trip), by a sweep that each successful
//     grant runs over a few other keys (at most one give-back per caller,
//     none when the caller's ctx is done or its deadline is nearer than
//     the limiter's timeout), or by [Limiter.ReleaseLeases] (call it at
//     shutdown). A windowed policy's give-back is its refund script run at
//     the grant's time, so it takes the events back only from the window
//     they were charged in; once that window has ended they are gone. A
//     bucket's give-back runs at Redis's current time and returns only
//     what refill since the grant has not cancelled (unused - refill x
//     elapsed, at least 0): the bucket may have refilled meanwhile, and a
//     give-back never returns more than the lease still holds down.
//   - Memory: one entry per tracked key, at most [LeaseConfig.MaxKeys]
//     (about 250 bytes each, plus the key); keys beyond it are decided
//     without leases. A key idle for 10 Lifetimes (at least a second) is
//     forgotten by the sweep and starts cold again. A key gets an entry
//     on its second decision within Target (a doorkeeper of 1024 slots
//     remembers first sightings), so keys decided once leave room; but
//     with more than MaxKeys distinct keys decided at least twice a
//     Target per 10 Lifetimes the table stays full, and a key that turns
//     hot then gets no lease (it is decided exactly, one script per
//     decision).
//
// What leases cost, with P processes leasing one key and k at most
// Limit/MaxShare (with the defaults, each lease covers about 10ms of the
// key's traffic and at most a sixteenth of its limit):
//
//   - Under-admission: leases park at most P x k events, charged on Redis
//     but not yet admitted (one lease per process and key). More can be
//     charged and never admitted: a grant whose reply is lost or times
//     out (its k), a lease that an admin call drops (its rest), a lease
//     that SetPolicy retires, a give-back that fails, and, for a bucket,
//     the refill x elapsed that a give-back withholds (in case refill has
//     cancelled it) when the bucket was not in fact full meanwhile: all
//     of a lease's rest once it is given back rest/refill after the grant
//     (so a process that stalls holding a lease may lose its rest). Token
//     and leaky bucket: parked events come back when they are given back
//     (the key's next decision, a sweep, ReleaseLeases), else by refill.
//     Fixed window, quota: events parked at a window's end are lost with
//     it, so a window in which a call is denied admits at least
//     Limit - P x k when no grant is lost. Sliding counter: a denial at a
//     fraction f into a window proves only that its count reached Limit
//     less the previous window's weighted by 1 - f; of that, at most
//     P x k is parked and lost (the parked events also count, weighted,
//     as the next window's previous count).
//   - Over-admission (apart from a Reset racing other processes'
//     give-backs, below): none on Redis's clock for the fixed window, the
//     sliding counter (the estimate at each event, by the events' own
//     times, stays within the limit) and the quota. For the buckets, an
//     event may happen up to Lifetime after its lease was charged: counted
//     from any moment when no lease is held (the start, say), the events
//     stay within capacity + rate x elapsed, but an observer counting
//     true event times over an interval [a, b] may see up to P x k more
//     than capacity + rate x (b - a): the leases granted before a and used
//     in it.
//   - The sliding log cannot be leased: its events would be stamped with
//     the grant's time and leave the log up to Lifetime early, breaking
//     its exact window. New and SetPolicy refuse it with WithLeases.
//   - Coarser Decisions: an admission from a lease reports Remaining as
//     the events left in the lease plus Redis's Remaining at the grant
//     (other processes' admissions since are not seen), and ResetAfter
//     counted down from the grant's. A denial is Redis's exact one (its
//     RetryAfter holds: parked events are charged on Redis, whose state
//     does not depend on them), except that callers waiting for the same
//     grant share its denial when they ask for the same n, and the deny
//     cache ([WithDenyCache]) answers as without leases. Peek asks Redis
//     and does not see the local lease.
//   - Failures: a grant is a decision script like any other (timeout,
//     breaker, failure policy, never retried once sent); a grant whose
//     reply is lost stays charged (an under-admission of up to k, never an
//     over-admission). Admissions from a lease need no round trip, so they
//     go on while Redis is unreachable, until the lease ends. A caller
//     whose ctx is done gets the usual denial, never a local admission it
//     was not granted: it stops waiting for a grant, which does not
//     depend on its ctx (bounded by the limiter's timeout) and whose lease
//     is installed when the reply comes, the caller's events included.
//   - [Limiter.SetPolicy] starts a new set of leases: those granted under
//     the old policy stop admitting at once, and are not given back (the
//     conversion counts their events as used: an under-admission, once).
//     Reset, Block and Penalize drop this process's lease of the key,
//     wait for its grant and give-backs in flight here (a grant whose
//     reply comes after installs no lease), and decide it exactly until
//     they are done. Other processes' leases admit until they end (at most
//     Lifetime), so a Block takes up to Lifetime to stop them, and their
//     give-backs may land after a Reset, taking their events off the
//     fresh state (an over-admission of up to (P - 1) x k, once).
//   - The observer sees one Event per decision, as without leases (Home
//     [ratelimit.HomeRedis]); nothing distinguishes a leased admission.
//
// Measured on a 2-CPU machine (BenchmarkRedisLease in the benchmarks
// module: one key, 64 goroutines of one process, medians of 3 runs of 1s,
// in two runs): about 3 to 8 million decisions/s with leases, against 50k
// to 78k without and 26k to 34k for go-redis/redis_rate, depending on the
// algorithm and the run. The hot path is a map lookup, a mutex per key
// and a clock reading, and allocates nothing; the mutex bounds one key in
// one process (the spread between runs is how the goroutines queue on
// it).
//
// # Throughput
//
// Concurrent decisions of one Limiter share round trips: calls that arrive
// while a round trip is in flight go together in the next pipeline of
// EVALSHAs (each script still atomic on its own). A lone caller pays one
// round trip. Denials are remembered locally until their RetryAfter
// ([WithDenyCache]), so a client hammering a denied key costs no round
// trips. Create the go-redis client with ContextTimeoutEnabled: see
// [WithTimeout].
//
// The scripts need Redis 5 or later (3.2 and 4 work too: the scripts ask for
// effects replication themselves), standalone, Sentinel or Cluster.
package redislimit
