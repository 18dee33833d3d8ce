package httplimit

import (
	"bufio"
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/adapter"
	"github.com/rlkit/ratelimit/internal/limitset"
	"github.com/rlkit/ratelimit/internal/report"
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
	// charged in this limit. Required. A key longer than 128 bytes (a
	// client-chosen header value, a long URL path) is replaced by "sha256:"
	// and the hex SHA-256 of the key, so that clients cannot make the
	// limiter store arbitrarily large keys; the digest is the same in every
	// process, so Redis limiters shared by several servers agree.
	Key KeyFunc
	// Limiter holds the limit: a *ratelimit.Keyed, a Redis limiter, or any
	// KeyedLimiter. Required. Observe it through the middleware
	// ([WithObserver]), not with an Observer of its own: [New] refuses
	// both, which would count each decision twice.
	//
	// For tiers (free, pro, ...) use a *ratelimit.Tiered: the middleware
	// calls its tier function once per request, with the request's context
	// (where an authentication middleware can have stored the plan), and
	// charges the request in that tier's limiter. An unknown tier is the
	// server's misconfiguration, not the client's fault: the request is
	// answered 500 Internal Server Error, charged nowhere, and the error
	// reported (logged, and observed as [ratelimit.OutcomeError]), never
	// let through unlimited nor told "do not retry".
	Limiter ratelimit.KeyedLimiter
	// Concurrency, in place of Limiter, makes the limit a concurrency
	// limit: at most so many requests in flight per key, such as a
	// ratelimit.NewConcurrency(20) or a Redis one. A Limit has one of
	// Limiter and Concurrency. The request's cost is the permits it takes,
	// acquired without waiting once the rate limits have admitted it (a
	// request they refuse takes none), and held until the handler returns
	// or panics; a client that goes away cancels the request's context,
	// and the permits come back when the handler returns. A full limit
	// refuses the request all or nothing (the rate limits that admitted it
	// are refunded) through the denied handler: 429 with RateLimit-Policy
	// `"name";q=20;qu="concurrent-requests"` and RateLimit `"name";r=0`
	// (no t, no X-RateLimit-Reset: nobody knows when a holder ends), and
	// Retry-After only for a key under Block. Name, Key, Shadow (the
	// permits are then held and measured, not enforced), ExemptKeys,
	// DeniedKeys, [Override] and [ExemptNetworks] apply as to a rate limit;
	// Window does not ([New] refuses one). The middleware's observer hears
	// each acquisition under Name and, once the handler returns, one
	// [ratelimit.OutcomeReleased] Event with the permits given back.
	Concurrency ratelimit.ConcurrencyLimiter
	// Count, when set, counts each request by its outcome, once its
	// handler has run, instead of charging its cost up front: only
	// failures, such as 5 failed logins a minute per user,
	//
	//	Count: func(status, _ int) int { if status >= 400 { return 1 }; return 0 },
	//
	// only successes, or the cost the handler reports with [ReportCost]
	// (tokens used: func(_, cost int) int { return cost }). Before the
	// handler runs, the request's cost ([WithCost], default 1: the most
	// Count should return) is reserved, all or nothing with the other
	// limits, so a spent limit refuses the request before it runs, as a
	// rate limit does (429). Once the handler returns, panics (status 500)
	// or returns after its client went away, the reservation is settled at
	// Count(status, cost): status is the first the handler wrote (200 if
	// none), cost what it reported, else the request's cost. Less than
	// reserved gives the difference back, more charges the overrun after
	// the fact.
	//
	// So that concurrent requests cannot overrun the limit, a request it
	// would refuse while this Middleware holds reservations of the key
	// waits for one to settle (until its context ends) and tries again:
	// with 5 failures allowed, concurrent successful logins take turns,
	// at most 5 in their handlers, and are never refused; only settled
	// counts refuse. (Servers sharing a Redis limiter do not wait for each
	// other's reservations.) The RateLimit fields show the state with this
	// request's cost reserved (for a failure limit, as if it failed); the
	// next response's show it settled. A reservation is held 10 minutes,
	// or a minute past the request's deadline if later, then stays
	// charged: that only reclaims a dead server's. Limiter must be a
	// [ratelimit.Reserver] (a *ratelimit.Keyed under any algorithm but the
	// sliding log, a *ratelimit.Tiered, a Redis limiter); [New] refuses
	// others, and Count on a concurrency limit.
	// A type of yours that embeds one reserves through the embedded
	// ReserveN, not through its own AllowN: give it a ReserveN of its own.
	Count func(status, cost int) int
	// Window is the window reported as w in RateLimit-Policy. When zero it
	// is taken from the limiter's Policy method (which ratelimit.Keyed has),
	// through the request's tier for a ratelimit.Tiered, on each request
	// (so it follows a policy changed while serving), with
	// [ratelimit.Policy.WindowAt] at the time of the middleware's clock:
	// for a calendar quota, the length of the current period. Without a
	// Policy method, w is omitted.
	Window time.Duration
	// Shadow makes the limit report without enforcing: requests are charged
	// and the request is served even when the limit denies it; the
	// middleware's observer ([WithObserver]) reports such a denial as
	// [ratelimit.OutcomeShadow]. Use it to roll a new limit out safely.
	// Shadow limits are consulted only for requests the enforced limits
	// admit.
	Shadow bool
	// ExemptKeys are keys this limit never charges, such as the API keys
	// of internal services: a request whose key is one of them passes this
	// limit uncharged, as if Key had not applied to it, except that the
	// middleware's observer ([WithObserver]) sees it as exempt. The other
	// limits still apply to it. Keys are compared as Key returns them,
	// before a long key is replaced by its digest (see Key). [New]
	// copies the list: changing it later changes nothing.
	ExemptKeys []string
	// DeniedKeys are keys this limit always refuses, compared as
	// ExemptKeys are. A request whose key is one of them is charged
	// nowhere and answered through the denied handler ([WithDeniedHandler])
	// with a Denial whose
	// Err is [ErrDenied] and Limit this limit's Name ([WriteDenied]: 403
	// Forbidden), whatever exempts it otherwise ([ExemptNetworks], an
	// [Override] with Exempt, a cost <= 0): denial beats exemption. A key
	// may not be in both lists. In shadow mode (Shadow, or an Override
	// with Shadow) such a request is served, not charged in this limit, and
	// the denial only reported to the middleware's observer.
	DeniedKeys []string
}

