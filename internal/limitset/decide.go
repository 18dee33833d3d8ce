package limitset

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/errs"
	"github.com/rlkit/ratelimit/internal/observe"
)

// Request is one request to decide.
type Request[R any] struct {
	R   R
	Ctx context.Context
	// N is the request's cost; N <= 0 makes it exempt from every limit.
	N int
	// AllShadow treats every limit as in shadow mode (an override).
	AllShadow bool
	// Exempt makes the request exempt from every limit (an exempt
	// network, an override); the DeniedKeys of enforced limits still
	// refuse it.
	Exempt bool
}

// Outcome is what Decide settled for a request.
type Outcome uint8

const (
	// Pass: no limit applies, or the request is exempt; serve it without
	// rate-limit fields (exemptions were reported to the observer).
	Pass Outcome = iota
	// Admitted: serve it; Verdict.From >= 0 says which Decision to
	// report in the fields (WriteFields).
	Admitted
	// Denied: an enforced limit refused it (or failed closed, with
	// Verdict.Err); answer with the denial (WriteFields sets Retry-After
	// and, unless Verdict.Failed, the quota fields).
	Denied
	// Listed: a denylist (a limit's DeniedKeys) refused it; Verdict.Listed
	// names the limit. Answer "forbidden", no rate-limit fields. Reported
	// to the observer as OutcomeDenied.
	Listed
	// Canceled: the request's context ended before the limiters could
	// decide; its error is the caller's: neither admit it nor report it.
	Canceled
	// Misconfigured: an enforced limit cannot decide because of the
	// server's own configuration (a tier with no limiter, a configuration
	// error from a limiter): answer with the server's failure (HTTP 500,
	// gRPC Internal), not as a denial the client caused. Nothing was
	// charged when the tier was unknown; Verdict.From names the limit,
	// Verdict.Err holds the error (reported and logged). No fields.
	Misconfigured
)

// String returns the outcome's name, such as "Admitted".
func (o Outcome) String() string {
	switch o {
	case Pass:
		return "Pass"
	case Admitted:
		return "Admitted"
	case Denied:
		return "Denied"
	case Listed:
		return "Listed"
	case Canceled:
		return "Canceled"
	case Misconfigured:
		return "Misconfigured"
	}
	return "Outcome(?)"
}

// Verdict is the decision for one request and where it came from. Its
// zero value is ready for Decide; Decide resets it. A Verdict holds its
// first MaxInline charges inline: keep it in a local variable and pass
// its address, so that deciding allocates nothing.
type Verdict[R any] struct {
	// Dec is the Decision to report: the denying limit's, else the most
	// restrictive of the applying ones.
	Dec ratelimit.Decision
	// From is the index in Charges() of Dec's limit; -1 when none.
	From int
	// Failed: Dec came with an error (a failure policy's Decision, an
	// unknown tier): no quota was measured, report no quota fields.
	Failed bool
	// Err is the enforced limits' error, if any (already reported).
	Err error
	// Listed is the limit whose DeniedKeys refused the request (Listed
	// outcome); nil otherwise.
	Listed *Entry[R]
	// Enforced is how many of Charges() are enforced (they come first);
	// the rest are in shadow mode. Among each, the rate limits charged up
	// front come first, then those counting by outcome (Limit.Count), then
	// the concurrency limits.
	Enforced int

	shadowFields bool // Decide's shadowFields, for WriteFields
	n            int  // len(Charges())
	rates        int  // how many of the enforced charges are rate limits charged up front
	counted      int  // rates + how many enforced rate limits count by outcome (Count)
	held         int  // how many charges hold permits (see Release)
	reserved     int  // how many charges hold reservations (see Release)
	cost         int  // the request's cost, the permits each holds
	// The charges: buf[:n], or more when there are more than MaxInline.
	// (Not a slice of buf kept in the Verdict: that would point the
	// Verdict at itself and move it to the heap.)
	buf  [MaxInline]Charge[R]
	more []Charge[R]
}

// Charges returns the limits that applied to the request, enforced ones
// first: Enforced of them are enforced, the rest shadow. The slice is
// valid until the next Decide with v.
func (v *Verdict[R]) Charges() []Charge[R] {
	if v.more != nil {
		return v.more
	}
	return v.buf[:v.n]
}

// Shadow reports whether Dec is a shadow limit's Decision (reported, not
// enforced).
func (v *Verdict[R]) Shadow() bool { return v.From >= v.Enforced }

