package ratelimit

import (
	"fmt"
	"time"
)

// Policy describes one algorithm and its parameters, independently of where
// its state lives: the same Policy runs as a single limiter
// ([Policy.NewLimiter]), per key in memory ([NewKeyed]) and per key on Redis
// (package redislimit), with identical decisions. Build one with
// [TokenBucketPolicy], [LeakyBucketPolicy], [FixedWindowPolicy],
// [SlidingLogPolicy], [SlidingCounterPolicy] or [QuotaPolicy]; the zero
// Policy is invalid.
type Policy struct {
	// Algorithm selects the algorithm.
	Algorithm Algorithm
	// Limit is the capacity of a bucket or the number of events per window.
	Limit int
	// Refill is the number of tokens a token bucket gains every Period.
	// Other algorithms ignore it.
	Refill int
	// Period is the token bucket's refill period, the leaky bucket's leak
	// interval, or the window length of the window algorithms. A calendar
	// quota ignores it.
	Period time.Duration
	// Calendar defines the periods of a calendar quota (QuotaAlgorithm).
	// Other algorithms ignore it.
	Calendar Calendar
}

// TokenBucketPolicy is the policy of [NewTokenBucket]: a bucket of capacity
// tokens refilled at rate, such as TokenBucketPolicy(Per(100, time.Minute), 100).
func TokenBucketPolicy(rate Rate, capacity int) Policy {
	return Policy{Algorithm: TokenBucketAlgorithm, Limit: capacity, Refill: rate.Events, Period: rate.Per}
}

// LeakyBucketPolicy is the policy of [NewLeakyBucket].
func LeakyBucketPolicy(capacity int, leakEvery time.Duration) Policy {
	return Policy{Algorithm: LeakyBucketAlgorithm, Limit: capacity, Period: leakEvery}
}

// FixedWindowPolicy is the policy of [NewFixedWindow].
func FixedWindowPolicy(limit int, window time.Duration) Policy {
	return Policy{Algorithm: FixedWindowAlgorithm, Limit: limit, Period: window}
}

// SlidingLogPolicy is the policy of [NewSlidingLog].
func SlidingLogPolicy(limit int, window time.Duration) Policy {
	return Policy{Algorithm: SlidingLogAlgorithm, Limit: limit, Period: window}
}

// SlidingCounterPolicy is the policy of [NewSlidingCounter].
func SlidingCounterPolicy(limit int, window time.Duration) Policy {
	return Policy{Algorithm: SlidingCounterAlgorithm, Limit: limit, Period: window}
}

// Validate reports whether p is a valid policy, with the same errors the
// constructors return.
func (p Policy) Validate() error {
	var err error
	switch p.Algorithm {
	case TokenBucketAlgorithm:
		_, err = newTokenBucketAlg(p.Limit, p.Refill, p.Period, policyParams)
	case LeakyBucketAlgorithm:
		_, err = newLeakyBucketAlg(p.Limit, p.Period, policyParams)
	case FixedWindowAlgorithm:
		_, err = newFixedWindowAlg(p.Limit, p.Period, policyParams)
	case SlidingLogAlgorithm:
		_, err = newSlidingLogAlg(p.Limit, p.Period, policyParams)
	case SlidingCounterAlgorithm:
		_, err = newSlidingCounterAlg(p.Limit, p.Period, policyParams)
	case QuotaAlgorithm:
		_, err = newQuotaAlg(p.Limit, p.Calendar, policyParams)
	default:
		err = configError("ratelimit.Policy.Algorithm must be a rate limit or quota algorithm (a concurrency limit is NewConcurrency), got %v", p.Algorithm)
	}
	return err
}

// NewLimiter returns a single in-memory limiter running p: a *TokenBucket,
// *LeakyBucket, *FixedWindow, *SlidingLog, *SlidingCounter or *Quota.
func (p Policy) NewLimiter(opts ...Option) (Limiter, error) {
	switch p.Algorithm {
	case TokenBucketAlgorithm:
		return NewTokenBucket(Per(p.Refill, p.Period), p.Limit, opts...)
	case LeakyBucketAlgorithm:
		return NewLeakyBucket(p.Limit, p.Period, opts...)
	case FixedWindowAlgorithm:
		return NewFixedWindow(p.Limit, p.Period, opts...)
	case SlidingLogAlgorithm:
		return NewSlidingLog(p.Limit, p.Period, opts...)
	case SlidingCounterAlgorithm:
		return NewSlidingCounter(p.Limit, p.Period, opts...)
	case QuotaAlgorithm:
		return NewQuota(p.Limit, p.Calendar, opts...)
	}
	return nil, p.Validate()
}

// WindowAt returns the span over which p's Limit applies at t, as reported
// in rate-limit headers: the window of the window algorithms, the time a
// token bucket takes to refill from empty (rounded up to a whole
// nanosecond), and the time a leaky bucket takes to drain when full, all
// the same at every t. For a calendar quota it is the length of the period
// containing t: 23 or 25 hours on a day the clocks change, 28 to 31 days
// for a month.
func (p Policy) WindowAt(t time.Time) time.Duration {
	if p.Algorithm == QuotaAlgorithm {
		return p.Calendar.windowAt(t)
	}
	return p.window()
}

// window is WindowAt for the algorithms whose window does not depend on
// the time; for a calendar quota, the nominal length of a period (24 hours
// for Daily, 7 days for Weekly, 30 days for Monthly, 365 for Yearly).
func (p Policy) window() time.Duration {
	switch p.Algorithm {
	case TokenBucketAlgorithm:
		if p.Refill <= 0 || p.Limit <= 0 || p.Period <= 0 {
			return 0
		}
		return time.Duration(mulDivCeil(int64(p.Limit), int64(p.Period), int64(p.Refill)))
	case LeakyBucketAlgorithm:
		return time.Duration(mulDiv(int64(max(p.Limit, 0)), int64(max(p.Period, 0)), 1))
	case QuotaAlgorithm:
		return p.Calendar.nominal()
	}
	return p.Period
}

// String describes p, such as "tokenbucket(capacity=100, refill=10/1s)",
// "slidinglog(limit=100, window=1m0s)" or
// "quota(limit=10000, daily at 00:00 America/New_York)".
func (p Policy) String() string {
	switch p.Algorithm {
	case TokenBucketAlgorithm:
		return fmt.Sprintf("%v(capacity=%d, refill=%d/%v)", p.Algorithm, p.Limit, p.Refill, p.Period)
	case LeakyBucketAlgorithm:
		return fmt.Sprintf("%v(capacity=%d, leakEvery=%v)", p.Algorithm, p.Limit, p.Period)
	case QuotaAlgorithm:
		return fmt.Sprintf("%v(limit=%d, %v)", p.Algorithm, p.Limit, p.Calendar)
	}
	return fmt.Sprintf("%v(limit=%d, window=%v)", p.Algorithm, p.Limit, p.Period)
}

// QuotaPolicy is the policy of [NewQuota]: at most limit events per
// calendar period of cal.
func QuotaPolicy(limit int, cal Calendar) Policy {
	return Policy{Algorithm: QuotaAlgorithm, Limit: limit, Calendar: cal}
}
