package redislimit

import (
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/reconf"
)

// keptPolicies is the number of previous policies a Limiter converts
// state from, as the in-memory limiter does (see reconf.Kept): a decision
// probes at most that many, however often the policy changed.
const keptPolicies = reconf.Kept

// generation is a Limiter's policy and everything that depends on it. A
// decision loads it once and uses it throughout; SetPolicy swaps it
// atomically, so a decision runs entirely under one policy.
type generation struct {
	policy    ratelimit.Policy
	scripts   scripts
	prefix    string       // of the state's key name, up to the opening brace
	natural   string       // prefix without a salt (see salted)
	salt      int          // see salted
	quota     *quotaBounds // calendar quotas only
	prev      []link       // previous policies, newest first, keptPolicies at most
	forgotten []forgotten  // names of policies dropped from prev before their state was idle
	chainArgs []any        // the scripts' previous-policy arguments; nil without
	// names are the key names of a client's keys up to its hash tag, in
	// the scripts' KEYS order: state, block, state under each previous
	// policy; namesLen is their total length.
	names    []string
	namesLen int
	cache    *denyCache // nil: disabled
	fallback *ratelimit.Keyed
	leases   *leaseTable // WithLeases; nil: off

	decideScript, refundScript  *script
	leaseScript                 *script // WithLeases: grants (lease.go)
	reserveScript, settleScript *script // reservations (reserve.go); nil: the sliding log

	// inflight counts the calls running under this generation; sealed,
	// set by SetPolicy, makes new calls wait for the next generation, so
	// that no call under the old policy reaches Redis after one under the
	// new (which may have converted and deleted the old state: the old
	// call would find it fresh).
	inflight atomic.Int64
	sealed   atomic.Bool
	// replaced is closed once the next generation is published: calls that
	// found this one sealed wait for it rather than spin.
	replaced chan struct{}
}

// acquire returns the current generation, counted as in use until release.
func (l *Limiter) acquire() *generation {
	for {
		g := l.cur.Load()
		g.inflight.Add(1)
		if !g.sealed.Load() {
			return g
		}
		g.inflight.Add(-1)
		<-g.replaced
	}
}

// release ends a use of g begun by acquire.
func (g *generation) release() { g.inflight.Add(-1) }

// link is a previous policy of a Limiter.
type link struct {
	policy  ratelimit.Policy
	scripts scripts
	prefix  string
	natural string // prefix without a salt
	salt    int
	mode    ratelimit.Inheritance // how state under policy passed to the next newer policy
	changed int64                 // local ns of the change away from policy; 0 (WithPrevious): unknown
}

// forgotten is a previous policy's key name kept after the policy was
// dropped from a chain that would have held more than keptPolicies, until
// every state under it is idle: no later policy may take the name while
// such a state may still be there (see salted).
type forgotten struct {
	natural string
	salt    int   // the largest salt forgotten under natural
	until   int64 // local ns after which every state under the name is idle; MaxInt64: unknown
}

// forget returns fs with lk's name added (merged into an entry of the same
// natural name), as a new slice.
func forget(fs []forgotten, lk link) []forgotten {
	until := int64(math.MaxInt64)
	if lk.changed != 0 {
		until = lk.changed + int64(idleTime(lk)+time.Minute)
	}
	out := make([]forgotten, 0, len(fs)+1)
	merged := false
	for _, f := range fs {
		if f.natural == lk.natural {
			f.salt, f.until, merged = max(f.salt, lk.salt), max(f.until, until), true
		}
		out = append(out, f)
	}
	if !merged {
		out = append(out, forgotten{natural: lk.natural, salt: lk.salt, until: until})
	}
	return out
}

// keep returns prev cut to keptPolicies links and fs with the names of the
// links cut added.
func keep(prev []link, fs []forgotten) ([]link, []forgotten) {
	for len(prev) > keptPolicies {
		fs = forget(fs, prev[len(prev)-1])
		prev = prev[:len(prev)-1]
	}
	return prev, fs
}

// previous is one WithPrevious option.
type previous struct {
	policy ratelimit.Policy
	mode   ratelimit.Inheritance
}

// WithPrevious names a policy this limiter's keys were run under before,
// and the mode in which state under it passed to the next newer one (the
// next WithPrevious, or the policy given to [New]): give the options
// oldest first. A process started after a policy change (a deploy, or
// [Limiter.SetPolicy] in another process) then converts the state a key
// still holds under the previous policies exactly as [Limiter.SetPolicy]
// does (see docs/redis.md, "Changing the policy"), and names
// the keys as that process does, salt included after a change back to an
// earlier policy: give the same changes, in the same order, to every
// process. Of the policies given, the last four convert state (as
// SetPolicy keeps four); the older ones only keep their key names taken
// (see "Changing the policy"). A step to the same policy with KeepUsed or
// ScaleUsed is skipped, as SetPolicy makes no change of it. Policies given
// by WithPrevious are never forgotten for idleness: drop the option once
// every key has been idle under the new policy for the old policy's idle
// time.
func WithPrevious(p ratelimit.Policy, mode ratelimit.Inheritance) Option {
	return named("WithPrevious", func(c *config) { c.previous = append(c.previous, previous{p, mode}) })
}

