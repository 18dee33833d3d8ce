// Package otellimit turns the decisions of rate limiters into OpenTelemetry
// metrics: an [Observer] for [ratelimit.WithObserver] (and the Redis
// limiters of package redislimit) that counts every decision by outcome,
// counts the decisions taken by a failure policy, times them, and counts
// the permits of concurrency limits in flight.
//
// It is its own module, so that only programs that want OpenTelemetry get
// it:
//
//	go get github.com/rlkit/ratelimit/otellimit
//
// Its code depends on the OpenTelemetry metric API only
// (go.opentelemetry.io/otel/metric); the program chooses the SDK and the
// exporter, such as Prometheus (see examples/prometheus).
//
//	obs, err := otellimit.NewObserver(meterProvider)
//	...
//	mw, err := httplimit.New(limits, httplimit.WithObserver(obs)) // the limits it serves, by Limit.Name
//	outbound, err := ratelimit.NewTokenBucket(rate, 10,
//		ratelimit.WithName("outbound"), ratelimit.WithObserver(obs)) // a limiter called directly
//
// Each decision is counted once, by whoever takes it: a server (httplimit,
// grpclimit) reports the limits it serves, under the name its rate-limit
// fields carry, with shadow denials and exemptions; a limiter you call
// yourself reports its own. The servers refuse a limiter that has an
// observer of its own, which would count its decisions twice.
//
// # Instruments
//
// All five come from the meter named "github.com/rlkit/ratelimit/otellimit".
// Prometheus exporters show ratelimit.decisions as
// ratelimit_decisions_total and the histograms with a _seconds suffix.
//
//	name                         kind       unit        attributes                    what
//	ratelimit.decisions          counter    {decision}  limit, algorithm, home,       every decision
//	                                                    outcome
//	ratelimit.fallbacks          counter    {decision}  limit, algorithm, home,       decisions taken by the failure
//	                                                    allowed                       policy because the store failed
//	ratelimit.decision.duration  histogram  s           limit, algorithm, home,       how long a decision took; Redis
//	                                                    outcome                       only unless WithDurationForAllHomes;
//	                                                                                  never a WaitN call
//	ratelimit.wait.duration      histogram  s           limit, algorithm, home,       how long a WaitN call took,
//	                                                    outcome                       waiting included; every home
//	ratelimit.concurrency.in_flight
//	                             up-down    {permit}    limit, home                   permits of concurrency limits
//	                             counter                                              held now
//
// The attributes:
//
//	ratelimit.limit      the limit's name for a server's decisions (httplimit.Limit.Name,
//	                     "adaptive" for its ratelimit.Adaptive: httplimit.WithAdaptive),
//	                     else the limiter's from ratelimit.WithName ("" without one),
//	                     or "other" once more than the cap of names is seen (below)
//	ratelimit.algorithm  tokenbucket, leakybucket, fixedwindow, slidinglog, slidingcounter,
//	                     quota, concurrency, adaptive
//	ratelimit.home       memory (a single limiter), keyed (ratelimit.Keyed), redis, none
//	                     (a decision a server took without asking a limiter)
//	ratelimit.outcome    allowed, denied, shadow, error, fallback, exempt, shed (an
//	                     Adaptive's refusal; see [ratelimit.Outcome]; released is not a
//	                     decision, below)
//	ratelimit.allowed    true when the failure policy admitted the request (fail open,
//	                     a local fallback that had room), false when it refused it
//
// A View or a reader of the metrics names them as written, such as
// attribute.Key("ratelimit.limit").
//
// Every fallback decision is counted twice: once in ratelimit.decisions with
// outcome "fallback", once in ratelimit.fallbacks, which tells which way the
// failure policy went. A fallback that admits requests is the number a
// security review asks for.
//
// A concurrency limit ([ratelimit.ConcurrencyLimiter]) reports its
// acquisitions as decisions and each release as an Event with Outcome
// [ratelimit.OutcomeReleased], which is not one: the permits of every
// allowed acquisition (TryAcquire or Acquire) are added to in_flight and
// the released ones taken off, and nothing else counts a release. A denied
// or failed acquisition holds nothing and leaves in_flight alone.
//
// decision.duration buckets run from 1µs to 100ms (a Redis round trip takes
// tens of microseconds to a few milliseconds; a store timeout shows in the
// last buckets); wait.duration buckets from 1ms to 60s. An SDK View can
// replace either.
//
// # Cardinality
//
// The attributes are bounded by construction: an [ratelimit.Event] never
// holds a key (an API key, a user, an address), so no key ever becomes an
// attribute. The limit name does, so it must come from a small fixed set
// written in the program ("api", "login"), never from a request. As a
// guard, an Observer keeps at most 100 distinct limit names (change it with
// [WithMaxLimits]); the decisions of any further name are reported under
// the limit name "other", so a program that makes up names without end
// costs a bounded amount of memory (about 3.6 KB per name, and a few hundred
// bytes per combination of name, algorithm, home and outcome) and a bounded
// number of time series. Algorithm, home and outcome values outside the
// known ones (those whose String method names them) are reported as
// "unknown".
//
// # Cost
//
// Observe does not allocate once it has seen a combination of limit,
// algorithm, home and outcome: the attribute sets are built on first use
// and cached. It is safe for concurrent use.
package otellimit
