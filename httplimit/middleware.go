package httplimit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/observe"
	"github.com/rlkit/ratelimit/internal/report"
	"github.com/rlkit/ratelimit/internal/timesrc"
	"github.com/rlkit/ratelimit/internal/typednil"
)

// Limit is one limit a request must pass: a keyed limiter and the key
// function choosing what to charge, such as 1,000 a minute per API key or
// 10 a minute per client address on POST /login.
type Limit struct {
	// Name identifies the limit in the RateLimit-Policy and RateLimit
	// fields, in error reports and in [Result], such as "api" or "login".
	// Printable ASCII; "default" if empty; unique among the Limits of one
	// Middleware.
	Name string
	// Key picks the key to charge; a request it does not apply to is not
	// charged in this limit. Required.
	Key KeyFunc
	// Limiter holds the limit: a *ratelimit.Keyed, a Redis limiter, or any
	// KeyedLimiter. Required.
	//
	// For tiers (free, pro, ...) use a *ratelimit.Tiered: the middleware
	// calls its tier function once per request, with the request's context
	// (where an authentication middleware can have stored the plan), and
	// charges the request in that tier's limiter. An unknown tier is the
	// Tiered's error: the request is denied and the error reported, never
	// let through unlimited.
	Limiter ratelimit.KeyedLimiter
	// Window is the window reported as w in RateLimit-Policy. When zero it
	// is taken from the limiter's Policy method (which ratelimit.Keyed has),
	// through the request's tier for a ratelimit.Tiered, on each request
	// (so it follows a policy changed while serving), with
	// [ratelimit.Policy.WindowAt] at the time of the middleware's clock:
	// for a calendar quota, the length of the current period. Without a
	// Policy method, w is omitted.
	Window time.Duration
	// Shadow makes the limit report without enforcing: requests are charged
	// and the request is served even when the limit denies it. The limiter
	// is called with a context marked as shadow, so that its
	// [ratelimit.Observer] reports such a denial as
	// [ratelimit.OutcomeShadow]. Use it to roll a new limit out safely.
	// Shadow limits are consulted only for requests the enforced limits
	// admit.
	Shadow bool
	// ExemptKeys are keys this limit never charges, such as the API keys
	// of internal services: a request whose key is one of them passes this
	// limit uncharged, as if Key had not applied to it, except that the
	// middleware's observer ([WithObserver]) sees it as exempt. The other
	// limits still apply to it. Keys are compared as Key returns them,
	// before a long key is replaced by its digest ([MaxKeyLen]). [New]
	// copies the list: changing it later changes nothing.
	ExemptKeys []string
	// DeniedKeys are keys this limit always refuses, compared as
	// ExemptKeys are. A request whose key is one of them is charged
	// nowhere and answered through the [DeniedHandler] with a Denial whose
	// Err is [ErrDenied] and Limit this limit's Name ([WriteDenied]: 403
	// Forbidden), whatever exempts it otherwise ([ExemptNetworks], an
	// [Override] with Exempt, a cost <= 0): denial beats exemption. A key
	// may not be in both lists. In shadow mode (Shadow, or an Override
	// with Shadow) such a request is served, not charged in this limit, and
	// the denial only reported to the middleware's observer.
	DeniedKeys []string
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
	// limiter failing closed, a key cap reached, an unknown tier), or
	// [ErrDenied] for a request a denylist refused ([DeniedNetworks],
	// [Limit.DeniedKeys]): Decision then holds only RetryAfter
	// [ratelimit.RetryNever], Never is set, and Limit is empty when the
	// client's network was denied.
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
//
// A request a denylist refused (d.Err is [ErrDenied]) is answered 403
// Forbidden instead, since no wait would help, with no Retry-After and no
// rate-limit fields, and a body that does not say which rule refused it:
//
//	{"error":"Forbidden","message":"request denied","retryNever":true}
func WriteDenied(w http.ResponseWriter, r *http.Request, d Denial) {
	h := w.Header()
	h[keyCType] = []string{"application/json; charset=utf-8"}
	h[keyNoSniff] = []string{"nosniff"}
	if errors.Is(d.Err, ErrDenied) {
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"error":"Forbidden","message":"request denied","retryNever":true}` + "\n"))
		return
	}
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

// Middleware limits the requests that go through it. Create one with
// [New]; the zero value is not usable. A Middleware is safe for concurrent
// use, and one Middleware may wrap any number of handlers.
type Middleware struct {
	limits        []limit
	headers       HeaderSet
	denied        DeniedHandler
	cost          func(r *http.Request) int
	logger        report.Logger
	shadowHeaders bool
	inContext     bool // WithDecisionInContext
	clock         ratelimit.Clock
	ts            timesrc.Source
	hasShadow     bool // some limit is in shadow mode
	reportEvery   time.Duration
	anyReporter   report.Throttle // for errors of no known limit

	resolver   *IPResolver    // finds the client address the networks match
	exemptNets []netip.Prefix // ExemptNetworks, ExemptPrefixes
	deniedNets []netip.Prefix // DeniedNetworks, DeniedPrefixes
	hasNets    bool           // some network is exempt or denied
	deniedKeys bool           // some limit has DeniedKeys
	observer   ratelimit.Observer
}

// limit is a Limit ready to serve.
type limit struct {
	Limit
	tiered *ratelimit.Tiered // Limiter, when it is one
	ph     policyHolder      // Limiter, when it tells its policy and is not a Tiered
	sfName []byte            // Name as an RFC 8941 String
	consts constCache
	wins   windowCache
	rep    *report.Throttle

	exemptKeys keySet // ExemptKeys; nil when none
	deniedKeys keySet // DeniedKeys; nil when none
	lists      bool   // exemptKeys or deniedKeys is set
}

// policyHolder is implemented by limiters that can say which policy they
// run, such as *ratelimit.Keyed.
type policyHolder interface {
	Policy() ratelimit.Policy
}

// New returns a middleware enforcing limits, all or nothing: a request is
// charged in every limit that applies to it only if every one admits it.
// The options that apply are [WithHeaders], [WithDeniedHandler],
// [WithCost], [WithLogger], [WithErrorReportInterval],
// [WithShadowHeaders], [WithDecisionInContext], [WithClock],
// [ExemptNetworks], [DeniedNetworks], [ExemptPrefixes], [DeniedPrefixes],
// [WithIPResolver] and [WithObserver].
//
// Exemptions and denylists are settled before any limiter is asked, in
// this order: a client of [DeniedNetworks] is refused; else a request
// exempt from every limit (a client of [ExemptNetworks], an [Override]
// with Exempt, a cost <= 0) is served uncharged, unless the
// [Limit.DeniedKeys] of an enforced limit hold its key; else each limit
// refuses the keys of its DeniedKeys and lets the keys of its
// [Limit.ExemptKeys] through uncharged. Denial always beats exemption.
//
// It returns an error wrapping [ratelimit.ErrInvalidConfig] when limits is
// empty, a Limit has no Key or no Limiter, a negative Window, a name that
// is not printable ASCII or the name of another Limit ("default" counts as
// the name of a Limit without one), an ExemptKeys entry that is also in
// its DeniedKeys, and for an invalid option or one that does not apply to
// a middleware.
func New(limits []Limit, opts ...Option) (*Middleware, error) {
	m := &Middleware{headers: AllHeaders, denied: WriteDenied, reportEvery: DefaultErrorReportInterval}
	if err := applyOptions(&config{to: forMiddleware, m: m}, opts); err != nil {
		return nil, err
	}
	if m.denied == nil {
		m.denied = WriteDenied
	}
	m.ts = timesrc.New(m.clock)
	if len(limits) == 0 {
		return nil, configError("httplimit.New: limits must not be empty, got %d", len(limits))
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
			return nil, configError("httplimit.Limit.Name must be unique, got %q twice", l.Name)
		}
		names[l.Name] = true
		if l.Key == nil {
			return nil, configError("httplimit.Limit.Key of limit %q must not be nil, got nil", l.Name)
		}
		if l.Limiter == nil || typednil.Is(l.Limiter) {
			return nil, configError("httplimit.Limit.Limiter of limit %q must not be nil, got %T", l.Name, l.Limiter)
		}
		if l.Window < 0 {
			return nil, configError("httplimit.Limit.Window of limit %q must not be negative, got %v", l.Name, l.Window)
		}
		tiered, _ := l.Limiter.(*ratelimit.Tiered)
		var ph policyHolder
		if tiered == nil {
			ph, _ = l.Limiter.(policyHolder)
		}
		m.limits = append(m.limits, limit{Limit: l, tiered: tiered, ph: ph, sfName: appendSFString(nil, l.Name), rep: new(report.Throttle)})
		nl := &m.limits[len(m.limits)-1]
		if err := nl.checkKeyLists(); err != nil {
			return nil, err
		}
		m.hasShadow = m.hasShadow || l.Shadow
		m.deniedKeys = m.deniedKeys || nl.deniedKeys != nil
	}
	m.hasNets = len(m.exemptNets)+len(m.deniedNets) > 0
	if m.resolver == nil {
		m.resolver = defaultResolver
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
	// such as for health checks or internal callers, and reports it to the
	// middleware's observer as exempt ([WithObserver]). Denylists still
	// apply: a client of [DeniedNetworks], or a key in the
	// [Limit.DeniedKeys] of an enforced limit, is refused.
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
	l       *limit
	limiter ratelimit.KeyedLimiter // l.Limiter, or the request's tier of it
	key     string
	// err is why the limit cannot decide: the tier could not be resolved
	// (deny with it).
	err error
	// listed is set for a limit in shadow mode whose DeniedKeys hold key:
	// its denial is reported, nothing charged.
	listed bool
}

// verdict is what the limits decided for one request: the Decision to
// report and where it came from.
type verdict struct {
	dec    ratelimit.Decision
	from   int   // index in the charges of dec; -1 when none
	denied bool  // an enforced limit refused the request
	failed bool  // dec came with an error: a failure policy's, not measured
	err    error // the enforced limits' error
}

// maxInline is how many applying limits a request can have before the
// middleware allocates to track them.
const maxInline = 4

// serve runs the six phases of a request: its cost, the limits that apply,
// the enforced decision, the shadow limits, the rate-limit fields, and the
// handler or the denial. Each phase past the first is called only when it
// has work, so that a request with one limit and no headers pays no call
// it does not need.
func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	n, allShadow, exempt := m.requestCost(r)
	if m.hasNets {
		switch m.matchNetwork(r) {
		case netDenied:
			m.denyListed(w, r, n, nil)
			return
		case netExempt:
			exempt = true
		}
	}
	if exempt {
		m.serveExempt(w, r, n, allShadow, next)
		return
	}
	var buf [maxInline]charge
	charges, enforced, listed := m.gather(r, n, allShadow, buf[:0])
	if listed != nil {
		m.denyListed(w, r, n, listed)
		return
	}
	if len(charges) == 0 {
		next.ServeHTTP(w, r)
		return
	}
	v := verdict{from: -1}
	if enforced > 0 && !m.enforce(r, n, charges[:enforced], &v) {
		// The request's context ended before the limiters could decide
		// (the client went away, a deadline passed): its error is not a
		// backend failure, and whatever Decision came with it was not made
		// on the request's merits. Neither admit it free nor charge the
		// failure to the backend.
		w.WriteHeader(http.StatusServiceUnavailable)
		return
	}
	if !v.denied && enforced < len(charges) {
		m.shadow(r, n, charges, enforced, &v)
	}
	if v.from >= 0 && (m.headers != NoHeaders || v.denied) && (v.from < enforced || m.shadowHeaders) {
		m.writeFields(w.Header(), charges, enforced, &v)
	}
	if !v.denied {
		if m.inContext && v.from >= 0 {
			r = withResult(r, Result{Limit: charges[v.from].l.Name, Decision: v.dec, Shadow: v.from >= enforced})
		}
		next.ServeHTTP(w, r)
		return
	}
	m.deny(w, r, charges, &v)
}

// requestCost returns the request's cost and its Override's verdict:
// every limit in shadow mode, or no limit at all (an Override with Exempt
// or a cost <= 0).
func (m *Middleware) requestCost(r *http.Request) (n int, allShadow, exempt bool) {
	n = 1
	if m.cost != nil {
		n = m.cost(r)
	}
	if o, ok := OverrideFrom(r.Context()); ok {
		if o.Cost > 0 {
			n = o.Cost
		}
		return n, o.Shadow, o.Exempt || n <= 0
	}
	return n, false, n <= 0
}

// gather appends to cs the limits that apply to r, enforced ones first,
// and returns them with the number of enforced ones. It resolves each
// *ratelimit.Tiered to the request's tier, calling its tier function once.
// It leaves out the limits whose ExemptKeys hold the request's key, and
// stops at the first enforced limit whose DeniedKeys hold it, returning
// that limit. The exemptions are reported to the observer only when no
// denylist refuses the request: denial beats exemption.
func (m *Middleware) gather(r *http.Request, n int, allShadow bool, cs []charge) ([]charge, int, *limit) {
	passes := 1
	if m.hasShadow || allShadow {
		passes = 2
	}
	var exemptBuf [maxInline]*limit
	exempt := exemptBuf[:0] // with an observer: the limits to report as exempt
	enforced := 0
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
			listed := false
			if l.lists {
				if l.deniedKeys.has(key) {
					if pass == 0 {
						return cs, len(cs), l
					}
					listed = true // reported when the shadow limits are
				} else if l.exemptKeys.has(key) {
					if m.observer != nil {
						exempt = append(exempt, l)
					}
					continue
				}
			}
			if len(key) > MaxKeyLen {
				key = digestKey(key)
			}
			c := charge{l: l, limiter: l.Limiter, key: key, listed: listed}
			if l.tiered != nil && !listed {
				_, c.limiter, c.err = l.tiered.Tier(r.Context(), key)
			}
			cs = append(cs, c)
		}
		if pass == 0 {
			enforced = len(cs)
		}
	}
	for _, l := range exempt {
		m.observe(r, l, ratelimit.OutcomeExempt, n)
	}
	return cs, enforced, nil
}

// enforce charges n in every enforced limit cs, all or nothing, and
// records the outcome in v. It returns false when the request's context
// ended before the limiters could decide.
func (m *Middleware) enforce(r *http.Request, n int, cs []charge, v *verdict) bool {
	ctx := r.Context()
	var errAt int
	v.dec, v.from, errAt, v.err = allowAll(ctx, n, cs)
	v.denied = !v.dec.Allowed
	if v.err != nil {
		if ctx.Err() != nil {
			return false
		}
		m.report(r, cs, errAt, v.err)
		v.failed = true
	}
	return true
}

// allowAll charges n in every limit of cs, all or nothing, and returns the
// Decision to report, its index in cs, and with an error the index of the
// limit to report it under.
func allowAll(ctx context.Context, n int, cs []charge) (ratelimit.Decision, int, int, error) {
	for i := range cs {
		if cs[i].err != nil { // a tier that could not be resolved: deny
			return ratelimit.Decision{RetryAfter: ratelimit.RetryNever}, i, i, cs[i].err
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
		// The resolved tier, not the Tiered: its tier function ran once.
		dims = append(dims, ratelimit.Dimension{Name: c.l.Name, Limiter: c.limiter, Key: c.key})
	}
	md, err := ratelimit.AllowAll(ctx, n, dims...)
	return md.Decision, md.Index, md.Index, err
}

// shadow charges n in the shadow limits, cs[enforced:], reporting their
// errors. Their limiters see a context marked as shadow, for their
// observers. With shadow headers, or when no enforced limit applies, a
// shadow limit more restrictive than v's Decision takes its place.
func (m *Middleware) shadow(r *http.Request, n int, cs []charge, enforced int, v *verdict) {
	ctx := r.Context()
	sctx := observe.WithShadow(ctx)
	compete := m.shadowHeaders || enforced == 0
	for i := enforced; i < len(cs); i++ {
		c := &cs[i]
		if c.listed { // its DeniedKeys would refuse the request
			if m.observer != nil {
				m.observe(r, c.l, ratelimit.OutcomeShadow, n)
			}
			continue
		}
		d, err := ratelimit.Decision{RetryAfter: ratelimit.RetryNever}, c.err
		if err == nil {
			d, err = c.limiter.AllowN(sctx, c.key, n)
		}
		if err != nil && ctx.Err() == nil {
			m.report(r, cs, i, err)
		}
		if compete && err == nil && (v.from < 0 || v.failed || moreRestrictive(d, v.dec)) {
			v.dec, v.from, v.failed = d, i, false
		}
	}
}

// moreRestrictive reports whether a should be reported rather than b.
func moreRestrictive(a, b ratelimit.Decision) bool {
	if a.Allowed != b.Allowed {
		return !a.Allowed
	}
	return a.Remaining < b.Remaining
}

// writeFields sets the rate-limit fields for v's Decision on h.
func (m *Middleware) writeFields(h http.Header, cs []charge, enforced int, v *verdict) {
	set := m.headers
	if v.failed {
		set = NoHeaders // no quota was measured: only Retry-After
	}
	c := &cs[v.from]
	st := headerState{d: v.dec, name: c.l.sfName, consts: &c.l.consts}
	if v.from >= enforced && !st.d.Allowed { // reported, not enforced
		st.d.Allowed, st.d.RetryAfter = true, 0
	}
	st.now = m.ts.Now()
	if set&IETFHeaders != 0 {
		st.window = c.window(st.now)
	}
	writeHeaders(h, set, &st)
}

// window returns the window to report for c's limit at now (Unix
// nanoseconds): its Window, or else the window of its limiter's (or
// tier's) policy as it is now (a calendar quota's period has its own
// length: a day of 23 hours, a month of 28 days); 0 if unknown.
func (c *charge) window(now int64) time.Duration {
	if c.l.Window > 0 {
		return c.l.Window
	}
	ph := c.l.ph
	if c.l.tiered != nil {
		ph, _ = c.limiter.(policyHolder)
	}
	if ph == nil {
		return 0
	}
	return c.l.wins.windowAt(ph.Policy(), now)
}

// deny answers a request an enforced limit refused.
func (m *Middleware) deny(w http.ResponseWriter, r *http.Request, cs []charge, v *verdict) {
	den := Denial{Decision: v.dec, Never: v.dec.RetryAfter == ratelimit.RetryNever, Err: v.err}
	if v.from >= 0 {
		den.Limit = cs[v.from].l.Name
	}
	if !den.Never {
		den.RetryAfter = RetryAfterSeconds(v.dec)
	}
	m.denied(w, r, den)
}