// Concurrent reports whether Dec is a concurrency limit's Decision: a
// denial of it has no RetryAfter unless its key is blocked (see
// RetryAfterSeconds).
func (v *Verdict[R]) Concurrent() bool {
	return v.From >= 0 && v.Charges()[v.From].Entry.Concurrency != nil
}

// Holds reports whether the request holds concurrency permits or
// reservations, which the caller must give back with Set.Release once it
// is served.
func (v *Verdict[R]) Holds() bool { return v.held+v.reserved > 0 }

// Counts reports whether the request holds reservations of limits that
// count by outcome (Limit.Count), which the caller must settle with
// Set.Release once it is served: the handler's context should then carry
// a cell for ReportCost (WithReportedCost).
func (v *Verdict[R]) Counts() bool { return v.reserved > 0 }

// Limit returns the name of the limit Dec came from, "" when none.
func (v *Verdict[R]) Limit() string {
	if v.From < 0 {
		return ""
	}
	return v.Charges()[v.From].Entry.Name
}

// slot adds a charge and returns it, to be filled in field by field (a
// Charge literal would be built in a temporary and copied, which stalls
// on store forwarding).
func (v *Verdict[R]) slot() *Charge[R] {
	if v.more == nil && v.n < MaxInline {
		c := &v.buf[v.n]
		v.n++
		return c
	}
	if v.more == nil {
		v.more = make([]Charge[R], MaxInline, 2*MaxInline)
		copy(v.more, v.buf[:])
	}
	v.more = append(v.more, Charge[R]{})
	v.n++
	return &v.more[len(v.more)-1]
}

// reset makes v ready for a new request.
func (v *Verdict[R]) reset(shadowFields bool) {
	v.Dec, v.From, v.Failed, v.Err, v.Listed, v.Enforced = ratelimit.Decision{}, -1, false, nil, nil, 0
	v.shadowFields, v.n, v.more = shadowFields, 0, nil
	v.rates, v.counted, v.held, v.reserved, v.cost = 0, 0, 0, 0, 0
}

// Charge is one limit applying to one request.
type Charge[R any] struct {
	Entry *Entry[R]
	// Limiter is Entry's limiter, or the request's tier of it; nil for a
	// concurrency limit (Entry.Concurrency).
	Limiter ratelimit.KeyedLimiter
	Key     string
	// err is why the limit cannot decide: the tier could not be resolved
	// (deny with it).
	err error
	// listed is set for a limit in shadow mode whose DeniedKeys hold Key:
	// its denial is reported, nothing charged.
	listed bool
	// res is the error this limit's limiter answered (err included), and
	// allowed whether its own Decision admitted the request, once decided.
	res     error
	allowed bool
	// For a concurrency limit: whether it holds permit, until Release,
	// and its Decision's Limit. (Not the whole Decision: a Verdict is
	// zeroed on every request, and its Charges are most of it.)
	held   bool
	limit  int
	permit ratelimit.Permit
	// rsv is the reservation held for a limit that counts by outcome,
	// until Release; nil when none.
	rsv *ratelimit.Reservation
	fl  *flight // the flight rsv is counted in (enforced limits); nil when none
}

// describe returns what the home of c's limiter (its tier's, for a
// Tiered) says of it.
func (c *Charge[R]) describe() observe.Info {
	if c.Entry.tiered == nil {
		return c.Entry.info
	}
	return observe.Describe(c.Limiter)
}

// algorithm returns the algorithm of c's limiter (its tier's, for a
// Tiered); 0 when it has no policy to tell.
func (c *Charge[R]) algorithm() ratelimit.Algorithm {
	if c.Entry.Concurrency != nil {
		return ratelimit.ConcurrencyAlgorithm
	}
	ph := c.Entry.ph
	if c.Entry.tiered != nil {
		ph, _ = c.Limiter.(policyHolder)
	}
	if ph == nil {
		return 0
	}
	return ph.Policy().Algorithm
}

