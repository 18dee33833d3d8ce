package redislimit

import (
	_ "embed"
	"math"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/errs"
)

// The Lua scripts, one decision script and one refund script per algorithm,
// each with the shared prelude and its algorithm's state helpers in front
// (only those: every helper is a closure made anew on every run). They are
// package-level [redis.Script] values: EVALSHA first, EVAL when the server
// answers NOSCRIPT (after a restart, a failover or SCRIPT FLUSH).
var (
	//go:embed lua/prelude.lua
	preludeLua string
	//go:embed lua/tb.lua
	tbLua string
	//go:embed lua/lb.lua
	lbLua string
	//go:embed lua/fw.lua
	fwLua string
	//go:embed lua/sl.lua
	slLua string
	//go:embed lua/sc.lua
	scLua string
	//go:embed lua/tokenbucket.lua
	tokenBucketLua string
	//go:embed lua/tokenbucket_refund.lua
	tokenBucketRefundLua string
	//go:embed lua/leakybucket.lua
	leakyBucketLua string
	//go:embed lua/leakybucket_refund.lua
	leakyBucketRefundLua string
	//go:embed lua/fixedwindow.lua
	fixedWindowLua string
	//go:embed lua/fixedwindow_refund.lua
	fixedWindowRefundLua string
	//go:embed lua/slidinglog.lua
	slidingLogLua string
	//go:embed lua/slidinglog_refund.lua
	slidingLogRefundLua string
	//go:embed lua/slidingcounter.lua
	slidingCounterLua string
	//go:embed lua/slidingcounter_refund.lua
	slidingCounterRefundLua string
)

var (
	tokenBucketScript          = redis.NewScript(preludeLua + tbLua + tokenBucketLua)
	tokenBucketRefundScript    = redis.NewScript(preludeLua + tbLua + tokenBucketRefundLua)
	leakyBucketScript          = redis.NewScript(preludeLua + lbLua + leakyBucketLua)
	leakyBucketRefundScript    = redis.NewScript(preludeLua + lbLua + leakyBucketRefundLua)
	fixedWindowScript          = redis.NewScript(preludeLua + fwLua + fixedWindowLua)
	fixedWindowRefundScript    = redis.NewScript(preludeLua + fwLua + fixedWindowRefundLua)
	slidingLogScript           = redis.NewScript(preludeLua + slLua + slidingLogLua)
	slidingLogRefundScript     = redis.NewScript(preludeLua + slLua + slidingLogRefundLua)
	slidingCounterScript       = redis.NewScript(preludeLua + scLua + slidingCounterLua)
	slidingCounterRefundScript = redis.NewScript(preludeLua + scLua + slidingCounterRefundLua)
)

// maxExact is 2^53: Lua numbers are doubles, exact for integers below it.
const maxExact = 1 << 53

// maxState bounds quantities that are added to a Unix time in microseconds
// (about 1.8e15 today, below 2^51 until 2041): keeping them below 2^52 keeps
// every sum below 2^53.
const maxState = 1 << 52

// scripts is what one algorithm runs on Redis: its two scripts, the key
// suffix that keeps algorithms apart, and the policy's parameters as script
// arguments (after now and n, at the same positions in both scripts; a
// decision script takes its commit flag after them).
type scripts struct {
	decide, refund *redis.Script
	code           string // key infix: tb, lb, fw, sl, sc
	params         []any
	exactRetry     bool // whether "denied until now+RetryAfter" may be cached
}

