package ratelimit

import (
	"fmt"
)

// Algorithm names one of the six rate-limiting algorithms: the five rate
// limits and the calendar quota.
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
	}
	return fmt.Sprintf("Algorithm(%d)", uint8(a))
}