// Decide runs the limits over one request: exemptions and denylists,
// then the enforced limits all or nothing (ratelimit.AllowAll for those
// charged up front, then a reservation in each counting by outcome, then
// the concurrency limits' permits; a tiered limiter, such as
// *ratelimit.Tiered, resolved once to the request's tier), then, when
// they admit, the shadow limits. Limiter errors are reported through
// Config.Logger, paced, under the limit whose limiter answered them
// (unless that limiter logs its errors itself), with attrs (nil: none)
// added to each report (such as the method); never the key. With
// shadowFields, or when no enforced limit applies, a more restrictive
// shadow Decision becomes the one to report.
//
// Exemptions and denylists are settled before any limiter is asked: a
// request exempt from every limit (req.Exempt, req.N <= 0) passes
// uncharged unless the DeniedKeys of an enforced limit hold its key; else
// each limit refuses the keys of its DeniedKeys and lets the keys of its
// ExemptKeys through uncharged. Denial beats exemption. The observer sees
// the exemptions only when no denylist refuses the request.
//
// The observer (Config.Observer) hears each decision once, under the
// limit's name, with Home and Algorithm those of the limiter (its tier's),
// N the cost and Latency the time the limiters took: for an admitted
// request one Event per enforced limit that applied (OutcomeAllowed, or
// OutcomeFallback for a limiter's failure policy), for a refused one the
// limit that refused it (OutcomeDenied, OutcomeFallback, OutcomeError),
// and every limit whose limiter answered an error; for each shadow limit
// consulted one Event (OutcomeShadow for its denial). A misconfigured
// limit is OutcomeError. The Decision of an Event is the limit's own when
// known (one enforced limit, the limit the fields report, shadow limits),
// else only its Allowed.
func (s *Set[R]) Decide(req *Request[R], v *Verdict[R], shadowFields bool, attrs func() []slog.Attr) Outcome {
	v.reset(shadowFields)
	if req.Exempt || req.N <= 0 {
		if v.Listed = s.DecideExempt(req); v.Listed != nil {
			return Listed
		}
		return Pass
	}
	if l := s.gather(req, v); l != nil {
		v.Listed = l
		if s.cfg.Observer != nil {
			s.observe(req.Ctx, l, ratelimit.OutcomeDenied, req.N)
		}
		return Listed
	}
	if v.n == 0 {
		return Pass
	}
	v.cost = req.N
	cs := v.Charges()
	denied := false
	if v.Enforced > 0 {
		ctx := req.Ctx
		var start time.Time
		if s.cfg.Observer != nil {
			start = time.Now()
		}
		enforced := cs[:v.Enforced]
		if v.rates > 0 {
			v.Dec, v.From, v.Err = allowAll(ctx, req.N, enforced[:v.rates])
		} else {
			v.Dec = ratelimit.Decision{Allowed: true}
		}
		if v.Dec.Allowed && v.rates < v.Enforced && (v.Err == nil || ctx.Err() == nil && misconfigured(enforced[:v.rates]) < 0) {
			s.acquire(ctx, req.N, enforced, v, attrs)
		}
		var latency time.Duration
		if s.cfg.Observer != nil {
			latency = time.Since(start)
		}
		denied = !v.Dec.Allowed
		if v.Err != nil {
			if ctx.Err() != nil {
				// The request's context ended before the limiters could
				// decide (the client went away, a deadline passed): its
				// error is not a backend failure, and whatever Decision
				// came with it was not made on the request's merits.
				return Canceled
			}
			v.Failed = true
			s.reportErrors(ctx, enforced, attrs)
			if at := misconfigured(enforced); at >= 0 {
				v.From, v.Dec = at, ratelimit.Decision{}
				if s.cfg.Observer != nil {
					s.observeCharge(ctx, &enforced[at], req.N, ratelimit.Decision{}, enforced[at].res, latency, false)
				}
				return Misconfigured
			}
		}
		if s.cfg.Observer != nil {
			s.observeEnforced(ctx, req.N, enforced, v, latency)
		}
	}
	if denied {
		return Denied
	}
	if v.Enforced < len(cs) {
		s.shadow(req, cs, v, shadowFields || v.Enforced == 0, attrs)
	}
	return Admitted
}