// Denial describes a denied request to the denied handler
// ([WithDeniedHandler]). grpclimit's Denial has the same fields, and two
// of its own (the call's Method, and Message for a stream message).
type Denial struct {
	// Limit is the name of the limit that denied the request.
	Limit string
	// Decision is that limit's Decision.
	Decision ratelimit.Decision
	// RetryAfter is the delay sent as Retry-After: the Decision's
	// RetryAfter rounded up to a whole second, at least one second; 0 when
	// Never, and when a concurrency limit is full (not blocked).
	RetryAfter time.Duration
	// Never reports that the request's cost exceeds the limit's capacity,
	// so that it can never succeed however long the client waits.
	Never bool
	// Err is the limiter's error, if the denial came with one (a Redis
	// limiter failing closed, a key cap reached, an unknown tier), or
	// [ErrDenied] for a request a denylist refused ([DeniedNetworks],
	// [Limit.DeniedKeys]): Decision then holds only RetryAfter
	// [ratelimit.RetryNever], Never is set, and Limit is empty when the
	// client's network was denied; or [ErrShed] for a request the
	// middleware's Adaptive shed ([WithAdaptive]).
	Err error

	concurrent bool // Limit is a concurrency limit ([Limit.Concurrency])
}

// ErrShed is the Err of the [Denial] of a request the middleware's
// adaptive concurrency limiter shed ([WithAdaptive]): the server is
// overloaded, so [WriteDenied] answers it 503 Service Unavailable rather
// than 429. It is grpclimit.ErrShed too.
var ErrShed = adapter.ErrShed

