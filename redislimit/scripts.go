package redislimit

import (
	"embed"
	"math"
	"strings"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/errs"
)

// The Lua scripts live under lua/, laid out one way:
//
//	lua/prelude.lua            the head of every script (time, constants; no function)
//	lua/helpers.lua            what every script uses next (arithmetic, parsing)
//	lua/store.lua, window.lua  helpers some parts use (see assemble)
//	lua/chain.lua, nochain.lua inheriting state from previous policies, or not
//	lua/decision.lua           modes, blocks and replies of the decision scripts
//	lua/lease.lua              a lease grant's give-back (lease.go)
//	lua/block.lua, reset.lua   the admin scripts (admin.go)
//	lua/<algorithm>/state.lua  an algorithm's state: reading and checking it
//	lua/<algorithm>/charge.lua converting state under another policy to it
//	lua/<algorithm>/fast.lua   its common decision, inline (see below)
//	lua/<algorithm>/decide.lua its decision script
//	lua/<algorithm>/refund.lua its refund script
//	lua/reserve.lua            a reservation's record, in its decision (reserve.go)
//	lua/settle.lua             reading and deleting the record, in a settle
//	lua/<algorithm>/settle.lua its settle arithmetic (none for the sliding log)
//
// A script is its parts concatenated in order (see assemble): the prelude,
// in the decision script of a limiter without previous policies the fast
// path (an AllowN of an unblocked client with well-formed state, decided
// before any helper is made: each function a run defines is a closure made
// anew, and closures were most of the server time of a decision), the
// helpers, the state helpers (every algorithm's states and charges with previous
// policies), chain.lua or nochain.lua, then the script itself
// (a decision script after decision.lua, a lease script after lease.lua
// and decision.lua).
// Every script is a package-level [redis.Script] value (wrapped, see
// internal/exec): EVALSHA first, EVAL when the server answers NOSCRIPT
// (after a restart, a failover or SCRIPT FLUSH).
//
//go:embed lua
var luaFiles embed.FS

// luaPart returns lua/<name>.lua.
func luaPart(name string) string {
	b, err := luaFiles.ReadFile("lua/" + name + ".lua")
	if err != nil {
		panic("redislimit: missing Lua part " + name) // embedded: a build error
	}
	return string(b)
}

// assemble returns the parts named (lua/<name>.lua) concatenated, with
// two directives, each a line of its own: "--@uses <part>" puts that part
// in its place unless the script has it already (a part says so at its
// top for the shared helpers it needs beyond the prelude, lua/store.lua
// and lua/window.lua, so that a script carries, and a run makes closures
// for, only the helpers it uses); "--@<slot>" is replaced by the part
// slots maps it to (a lease script puts the algorithm's refund inside
// lua/lease.lua).
func assemble(slots map[string]string, names ...string) string {
	var b strings.Builder
	have := map[string]bool{}
	var put func(name string)
	put = func(name string) {
		have[name] = true
		src := luaPart(name)
		for _, line := range strings.SplitAfter(src, "\n") {
			directive, ok := strings.CutPrefix(strings.TrimSpace(line), "--@")
			if !ok {
				b.WriteString(line)
				continue
			}
			if part, ok := strings.CutPrefix(directive, "uses "); ok {
				if !have[part] {
					put(part)
				}
				continue
			}
			part, ok := slots[directive]
			if !ok {
				panic("redislimit: Lua part " + name + " has an unknown slot " + directive)
			}
			put(part)
		}
		if !strings.HasSuffix(src, "\n") {
			b.WriteString("\n")
		}
	}
	for _, name := range names {
		put(name)
	}
	return b.String()
}

// algorithms are the directories under lua/ that hold an algorithm's
// parts. The scripts of a limiter with previous policies include every
// algorithm's state helpers, to read the state kept under them (chain.lua).
var algorithms = []string{"tokenbucket", "leakybucket", "fixedwindow", "slidinglog", "slidingcounter", "quota"}