// acquire reserves the request's cost in the enforced limits counting by
// outcome, cs[v.rates:v.counted] (waiting, while a reservation of the key
// this process holds may come back: see flights), then acquires its
// permits in the enforced concurrency limits, cs[v.counted:] (never
// waiting: TryAcquire), once the rate limits cs[:v.rates] have admitted
// it, leaving each in its charge. When one denies, fails with the
// caller's context done, or answers a configuration error, the request
// is refused all or nothing: the reservations are settled at 0, the
// permits released and the rate limits refunded, unreported. A counting
// or concurrency limit's Decision becomes v's when it denies, came with an
// error, or is more restrictive than the one v has (unless that one came
// with an error).
func (s *Set[R]) acquire(ctx context.Context, n int, cs []Charge[R], v *Verdict[R], attrs func() []slog.Attr) {
	for i := v.rates; i < len(cs); i++ {
		c := &cs[i]
		var d ratelimit.Decision
		var err error
		if i < v.counted {
			var r *ratelimit.Reservation
			r, c.fl, err = c.Entry.flights.reserve(ctx, c.Key, func() (*ratelimit.Reservation, error) { return c.reserve(ctx, n) })
			d = r.Decision
			c.res, c.allowed, c.limit = err, d.Allowed, d.Limit
			if d.Allowed {
				c.rsv = r
				v.reserved++
			}
		} else {
			var p ratelimit.Permit
			p, d, err = c.tryAcquire(ctx, n)
			c.res, c.allowed, c.limit = err, d.Allowed, d.Limit
			if d.Allowed {
				c.permit, c.held = p, true
				v.held++
			}
		}
		switch {
		case err == nil:
		case v.Err == nil:
			v.Err = err
		default:
			v.Err = errors.Join(v.Err, err)
		}
		if !d.Allowed || (err != nil && (ctx.Err() != nil || isMisconfigured(err))) {
			if !d.Allowed {
				v.Dec, v.From = d, i
			}
			s.rollback(ctx, n, cs[:i+1], v, attrs)
			return
		}
		if v.From < 0 || err != nil || (v.Err == nil && moreRestrictive(d, v.Dec)) {
			v.Dec, v.From = d, i
		}
	}
}

// DefaultExpiry is how long a reservation of a limit counting by outcome
// is held at most, unless the request's deadline is later (see
// expiryOf). The caller settles it when the request ends, however it
// ends; the expiry only reclaims a reservation nobody settles (a process
// that died while the request ran, on a shared store such as Redis), so
// it must outlast any handler: a settlement after it comes too late and
// leaves the estimate charged.
const DefaultExpiry = 10 * time.Minute

// expiryOf returns the expiry of the reservations of a request with ctx:
// DefaultExpiry, or a minute past ctx's deadline when that is later (a
// handler may run past its deadline before it returns).
func expiryOf(ctx context.Context) time.Duration {
	e := DefaultExpiry
	if dl, ok := ctx.Deadline(); ok {
		if d := time.Until(dl) + time.Minute; d > e {
			e = d
		}
	}
	return e
}

// reserve reserves n in c's limiter, a limit counting by outcome, for the
// request whose context is ctx. A limiter that cannot reserve (a tier's
// that is not a ratelimit.Reserver) is a configuration error; so is, as
// for allowAll, a tier that could not be resolved. The Reservation is
// never nil.
func (c *Charge[R]) reserve(ctx context.Context, n int) (*ratelimit.Reservation, error) {
	if c.err != nil {
		return refusedReservation(), c.err
	}
	rs, ok := c.Limiter.(ratelimit.Reserver)
	if !ok {
		return refusedReservation(), configError("limit %q: its limiter (the request's tier's) is a %T, which cannot reserve (it is not a ratelimit.Reserver)", c.Entry.Name, c.Limiter)
	}
	return rs.ReserveN(ctx, c.Key, n, expiryOf(ctx))
}

// refusedReservation is the Reservation of a request refused before
// anything was reserved: it holds nothing.
func refusedReservation() *ratelimit.Reservation {
	return &ratelimit.Reservation{MultiDecision: ratelimit.MultiDecision{Decision: ratelimit.Decision{RetryAfter: ratelimit.RetryNever}}}
}

// settled forgets c's reservation, once settled, waking the requests
// that wait for it (flights).
func (c *Charge[R]) settled() {
	if c.fl != nil {
		c.Entry.flights.leave(c.Key, c.fl, true)
	}
	c.rsv, c.fl = nil, nil
}

// tryAcquire asks c's concurrency limiter for n permits. An n that can
// never be acquired (above the limit) is a denial with ratelimit.RetryNever
// and no error, as a rate limiter reports it.
func (c *Charge[R]) tryAcquire(ctx context.Context, n int) (ratelimit.Permit, ratelimit.Decision, error) {
	p, d, err := c.Entry.Concurrency.TryAcquire(ctx, c.Key, n)
	if err != nil && !d.Allowed && (errors.Is(err, ratelimit.ErrExceedsLimit) || errors.Is(err, ratelimit.ErrInvalidN)) {
		err, d.RetryAfter = nil, ratelimit.RetryNever
	}
	return p, d, err
}