// maxLinkLimit bounds the limits of a chain of policies: the scripts
// scale used quota by ceil(u * next / previous) exactly for limits up to
// 2^52.
const maxLinkLimit = maxState

// checkMode validates an inheritance mode.
func checkMode(op string, mode ratelimit.Inheritance) error {
	switch mode {
	case ratelimit.KeepUsed, ratelimit.ScaleUsed, ratelimit.StartFresh:
		return nil
	}
	return invalid("%s: mode must be KeepUsed, ScaleUsed or StartFresh, got %v", op, mode)
}

// linkTo returns g as the previous policy of the next one, to which its
// state passes by mode.
func (g *generation) linkTo(mode ratelimit.Inheritance, changed int64, op string) (link, error) {
	if int64(g.policy.Limit) > maxLinkLimit {
		return link{}, invalid("%s: Policy.Limit must be at most 2^52 to convert state between policies exactly, got %d", op, g.policy.Limit)
	}
	return link{policy: g.policy, scripts: g.scripts, prefix: g.prefix, natural: g.natural, salt: g.salt, mode: mode, changed: changed}, nil
}

// scriptsFor validates p for l (see scriptsFor, and checkZone for a
// calendar quota's zone) and returns its scripts; op names the call in
// errors.
func (l *Limiter) scriptsFor(p ratelimit.Policy, op string) (scripts, error) {
	sc, err := scriptsFor(p, op)
	if err == nil && p.Algorithm == ratelimit.QuotaAlgorithm {
		err = checkZone(p.Calendar, time.Unix(0, l.ts.Now()), op)
	}
	return sc, err
}

// newGeneration validates p and builds what a Limiter running it needs,
// with the previous policies prev (newest first, at most keptPolicies)
// and the names fs forgotten before their states were idle.
func (l *Limiter) newGeneration(p ratelimit.Policy, op string, prev []link, fs []forgotten) (*generation, error) {
	sc, err := l.scriptsFor(p, op)
	if err != nil {
		return nil, err
	}
	g := &generation{policy: p, scripts: sc, natural: l.naturalPrefix(sc.code, p), replaced: make(chan struct{})}
	g.salt, g.prefix = salted(g.natural, prev, fs)
	if len(prev) > 0 && int64(p.Limit) > maxLinkLimit {
		return nil, invalid("%s: Policy.Limit must be at most 2^52 to convert state between policies exactly, got %d", op, p.Limit)
	}
	g.prev, g.forgotten = prev, fs
	g.names, g.namesLen = l.keyNames(g.prefix, prev)
	g.decideScript, g.refundScript, g.leaseScript = sc.decide, sc.refund, sc.lease
	g.reserveScript, g.settleScript = sc.reserve, sc.settle
	if len(prev) > 0 {
		g.decideScript, g.refundScript, g.leaseScript = sc.decideChain, sc.refundChain, sc.leaseChain
		g.reserveScript, g.settleScript = sc.reserveChain, sc.settleChain
		g.chainArgs = make([]any, 0, 4+5*len(prev))
		g.chainArgs = append(g.chainArgs, len(prev))
		for _, lk := range prev {
			x, y := lk.scripts.chainParams()
			g.chainArgs = append(g.chainArgs, lk.scripts.code, modeArg(lk.mode), lk.policy.Limit, x, y)
		}
		x, y := sc.chainParams()
		g.chainArgs = append(g.chainArgs, sc.code, x, y)
	}
	if p.Algorithm == ratelimit.QuotaAlgorithm {
		g.quota = &quotaBounds{cal: p.Calendar, limit: int64(p.Limit)}
	}
	if l.leases != nil {
		if err := checkLeasable(p, op); err != nil {
			return nil, err
		}
		g.leases = l.leases.newTable(p)
	}
	if l.cacheKeys > 0 && sc.exactRetry {
		g.cache = newDenyCache(l.cacheKeys)
	}
	if l.failure == failLocal {
		share, err := localShare(p, l.instances)
		if err != nil {
			return nil, err
		}
		if g.fallback, err = ratelimit.NewKeyed(share, ratelimit.WithClock(l.clock)); err != nil {
			return nil, err
		}
	}
	return g, nil
}

// modeArg is a mode as the scripts take it.
func modeArg(m ratelimit.Inheritance) string {
	switch m {
	case ratelimit.KeepUsed:
		return "k"
	case ratelimit.ScaleUsed:
		return "s"
	}
	return "f"
}

// args returns a script's arguments: now, n, the policy's parameters, the
// mode and the previous policies.
func (g *generation) args(l *Limiter, now any, n int, mode commitMode) []any {
	params := g.scripts.params
	if g.quota != nil {
		params = g.quota.params(l.ts.Now())
	}
	args := make([]any, 0, 3+len(params)+len(g.chainArgs))
	args = append(args, now, n)
	args = append(args, params...)
	args = append(args, mode.arg())
	return append(args, g.chainArgs...)
}