// algoScripts are an algorithm's scripts: decision and refund, without and
// with previous policies. Scripts without them include only their own
// algorithm's state helpers, so the common case compiles and runs the
// least Lua.
type algoScripts struct {
	decide, refund           *script
	decideChain, refundChain *script
	// lease and leaseChain grant a lease (lease.go): the decision script,
	// in lease mode, after the refund script run as a function that gives
	// back the previous lease's unused events (lua/lease.lua).
	lease, leaseChain *script
	// reserve and reserveChain reserve (reserve.go): the decision script
	// with lua/reserve.lua, which writes the reservation's record when it
	// admits. settle and settleChain settle one: lua/settle.lua, then the
	// algorithm's settle.lua. All four are nil for the sliding log, which
	// cannot settle.
	reserve, reserveChain *script
	settle, settleChain   *script
}

func newAlgoScripts(alg string) algoScripts {
	own := []string{"prelude", "helpers", alg + "/state", "nochain"}
	all := []string{"prelude", "helpers"}
	for _, a := range algorithms {
		all = append(all, a+"/state")
	}
	for _, a := range algorithms {
		all = append(all, a+"/charge")
	}
	all = append(all, "chain")
	script := func(head []string, tail ...string) *script {
		slots := map[string]string{"refund": alg + "/refund"}
		return newScript(assemble(slots, append(append([]string(nil), head...), tail...)...))
	}
	// The decision script without previous policies puts the algorithm's
	// fast path (its common decision, inline) before everything else.
	fast := own
	if _, err := luaFiles.Open("lua/" + alg + "/fast.lua"); err == nil {
		fast = append([]string{"prelude", alg + "/fast"}, own[1:]...)
	}
	s := algoScripts{
		decide:      script(fast, "decision", alg+"/decide"),
		refund:      script(own, alg+"/refund"),
		decideChain: script(all, "decision", alg+"/decide"),
		refundChain: script(all, alg+"/refund"),
		lease:       script(own, "lease", "decision", alg+"/decide"),
		leaseChain:  script(all, "lease", "decision", alg+"/decide"),
	}
	if _, err := luaFiles.Open("lua/" + alg + "/settle.lua"); err == nil {
		s.reserve = script(own, "decision", "reserve", alg+"/decide")
		s.reserveChain = script(all, "decision", "reserve", alg+"/decide")
		s.settle = script(own, "settle", alg+"/settle")
		s.settleChain = script(all, "settle", alg+"/settle")
	}
	return s
}

var (
	tokenBucketScripts    = newAlgoScripts("tokenbucket")
	leakyBucketScripts    = newAlgoScripts("leakybucket")
	fixedWindowScripts    = newAlgoScripts("fixedwindow")
	slidingLogScripts     = newAlgoScripts("slidinglog")
	slidingCounterScripts = newAlgoScripts("slidingcounter")
	quotaScripts          = newAlgoScripts("quota")
	blockScript           = newScript(assemble(nil, "prelude", "helpers", "block"))
	resetScript           = newScript(assemble(nil, "prelude", "helpers", "reset"))
)

// maxExact is 2^53: Lua numbers are doubles, exact for integers below it.
const maxExact = 1 << 53

// maxState bounds quantities that are added to a Unix time in microseconds
// (about 1.8e15 today, below 2^51 until 2041): keeping them below 2^52 keeps
// every sum below 2^53.
const maxState = 1 << 52

// scripts is what one algorithm runs on Redis: its scripts, the key
// suffix that keeps algorithms apart, and the policy's parameters as script
// arguments (after now and n, at the same positions in both scripts; then
// the mode, then the previous policies). A calendar quota's parameters
// depend on the time (see quotaParams): params is nil.
type scripts struct {
	algoScripts
	code       string // key infix: tb, lb, fw, sl, sc, cq
	params     []any
	exactRetry bool // whether "denied until now+RetryAfter" may be cached
}

// chainParams returns the two parameters after the limit, as chain.lua
// takes them for a policy (tb: r, p; lb: every; fw, sl, sc: window; cq:
// none), 0 where the policy has fewer.
func (s scripts) chainParams() (x, y any) {
	x, y = int64(0), int64(0)
	if len(s.params) > 1 {
		x = s.params[1]
	}
	if len(s.params) > 2 {
		y = s.params[2]
	}
	return x, y
}

