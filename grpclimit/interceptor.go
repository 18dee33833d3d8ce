package grpclimit

import (
	"context"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/adapter"
	"github.com/rlkit/ratelimit/internal/limitset"
	"github.com/rlkit/ratelimit/internal/report"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// Limit is one limit a call must pass: a keyed limiter and the key function
// choosing what to charge, such as 1,000 calls a minute per API key, or 10
// a minute per peer on /pkg.Auth/Login.
type Limit struct {
	// Name identifies the limit in the ratelimit-policy and ratelimit
	// fields, in the QuotaFailure of a denial, in error reports and in the
	// observer's Events, such as "api" or "login". Printable ASCII;
	// "default" if empty; unique among the Limits of one Interceptor.
	Name string
	// Key picks the key to charge; a call it does not apply to is not
	// charged in this limit. Required.
	Key KeyFunc
	// Limiter holds the limit: a *ratelimit.Keyed, a Redis limiter, or any
	// KeyedLimiter. Required. Observe it through the interceptors
	// ([WithObserver]), not with an Observer of its own: [New] refuses
	// both, which would count each decision twice.
	//
	// For tiers (free, pro, ...) use a *ratelimit.Tiered: the interceptor
	// calls its tier function once per call, with the call's context (where
	// an authentication interceptor can have stored the plan), and charges
	// the call in that tier's limiter. An unknown tier is the server's
	// misconfiguration, not the client's fault: the call ends with
	// codes.Internal (no RetryInfo), is charged nowhere, and the error is
	// reported (logged, and observed as [ratelimit.OutcomeError]), never
	// let through unlimited.
	Limiter ratelimit.KeyedLimiter
	// Concurrency, in place of Limiter, makes the limit a concurrency
	// limit: at most so many calls in flight per key, such as a
	// ratelimit.NewConcurrency(20) or a Redis one. A Limit has one of
	// Limiter and Concurrency. The call's cost is the permits it takes,
	// acquired without waiting once the rate limits have admitted the call
	// (a call they refuse takes none), and held for the unary handler's
	// call, or for a stream's life (until its handler returns); a client
	// that goes away cancels the handler's context, and the permits come
	// back when it returns. A full limit refuses the call all or nothing
	// (the rate limits that admitted it are refunded) with
	// codes.ResourceExhausted, ratelimit-policy
	// `"name";q=20;qu="concurrent-requests"` and ratelimit `"name";r=0`
	// (no t, no x-ratelimit-reset), and RetryInfo and retry-after only for
	// a key under Block. Name, Key, Shadow (permits held and measured, not
	// enforced), ExemptKeys and DeniedKeys apply as to a rate limit;
	// Window and Messages do not ([New] refuses them). The interceptors'
	// observer hears each acquisition under Name and, once the call ends,
	// one [ratelimit.OutcomeReleased] Event with the permits given back.
	Concurrency ratelimit.ConcurrencyLimiter
	// Count, when set, counts each call by its outcome, once its handler
	// has returned, instead of charging its cost up front: only failures,
	// such as 5 failed logins a minute per user,
	//
	//	Count: func(c codes.Code, _ int) int { if c != codes.OK { return 1 }; return 0 },
	//
	// only successes, or the cost the handler reports with [ReportCost]
	// (tokens used: func(_ codes.Code, cost int) int { return cost }).
	// Before the handler runs, the call's cost ([WithCost], default 1: the
	// most Count should return) is reserved, all or nothing with the other
	// limits, so a spent limit refuses the call before it runs
	// (codes.ResourceExhausted). When the unary handler returns, or a
	// stream's handler (the stream's end), or either panics
	// (codes.Internal), the reservation is settled at Count(code, cost):
	// code is status.Code of the handler's error, cost what it reported,
	// else the call's cost. Less than reserved gives the difference back,
	// more charges the overrun after the fact.
	//
	// So that concurrent calls cannot overrun the limit, a call it would
	// refuse while this Interceptor holds reservations of the key waits
	// for one to settle (until its context ends) and tries again: with 5
	// failures allowed, concurrent successful calls take turns, at most 5
	// in their handlers, and are never refused; only settled counts
	// refuse. (Servers sharing a Redis limiter do not wait for each
	// other's reservations.) The header fields show the state with this
	// call's cost reserved (for a failure limit, as if it failed); the
	// next call's show it settled. A reservation is held 10 minutes, or a
	// minute past the call's deadline if later, then stays charged: that
	// only reclaims a dead server's. Limiter must be a [ratelimit.Reserver]
	// (a *ratelimit.Keyed under any algorithm but the sliding log, a
	// *ratelimit.Tiered, a Redis limiter); [New] refuses others, and Count
	// with Concurrency or Messages.
	// A type of yours that embeds one reserves through the embedded
	// ReserveN, not through its own AllowN: give it a ReserveN of its own.
	Count func(code codes.Code, cost int) int
	// Window is the window reported as w in ratelimit-policy. When zero it
	// is taken from the limiter's Policy method (which ratelimit.Keyed
	// has), through the call's tier for a ratelimit.Tiered, on each call,
	// at the time of the interceptor's clock. Without a Policy method, w is
	// omitted.
	Window time.Duration
	// Shadow makes the limit report without enforcing: calls are charged
	// and served even when the limit denies them; the interceptors'
	// observer ([WithObserver]) reports such a denial as
	// [ratelimit.OutcomeShadow]. Use it to roll a new limit out safely.
	// Shadow limits are consulted only for calls the enforced limits
	// admit.
	Shadow bool
	// ExemptKeys are keys this limit never charges, such as the API keys
	// of internal services: a call whose key is one of them passes this
	// limit uncharged, as if Key had not applied to it, except that the
	// interceptor's observer ([WithObserver]) sees it as exempt. Keys are
	// compared as Key returns them. [New] copies the list.
	ExemptKeys []string
	// DeniedKeys are keys this limit always refuses, compared as
	// ExemptKeys are. A call whose key is one of them is charged nowhere
	// and answered through the denied handler with a [Denial] whose Err is
	// [ErrDenied] ([DeniedError]: codes.PermissionDenied), whatever
	// exempts it otherwise (a cost <= 0). A key may not be in both lists.
	// In shadow mode such a call is served, not charged in this limit, and
	// the denial only reported to the interceptor's observer.
	DeniedKeys []string
	// Messages makes the limit charge the messages clients send on streams
	// instead of calls: each message the stream's handler receives, at the
	// cost [WithMessageCost] gives it (default 1). Unary calls and stream
	// creation are not charged in such a limit. Its keys are computed from
	// the stream's context and method, for each message.
	Messages bool
}

// Interceptor holds unary and stream server interceptors that limit the
// calls, and optionally the stream messages, a gRPC server serves. Create
// one with [New]; the zero value is not usable. An Interceptor is safe for
// concurrent use, and one Interceptor may serve any number of servers.
type Interceptor struct {
	calls        *limitset.Set[inCall] // the call limits; nil when none
	msgs         *limitset.Set[inCall] // the Messages limits; nil when none
	fields       FieldSet
	shadowFields bool
	denied       func(ctx context.Context, d Denial) error
	common       // WithClock, WithCost
	msgCost      func(ctx context.Context, method string, msg any) int
	logger       report.Logger
	reportEvery  time.Duration
	observer     ratelimit.Observer
	chargeInfra  bool // ChargeHealthAndReflection

	// WithAdaptive's values, and the Overload New builds of them; over is
	// nil without it.
	adaptive    *ratelimit.Adaptive
	priority    func(ctx context.Context, method string) ratelimit.Priority
	adaptiveSet bool
	over        *limitset.Overload[inCall]
}

// inCall is what the limits decide on: one call, or one message of a
// stream.
type inCall struct {
	ctx    context.Context
	method string
}

// New returns server interceptors enforcing limits, all or nothing: a call
// is charged in every limit that applies to it only if every one admits
// it. Limits with [Limit.Messages] charge stream messages instead, all or
// nothing among themselves. The options that apply are [WithCost],
// [WithMessageCost], [WithFields], [WithShadowFields],
// [WithDeniedHandler], [WithLogger], [WithErrorReportInterval],
// [WithObserver], [WithClock], [ChargeHealthAndReflection] and
// [WithAdaptive].
//
// Exemptions and denylists are settled before any limiter is asked: a call
// of cost <= 0, or to the health or server reflection services (see
// [ChargeHealthAndReflection]), is served uncharged unless the
// [Limit.DeniedKeys] of an enforced limit hold its key; else each limit
// refuses the keys of its DeniedKeys and lets the keys of its
// [Limit.ExemptKeys] through uncharged. Denial always beats exemption.
//
// With [WithAdaptive], limits may be empty: the interceptors then protect
// the service from overload alone.
//
// It returns an error wrapping [ratelimit.ErrInvalidConfig] when limits is
// empty (without WithAdaptive), a Limit has no Key (or a key helper given
// nothing to key by, such as KeyByUser(nil), or a method no call can have), neither or both of
// Limiter and Concurrency, a negative Window, a Window or Messages on a
// concurrency limit, a name that is not printable ASCII or the name of
// another Limit ("default" counts as the name of a Limit without one), an
// ExemptKeys entry that is also in its DeniedKeys, a Limiter with an
// Observer of its own beside [WithObserver]'s, and for an invalid option.
func New(limits []Limit, opts ...Option) (*Interceptor, error) {
	i := &Interceptor{fields: allFields, reportEvery: defaultReportEvery}
	if err := adapter.Apply(opts, func(o Option) error { return o.applyServer(i) }); err != nil {
		return nil, err
	}
	if i.denied == nil {
		i.denied = deniedError
	}
	if len(limits) == 0 && !i.adaptiveSet {
		return nil, configError("grpclimit.New: limits must not be empty (without WithAdaptive), got %d", len(limits))
	}
	names := make(map[string]bool, len(limits))
	var calls, msgs []limitset.Limit[inCall]
	for _, l := range limits {
		name := l.Name
		if name == "" {
			name = "default"
		}
		if names[name] {
			return nil, configError("grpclimit.Limit.Name must be unique, got %q twice", name)
		}
		names[name] = true
		if isInvalidMethod(l.Key) {
			return nil, configError("grpclimit.Limit.Key of limit %q matches a method or service that can never match: IsMethod takes \"/pkg.Service/Method\", IsService \"pkg.Service\"", name)
		}
		if l.Key != nil && isInvalid(l.Key) {
			return nil, configError("grpclimit.Limit.Key of limit %q is a key helper given nothing to key by: a nil function, an empty metadata name or no keys (KeyByUser, KeyByMetadata, When, FirstOf, Combine)", name)
		}
		if l.Messages && l.Concurrency != nil {
			return nil, configError("grpclimit.Limit.Messages of limit %q must be false for a concurrency limit: a message holds nothing once received", name)
		}
		if l.Messages && l.Count != nil {
			return nil, configError("grpclimit.Limit.Count of limit %q must be nil for a Messages limit: a message has no outcome", name)
		}
		sl := limitset.Limit[inCall]{
			Name:        l.Name,
			Key:         callKey(l.Key),
			Limiter:     l.Limiter,
			Concurrency: l.Concurrency,
			Count:       codeCount(l.Count),
			Window:      l.Window,
			Shadow:      l.Shadow,
			ExemptKeys:  l.ExemptKeys,
			DeniedKeys:  l.DeniedKeys,
		}
		if l.Messages {
			msgs = append(msgs, sl)
		} else {
			calls = append(calls, sl)
		}
	}
	cfg := limitset.Config{
		Pkg:         "grpclimit",
		Observer:    i.observer,
		Clock:       i.clock,
		Logger:      i.logger,
		ReportEvery: i.reportEvery,
		DeniedErr:   ErrDenied,
	}
	var err error
	if len(calls) > 0 {
		if i.calls, err = limitset.New(cfg, calls); err != nil {
			return nil, err
		}
	}
	if len(msgs) > 0 {
		if i.msgs, err = limitset.New(cfg, msgs); err != nil {
			return nil, err
		}
	}
	if i.adaptiveSet {
		var priority func(inCall) ratelimit.Priority
		if p := i.priority; p != nil {
			priority = func(c inCall) ratelimit.Priority { return p(c.ctx, c.method) }
		}
		if i.over, err = limitset.NewOverload("grpclimit", i.adaptive, priority, i.observer); err != nil {
			return nil, err
		}
	}
	return i, nil
}

// callKey adapts a KeyFunc to the limit set; nil stays nil, for New to
// refuse.
func callKey(k KeyFunc) func(c inCall) (string, bool) {
	if k == nil {
		return nil
	}
	return func(c inCall) (string, bool) { return k(c.ctx, c.method) }
}

// codeCount is count over the limit set's int outcome, nil for nil.
func codeCount(count func(codes.Code, int) int) func(outcome, cost int) int {
	if count == nil {
		return nil
	}
	return func(outcome, cost int) int { return count(codes.Code(outcome), cost) }
}

// ReportCost records n as the actual cost of the call whose context is
// ctx (a unary handler's, or a stream's Context()), such as the tokens an
// LLM completion used, for the limits that count it by outcome
// ([Limit.Count]): they settle Count(code, n) once the handler returns.
// The last report counts; it is safe to call from any goroutine. It
// returns an error wrapping [ratelimit.ErrInvalidN] when n is negative,
// and does nothing when no limit counts the call.
func ReportCost(ctx context.Context, n int) error {
	return limitset.ReportCost("grpclimit", ctx, n)
}

// outcomeCode is the outcome of a call whose handler returned err, or
// panicked (codes.Internal) when done is false.
func outcomeCode(err error, done bool) int {
	if !done {
		return int(codes.Internal)
	}
	return int(status.Code(err))
}

// countedStream gives a stream's handler the context that carries the
// cell for [ReportCost].
type countedStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *countedStream) Context() context.Context { return s.ctx }