// scriptsFor validates pol for Redis and returns its scripts. Beyond
// pol.Validate, Period must be a whole number of microseconds, and the
// integers the scripts compute must stay below 2^53.
func scriptsFor(pol ratelimit.Policy) (scripts, error) {
	if err := pol.Validate(); err != nil {
		return scripts{}, err
	}
	if pol.Period%time.Microsecond != 0 {
		return scripts{}, invalid("New: Policy.Period must be a whole number of microseconds (Redis keeps time in integer microseconds), got %v", pol.Period)
	}
	per := int64(pol.Period / time.Microsecond)
	limit := int64(pol.Limit)
	switch pol.Algorithm {
	case ratelimit.FixedWindowAlgorithm, ratelimit.SlidingLogAlgorithm, ratelimit.SlidingCounterAlgorithm:
		// Window indexes, ends and (sliding counter) the times the
		// estimate multiplies stay exact only for windows below 2^52 µs.
		if per > maxState {
			return scripts{}, invalid("New: Policy.Period (window) must be at most 2^52 µs, the longest window Redis Lua handles exactly, got %v", pol.Period)
		}
	}
	switch pol.Algorithm {
	case ratelimit.TokenBucketAlgorithm:
		// The scripts count tokens in units of 1/p token, of which one
		// microsecond refills r: r/p is Refill/Period(µs) in lowest terms.
		g := errs.GCD(int64(pol.Refill), per)
		r, p := int64(pol.Refill)/g, per/g
		// Units in a full bucket, plus the refill per µs that the
		// arithmetic adds on top, must stay exact.
		if limit > (maxState-2*r)/p {
			return scripts{}, invalid("New: Policy.Limit (capacity) with Refill %d per %v must fit 2^52 units on Redis: use a smaller capacity or a coarser rate, got %d (%d-bit)",
				pol.Refill, pol.Period, pol.Limit, bitsOf(limit, p))
		}
		return scripts{decide: tokenBucketScript, refund: tokenBucketRefundScript, code: "tb",
			params: []any{limit, r, p}, exactRetry: true}, nil
	case ratelimit.LeakyBucketAlgorithm:
		if limit > maxState/per {
			return scripts{}, invalid("New: Policy.Limit (capacity) x Period (leakEvery) must be at most 2^52 µs, the longest bucket Redis Lua handles exactly, got %d x %v", pol.Limit, pol.Period)
		}
		return scripts{decide: leakyBucketScript, refund: leakyBucketRefundScript, code: "lb",
			params: []any{limit, per}, exactRetry: true}, nil
	case ratelimit.FixedWindowAlgorithm:
		// count + n, both at most limit, must stay exact.
		if limit > maxState {
			return scripts{}, invalid("New: Policy.Limit must be at most 2^52, the largest fixed window limit Redis Lua counts exactly, got %d", pol.Limit)
		}
		return scripts{decide: fixedWindowScript, refund: fixedWindowRefundScript, code: "fw",
			params: []any{limit, per}, exactRetry: true}, nil
	case ratelimit.SlidingLogAlgorithm:
		// total + n, both at most limit, and the log's cumulative counts
		// (base + at most limit, base kept at most 2^52) must stay exact.
		if limit > maxState {
			return scripts{}, invalid("New: Policy.Limit must be at most 2^52, the largest sliding log limit Redis Lua counts exactly, got %d", pol.Limit)
		}
		return scripts{decide: slidingLogScript, refund: slidingLogRefundScript, code: "sl",
			params: []any{limit, per}, exactRetry: true}, nil
	case ratelimit.SlidingCounterAlgorithm:
		// The estimate multiplies counts (at most limit) by times within a
		// window (at most window µs); window ends are now + 2 windows.
		if limit > (maxExact-1)/per {
			return scripts{}, invalid("New: Policy.Limit x Period (window) must be below 2^53 µs, the exact integer range of Redis Lua: use a smaller limit or a shorter window, got %d x %v = %.3g",
				pol.Limit, pol.Period, float64(limit)*float64(per))
		}
		return scripts{decide: slidingCounterScript, refund: slidingCounterRefundScript, code: "sc",
			params: []any{limit, per}, exactRetry: false}, nil
	}
	return scripts{}, invalid("New: Policy.Algorithm must be one of the five algorithms, got %v", pol.Algorithm)
}

// bitsOf returns the number of bits of a*b, for error messages.
func bitsOf(a, b int64) int {
	return int(math.Ceil(math.Log2(float64(a)*float64(b) + 1)))
}