// scriptsFor validates pol for Redis and returns its scripts; op names
// the call in errors (New, SetPolicy, WithPrevious). Beyond pol.Validate,
// Period must be a whole number of microseconds, and the integers the
// scripts compute must stay below 2^53.
func scriptsFor(pol ratelimit.Policy, op string) (scripts, error) {
	if err := pol.Validate(); err != nil {
		return scripts{}, err
	}
	if pol.Algorithm == ratelimit.QuotaAlgorithm {
		// count + n, both at most limit, must stay exact.
		if int64(pol.Limit) > maxState {
			return scripts{}, invalid("%s: Policy.Limit must be at most 2^52, the largest quota Redis Lua counts exactly, got %d", op, pol.Limit)
		}
		return scripts{algoScripts: quotaScripts, code: "cq", exactRetry: true}, nil
	}
	if pol.Period%time.Microsecond != 0 {
		return scripts{}, invalid("%s: Policy.Period must be a whole number of microseconds (Redis keeps time in integer microseconds), got %v", op, pol.Period)
	}
	per := int64(pol.Period / time.Microsecond)
	limit := int64(pol.Limit)
	switch pol.Algorithm {
	case ratelimit.FixedWindowAlgorithm, ratelimit.SlidingLogAlgorithm, ratelimit.SlidingCounterAlgorithm:
		// Window indexes, ends and (sliding counter) the times the
		// estimate multiplies stay exact only for windows below 2^52 µs.
		if per > maxState {
			return scripts{}, invalid("%s: Policy.Period (window) must be at most 2^52 µs, the longest window Redis Lua handles exactly, got %v", op, pol.Period)
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
			return scripts{}, invalid("%s: Policy.Limit (capacity) with Refill %d per %v must fit 2^52 units on Redis: use a smaller capacity or a coarser rate, got %d (%d-bit)", op,
				pol.Refill, pol.Period, pol.Limit, bitsOf(limit, p))
		}
		return scripts{algoScripts: tokenBucketScripts, code: "tb",
			params: []any{limit, r, p}, exactRetry: true}, nil
	case ratelimit.LeakyBucketAlgorithm:
		if limit > maxState/per {
			return scripts{}, invalid("%s: Policy.Limit (capacity) x Period (leakEvery) must be at most 2^52 µs, the longest bucket Redis Lua handles exactly, got %d x %v", op, pol.Limit, pol.Period)
		}
		return scripts{algoScripts: leakyBucketScripts, code: "lb",
			params: []any{limit, per}, exactRetry: true}, nil
	case ratelimit.FixedWindowAlgorithm:
		// count + n, both at most limit, must stay exact.
		if limit > maxState {
			return scripts{}, invalid("%s: Policy.Limit must be at most 2^52, the largest fixed window limit Redis Lua counts exactly, got %d", op, pol.Limit)
		}
		return scripts{algoScripts: fixedWindowScripts, code: "fw",
			params: []any{limit, per}, exactRetry: true}, nil
	case ratelimit.SlidingLogAlgorithm:
		// total + n, both at most limit, and the log's cumulative counts
		// (base + at most limit, base kept at most 2^52) must stay exact.
		if limit > maxState {
			return scripts{}, invalid("%s: Policy.Limit must be at most 2^52, the largest sliding log limit Redis Lua counts exactly, got %d", op, pol.Limit)
		}
		return scripts{algoScripts: slidingLogScripts, code: "sl",
			params: []any{limit, per}, exactRetry: true}, nil
	case ratelimit.SlidingCounterAlgorithm:
		// The estimate multiplies counts (at most limit) by times within a
		// window (at most window µs); window ends are now + 2 windows.
		if limit > (maxExact-1)/per {
			return scripts{}, invalid("%s: Policy.Limit x Period (window) must be below 2^53 µs, the exact integer range of Redis Lua: use a smaller limit or a shorter window, got %d x %v = %.3g", op,
				pol.Limit, pol.Period, float64(limit)*float64(per))
		}
		return scripts{algoScripts: slidingCounterScripts, code: "sc",
			params: []any{limit, per}, exactRetry: false}, nil
	}
	return scripts{}, invalid("%s: Policy.Algorithm must be one of the six algorithms, got %v", op, pol.Algorithm)
}

// bitsOf returns the number of bits of a*b, for error messages.
func bitsOf(a, b int64) int {
	return int(math.Ceil(math.Log2(float64(a)*float64(b) + 1)))
}
