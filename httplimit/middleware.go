package httplimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/rlkit/ratelimit"
)

// Limit is one limit a request must pass: a keyed limiter and the key
// function choosing what to charge, such as 1,000 a minute per API key or
// 10 a minute per client address on POST /login.
type Limit struct {
	// Name identifies the limit in the RateLimit-Policy and RateLimit
	// fields and in hooks, such as "api" or "login". Printable ASCII;
	// "default" if empty; unique among the Limits of one Middleware.
	Name string
	// Key picks the key to charge; a request it does not apply to is not
	// charged in this limit. Required.
	Key KeyFunc
	// Limiter holds the limit: a *ratelimit.Keyed, a *ratelimit.Tiered (the
	// tier chosen per key), a Redis limiter, or any KeyedLimiter. Required
	// unless Tiers is set.
	Limiter ratelimit.KeyedLimiter
	// Tier, with Tiers, chooses the limiter per request rather than per
	// key: Tiers[Tier(r)], for instance from the plan an authentication
	// middleware stored in the request context. A tier name missing from
	// Tiers falls back to Limiter, or, without one, is denied (and reported
	// to the error hook) rather than let through unlimited.
	Tier  func(r *http.Request) string
	Tiers map[string]ratelimit.KeyedLimiter
	// Window is the window reported as w in RateLimit-Policy. When zero it
	// is taken from the limiter's Policy method (which ratelimit.Keyed has),
	// through the tier of a ratelimit.Tiered; without one, w is omitted.
	Window time.Duration
	// Shadow makes the limit report without enforcing: requests are charged
	// and a denial goes to the shadow hook ([WithShadowHook]), but the
	// request is served. Use it to roll a new limit out safely. Shadow
	// limits are consulted only for requests the enforced limits admit.
	Shadow bool
}

// Denial describes a denied request to a [DeniedHandler].
type Denial struct {
	// Limit is the name of the limit that denied the request.
	Limit string
	// Decision is that limit's Decision.
	Decision ratelimit.Decision
	// RetryAfter is the Retry-After value sent, in seconds: the Decision's
	// RetryAfter rounded up, at least 1; 0 when Never.
	RetryAfter int64
	// Never reports that the request's cost exceeds the limit's capacity,
	// so that it can never succeed however long the client waits.
	Never bool
	// Err is the limiter's error, if the denial came with one (a Redis
	// limiter failing closed, a key cap reached).
	Err error
}

// DeniedHandler answers a denied request. The rate-limit fields and
// Retry-After are already set on w's header when it is called (a handler
// serving a full response instead may delete Retry-After). It may
// answer 429 in its own format, or serve a cached or reduced response
// instead (graceful degradation).
type DeniedHandler func(w http.ResponseWriter, r *http.Request, d Denial)

// WriteDenied is the default [DeniedHandler]: 429 Too Many Requests with a
// JSON body such as
//
//	{"error":"Too Many Requests","message":"rate limit \"api\" exceeded, retry in 17 s","retryAfter":17}
//
// or, for a request that can never succeed,
//
//	{"error":"Too Many Requests","message":"request cost exceeds rate limit \"api\" (quota 100): it can never succeed, do not retry","retryNever":true}
func WriteDenied(w http.ResponseWriter, r *http.Request, d Denial) {
	h := w.Header()
	h[keyCType] = []string{"application/json; charset=utf-8"}
	h[keyNoSniff] = []string{"nosniff"}
	w.WriteHeader(http.StatusTooManyRequests)
	b := make([]byte, 0, 160)
	b = append(b, `{"error":"Too Many Requests","message":`...)
	var msg string
	switch {
	case d.Never && d.Decision.Limit > 0:
		msg = fmt.Sprintf("request cost exceeds rate limit %q (quota %d): it can never succeed, do not retry", d.Limit, d.Decision.Limit)
	case d.Never:
		msg = fmt.Sprintf("request refused by rate limit %q: it can never succeed, do not retry", d.Limit)
	default:
		msg = fmt.Sprintf("rate limit %q exceeded, retry in %d s", d.Limit, d.RetryAfter)
	}
	b = strconv.AppendQuote(b, msg) // ASCII names: a valid JSON string
	if d.Never {
		b = append(b, `,"retryNever":true}`...)
	} else {
		b = append(b, `,"retryAfter":`...)
		b = strconv.AppendInt(b, d.RetryAfter, 10)
		b = append(b, '}')
	}
	b = append(b, '\n')
	_, _ = w.Write(b)
}