// Unary returns the unary server interceptor, for grpc.UnaryInterceptor or
// grpc.ChainUnaryInterceptor. It charges each call in the limits that
// apply to it before calling the handler; a denied call ends with the
// denied handler's error ([DeniedError] by default) without reaching the
// handler. The rate-limit fields ([WithFields]) are set as response header
// metadata on admitted and denied calls alike.
func (i *Interceptor) Unary() grpc.UnaryServerInterceptor { return i.unary }

func (i *Interceptor) unary(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	var f ratelimit.Flight
	if i.calls != nil {
		var v limitset.Verdict[inCall]
		if err := i.admit(ctx, info.FullMethod, req, nil, &v, &f); err != nil {
			return nil, err
		}
		if v.Counts() {
			return i.unaryCounted(ctx, req, handler, &v, f)
		}
		if v.Holds() {
			// Released however the handler ends, a panic included.
			defer i.calls.Release(ctx, &v, 0)
		}
	} else if i.over != nil {
		if err := i.acquire(ctx, info.FullMethod, nil, nil, &f); err != nil {
			return nil, err
		}
	}
	if i.over == nil {
		return handler(ctx, req)
	}
	return unaryFlight(ctx, req, handler, f)
}

// unaryFlight runs the handler of a call in its flight f of the Adaptive,
// and ends f by the call's outcome however the handler ends.
func unaryFlight(ctx context.Context, req any, handler grpc.UnaryHandler, f ratelimit.Flight) (resp any, err error) {
	done := false
	defer func() { endFlight(f, ctx, err, done) }()
	resp, err = handler(ctx, req)
	done = true
	return resp, err
}

