package ratelimit

import (
	"math"
	"math/bits"
	"time"
)

// ceilDiv returns ceil(a/b) for a >= 0, b > 0 without overflow.
func ceilDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}

// floorDiv returns floor(a/b) for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}

// mulDiv returns floor(a*b/c) for a, b >= 0 and c > 0, computed in 128 bits
// and saturated at math.MaxInt64.
func mulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, _ := bits.Div64(hi, lo, uint64(c))
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// mulDivCeil returns ceil(a*b/c) for a, b >= 0 and c > 0, computed in 128
// bits and saturated at math.MaxInt64.
func mulDivCeil(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, r := bits.Div64(hi, lo, uint64(c))
	if r != 0 {
		q++
	}
	if q > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(q)
}

// maxPeriod bounds windows and refill periods so that window arithmetic on
// Unix nanoseconds cannot overflow.
const maxPeriod = 100 * 365 * 24 * time.Hour

// maxCount bounds every capacity and limit, so that sums of counts cannot
// overflow and counts stay exact in the doubles of Redis's Lua.
const maxCount = 1 << 53

// paramNames names, for error messages, what a constructor validates: the
// count (capacity or limit), the rate's events (token bucket only) and the
// period, as the caller wrote them: "ratelimit.NewTokenBucket capacity" or
// "ratelimit.Policy.Limit".
type paramNames struct{ count, events, period string }

// argNames names the arguments of the function fn.
func argNames(fn, count, events, period string) paramNames {
	return paramNames{count: fn + " " + count, events: fn + " " + events, period: fn + " " + period}
}

// policyParams names the Policy fields, for NewKeyed and Policy.Validate.
var policyParams = paramNames{count: "ratelimit.Policy.Limit", events: "ratelimit.Policy.Refill", period: "ratelimit.Policy.Period"}

// checkCount validates a positive count argument.
func checkCount(name string, v int) error {
	if v <= 0 {
		return configError("%s must be positive, got %d", name, v)
	}
	if v > maxCount {
		return configError("%s must be at most 2^53, got %d", name, v)
	}
	return nil
}

// checkPeriod validates a positive duration argument.
func checkPeriod(name string, d time.Duration) error {
	if d <= 0 {
		return configError("%s must be positive, got %v", name, d)
	}
	if d > maxPeriod {
		return configError("%s must be at most %v, got %v", name, maxPeriod, d)
	}
	return nil
}

// addSat returns a + b (b >= 0), saturating at math.MaxInt64.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
