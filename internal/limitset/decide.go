package limitset

import (
	"context"
	"log/slog"

	"github.com/rlkit/ratelimit"
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
	// the rest are in shadow mode.
	Enforced int

	shadowFields bool // Decide's shadowFields, for WriteFields
	n            int  // len(Charges())
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

// Limit returns the name of the limit Dec came from, "" when none.
func (v *Verdict[R]) Limit() string {
	if v.From < 0 {
		return ""
	}
	return v.Charges()[v.From].Entry.Name
}

// add appends c to the charges.
func (v *Verdict[R]) add(c Charge[R]) {
	if v.more == nil && v.n < MaxInline {
		v.buf[v.n] = c
		v.n++
		return
	}
	if v.more == nil {
		v.more = make([]Charge[R], MaxInline, 2*MaxInline)
		copy(v.more, v.buf[:])
	}
	v.more = append(v.more, c)
	v.n++
}

// reset makes v ready for a new request.
func (v *Verdict[R]) reset(shadowFields bool) {
	v.Dec, v.From, v.Failed, v.Err, v.Listed, v.Enforced = ratelimit.Decision{}, -1, false, nil, nil, 0
	v.shadowFields, v.n, v.more = shadowFields, 0, nil
}

// Charge is one limit applying to one request.
type Charge[R any] struct {
	Entry   *Entry[R]
	Limiter ratelimit.KeyedLimiter // Entry's limiter, or the request's tier of it
	Key     string
	// err is why the limit cannot decide: the tier could not be resolved
	// (deny with it).
	err error
	// listed is set for a limit in shadow mode whose DeniedKeys hold Key:
	// its denial is reported, nothing charged.
	listed bool
}

// Decide runs the limits over one request: exemptions and denylists,
// then the enforced limits all or nothing (ratelimit.AllowAll; a
// *ratelimit.Tiered resolved once to the request's tier), then, when
// they admit, the shadow limits (their limiters called with a context
// marked as shadow). Limiter errors are reported through cfg.Logger,
// paced, with attrs (nil: none) added to each report (such as the
// method); never the key. With compete (shadowFields, or when no
// enforced limit applies) a more restrictive shadow Decision becomes the
// one to report.
//
// Exemptions and denylists are settled before any limiter is asked: a
// request exempt from every limit (req.Exempt, req.N <= 0) passes
// uncharged unless the DeniedKeys of an enforced limit hold its key; else
// each limit refuses the keys of its DeniedKeys and lets the keys of its
// ExemptKeys through uncharged. Denial beats exemption. The observer sees
// the exemptions only when no denylist refuses the request.
func (s *Set[R]) Decide(req *Request[R], v *Verdict[R], shadowFields bool, attrs func() []slog.Attr) Outcome {
	v.reset(shadowFields)
	if req.Exempt || req.N <= 0 {
		return s.decideExempt(req, v)
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
	cs := v.Charges()
	denied := false
	if v.Enforced > 0 {
		ctx := req.Ctx
		var errAt int
		v.Dec, v.From, errAt, v.Err = allowAll(ctx, req.N, cs[:v.Enforced])
		denied = !v.Dec.Allowed
		if v.Err != nil {
			if ctx.Err() != nil {
				// The request's context ended before the limiters could
				// decide (the client went away, a deadline passed): its
				// error is not a backend failure, and whatever Decision
				// came with it was not made on the request's merits.
				return Canceled
			}
			s.report(req.Ctx, cs, errAt, v.Err, attrs)
			v.Failed = true
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

// decideExempt settles a request exempt from every limit: refused when
// the DeniedKeys of an enforced limit hold its key, else passed, and
// reported to the observer as exempt by every limit.
func (s *Set[R]) decideExempt(req *Request[R], v *Verdict[R]) Outcome {
	if s.deniedKeys && !req.AllShadow {
		for i := range s.limits {
			l := &s.limits[i]
			if l.deniedKeys == nil || l.Shadow {
				continue
			}
			if key, ok := l.Key(req.R); ok && l.deniedKeys.has(key) {
				v.Listed = l
				if s.cfg.Observer != nil {
					s.observe(req.Ctx, l, ratelimit.OutcomeDenied, req.N)
				}
				return Listed
			}
		}
	}
	if s.cfg.Observer != nil {
		s.ObserveAll(req.Ctx, ratelimit.OutcomeExempt, req.N)
	}
	return Pass
}

// gather adds to v the limits that apply to req, enforced ones first, and
// sets v.Enforced. It resolves each *ratelimit.Tiered to the request's
// tier, calling its tier function once. It leaves out the limits whose
// ExemptKeys hold the request's key, and stops at the first enforced
// limit whose DeniedKeys hold it, returning that limit. The exemptions
// are reported to the observer only when no denylist refuses the
// request: denial beats exemption.
func (s *Set[R]) gather(req *Request[R], v *Verdict[R]) *Entry[R] {
	passes := 1
	if s.hasShadow || req.AllShadow {
		passes = 2
	}
	var exemptBuf [MaxInline]*Entry[R]
	exempt := exemptBuf[:0] // with an observer: the limits to report as exempt
	for pass := 0; pass < passes; pass++ {
		for i := range s.limits {
			l := &s.limits[i]
			if (l.Shadow || req.AllShadow) != (pass == 1) {
				continue
			}
			key, ok := l.Key(req.R)
			if !ok {
				continue
			}
			listed := false
			if l.lists {
				if l.deniedKeys.has(key) {
					if pass == 0 {
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
			c := Charge[R]{Entry: l, Limiter: l.Limiter, Key: key, listed: listed}
			if l.tiered != nil && !listed {
				_, c.Limiter, c.err = l.tiered.Tier(req.Ctx, key)
			}
			v.add(c)
		}
		if pass == 0 {
			v.Enforced = v.n
		}
	}
	for _, l := range exempt {
		s.observe(req.Ctx, l, ratelimit.OutcomeExempt, req.N)
	}
	return nil
}

// allowAll charges n in every limit of cs, all or nothing, and returns the
// Decision to report, its index in cs, and with an error the index of the
// limit to report it under.
func allowAll[R any](ctx context.Context, n int, cs []Charge[R]) (ratelimit.Decision, int, int, error) {
	for i := range cs {
		if cs[i].err != nil { // a tier that could not be resolved: deny
			return ratelimit.Decision{RetryAfter: ratelimit.RetryNever}, i, i, cs[i].err
		}
	}
	if len(cs) == 1 {
		// One limit: AllowN directly, which is AllowAll's result for one
		// dimension without the bookkeeping.
		d, err := cs[0].Limiter.AllowN(ctx, cs[0].Key, n)
		return d, 0, 0, err
	}
	var buf [MaxInline]ratelimit.Dimension
	dims := buf[:0]
	for i := range cs {
		c := &cs[i]
		// The resolved tier, not the Tiered: its tier function ran once.
		dims = append(dims, ratelimit.Dimension{Name: c.Entry.Name, Limiter: c.Limiter, Key: c.Key})
	}
	md, err := ratelimit.AllowAll(ctx, n, dims...)
	return md.Decision, md.Index, md.Index, err
}

// shadow charges the request's cost in the shadow limits,
// cs[v.Enforced:], reporting their errors. Their limiters see a context
// marked as shadow, for their observers. With compete, a shadow limit
// more restrictive than v's Decision takes its place.
func (s *Set[R]) shadow(req *Request[R], cs []Charge[R], v *Verdict[R], compete bool, attrs func() []slog.Attr) {
	ctx := req.Ctx
	sctx := observe.WithShadow(ctx)
	for i := v.Enforced; i < len(cs); i++ {
		c := &cs[i]
		if c.listed { // its DeniedKeys would refuse the request
			if s.cfg.Observer != nil {
				s.observe(ctx, c.Entry, ratelimit.OutcomeShadow, req.N)
			}
			continue
		}
		d, err := ratelimit.Decision{RetryAfter: ratelimit.RetryNever}, c.err
		if err == nil {
			d, err = c.Limiter.AllowN(sctx, c.Key, req.N)
		}
		if err != nil && ctx.Err() == nil {
			s.report(ctx, cs, i, err, attrs)
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

// report logs err, from the limit of cs[at] (any other at: unknown), at
// most once per limit per Config.ReportEvery, at level Error with the
// message "ratelimit: limiter error" and the attributes "limit" (the
// limit's name, "" when unknown), "error", "suppressed" (how many errors
// of the limit went unreported since the previous report), then attrs'.
// Never the key.
func (s *Set[R]) report(ctx context.Context, cs []Charge[R], at int, err error, attrs func() []slog.Attr) {
	lg := s.cfg.Logger.Get()
	if lg == nil {
		return
	}
	rep, name := &s.anyReporter, ""
	if at >= 0 && at < len(cs) {
		rep, name = &cs[at].Entry.rep, cs[at].Entry.Name
	}
	suppressed, ok := rep.Admit(s.ts.Now(), s.cfg.ReportEvery)
	if !ok {
		return
	}
	var extra []slog.Attr
	if attrs != nil {
		extra = attrs()
	}
	all := make([]slog.Attr, 0, 3+len(extra))
	all = append(all,
		slog.String("limit", name),
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
	e := ratelimit.Event{Limit: l.Name, Home: ratelimit.HomeNone, Outcome: o, N: n}
	if l.ph != nil {
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