// unaryCounted runs the handler of a call that holds reservations of
// limits that count by outcome ([Limit.Count]), and settles them with its
// outcome however it ends, and ends f, its flight in the Adaptive if any.
func (i *Interceptor) unaryCounted(ctx context.Context, req any, handler grpc.UnaryHandler, v *limitset.Verdict[inCall], f ratelimit.Flight) (resp any, err error) {
	ctx = limitset.WithReportedCost(ctx)
	done := false
	defer func() {
		if i.over != nil {
			endFlight(f, ctx, err, done)
		}
		i.calls.Release(ctx, v, outcomeCode(err, done))
	}()
	resp, err = handler(ctx, req)
	done = true
	return resp, err
}

// endFlight ends the flight f of a call with ctx whose handler returned
// err, or panicked when done is false, by [flightEnd].
func endFlight(f ratelimit.Flight, ctx context.Context, err error, done bool) {
	flightEnd(ctx, err, done).End(f)
}

// endStreamFlight ends the flight f of a stream whose handler returned
// err, or panicked when done is false: as [endFlight], but a stream that
// succeeded is ignored, not a sample, as its life is as long as its
// client keeps it, not the service's latency.
func endStreamFlight(f ratelimit.Flight, ctx context.Context, err error, done bool) {
	streamFlightEnd(ctx, err, done).End(f)
}