// rollback undoes what cs admitted of a request that is refused after
// all: it releases the permits held, settles at 0 the reservations held
// (which gives back exactly what they charged), and refunds the rate limits that
// admitted it (a compensation, made whatever becomes of ctx). Refund
// errors are reported as the limiters' errors are. Nothing is reported to
// the observer: only the refusal is.
func (s *Set[R]) rollback(ctx context.Context, n int, cs []Charge[R], v *Verdict[R], attrs func() []slog.Attr) {
	rctx := context.WithoutCancel(ctx)
	for i := len(cs) - 1; i >= 0; i-- {
		c := &cs[i]
		if c.held {
			c.permit.Release()
			c.permit, c.held = ratelimit.Permit{}, false
			v.held--
		}
		if c.rsv != nil {
			// Settled at 0: exactly what it was charged comes back.
			if err := c.rsv.Settle(rctx, 0); err != nil && !errors.Is(err, ratelimit.ErrReservationSettled) {
				s.report(ctx, c, err, attrs)
			}
			c.settled()
			v.reserved--
		}
	}
	for i := v.rates - 1; i >= 0; i-- {
		c := &cs[i]
		if !c.allowed {
			continue
		}
		if err := c.Limiter.RefundN(rctx, c.Key, n); err != nil {
			s.report(ctx, c, err, attrs)
		}
	}
}

// Release ends what v holds (Verdict.Holds) once the request Decide
// admitted has been served, however it ended: it settles each
// reservation of a limit counting by outcome at Count(outcome, cost),
// where cost is what the handler reported in ctx (ReportCost, which ctx
// must carry from WithReportedCost) or else the request's cost; and it
// gives back the permits of the concurrency limits. A settlement's error
// (a negative count, a store failure) is reported as a limiter's error
// is, and leaves the estimate charged; a reservation that expired first
// was settled at its estimate. The observer hears one
// ratelimit.OutcomeReleased Event per concurrency limit that held
// permits, under the limit's name: N the permits, Decision{Allowed: true,
// Limit} (what is free after is the limiter's to know); a settlement is
// not a decision and is not reported. It is idempotent: a second Release
// does nothing.
func (s *Set[R]) Release(ctx context.Context, v *Verdict[R], outcome int) {
	if v.held+v.reserved == 0 {
		return
	}
	cs := v.Charges()
	cost, reported := v.cost, false
	if v.reserved > 0 {
		cost, reported = reportedCost(ctx)
		if !reported {
			cost = v.cost
		}
	}
	for i := range cs {
		c := &cs[i]
		if c.rsv != nil {
			err := c.rsv.Settle(ctx, c.Entry.Count(outcome, cost))
			if err != nil && !errors.Is(err, ratelimit.ErrReservationSettled) {
				s.report(ctx, c, err, nil)
			}
			c.settled()
		}
		if !c.held {
			continue
		}
		c.permit.Release()
		c.permit, c.held = ratelimit.Permit{}, false
		if s.cfg.Observer != nil {
			info := c.describe()
			s.cfg.Observer.Observe(ctx, ratelimit.Event{Name: c.Entry.Name, Algorithm: ratelimit.ConcurrencyAlgorithm,
				Home: ratelimit.Home(info.Home), Outcome: ratelimit.OutcomeReleased, N: v.cost,
				Decision: ratelimit.Decision{Allowed: true, Limit: c.limit}})
		}
	}
	v.held, v.reserved = 0, 0
}

// misconfigured returns the index of the first of cs whose limiter
// answered a configuration error (an unknown tier, ErrInvalidConfig), or
// -1.
func misconfigured[R any](cs []Charge[R]) int {
	for i := range cs {
		if isMisconfigured(cs[i].res) {
			return i
		}
	}
	return -1
}

// isMisconfigured reports whether err says that a limiter could not decide
// because of the server's configuration, not the request.
func isMisconfigured(err error) bool {
	return err != nil && (errors.Is(err, ratelimit.ErrUnknownTier) || errors.Is(err, ratelimit.ErrInvalidConfig))
}

// observeEnforced reports the enforced limits' decision of a request to
// the observer (see Decide); the observer is set.
func (s *Set[R]) observeEnforced(ctx context.Context, n int, cs []Charge[R], v *Verdict[R], latency time.Duration) {
	for i := range cs {
		c := &cs[i]
		if !v.Dec.Allowed && i != v.From && c.res == nil {
			continue // it did not decide the request's refusal
		}
		d := ratelimit.Decision{Allowed: c.allowed}
		switch {
		case i == v.From || len(cs) == 1:
			d = v.Dec
		case c.Entry.Concurrency != nil:
			d.Limit = c.limit
		}
		s.observeCharge(ctx, c, n, d, c.res, latency, false)
	}
}