// WriteDenied is the default denied handler ([WithDeniedHandler]): 429 Too Many Requests with a
// JSON body such as
//
//	{"error":"Too Many Requests","message":"rate limit \"api\" exceeded, retry in 17 s","retryAfter":17}
//
// or, for a request that can never succeed,
//
//	{"error":"Too Many Requests","message":"request cost exceeds rate limit \"api\" (quota 100): it can never succeed, do not retry","retryNever":true}
//
// or, for a full concurrency limit ([Limit.Concurrency]), with no delay
// to announce,
//
//	{"error":"Too Many Requests","message":"concurrency limit \"exports\" exceeded: too many requests in flight, retry once one ends"}
//
// A request a denylist refused (d.Err is [ErrDenied]) is answered 403
// Forbidden instead, since no wait would help, with no Retry-After and no
// rate-limit fields, and a body that does not say which rule refused it:
//
//	{"error":"Forbidden","message":"request denied","retryNever":true}
//
// A request shed to protect the server from overload (d.Err is [ErrShed],
// see [WithAdaptive]) is answered 503 Service Unavailable, with
// Retry-After:
//
//	{"error":"Service Unavailable","message":"server overloaded, retry in 1 s","retryAfter":1}
func WriteDenied(w http.ResponseWriter, r *http.Request, d Denial) {
	h := w.Header()
	h[keyCType] = []string{"application/json; charset=utf-8"}
	h[keyNoSniff] = []string{"nosniff"}
	if errors.Is(d.Err, ErrDenied) {
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte(`{"error":"Forbidden","message":"request denied","retryNever":true}` + "\n"))
		return
	}
	if errors.Is(d.Err, ErrShed) {
		secs := int64(d.RetryAfter / time.Second)
		w.WriteHeader(http.StatusServiceUnavailable)
		b := append(make([]byte, 0, 128), `{"error":"Service Unavailable","message":`...)
		b = strconv.AppendQuote(b, limitset.ShedMessage(secs))
		b = append(b, `,"retryAfter":`...)
		b = strconv.AppendInt(b, secs, 10)
		_, _ = w.Write(append(b, '}', '\n'))
		return
	}
	w.WriteHeader(http.StatusTooManyRequests)
	b := make([]byte, 0, 160)
	b = append(b, `{"error":"Too Many Requests","message":`...)
	msg := limitset.DenialMessage(d.Limit, d.concurrent, d.Never, d.Decision.Limit, int64(d.RetryAfter/time.Second))
	b = strconv.AppendQuote(b, msg) // ASCII names: a valid JSON string
	switch {
	case d.Never:
		b = append(b, `,"retryNever":true}`...)
	case d.RetryAfter > 0 || !d.concurrent:
		b = append(b, `,"retryAfter":`...)
		b = strconv.AppendInt(b, int64(d.RetryAfter/time.Second), 10)
		b = append(b, '}')
	default:
		b = append(b, '}')
	}
	b = append(b, '\n')
	_, _ = w.Write(b)
}

// Middleware limits the requests that go through it. Create one with
// [New]; the zero value is not usable. A Middleware is safe for concurrent
// use, and one Middleware may wrap any number of handlers.
type Middleware struct {
	set           *limitset.Set[*http.Request] // the limits, ready to serve
	headers       HeaderSet
	denied        func(w http.ResponseWriter, r *http.Request, d Denial)
	common        // WithClock, WithCost
	logger        report.Logger
	shadowHeaders bool
	inContext     bool // WithDecisionInContext
	// logger, reportEvery and observer are the options' values, handed to
	// the limit set by New.
	reportEvery time.Duration

	resolver   *IPResolver    // finds the client address the networks match
	exemptNets []netip.Prefix // ExemptNetworks
	deniedNets []netip.Prefix // DeniedNetworks
	hasNets    bool           // some network is exempt or denied
	observer   ratelimit.Observer

	// WithAdaptive's values, and the Overload New builds of them; over is
	// nil without it.
	adaptive    *ratelimit.Adaptive
	priority    func(r *http.Request) ratelimit.Priority
	adaptiveSet bool
	over        *limitset.Overload[*http.Request]
}