// streamFlightEnd is flightEnd for a stream: its success is ignored.
func streamFlightEnd(ctx context.Context, err error, done bool) limitset.FlightEnd {
	if e := flightEnd(ctx, err, done); e != limitset.EndSuccess {
		return e
	}
	return limitset.EndIgnored
}

// flightEnd is what a call with ctx whose handler returned err, or
// panicked when done is false, says of the service's capacity (see
// [WithAdaptive]).
func flightEnd(ctx context.Context, err error, done bool) limitset.FlightEnd {
	if !done {
		return limitset.EndIgnored
	}
	if e, ended := limitset.ContextEnd(ctx); ended {
		return e
	}
	code := status.Code(err)
	if code == codes.Unknown {
		code = status.FromContextError(err).Code() // a bare context error
	}
	switch code {
	case codes.Unavailable, codes.DeadlineExceeded:
		return limitset.EndDropped
	case codes.Canceled:
		return limitset.EndIgnored
	}
	return limitset.EndSuccess
}

// acquire asks the Adaptive for a place for a call (a unary call when ss
// is nil, else a stream's creation), in f: nil to serve it, else the
// error to end it with, once the shed call was answered (the trailer
// grpc-retry-pushback-ms set) and v, the verdict of the limits that
// admitted it if not nil, undone.
func (i *Interceptor) acquire(ctx context.Context, method string, ss grpc.ServerStream, v *limitset.Verdict[inCall], f *ratelimit.Flight) error {
	var d ratelimit.Decision
	if *f, d = i.over.Acquire(ctx, inCall{ctx: ctx, method: method}); d.Allowed {
		return nil
	}
	if v != nil {
		i.calls.Undo(ctx, v, func() []slog.Attr { return []slog.Attr{slog.String("method", method)} })
	}
	ra := limitset.ShedRetryAfter(d)
	md := metadata.MD{pushbackKey: []string{strconv.FormatInt(ra.Milliseconds(), 10)}}
	if ss != nil {
		ss.SetTrailer(md)
	} else {
		_ = grpc.SetTrailer(ctx, md)
	}
	return i.answer(ctx, Denial{Method: method, Limit: limitset.ShedName, Decision: d, RetryAfter: ra, Err: ErrShed})
}