// observeCharge reports to the observer the decision d (with its error
// err) of c's limit for a request of cost n, in shadow mode or not; the
// observer is set.
func (s *Set[R]) observeCharge(ctx context.Context, c *Charge[R], n int, d ratelimit.Decision, err error, latency time.Duration, shadow bool) {
	info := c.describe()
	e := ratelimit.Event{Name: c.Entry.Name, Algorithm: c.algorithm(), Home: ratelimit.Home(info.Home), N: n,
		Decision: d, Err: err, Latency: latency}
	switch {
	case err != nil && isMisconfigured(err):
		e.Outcome = ratelimit.OutcomeError
	case err != nil && isFallback(info, err):
		e.Outcome = ratelimit.OutcomeFallback
	case err != nil:
		e.Outcome = ratelimit.OutcomeError
	case d.Allowed:
		e.Outcome = ratelimit.OutcomeAllowed
	case d.RetryAfter == ratelimit.RetryNever: // as a limiter reports it
		e.Outcome, e.Err = ratelimit.OutcomeError, ratelimit.ErrExceedsLimit
	case shadow:
		e.Outcome = ratelimit.OutcomeShadow
	default:
		e.Outcome = ratelimit.OutcomeDenied
	}
	s.cfg.Observer.Observe(ctx, e)
}

// isFallback reports whether err, from a limiter described by info, came
// with its failure policy's Decision. A limiter no home describes is taken
// at the KeyedLimiter contract: an error comes with the failure policy's
// Decision.
func isFallback(info observe.Info, err error) bool {
	if info.Home == uint8(ratelimit.HomeNone) {
		return !errors.Is(err, ratelimit.ErrTooManyKeys)
	}
	return info.Fallback != nil && info.Fallback(err)
}

// DecideExempt settles a request exempt from every limit (req.Exempt or
// req.N <= 0, whatever their values here), as Decide does without a
// Verdict: it returns the enforced limit whose DeniedKeys hold the
// request's key (its Listed outcome; reported to the observer as
// ratelimit.OutcomeDenied), or nil when the request passes (reported as
// exempt by every limit). With req.AllShadow no denylist refuses it.
// Callers that settle exemptions themselves use it to keep a Verdict
// off the exempt path.
func (s *Set[R]) DecideExempt(req *Request[R]) *Entry[R] {
	if s.deniedKeys && !req.AllShadow {
		for i := range s.limits {
			l := &s.limits[i]
			if l.deniedKeys == nil || l.Shadow {
				continue
			}
			if key, ok := l.Key(req.R); ok && l.deniedKeys.has(key) {
				if s.cfg.Observer != nil {
					s.observe(req.Ctx, l, ratelimit.OutcomeDenied, req.N)
				}
				return l
			}
		}
	}
	if s.cfg.Observer != nil {
		s.ObserveAll(req.Ctx, ratelimit.OutcomeExempt, req.N)
	}
	return nil
}

// gather adds to v the limits that apply to req, enforced ones first, and
// sets v.Enforced (and v.rates: among each, rate limits come before
// concurrency limits, which are acquired once the rate limits admit). It
// resolves each tiered limiter (a tierer, such as
// *ratelimit.Tiered) to the request's tier, calling its tier function
// once. It leaves out the limits whose
// ExemptKeys hold the request's key, and stops at the first enforced
// limit whose DeniedKeys hold it, returning that limit. The exemptions
// are reported to the observer only when no denylist refuses the
// request: denial beats exemption.
func (s *Set[R]) gather(req *Request[R], v *Verdict[R]) *Entry[R] {
	passes := 1
	if s.hasShadow || req.AllShadow {
		passes = 2
	}
	// The kinds of limits, in the order charged: rate limits charged up
	// front, those counting by outcome, concurrency limits.
	ks, kinds := [3]uint8{kindRate}, 1
	if s.hasCount {
		ks[kinds], kinds = kindCount, kinds+1
	}
	if s.hasConc {
		ks[kinds], kinds = kindConc, kinds+1
	}
	var exemptBuf [MaxInline]*Entry[R]
	exempt := exemptBuf[:0] // with an observer: the limits to report as exempt
	for pass := 0; pass < passes*kinds; pass++ {
		shadow, kind := pass >= kinds, ks[pass%kinds]
		if pass == kinds {
			v.Enforced = v.n
		}
		switch {
		case shadow:
		case kind == kindCount:
			v.rates = v.n
		case kind == kindConc:
			v.counted = v.n
			if !s.hasCount {
				v.rates = v.n
			}
		}
		for i := range s.limits {
			l := &s.limits[i]
			if (l.Shadow || req.AllShadow) != shadow || l.kind() != kind {
				continue
			}
			key, ok := l.Key(req.R)
			if !ok {
				continue
			}
			listed := false
			if l.lists {
				if l.deniedKeys.has(key) {
					if !shadow {
						return l
					}
					listed = true // reported when the shadow limits are
				} else if l.exemptKeys.has(key) {
					if s.cfg.Observer != nil {
						exempt = append(exempt, l)
					}
					continue
				}
			}
			if len(key) > MaxKeyLen {
				key = DigestKey(key)
			}
			c := v.slot()
			c.Entry, c.Limiter, c.Key, c.err, c.listed, c.res, c.allowed = l, l.Limiter, key, nil, listed, nil, false
			c.held, c.rsv, c.fl = false, nil, nil // limit and permit are set before they are read
			if l.tiered != nil && !listed {
				_, c.Limiter, c.err = l.tiered.Tier(req.Ctx, key)
			}
		}
	}
	if passes == 1 {
		v.Enforced = v.n
	}
	if !s.hasConc {
		v.counted = v.Enforced
		if !s.hasCount {
			v.rates = v.Enforced
		}
	}
	// So: cs[:v.rates] are the enforced rate limits charged up front,
	// cs[v.rates:v.counted] those counting by outcome, and
	// cs[v.counted:v.Enforced] the concurrency limits.
	for _, l := range exempt {
		s.observe(req.Ctx, l, ratelimit.OutcomeExempt, req.N)
	}
	return nil
}

