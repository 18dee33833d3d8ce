package ratelimit

import (
	"fmt"
)

// Algorithm names how a limiter decides: one of the five rate limits, the
// calendar quota, the concurrency limit, the adaptive one or the
// client-side throttle.
type Algorithm uint8

// The algorithms. The zero Algorithm is invalid.
const (
	TokenBucketAlgorithm Algorithm = iota + 1
	LeakyBucketAlgorithm
	FixedWindowAlgorithm
	SlidingLogAlgorithm
	SlidingCounterAlgorithm
	// QuotaAlgorithm is the calendar quota: events per day, week, month or
	// year of a time zone's calendar ([NewQuota]).
	QuotaAlgorithm
	// ConcurrencyAlgorithm is the concurrency limit: permits in flight
	// per key ([NewConcurrency]).
	ConcurrencyAlgorithm
	// AdaptiveAlgorithm is the adaptive concurrency limit: requests in
	// flight to a service, bounded by its latency ([NewAdaptive]).
	AdaptiveAlgorithm
	// ThrottleAlgorithm is client-side adaptive throttling: attempts per
	// key bounded by the accepted ones ([NewThrottle]).
	ThrottleAlgorithm
)

// String returns the algorithm's short name, such as "tokenbucket".
func (a Algorithm) String() string {
	switch a {
	case TokenBucketAlgorithm:
		return "tokenbucket"
	case LeakyBucketAlgorithm:
		return "leakybucket"
	case FixedWindowAlgorithm:
		return "fixedwindow"
	case SlidingLogAlgorithm:
		return "slidinglog"
	case SlidingCounterAlgorithm:
		return "slidingcounter"
	case QuotaAlgorithm:
		return "quota"
	case ConcurrencyAlgorithm:
		return "concurrency"
	case AdaptiveAlgorithm:
		return "adaptive"
	case ThrottleAlgorithm:
		return "throttle"
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}