// New returns a middleware enforcing limits, all or nothing: a request is
// charged in every limit that applies to it only if every one admits it.
// The options that apply are [WithHeaders], [WithDeniedHandler],
// [WithCost], [WithLogger], [WithErrorReportInterval],
// [WithShadowHeaders], [WithDecisionInContext], [WithClock],
// [ExemptNetworks], [DeniedNetworks],
// [WithIPResolver], [WithObserver] and [WithAdaptive].
//
// Exemptions and denylists are settled before any limiter is asked, in
// this order: a client of [DeniedNetworks] is refused; else a request
// exempt from every limit (a client of [ExemptNetworks], an [Override]
// with Exempt, a cost <= 0) is served uncharged, unless the
// [Limit.DeniedKeys] of an enforced limit hold its key; else each limit
// refuses the keys of its DeniedKeys and lets the keys of its
// [Limit.ExemptKeys] through uncharged. Denial always beats exemption.
//
// With [WithAdaptive], limits may be empty: the middleware then protects
// the service from overload alone.
//
// It returns an error wrapping [ratelimit.ErrInvalidConfig] when limits is
// empty (without WithAdaptive), a Limit has no Key (or a key helper given nothing to key by, such
// as KeyByUser(nil), or a route that can never match), neither or both of
// Limiter and Concurrency, a negative Window or one on a concurrency limit, a name that is not printable ASCII or the name of
// another Limit ("default" counts as the name of a Limit without one), an
// ExemptKeys entry that is also in its DeniedKeys, a Limiter with an
// Observer of its own beside [WithObserver]'s, and for an invalid option.
func New(limits []Limit, opts ...Option) (*Middleware, error) {
	m := &Middleware{headers: allHeaders, denied: WriteDenied, reportEvery: defaultReportEvery}
	if err := adapter.Apply(opts, func(o Option) error { return o.applyServer(m) }); err != nil {
		return nil, err
	}
	if m.denied == nil {
		m.denied = WriteDenied
	}
	ls := make([]limitset.Limit[*http.Request], len(limits))
	for i, l := range limits {
		if l.Key != nil && isInvalid(l.Key) {
			name := l.Name
			if name == "" {
				name = "default"
			}
			if isInvalidRoute(l.Key) {
				return nil, configError("httplimit.Limit.Key of limit %q matches a route that can never match: IsRoute takes \"[METHOD ]/path\" with the method in upper case and no host or wildcards (IsRoute given a mux takes those), IsRoute given a mux a pattern ServeMux accepts, with the method in upper case and one space after it", name)
			}
			return nil, configError("httplimit.Limit.Key of limit %q is a key helper given nothing to key by: a nil function, a nil mux or more than one, an empty header name or no keys (KeyByUser, KeyByHeader, KeyByRoute, IsRoute, When, FirstOf, Combine)", name)
		}
		ls[i] = limitset.Limit[*http.Request]{Name: l.Name, Key: l.Key, Limiter: l.Limiter, Concurrency: l.Concurrency,
			Count: l.Count, Window: l.Window, Shadow: l.Shadow, ExemptKeys: l.ExemptKeys, DeniedKeys: l.DeniedKeys}
	}
	var err error
	if len(limits) > 0 || !m.adaptiveSet { // no limits but an Adaptive: overload protection alone
		if m.set, err = limitset.New(limitset.Config{Pkg: "httplimit", Observer: m.observer, Clock: m.clock,
			Logger: m.logger, ReportEvery: m.reportEvery, DeniedErr: ErrDenied}, ls); err != nil {
			return nil, err
		}
	}
	if m.adaptiveSet {
		if m.over, err = limitset.NewOverload("httplimit", m.adaptive, m.priority, m.observer); err != nil {
			return nil, err
		}
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

// overrideOf returns the Override ctx carries, if any.
func overrideOf(ctx context.Context) (Override, bool) {
	o, ok := ctx.Value(overrideKey{}).(Override)
	return o, ok
}

// maxKeyLen is the longest key the middleware passes to a limiter; see
// [Limit.Key]. The limit set digests longer keys: this fails to compile if
// its bound differs.
const maxKeyLen = 128

var _ = [1]struct{}{}[maxKeyLen-limitset.MaxKeyLen]

// serve runs a request through the limits: its cost and the client
// networks here, the decision in the limit set, then the rate-limit
// fields, and the handler or the denial. A request with one limit and no
// headers pays no call it does not need.
func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if m.set == nil { // WithAdaptive alone
		if m.hasNets && m.matchNetwork(r) == netDenied {
			m.denied(w, r, listedDenial(""))
			return
		}
		m.serveFlight(w, r, next)
		return
	}
	n, allShadow, exempt := m.requestCost(r)
	if m.hasNets {
		switch m.matchNetwork(r) {
		case netDenied:
			m.set.ObserveAll(r.Context(), ratelimit.OutcomeDenied, n)
			m.denied(w, r, listedDenial(""))
			return
		case netExempt:
			exempt = true
		}
	}
	// Field by field: a composite literal is built in a temporary and
	// copied, which stalls on store forwarding.
	var req limitset.Request[*http.Request]
	req.R, req.Ctx, req.N, req.AllShadow, req.Exempt = r, r.Context(), n, allShadow, exempt
	if exempt {
		// Settled without a Verdict, which an exempt request would pay
		// for zeroing.
		if l := m.set.DecideExempt(&req); l != nil {
			m.denied(w, r, listedDenial(l.Name))
			return
		}
		m.serveFlight(w, r, next)
		return
	}
	var v limitset.Verdict[*http.Request]
	switch m.set.Decide(&req, &v, m.shadowHeaders, func() []slog.Attr { return reportAttrs(r) }) {
	case limitset.Admitted:
		var f ratelimit.Flight
		if m.over != nil {
			var d ratelimit.Decision
			if f, d = m.over.Acquire(r.Context(), r); !d.Allowed {
				m.set.Undo(r.Context(), &v, func() []slog.Attr { return reportAttrs(r) })
				m.shed(w, r, d)
				return
			}
		}
		if m.headers != NoHeaders {
			m.set.WriteFields(w.Header(), &limitset.HTTPNames, limitset.FieldSet(m.headers), &v)
		}
		if m.inContext && v.From >= 0 {
			r = withResult(r, Result{Limit: v.Limit(), Decision: v.Dec, Shadow: v.Shadow()})
		}
		if v.Counts() {
			m.serveCounted(w, r, next, &v, f)
			return
		}
		if v.Holds() {
			// Released however the handler ends: a panic goes on up
			// once the permits are back.
			defer m.set.Release(r.Context(), &v, 0)
		}
		if m.over != nil {
			m.serveAcquired(w, r, next, f)
			return
		}
		next.ServeHTTP(w, r)
	case limitset.Pass:
		m.serveFlight(w, r, next)
	case limitset.Denied:
		m.set.WriteFields(w.Header(), &limitset.HTTPNames, limitset.FieldSet(m.headers), &v)
		m.deny(w, r, &v)
	case limitset.Listed:
		m.denied(w, r, listedDenial(v.Listed.Name))
	case limitset.Canceled:
		// The request's context ended before the limiters could decide
		// (the client went away, a deadline passed): its error is not a
		// backend failure, and whatever Decision came with it was not made
		// on the request's merits. Neither admit it free nor charge the
		// failure to the backend.
		w.WriteHeader(http.StatusServiceUnavailable)
	case limitset.Misconfigured:
		writeMisconfigured(w, v.Limit())
	}
}

// serveCounted serves a request that holds reservations of limits that
// count by outcome ([Limit.Count]): the handler's context carries the
// cell for [ReportCost], its writer records its status, and however it
// ends (a panic counts as 500, and goes on up) the reservations are
// settled, the permits released and f, the request's flight in the
// Adaptive if any, ended.
func (m *Middleware) serveCounted(w http.ResponseWriter, r *http.Request, next http.Handler, v *limitset.Verdict[*http.Request], f ratelimit.Flight) {
	ctx := limitset.WithReportedCost(r.Context())
	ow := &outcomeWriter{ResponseWriter: w}
	status, returned := http.StatusInternalServerError, false
	defer func() {
		if m.over != nil {
			endFlight(f, r.Context(), ow, returned)
		}
		m.set.Release(ctx, v, status)
	}()
	next.ServeHTTP(ow, r.WithContext(ctx))
	returned = true
	status = ow.status
	if status == 0 {
		status = http.StatusOK
	}
}

// serveFlight serves a request the limits let through, in a flight of the
// Adaptive ([WithAdaptive]) if there is one: r is shed when it has no
// place. (An admitted request holds nothing to undo when shed.)
func (m *Middleware) serveFlight(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if m.over == nil {
		next.ServeHTTP(w, r)
		return
	}
	f, d := m.over.Acquire(r.Context(), r)
	if !d.Allowed {
		m.shed(w, r, d)
		return
	}
	m.serveAcquired(w, r, next, f)
}

// writers are the outcomeWriters of the requests served in a flight,
// reused so that a request served so allocates nothing.
var writers = sync.Pool{New: func() any { return new(outcomeWriter) }}

// serveAcquired serves a request in its flight f, and ends f by the
// handler's outcome however the handler ends: a panic goes on up once the
// place is free (and its writer is not reused: the handler's goroutines
// may still hold it).
func (m *Middleware) serveAcquired(w http.ResponseWriter, r *http.Request, next http.Handler, f ratelimit.Flight) {
	ow := writers.Get().(*outcomeWriter)
	ow.ResponseWriter = w
	returned := false
	defer func() {
		if !returned {
			f.Ignore()
		}
	}()
	next.ServeHTTP(ow, r)
	returned = true
	endFlight(f, r.Context(), ow, true)
	*ow = outcomeWriter{}
	writers.Put(ow)
}

// endFlight ends the flight f of a request served with ctx, whose handler
// wrote to w, by [flightEnd].
func endFlight(f ratelimit.Flight, ctx context.Context, w *outcomeWriter, returned bool) {
	flightEnd(ctx, w, returned).End(f)
}

// flightEnd is what a request served with ctx, whose handler wrote to w,
// says of the service's capacity (see [WithAdaptive]); returned is false
// when the handler panicked.
func flightEnd(ctx context.Context, w *outcomeWriter, returned bool) limitset.FlightEnd {
	if !returned || w.hijacked {
		return limitset.EndIgnored
	}
	if e, done := limitset.ContextEnd(ctx); done {
		return e
	}
	switch {
	case w.status == http.StatusServiceUnavailable || w.status == http.StatusGatewayTimeout:
		return limitset.EndDropped
	case w.status >= 500:
		return limitset.EndIgnored
	}
	return limitset.EndSuccess
}

// shed answers a request the Adaptive shed with d, through the denied
// handler, Retry-After set.
func (m *Middleware) shed(w http.ResponseWriter, r *http.Request, d ratelimit.Decision) {
	ra := limitset.ShedRetryAfter(d)
	w.Header()[keyRetryAfter] = []string{strconv.FormatInt(int64(ra/time.Second), 10)}
	m.denied(w, r, Denial{Limit: limitset.ShedName, Decision: d, RetryAfter: ra, Err: ErrShed})
}

// ReportCost records n as the actual cost of the request whose context is
// ctx (the handler's r.Context()), such as the tokens an LLM completion
// used, for the limits that count it by outcome ([Limit.Count]): they
// settle Count(status, n) once the handler returns. The last report
// counts; it is safe to call from any goroutine. It returns an error
// wrapping [ratelimit.ErrInvalidN] when n is negative, and does nothing
// when no limit counts the request.
func ReportCost(ctx context.Context, n int) error {
	return limitset.ReportCost("httplimit", ctx, n)
}

// outcomeWriter records the status a handler answers with, for
// [Limit.Count]. It passes Flush and Hijack on, and unwraps for
// [http.ResponseController].
type outcomeWriter struct {
	http.ResponseWriter
	status   int  // the first final status written; 0 while none
	hijacked bool // the handler took the connection over
}

func (w *outcomeWriter) WriteHeader(code int) {
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *outcomeWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush implements [http.Flusher].
func (w *outcomeWriter) Flush() {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Hijack implements [http.Hijacker] when the writer it wraps does.
func (w *outcomeWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, rw, err := http.NewResponseController(w.ResponseWriter).Hijack()
	w.hijacked = w.hijacked || err == nil
	return c, rw, err
}

// Unwrap returns the writer it wraps, for [http.ResponseController].
func (w *outcomeWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// writeMisconfigured answers a request that a limit could not decide
// because of the server's own configuration (a tier with no limiter): 500,
// a JSON body naming the limit and nothing else (not the tier, not the
// error), no Retry-After and no rate-limit fields: the client did nothing
// wrong, and waiting would not help it either. The error was reported
// already.
func writeMisconfigured(w http.ResponseWriter, limit string) {
	h := w.Header()
	h[keyCType] = []string{"application/json; charset=utf-8"}
	h[keyNoSniff] = []string{"nosniff"}
	w.WriteHeader(http.StatusInternalServerError)
	b := append(make([]byte, 0, 96), `{"error":"Internal Server Error","message":`...)
	b = strconv.AppendQuote(b, "rate limit "+strconv.Quote(limit)+" is misconfigured on the server")
	_, _ = w.Write(append(b, '}', '\n'))
}

// requestCost returns the request's cost and its Override's verdict:
// every limit in shadow mode, or no limit at all (an Override with Exempt
// or a cost <= 0).
func (m *Middleware) requestCost(r *http.Request) (n int, allShadow, exempt bool) {
	n = 1
	if m.cost != nil {
		n = m.cost(r)
	}
	if o, ok := overrideOf(r.Context()); ok {
		if o.Cost > 0 {
			n = o.Cost
		}
		return n, o.Shadow, o.Exempt || n <= 0
	}
	return n, false, n <= 0
}

// deny answers a request an enforced limit refused.
func (m *Middleware) deny(w http.ResponseWriter, r *http.Request, v *limitset.Verdict[*http.Request]) {
	den := Denial{Limit: v.Limit(), Decision: v.Dec, Never: v.Dec.RetryAfter == ratelimit.RetryNever, Err: v.Err,
		concurrent: v.Concurrent()}
	if !den.Never && (!den.concurrent || v.Dec.RetryAfter > 0) {
		den.RetryAfter = time.Duration(limitset.RetryAfterSeconds(v.Dec)) * time.Second
	}
	m.denied(w, r, den)
}

// listedDenial is the Denial of a request a denylist refused: the
// DeniedKeys of the limit named limit, or a denied network when limit is
// "".
func listedDenial(limit string) Denial {
	return Denial{Limit: limit, Decision: ratelimit.Decision{RetryAfter: ratelimit.RetryNever}, Never: true, Err: ErrDenied}
}