// exempt reports whether calls to method are served uncharged: server
// reflection and health checks, unless ChargeHealthAndReflection.
func (i *Interceptor) exempt(method string) bool {
	return !i.chargeInfra && infraMethod(method)
}

// infraMethod reports whether method belongs to gRPC's server reflection
// (v1 or v1alpha) or health-checking service.
func infraMethod(method string) bool {
	return strings.HasPrefix(method, "/grpc.health.v1.") ||
		strings.HasPrefix(method, "/grpc.reflection.v1.") ||
		strings.HasPrefix(method, "/grpc.reflection.v1alpha.")
}

// Stream returns the stream server interceptor, for grpc.StreamInterceptor
// or grpc.ChainStreamInterceptor. It charges the creation of each stream
// like a unary call, in the limits without [Limit.Messages]; with limits
// that have it, each message the handler receives (RecvMsg) is charged in
// them, and a denied message makes RecvMsg return the denial error: the
// message is dropped (RecvMsg resets it), and a handler that returns that
// error ends the stream with it. When the last message a handler received
// was denied, the denial's fields are set as the stream's trailer when the
// handler returns, once however many messages it skipped.
func (i *Interceptor) Stream() grpc.StreamServerInterceptor { return i.stream }

func (i *Interceptor) stream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) (err error) {
	var f ratelimit.Flight
	if i.calls != nil {
		var v limitset.Verdict[inCall]
		if err := i.admit(ss.Context(), info.FullMethod, nil, ss, &v, &f); err != nil {
			return err
		}
		if v.Counts() {
			// Settled at the stream's end, however its handler ends.
			cs := &countedStream{ServerStream: ss, ctx: limitset.WithReportedCost(ss.Context())}
			done := false
			defer func() {
				if i.over != nil {
					endStreamFlight(f, ss.Context(), err, done)
				}
				i.calls.Release(cs.ctx, &v, outcomeCode(err, done))
			}()
			err = i.serveStream(srv, cs, info, handler)
			done = true
			return err
		}
		if v.Holds() {
			// Held for the stream's life: until its handler returns.
			defer i.calls.Release(ss.Context(), &v, 0)
		}
	} else if i.over != nil {
		if err := i.acquire(ss.Context(), info.FullMethod, ss, nil, &f); err != nil {
			return err
		}
	}
	if i.over == nil {
		return i.serveStream(srv, ss, info, handler)
	}
	// The flight lasts the stream's life: until its handler returns.
	done := false
	defer func() { endStreamFlight(f, ss.Context(), err, done) }()
	err = i.serveStream(srv, ss, info, handler)
	done = true
	return err
}