// Option configures a [Middleware].
type Option struct {
	apply func(*Middleware)
}

// WithHeaders chooses which rate-limit fields are sent (default
// [AllHeaders]).
func WithHeaders(set HeaderSet) Option {
	return Option{func(m *Middleware) { m.headers = set }}
}

// WithDeniedHandler replaces [WriteDenied] as the answer to denied
// requests.
func WithDeniedHandler(h DeniedHandler) Option {
	return Option{func(m *Middleware) { m.denied = h }}
}

// WithCost sets each request's cost (the n charged in every limit),
// default 1: for instance by the size of a batch. A cost <= 0 exempts the
// request. A cost above a limit's capacity can never succeed (see the
// package documentation).
func WithCost(cost func(r *http.Request) int) Option {
	return Option{func(m *Middleware) { m.cost = cost }}
}

// WithErrorHook reports errors from limiters (a Redis backend down, a key
// cap reached, an unknown tier), with the name of the limit when it is
// known ("" when it is not). The request is then treated as the limiter's
// Decision says: limiters carry their own failure policy, so under
// FailOpen a request is admitted with the error, under FailClosed denied.
// Either way the middleware sends no quota fields for a request on which
// an enforced limit's limiter reported an error (a failure policy's
// Decision has made-up quota numbers, and with several limits the error
// does not say whose Decision it was), only Retry-After on a denial.
//
// A backend that is down fails every request, so the hook is called at
// most once per limit per interval ([WithErrorReportInterval], default
// [DefaultErrorReportInterval]); the next error reported after some were
// left out comes wrapped in an [*ErrorSummary] counting them. The caller's
// own cancellation (a done request context) is not reported. The hook is
// called synchronously, must be safe for concurrent use and should be
// quick.
func WithErrorHook(hook func(r *http.Request, limit string, err error)) Option {
	return Option{func(m *Middleware) { m.onError = hook }}
}

// DefaultErrorReportInterval is how often, at most, the error hook is
// called for one limit unless [WithErrorReportInterval] says otherwise.
const DefaultErrorReportInterval = 10 * time.Second

// WithErrorReportInterval sets how often, at most, the error hook
// ([WithErrorHook]) is called for one limit (default
// [DefaultErrorReportInterval]). d <= 0 reports every error, one call per
// limit per request while a backend is down.
func WithErrorReportInterval(d time.Duration) Option {
	return Option{func(m *Middleware) { m.reportEvery = max(d, 0) }}
}

// ErrorSummary is the error passed to the error hook ([WithErrorHook])
// when earlier errors of the same limit were not reported, to keep an
// outage from calling the hook on every request: Err is the error of the
// request at hand, Suppressed how many errors of the limit went
// unreported since the last call.
type ErrorSummary struct {
	// Err is the error of the request the hook is called for.
	Err error
	// Suppressed counts the errors of the limit left unreported before it.
	Suppressed int64
}

// Error returns Err's text with the count of errors left unreported.
func (e *ErrorSummary) Error() string {
	return fmt.Sprintf("%v (and %d more errors not reported since the last report)", e.Err, e.Suppressed)
}

// Unwrap returns Err.
func (e *ErrorSummary) Unwrap() error { return e.Err }

// reporter throttles the error reports of one limit.
type reporter struct {
	mu         sync.Mutex
	reported   bool  // guarded by mu; a report was made
	last       int64 // guarded by mu; Unix nanoseconds of the last report
	suppressed int64 // guarded by mu; errors left out since
}

// WithShadowHook reports every request that a [Limit] in shadow mode would
// have denied. The request is served anyway.
func WithShadowHook(hook func(r *http.Request, limit string, d ratelimit.Decision)) Option {
	return Option{func(m *Middleware) { m.onShadow = hook }}
}

// WithShadowHeaders lets limits in shadow mode take part in the rate-limit
// fields (when one of them is the most restrictive), so that clients see
// them before they are enforced. Off by default: a shadow limit changes
// nothing a client can see.
func WithShadowHeaders(on bool) Option {
	return Option{func(m *Middleware) { m.shadowHeaders = on }}
}