// The kinds of limits, in the order gather puts them (among the enforced
// limits, then among the shadow ones) and Decide charges them.
const (
	kindRate  uint8 = iota // a rate limit charged up front
	kindCount              // a rate limit counting by outcome (Count)
	kindConc               // a concurrency limit
)

// kind returns l's kind.
func (l *Entry[R]) kind() uint8 {
	switch {
	case l.Concurrency != nil:
		return kindConc
	case l.Count != nil:
		return kindCount
	}
	return kindRate
}

// allowAll charges n in every limit of cs, all or nothing, and returns the
// Decision to report, its index in cs, and the error, if any. It leaves in
// each charge the error its limiter answered (res) and whether its own
// Decision admitted the request (allowed).
func allowAll[R any](ctx context.Context, n int, cs []Charge[R]) (ratelimit.Decision, int, error) {
	for i := range cs {
		if c := &cs[i]; c.err != nil { // a tier that could not be resolved: deny
			c.res = c.err
			return ratelimit.Decision{RetryAfter: ratelimit.RetryNever}, i, c.err
		}
	}
	if len(cs) == 1 {
		// One limit: AllowN directly, which is AllowAll's result for one
		// dimension without the bookkeeping.
		c := &cs[0]
		d, err := c.Limiter.AllowN(ctx, c.Key, n)
		c.res, c.allowed = err, d.Allowed
		return d, 0, err
	}
	var buf [MaxInline]ratelimit.Dimension
	dims := buf[:0]
	for i := range cs {
		c := &cs[i]
		// The resolved tier, not the Tiered: its tier function ran once.
		dims = append(dims, ratelimit.Dimension{Name: c.Entry.Name, Limiter: c.Limiter, Key: c.Key})
	}
	md, err := ratelimit.AllowAll(ctx, n, dims...)
	for i := range cs {
		cs[i].allowed = md.Allowed
	}
	if err != nil {
		// Each dimension's error names its dimension; an error that does
		// not goes with the reported Decision.
		if !errs.EachDimension(err, func(d *errs.Dimension) {
			if d.Index >= 0 && d.Index < len(cs) {
				c := &cs[d.Index]
				if c.res == nil {
					c.allowed = d.Allowed
				}
				c.res = errors.Join(c.res, d.Err)
			}
		}) && md.Index >= 0 && md.Index < len(cs) {
			cs[md.Index].res = err
		}
	}
	return md.Decision, md.Index, err
}