// serveStream serves a stream the call limits admitted: through the
// Messages limits, if any.
func (i *Interceptor) serveStream(srv any, ss grpc.ServerStream, info *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	if i.msgs == nil {
		return handler(srv, ss)
	}
	if i.exempt(info.FullMethod) {
		// Exempt messages: the denylists settled once, for the stream.
		ctx := ss.Context()
		req := limitset.Request[inCall]{R: inCall{ctx: ctx, method: info.FullMethod}, Ctx: ctx, N: 1, Exempt: true}
		if l := i.msgs.DecideExempt(&req); l != nil {
			return i.denyListed(ctx, info.FullMethod, &limitset.Verdict[inCall]{Listed: l}, false)
		}
		return handler(srv, ss)
	}
	ls := &limitedStream{ServerStream: ss, i: i, method: info.FullMethod}
	err := handler(srv, ls)
	ls.setTrailer()
	return err
}

// admit decides a call (a unary call and its request when ss is nil, else
// a stream's creation) in the call limits, in v, then in the Adaptive, if
// any, in f: nil to serve it, else the error to end it with. A call
// served may hold permits in v (v.Holds), to release once it ends, and a
// flight in f, to end once it ends.
func (i *Interceptor) admit(ctx context.Context, method string, req any, ss grpc.ServerStream, v *limitset.Verdict[inCall], f *ratelimit.Flight) error {
	n, exempt := 1, i.exempt(method)
	if i.cost != nil && !exempt {
		n = i.cost(ctx, method, req)
	}
	call := limitset.Request[inCall]{R: inCall{ctx: ctx, method: method}, Ctx: ctx, N: n, Exempt: exempt}
	switch i.calls.Decide(&call, v, i.shadowFields, func() []slog.Attr {
		return []slog.Attr{slog.String("method", method)}
	}) {
	case limitset.Pass:
		if i.over != nil {
			return i.acquire(ctx, method, ss, nil, f)
		}
		return nil
	case limitset.Admitted:
		if i.over != nil {
			if err := i.acquire(ctx, method, ss, v, f); err != nil {
				return err
			}
		}
		if i.fields != NoFields && v.From >= 0 && (!v.Shadow() || i.shadowFields) {
			i.setFields(ctx, ss, v)
		}
		return nil
	case limitset.Denied:
		i.setFields(ctx, ss, v)
		return i.deny(ctx, method, v, false)
	case limitset.Listed:
		return i.denyListed(ctx, method, v, false)
	case limitset.Misconfigured:
		return misconfiguredError(v.Limit())
	}
	return ctxError(ctx)
}