// WithClock sets the clock X-RateLimit-Reset is computed from (default the
// real clock). Limiters have their own clocks ([ratelimit.WithClock]).
func WithClock(c ratelimit.Clock) Option {
	return Option{func(m *Middleware) { m.clock = c }}
}

// Middleware limits the requests that go through it. Create one with
// [New]; the zero value is not usable. A Middleware is safe for concurrent
// use, and one Middleware may wrap any number of handlers.
type Middleware struct {
	limits        []limit
	headers       HeaderSet
	denied        DeniedHandler
	cost          func(r *http.Request) int
	onError       func(r *http.Request, limit string, err error)
	onShadow      func(r *http.Request, limit string, d ratelimit.Decision)
	shadowHeaders bool
	clock         ratelimit.Clock
	wall          wallClock // when clock is nil
	hasShadow     bool      // some limit is in shadow mode
	reportEvery   time.Duration
	anyReporter   reporter // for errors of no known limit
}

// limit is a Limit ready to serve.
type limit struct {
	Limit
	sfName []byte        // Name as an RFC 8941 String
	window time.Duration // Limiter's window, if fixed; 0 if not known up front
	consts constCache
	rep    *reporter
}

// policer is implemented by limiters that can say which policy they run,
// such as *ratelimit.Keyed.
type policer interface {
	Policy() ratelimit.Policy
}

// tierer is implemented by *ratelimit.Tiered.
type tierer interface {
	Tier(ctx context.Context, key string) (string, ratelimit.KeyedLimiter, error)
}

// New returns a middleware enforcing limits, all or nothing: a request is
// charged in every limit that applies to it only if every one admits it.
// It returns an error when a Limit has no Key or no limiter, a name that
// is not printable ASCII, or the name of another Limit ("default" counts as
// the name of a Limit without one).
func New(limits []Limit, opts ...Option) (*Middleware, error) {
	m := &Middleware{headers: AllHeaders, denied: WriteDenied, reportEvery: DefaultErrorReportInterval}
	for _, o := range opts {
		if o.apply != nil {
			o.apply(m)
		}
	}
	if m.denied == nil {
		m.denied = WriteDenied
	}
	if len(limits) == 0 {
		return nil, errors.New("httplimit: no limits")
	}
	names := make(map[string]bool, len(limits))
	for _, l := range limits {
		if l.Name == "" {
			l.Name = "default"
		}
		if err := checkPolicyName(l.Name); err != nil {
			return nil, err
		}
		if names[l.Name] {
			return nil, fmt.Errorf("httplimit: limit name %q used twice: each Limit needs a name of its own", l.Name)
		}
		names[l.Name] = true
		if l.Key == nil {
			return nil, fmt.Errorf("httplimit: limit %q has no Key", l.Name)
		}
		if l.Limiter == nil && (l.Tier == nil || len(l.Tiers) == 0) {
			return nil, fmt.Errorf("httplimit: limit %q has no Limiter and no Tier with Tiers", l.Name)
		}
		if (l.Tier == nil) != (len(l.Tiers) == 0) {
			return nil, fmt.Errorf("httplimit: limit %q: Tier and Tiers go together", l.Name)
		}
		for name, tl := range l.Tiers {
			if tl == nil {
				return nil, fmt.Errorf("httplimit: limit %q: tier %q has a nil limiter", l.Name, name)
			}
		}
		if l.Window < 0 {
			return nil, fmt.Errorf("httplimit: limit %q: negative Window %v", l.Name, l.Window)
		}
		if l.Tiers != nil {
			tiers := make(map[string]ratelimit.KeyedLimiter, len(l.Tiers))
			for k, v := range l.Tiers {
				tiers[k] = v
			}
			l.Tiers = tiers
		}
		fixed := l.Window
		if _, tiered := l.Limiter.(tierer); fixed == 0 && !tiered {
			if p, ok := l.Limiter.(policer); ok {
				fixed = p.Policy().Window()
			}
		}
		m.limits = append(m.limits, limit{Limit: l, sfName: appendSFString(nil, l.Name), window: fixed, rep: new(reporter)})
		m.hasShadow = m.hasShadow || l.Shadow

	}
	return m, nil
}

// Handler returns next wrapped by the middleware. m.Handler has the
// standard middleware shape func(http.Handler) http.Handler.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.serve(w, r, next)
	})
}