// SetPolicy makes l run p for every key from now on, converting the state
// each key has under the policies before lazily, the first time the key is
// touched (AllowN, Peek, WaitN, RefundN, Penalize): its used quota (the old
// limit minus the old remaining quota) passes to p as mode says (see
// [ratelimit.Inheritance] and docs/redis.md, "Changing the policy").
// Blocks are kept. Setting the policy in force again with KeepUsed or
// ScaleUsed changes nothing (a configuration reload may re-apply it as
// often as it likes); with StartFresh it starts every key over. A change
// back to an earlier policy converts state kept under it too: the key
// names then take a salt.
// State is converted across the last four changes: a key whose state is
// older than that, and not idle yet, starts fresh, as in memory; so a
// decision's work stays the same however often the policy changes. The
// change is local to this process: other processes sharing the Redis keep
// their policy until told (SetPolicy in each, or [WithPrevious] at their
// start).
//
// It returns an error wrapping [ratelimit.ErrInvalidConfig] when p is not
// valid for Redis (as [New] checks) or mode is not one of the three modes,
// and changes nothing then. SetPolicy is safe for concurrent use with
// decisions: each decision runs under one policy, the old or the new. The
// deny cache starts empty and the local fallback ([WithLocalFallback])
// starts over under p's share.
func (l *Limiter) SetPolicy(p ratelimit.Policy, mode ratelimit.Inheritance) error {
	if err := checkMode("SetPolicy", mode); err != nil {
		return err
	}
	l.setMu.Lock()
	defer l.setMu.Unlock()
	old := l.cur.Load()
	now := l.ts.Now()
	if mode != ratelimit.StartFresh && samePolicy(old.policy, p, now) {
		return nil
	}
	lk, err := old.linkTo(mode, now, "SetPolicy")
	if err != nil {
		return err
	}
	prev := append([]link{lk}, old.prev...)
	// Forget the oldest policies once every state kept under them is idle
	// (with a minute to spare for client clocks and TTL slack): then they
	// cannot change a decision.
	for len(prev) > 0 {
		last := prev[len(prev)-1]
		if last.changed == 0 || now < last.changed+int64(idleTime(last)+time.Minute) {
			break
		}
		prev = prev[:len(prev)-1]
	}
	// Keep keptPolicies, as memory does; the names of those dropped stay
	// taken until their states are idle.
	var fs []forgotten
	for _, f := range old.forgotten {
		if now < f.until {
			fs = append(fs, f)
		}
	}
	prev, fs = keep(prev, fs)
	g, err := l.newGeneration(p, "SetPolicy", prev, fs)
	if err != nil {
		return err
	}
	// Let the calls under the old policy finish (each is bounded by the
	// timeout) before any call runs under the new one.
	old.sealed.Store(true)
	for old.inflight.Load() > 0 {
		time.Sleep(50 * time.Microsecond)
	}
	l.cur.Store(g)
	close(old.replaced)
	return nil
}

// samePolicy reports whether a change from the policy in force, from, to
// to changes nothing, at now in Unix ns: then SetPolicy with KeepUsed or
// ScaleUsed keeps the policy in force, as memory does (see
// [reconf.Unchanged]), and WithPrevious skips such a step.
func samePolicy(from, to ratelimit.Policy, now int64) bool {
	zf, zt := from.Calendar.Location, to.Calendar.Location
	from.Calendar.Location, to.Calendar.Location = nil, nil
	return from == to && reconf.Unchanged(zf, zt, time.Unix(0, now))
}

// idleTime returns the longest time state under lk's policy, last written
// before its change, takes to become idle: a full bucket, passed windows
// (two for a sliding counter), or the end of the calendar period holding
// the change.
func idleTime(lk link) time.Duration {
	p := lk.policy
	switch p.Algorithm {
	case ratelimit.SlidingCounterAlgorithm:
		return 2 * p.Period
	case ratelimit.QuotaAlgorithm:
		// The rest of the period holding the change (a year at most; a
		// validated calendar always has its periods).
		if _, end, err := p.Calendar.Period(time.Unix(0, lk.changed)); err == nil {
			return time.Duration(end.UnixNano() - lk.changed)
		}
		return 367 * 24 * time.Hour
	case ratelimit.TokenBucketAlgorithm, ratelimit.LeakyBucketAlgorithm:
		// To refill from empty, or drain when full, from one capacity
		// beyond: the most a reservation's overrun leaves (settle.lua).
		return 2 * p.WindowAt(time.Unix(0, lk.changed))
	}
	// A window.
	return p.WindowAt(time.Unix(0, lk.changed))
}

// String of a link, for tests.
func (lk link) String() string { return fmt.Sprintf("%v (%v)", lk.policy, lk.mode) }