// misconfiguredError is the status of a call that a limit could not decide
// because of the server's own configuration (a tier with no limiter):
// codes.Internal, naming the limit and nothing else (not the tier, not the
// error), with no RetryInfo and no rate-limit fields: the client did
// nothing wrong, and waiting would not help it either. The error was
// reported already.
func misconfiguredError(limit string) error {
	return status.Error(codes.Internal, "rate limit "+strconv.Quote(limit)+" is misconfigured on the server")
}

// setFields sends the rate-limit fields of v, a verdict of the call
// limits, as header metadata.
func (i *Interceptor) setFields(ctx context.Context, ss grpc.ServerStream, v *limitset.Verdict[inCall]) {
	md := make(metadata.MD, 6)
	i.calls.WriteFields(md, &grpcNames, limitset.FieldSet(i.fields), v)
	if len(md) == 0 {
		return
	}
	if ss != nil {
		_ = ss.SetHeader(md)
	} else {
		_ = grpc.SetHeader(ctx, md)
	}
}

// deny answers a call (or message) an enforced limit refused.
func (i *Interceptor) deny(ctx context.Context, method string, v *limitset.Verdict[inCall], message bool) error {
	d := Denial{Method: method, Decision: v.Dec, Never: v.Dec.RetryAfter == ratelimit.RetryNever, Message: message, Err: v.Err,
		concurrent: v.Concurrent()}
	d.Limit = v.Limit()
	if !d.Never && (!d.concurrent || v.Dec.RetryAfter > 0) {
		d.RetryAfter = time.Duration(limitset.RetryAfterSeconds(v.Dec)) * time.Second
	}
	return i.answer(ctx, d)
}

// denyListed answers a call (or message) a limit's DeniedKeys refused.
func (i *Interceptor) denyListed(ctx context.Context, method string, v *limitset.Verdict[inCall], message bool) error {
	d := Denial{Method: method, Decision: ratelimit.Decision{RetryAfter: ratelimit.RetryNever}, Never: true, Message: message, Err: ErrDenied}
	if v.Listed != nil {
		d.Limit = v.Listed.Name
	}
	return i.answer(ctx, d)
}

// answer returns the denied handler's error for d; a handler returning nil
// gets the default one, so that a denied call is never served by mistake.
func (i *Interceptor) answer(ctx context.Context, d Denial) error {
	if err := i.denied(ctx, d); err != nil {
		return err
	}
	return DeniedError(d)
}

// ctxError is the status of a call whose context ended before the limiters
// answered: Canceled or DeadlineExceeded.
func ctxError(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return status.FromContextError(err).Err()
	}
	return status.Error(codes.Canceled, "ratelimit: call canceled before the limiters answered")
}