// Override changes how the middleware treats one request. An earlier
// middleware (authentication, say) attaches it with [WithOverride].
type Override struct {
	// Exempt lets the request through uncharged, with no rate-limit fields,
	// such as for health checks or internal callers.
	Exempt bool
	// Cost, when positive, replaces the cost [WithCost] would give.
	Cost int
	// Shadow treats every limit as in shadow mode for this request.
	Shadow bool
}

type overrideKey struct{}

// WithOverride returns a copy of ctx carrying o for the middleware.
func WithOverride(ctx context.Context, o Override) context.Context {
	return context.WithValue(ctx, overrideKey{}, o)
}

// OverrideFrom returns the Override ctx carries, if any.
func OverrideFrom(ctx context.Context) (Override, bool) {
	o, ok := ctx.Value(overrideKey{}).(Override)
	return o, ok
}

// MaxKeyLen is the longest key the middleware passes to a limiter. A
// longer key (a client-chosen header value, a long URL path) is replaced by
// "sha256:" and the hex SHA-256 of the key, so that clients cannot make the
// limiter store arbitrarily large keys; the digest is the same in every
// process, so Redis limiters shared by several servers agree.
const MaxKeyLen = 128

func digestKey(key string) string {
	sum := sha256.Sum256([]byte(key))
	return "sha256:" + hex.EncodeToString(sum[:])
}

// charge is one limit applying to one request.
type charge struct {
	l              *limit
	limiter        ratelimit.KeyedLimiter
	key            string
	perRequestTier bool // limiter was chosen from l.Tiers
}

// maxInline is how many applying limits a request can have before the
// middleware allocates to track them.
const maxInline = 4

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	ctx := r.Context()
	n := 1
	if m.cost != nil {
		n = m.cost(r)
	}
	allShadow := false
	if o, ok := OverrideFrom(ctx); ok {
		if o.Exempt {
			next.ServeHTTP(w, r)
			return
		}
		if o.Cost > 0 {
			n = o.Cost
		}
		allShadow = o.Shadow
	}
	if n <= 0 {
		next.ServeHTTP(w, r)
		return
	}

	// Gather the limits that apply: enforced ones, then shadow ones.
	var buf [maxInline]charge
	charges := buf[:0]
	enforced := 0
	passes := 1
	if m.hasShadow || allShadow {
		passes = 2
	}
	for pass := 0; pass < passes; pass++ {
		for i := range m.limits {
			l := &m.limits[i]
			if (l.Shadow || allShadow) != (pass == 1) {
				continue
			}
			key, ok := l.Key(r)
			if !ok {
				continue
			}
			if len(key) > MaxKeyLen {
				key = digestKey(key)
			}
			c := charge{l: l, limiter: l.Limiter, key: key}
			if l.Tier != nil {
				if tl, ok := l.Tiers[l.Tier(r)]; ok {
					c.limiter, c.perRequestTier = tl, true
				}
			}
			charges = append(charges, c)
		}
		if pass == 0 {
			enforced = len(charges)
		}
	}
	if len(charges) == 0 {
		next.ServeHTTP(w, r)
		return
	}

	var (
		dec    ratelimit.Decision
		from   = -1 // index in charges of the reported Decision
		denied bool
		err    error
		failed bool // the reported Decision came with an error: a failure policy's
	)
	if enforced > 0 {
		var errAt int
		dec, from, errAt, err = m.allowAll(ctx, n, charges[:enforced])
		if err != nil {
			if ctx.Err() != nil {
				// The request's context ended before the limiters could
				// decide (the client went away, a deadline passed): its
				// error is not a backend failure, and whatever Decision
				// came with it was not made on the request's merits.
				// Neither admit it free nor charge the failure to the
				// backend.
				w.WriteHeader(http.StatusServiceUnavailable)
				return
			}
			m.report(r, charges, errAt, err)
			failed = true
		}
		denied = !dec.Allowed
	}
	if !denied {
		for i := enforced; i < len(charges); i++ {
			c := &charges[i]
			d := ratelimit.Decision{RetryAfter: ratelimit.RetryNever}
			var e error
			if c.limiter == nil {
				e = unknownTier(c.l.Name)
			} else {
				d, e = c.limiter.AllowN(ctx, c.key, n)
			}
			if e != nil && ctx.Err() == nil {
				m.report(r, charges, i, e)
			}
			if !d.Allowed && m.onShadow != nil && (e == nil || ctx.Err() == nil) {
				m.onShadow(r, c.l.Name, d)
			}
			if m.shadowHeaders && e == nil && (from < 0 || failed || moreRestrictive(d, dec)) {
				dec, from, failed = d, i, false
				if !d.Allowed { // reported, not enforced
					dec.Allowed = true
					dec.RetryAfter = 0
				}
			}
		}
	}

	if from >= 0 && (m.headers != NoHeaders || denied) {
		set := m.headers
		if failed {
			set = NoHeaders // no quota was measured: only Retry-After
		}
		c := &charges[from]
		st := headerState{d: dec, name: c.l.sfName, consts: &c.l.consts}
		if set&IETFHeaders != 0 {
			st.window = m.window(ctx, c)
		}
		st.now = m.nowNano()
		writeHeaders(w.Header(), set, &st)
	}
	if !denied {
		next.ServeHTTP(w, r)
		return
	}
	den := Denial{Decision: dec, Never: dec.RetryAfter == ratelimit.RetryNever, Err: err}
	if from >= 0 {
		den.Limit = charges[from].l.Name
	}
	if !den.Never {
		den.RetryAfter = RetryAfterSeconds(dec)
	}
	m.denied(w, r, den)
}