// shadow charges the request's cost in the shadow limits,
// cs[v.Enforced:], reporting their decisions to the observer (a denial as
// OutcomeShadow: only the Set knows the limit does not enforce it) and
// their errors to the logger. With compete, a shadow limit more
// restrictive than v's Decision takes its place.
func (s *Set[R]) shadow(req *Request[R], cs []Charge[R], v *Verdict[R], compete bool, attrs func() []slog.Attr) {
	ctx := req.Ctx
	for i := v.Enforced; i < len(cs); i++ {
		c := &cs[i]
		if c.listed { // its DeniedKeys would refuse the request
			if s.cfg.Observer != nil {
				s.observe(ctx, c.Entry, ratelimit.OutcomeShadow, req.N)
			}
			continue
		}
		var start time.Time
		if s.cfg.Observer != nil {
			start = time.Now()
		}
		d, err := ratelimit.Decision{RetryAfter: ratelimit.RetryNever}, c.err
		switch {
		case err != nil:
		case c.Entry.Concurrency != nil:
			// Held while the request is served, as an enforced one is,
			// so that what it would have let in flight is measured.
			var p ratelimit.Permit
			p, d, err = c.tryAcquire(ctx, req.N)
			c.limit = d.Limit
			if d.Allowed {
				if ctx.Err() != nil && err != nil {
					p.Release()
				} else {
					c.permit, c.held = p, true
					v.held++
				}
			}
		case c.Entry.Count != nil:
			// Reserved and settled as an enforced one is, so that what
			// it would have counted is measured.
			var r *ratelimit.Reservation
			r, err = c.reserve(ctx, req.N)
			d = r.Decision
			if d.Allowed {
				if ctx.Err() != nil && err != nil {
					_ = r.Settle(ctx, 0)
				} else {
					c.rsv = r
					v.reserved++
				}
			}
		default:
			d, err = c.Limiter.AllowN(ctx, c.Key, req.N)
		}
		c.res, c.allowed = err, d.Allowed
		if ctx.Err() != nil && err != nil {
			continue // the caller's cancellation: neither a failure nor a decision
		}
		if err != nil {
			s.report(ctx, c, err, attrs)
		}
		if s.cfg.Observer != nil {
			s.observeCharge(ctx, c, req.N, d, err, time.Since(start), true)
		}
		if compete && err == nil && (v.From < 0 || v.Failed || moreRestrictive(d, v.Dec)) {
			v.Dec, v.From, v.Failed = d, i, false
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

// reportErrors logs the error each of cs's limiters answered, if any,
// under its limit (see report).
func (s *Set[R]) reportErrors(ctx context.Context, cs []Charge[R], attrs func() []slog.Attr) {
	for i := range cs {
		if cs[i].res != nil {
			s.report(ctx, &cs[i], cs[i].res, attrs)
		}
	}
}

// report logs err, answered by c's limiter, at most once per limit per
// Config.ReportEvery, at level Error with the message "ratelimit: limiter
// error" and the attributes "limit" (the limit's name), "error",
// "suppressed" (how many errors of the limit went unreported since the
// previous report), then attrs'. Never the key. It logs nothing for a
// limiter that logs its errors itself (a Redis limiter given a logger):
// one failure, one line.
func (s *Set[R]) report(ctx context.Context, c *Charge[R], err error, attrs func() []slog.Attr) {
	lg := s.cfg.Logger.Get()
	if lg == nil || c.describe().Logs {
		return
	}
	suppressed, ok := c.Entry.rep.Admit(s.ts.Now(), s.cfg.ReportEvery)
	if !ok {
		return
	}
	var extra []slog.Attr
	if attrs != nil {
		extra = attrs()
	}
	all := make([]slog.Attr, 0, 3+len(extra))
	all = append(all,
		slog.String("limit", c.Entry.Name),
		slog.Any("error", err),
		slog.Int64("suppressed", suppressed))
	all = append(all, extra...)
	lg.LogAttrs(ctx, slog.LevelError, "ratelimit: limiter error", all...)
}

// ObserveAll reports to the observer, for every limit, that the request
// was let through as exempt (ratelimit.OutcomeExempt) or refused by a
// denylist (ratelimit.OutcomeDenied); for a denied client network. No-op
// without an observer.
func (s *Set[R]) ObserveAll(ctx context.Context, o ratelimit.Outcome, n int) {
	if s.cfg.Observer == nil {
		return
	}
	for i := range s.limits {
		s.observe(ctx, &s.limits[i], o, n)
	}
}

// observe reports to the observer that l let a request through as exempt
// (OutcomeExempt) or refused it by its denylist (OutcomeDenied, or
// OutcomeShadow in shadow mode); the observer is not nil.
func (s *Set[R]) observe(ctx context.Context, l *Entry[R], o ratelimit.Outcome, n int) {
	e := ratelimit.Event{Name: l.Name, Home: ratelimit.HomeNone, Outcome: o, N: n}
	if l.Concurrency != nil {
		e.Algorithm = ratelimit.ConcurrencyAlgorithm
	} else if l.ph != nil {
		e.Algorithm = l.ph.Policy().Algorithm
	}
	if o == ratelimit.OutcomeExempt {
		e.Decision.Allowed = true
	} else {
		e.Decision.RetryAfter = ratelimit.RetryNever
		e.Err = s.cfg.DeniedErr
	}
	s.cfg.Observer.Observe(ctx, e)
}