// moreRestrictive reports whether a should be reported rather than b.
func moreRestrictive(a, b ratelimit.Decision) bool {
	if a.Allowed != b.Allowed {
		return !a.Allowed
	}
	return a.Remaining < b.Remaining
}

func unknownTier(limit string) error {
	return fmt.Errorf("httplimit: limit %q: %w", limit, ratelimit.ErrUnknownTier)
}

func (m *Middleware) nowNano() int64 {
	if m.clock != nil {
		return m.clock.Now().UnixNano()
	}
	return m.wall.unixNano()
}

// report passes err, from the limit of cs[at] (at < 0: unknown), to the
// error hook, at most once per limit per m.reportEvery.
func (m *Middleware) report(r *http.Request, cs []charge, at int, err error) {
	if m.onError == nil {
		return
	}
	rep, name := &m.anyReporter, ""
	if at >= 0 && at < len(cs) {
		rep, name = cs[at].l.rep, cs[at].l.Name
	}
	if m.reportEvery > 0 {
		now := m.nowNano()
		rep.mu.Lock()
		if rep.reported && now-rep.last < int64(m.reportEvery) {
			rep.suppressed++
			rep.mu.Unlock()
			return
		}
		left := rep.suppressed
		rep.reported, rep.last, rep.suppressed = true, now, 0
		rep.mu.Unlock()
		if left > 0 {
			err = &ErrorSummary{Err: err, Suppressed: left}
		}
	}
	m.onError(r, name, err)
}

// allowAll charges n in every limit of cs, all or nothing, and returns the
// Decision to report, its index in cs, and with an error the index of the
// limit to report it under (-1 if unknown).
func (m *Middleware) allowAll(ctx context.Context, n int, cs []charge) (ratelimit.Decision, int, int, error) {
	for i := range cs {
		if cs[i].limiter == nil { // a tier with no limiter: deny
			return ratelimit.Decision{RetryAfter: ratelimit.RetryNever}, i, i, unknownTier(cs[i].l.Name)
		}
	}
	if len(cs) == 1 {
		// One limit: AllowN directly, which is AllowAll's result for one
		// dimension without the bookkeeping.
		d, err := cs[0].limiter.AllowN(ctx, cs[0].key, n)
		return d, 0, 0, err
	}
	var buf [maxInline]ratelimit.Dimension
	dims := buf[:0]
	for _, c := range cs {
		dims = append(dims, ratelimit.Dimension{Name: c.l.Name, Limiter: c.limiter, Key: c.key})
	}
	md, err := ratelimit.AllowAll(ctx, n, dims...)
	return md.Decision, md.Index, md.Index, err
}

// window returns the window to report for c's limit.
func (m *Middleware) window(ctx context.Context, c *charge) time.Duration {
	if c.l.Window > 0 {
		return c.l.Window
	}
	if c.l.window > 0 && !c.perRequestTier {
		return c.l.window
	}
	lim := c.limiter
	if t, ok := lim.(tierer); ok {
		if _, tl, err := t.Tier(ctx, c.key); err == nil {
			lim = tl
		}
	}
	if p, ok := lim.(policer); ok {
		return p.Policy().Window()
	}
	return 0
}
