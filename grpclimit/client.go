package grpclimit

import (
	"context"
	"errors"
	"io"
	"math"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/adapter"
	"github.com/rlkit/ratelimit/internal/hints"
	"github.com/rlkit/ratelimit/internal/pacer"
	"github.com/rlkit/ratelimit/internal/timesrc"
	"github.com/rlkit/ratelimit/internal/typednil"
)

// Client holds the client interceptors of a gRPC client of rate-limited
// services: [Client.Unary] and [Client.Stream], installed with
// grpc.WithUnaryInterceptor and grpc.WithStreamInterceptor (or their
// chained forms). Each call first waits for the client's limiter
// (honouring its context), then for what the servers' answers asked of its
// scope ([WithPauseScope]: the target by default), then goes out. It
// follows the rules of httplimit's Transport, where gRPC carries the
// information:
//
//   - A unary call's response metadata (header, else trailer) that reports
//     a quota, in any of the dialects of the HTTP fields (ratelimit
//     `"name";r=0;t=3`, its draft-07 and draft-06 forms, x-ratelimit-*,
//     as this package's server interceptors send them), bounds the scope's
//     calls: at most the remaining count before the reset, less the calls
//     in flight; a spent quota holds the scope until its reset, so that
//     the server need not refuse the next call; each reset gives back the
//     stated limit less the remaining count reported (what a fixed window
//     or a token bucket has restored by then), whatever order the answers
//     come back in.
//   - codes.ResourceExhausted with an errdetails.RetryInfo pauses the
//     scope for the longest valid RetryDelay, capped ([WithMaxPause]), and
//     the call is retried if the caller marked it safe ([MarkRetrySafe],
//     [WithRetries]). A RetryInfo naming no usable delay (unset, zero,
//     negative, out of range) backs the scope off instead, with jitter
//     ([WithBackoff]): the client never comes back at once.
//   - A ResourceExhausted without RetryInfo (a cost that can never fit, a
//     message too large) is neither paused for nor retried; only its
//     metadata's quotas count.
//   - A failed call whose trailer (or header) carries gRPC's retry
//     pushback, grpc-retry-pushback-ms (gRFC A6), is a refusal like one
//     with a RetryInfo, whatever its code: a value of 0 or more pauses
//     the scope that long (the longer of the two when both are given; 0
//     backs off) and the call may be retried; a negative or unreadable
//     one asks not to retry: the call is not, whatever its RetryInfo.
//   - When a pause ends (a RetryInfo's, a backoff, a reset that was
//     capped), one call of the scope goes out alone, a probe: the others
//     wait for its answer, then go by what it says. A probe without an
//     answer (an error that may not come from the server, its context
//     ended) hands on to the next call at once; one that takes longer
//     than the pause it ended (at least the first backoff delay) too.
//   - With [WithPolicyShaping], advertised policies (ratelimit-policy: q
//     per w) space the scope's unary calls at least w/q apart.
//
// Streams wait like calls, and a stream ended by ResourceExhausted with a
// RetryInfo pauses the scope as above; a stream's metadata is not read. A
// stream is not kept in flight (it may run for long): sent as a probe, it
// hands the probe on to the next call once it is created.
//
// With [WithThrottle], a call its throttle refuses is not sent either.
//
// A call the interceptors do not send fails with a gRPC status error
// whose code says why (Canceled, DeadlineExceeded, ResourceExhausted,
// InvalidArgument for [ErrNoKey], Unavailable for [ErrThrottled]) and
// which matches its cause with errors.Is: context.Canceled, context.DeadlineExceeded,
// [ratelimit.ErrDeadline] (the limiter's wait would outlast the deadline),
// [ErrPauseDeadline] (a pause would), [ratelimit.ErrExceedsLimit], ... A
// call whose context is done is never sent.
//
// Create one with [NewClient] or [NewKeyedClient]; the zero value is not
// usable. A Client is safe for concurrent use, and one Client may serve
// several connections: pauses belong to each connection's target.
type Client struct {
	wait     func(ctx context.Context, key string, n int) error // nil: no limiter
	key      KeyFunc                                            // nil: one key, ""
	common                                                      // WithClock, WithCost
	ts       timesrc.Source
	retries  int
	maxRetry time.Duration
	pacing   pacer.Config // from the options
	scope    PauseScope
	onPause  func(ctx context.Context, method string, d time.Duration)
	pacer    *pacer.Pacer        // what the servers' answers allow, per scope
	throttle *ratelimit.Throttle // WithThrottle; nil: none
	scopes   sync.Map            // [2]string{target, method} -> its PauseByMethod scope
	nscopes  atomic.Int64        // scopes stored, or tried to be
}

type retrySafeKey struct{}

// MarkRetrySafe returns a copy of ctx marking the calls made with it as
// safe to send more than once, so that a [Client] retries them after a
// ResourceExhausted answer ([WithRetries]): for instance an idempotent
// read, or a write the server deduplicates. gRPC methods say nothing
// about idempotency, so no call is retried unless marked.
func MarkRetrySafe(ctx context.Context) context.Context {
	return context.WithValue(ctx, retrySafeKey{}, true)
}

func retrySafe(ctx context.Context) bool {
	safe, _ := ctx.Value(retrySafeKey{}).(bool)
	return safe
}

// NewClient returns client interceptors that wait for lim before each
// call; a nil lim waits for nothing but the pauses servers ask for (a typed
// nil, such as a nil *ratelimit.TokenBucket, is a mistake and an error). The
// options that apply are [WithCost], [WithClock], [WithRetries],
// [WithMaxRetryWait], [WithMaxPause], [WithBackoff], [WithPolicyShaping],
// [WithPauseScope] (not [PauseByKey]), [WithMaxKeys], [WithPauseHook] and
// [WithThrottle]; an invalid one is an error wrapping
// [ratelimit.ErrInvalidConfig].
//
// The pacing of a scope is held while it has anything live, up to
// [WithMaxKeys] scopes (65,536 by default); at the cap a call of a new
// scope fails with ResourceExhausted, matching [ratelimit.ErrTooManyKeys],
// rather than a live scope being forgotten.
func NewClient(lim ratelimit.Limiter, opts ...ClientOption) (*Client, error) {
	if lim != nil && typednil.Is(lim) {
		return nil, configError("grpclimit.NewClient: the limiter is a nil %T; pass nil for no limiter", lim)
	}
	var wait func(context.Context, string, int) error
	if lim != nil {
		wait = func(ctx context.Context, _ string, n int) error { return lim.WaitN(ctx, n) }
	}
	return newClient("NewClient", wait, nil, opts)
}

// NewKeyedClient is [NewClient] with a keyed limiter: each call waits in
// lim under the key that key picks from the call's context and full
// method name (such as [KeyByMethod] or [KeyByService]), so that one
// client respects a different quota per method or service. Key functions
// that read incoming metadata find none in a client's context, unless the
// client serves a call it received. With [WithPauseScope]([PauseByKey]),
// pauses belong to the key too.
//
// A call for which key reports no key (ok == false) is not sent: it fails
// with [ErrNoKey].
//
// The options that apply are [WithCost], [WithClock], [WithRetries],
// [WithMaxRetryWait], [WithMaxPause], [WithBackoff], [WithPolicyShaping],
// [WithPauseScope], [WithMaxKeys], [WithPauseHook] and [WithThrottle]. It
// returns an error wrapping [ratelimit.ErrInvalidConfig] when lim or key
// is nil, or for an invalid option.
func NewKeyedClient(lim ratelimit.KeyedLimiter, key KeyFunc, opts ...ClientOption) (*Client, error) {
	if lim == nil || typednil.Is(lim) {
		return nil, configError("grpclimit.NewKeyedClient: the limiter must not be nil, got %T", lim)
	}
	if isInvalid(key) {
		return nil, configError("grpclimit.NewKeyedClient: the key function must not be nil or a key helper given nothing to key by (such as KeyByUser(nil))")
	}
	wait := func(ctx context.Context, k string, n int) error { return lim.WaitN(ctx, k, n) }
	return newClient("NewKeyedClient", wait, key, opts)
}

func newClient(name string, wait func(context.Context, string, int) error, key KeyFunc, opts []ClientOption) (*Client, error) {
	c := &Client{wait: wait, key: key, maxRetry: defaultMaxRetryWait,
		pacing: pacer.Config{MaxPause: defaultMaxPause, First: defaultBackoffFirst, Cap: defaultBackoffMax,
			MaxKeys: defaultMaxKeys, Full: ratelimit.ErrTooManyKeys}}
	if err := adapter.Apply(opts, func(o ClientOption) error { return o.applyClient(c) }); err != nil {
		return nil, err
	}
	if c.scope == PauseByKey && key == nil {
		return nil, configError("grpclimit.WithPauseScope(PauseByKey) applies to NewKeyedClient, not %s", name)
	}
	c.ts = timesrc.New(c.clock)
	c.pacer = pacer.New(c.pacing)
	return c, nil
}

// PausedFor returns how long, from now, a call of method to target (the
// string a connection was created with, as grpc.ClientConn.Target
// returns it) under key (the limiter key [NewKeyedClient]'s [KeyFunc]
// gives the call; "" for [NewClient]) is paused at a server's request
// (while a probe is out, the longest its answer is waited for); 0 if it
// is not. The client's scope ([WithPauseScope]) says which of them count:
// target under [PauseByTarget], target and method under [PauseByMethod],
// key under [PauseByKey]; the others are ignored.
func (c *Client) PausedFor(target, method, key string) time.Duration {
	switch c.scope {
	case PauseByMethod:
		return c.pausedFor(methodScope(target, method))
	case PauseByKey:
		return c.pausedFor(key)
	}
	return c.pausedFor(target)
}

func (c *Client) pausedFor(scope string) time.Duration {
	return c.pacer.PausedFor(scope, c.ts.Time())
}

// methodScope is the pause key of method on target under PauseByMethod.
func methodScope(target, method string) string { return target + "\x00" + method }

// maxScopes bounds the PauseByMethod scopes a client keeps built.
const maxScopes = 4096

// scopeOf returns methodScope(target, method), built once per pair (up to
// maxScopes pairs): a client's targets and methods are few, and every call
// needs its scope.
func (c *Client) scopeOf(target, method string) string {
	k := [2]string{target, method}
	if v, ok := c.scopes.Load(k); ok {
		return v.(string)
	}
	s := methodScope(target, method)
	if c.nscopes.Add(1) <= maxScopes {
		c.scopes.Store(k, s)
	}
	return s
}

// outCall is one call going through the interceptors.
type outCall struct {
	ctx    context.Context
	target string
	method string
	key    string // the limiter's key; "" without a KeyFunc
	n      int    // the cost; <= 0: the limiter is not asked
	scope  string // the pause key, once built
	built  bool   // scope is built
}

// start reads what a call needs from its context: its key and cost. req is
// the unary call's request, nil for a stream.
func (c *Client) start(ctx context.Context, cc *grpc.ClientConn, method string, req any) (outCall, error) {
	cl := outCall{ctx: ctx, method: method, n: 1}
	if cc != nil {
		cl.target = cc.Target()
	}
	if c.key != nil {
		k, ok := c.key(ctx, method)
		if !ok {
			return cl, notSent(ErrNoKey)
		}
		cl.key = k
	}
	if c.cost != nil {
		cl.n = c.cost(ctx, method, req)
	}
	return cl, nil
}

// scopeKey returns the call's pause key, building it once.
func (c *Client) scopeKey(cl *outCall) string {
	if !cl.built {
		switch c.scope {
		case PauseByMethod:
			cl.scope = c.scopeOf(cl.target, cl.method)
		case PauseByKey:
			cl.scope = cl.key
		default:
			cl.scope = cl.target
		}
		cl.built = true
	}
	return cl.scope
}

// ready waits for what the servers asked of the call's scope, then for the
// limiter, then reserves the call's place in the scope's pacing (waiting
// again if needed). It returns a status error (notSent) when the call must
// not be sent, including when its context is done even though the limiter
// admitted it.
func (c *Client) ready(cl *outCall) (pacer.Ticket, error) {
	if c.wait != nil && cl.n > 0 {
		if err := c.pacer.Wait(cl.ctx, &c.ts, c.scopeKey(cl), ErrPauseDeadline); err != nil {
			return pacer.Ticket{}, notSent(err)
		}
		if err := c.wait(cl.ctx, cl.key, cl.n); err != nil {
			return pacer.Ticket{}, notSent(err)
		}
	}
	tk, err := c.pacer.Acquire(cl.ctx, &c.ts, c.scopeKey(cl), ErrPauseDeadline)
	if err != nil {
		return pacer.Ticket{}, notSent(err)
	}
	return tk, nil
}

// answer reads what a call's outcome says about the server's limits: the
// rate-limit fields of its response metadata (header, else trailer), and,
// for a ResourceExhausted error carrying an errdetails.RetryInfo, a
// refusal whose pause is the longest valid RetryDelay (over the metadata's
// retry-after). A ResourceExhausted without RetryInfo is not a refusal to
// come back from: gRPC also uses the code for limits that waiting does not
// lift (a message too large, a cost that can never fit). It reports false
// when the call may not have been answered by the server at all (Canceled,
// DeadlineExceeded, Unavailable without metadata).
func (c *Client) answer(h *hints.Hints, now time.Time, err error, header, trailer metadata.MD) (pacer.Answer, bool) {
	if len(header) > 0 || len(trailer) > 0 {
		*h = hints.Parse(func(name string) []string {
			k := mdName(name)
			if v := header[k]; len(v) > 0 {
				return v
			}
			return trailer[k]
		}, now)
	}
	a := pacer.Answer{Hints: h}
	d, hasInfo, valid := retryInfo(err)
	if hasInfo {
		a.Refused = true
		if valid {
			h.RetryAfter, h.HasRetryAfter = d, true
		}
	}
	if err != nil {
		if p, ok := pushback(header, trailer); ok && p >= 0 {
			a.Refused = true
			if !valid || p > h.RetryAfter {
				h.RetryAfter, h.HasRetryAfter = p, true
			}
		}
	}
	switch status.Code(err) {
	case codes.Canceled, codes.DeadlineExceeded, codes.Unavailable:
		// The call may never have reached the server, or was cut short.
		return a, len(header) > 0 || len(trailer) > 0
	}
	return a, true
}

// pushbackKey is gRPC's retry pushback (gRFC A6), the trailer a server's
// shed sends and the client honours: the milliseconds to wait before
// retrying, or a negative (or unreadable) value asking not to retry.
const pushbackKey = "grpc-retry-pushback-ms"

// pushback reads the pushback of a call's response metadata (trailer,
// else header): ok when there is one, d < 0 when it asks not to retry.
// A huge value saturates; the pacer caps it.
func pushback(header, trailer metadata.MD) (d time.Duration, ok bool) {
	v := trailer[pushbackKey]
	if len(v) == 0 {
		v = header[pushbackKey]
	}
	if len(v) == 0 {
		return 0, false
	}
	// Out of range, ParseInt returns its bound with ErrRange: saturated.
	ms, err := strconv.ParseInt(strings.TrimSpace(v[0]), 10, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) || ms < 0 {
		return -1, true
	}
	return time.Duration(min(ms, int64(math.MaxInt64/time.Millisecond))) * time.Millisecond, true
}

// mdNames maps the field names hints.Parse asks for to gRPC's lower-case
// metadata keys, so that reading them allocates nothing.
var mdNames = func() map[string]string {
	m := make(map[string]string, len(hints.Fields))
	for _, f := range hints.Fields {
		m[f] = strings.ToLower(f)
	}
	return m
}()

func mdName(name string) string {
	if k, ok := mdNames[name]; ok {
		return k
	}
	return strings.ToLower(name)
}

// obey records the outcome of a call sent with tk, and returns the pause
// it imposed on the call's scope (reported to the pause hook) and whether
// the call may be retried: refused with a RetryInfo or a pushback of 0 or
// more, and no negative pushback.
func (c *Client) obey(cl *outCall, tk pacer.Ticket, err error, header, trailer metadata.MD) (time.Duration, bool) {
	if c.throttle != nil {
		c.record(cl, err)
	}
	var h hints.Hints
	now := c.ts.Time()
	a, answered := c.answer(&h, now, err, header, trailer)
	if !answered {
		c.pacer.Lost(tk)
		return 0, false
	}
	out := c.pacer.Done(tk, now, a)
	c.reportPause(cl, out)
	if !a.Refused {
		return out.Pause, false
	}
	if p, ok := pushback(header, trailer); ok && p < 0 {
		return out.Pause, false // the server asks not to retry
	}
	return out.Pause, a.Refused
}

// record tells the throttle the outcome of a call it let go: a call
// cancelled says nothing of the server.
func (c *Client) record(cl *outCall, err error) {
	if status.Code(err) == codes.Canceled || errors.Is(cl.ctx.Err(), context.Canceled) {
		return
	}
	c.throttle.Record(c.scopeKey(cl), accepted(err))
}

// accepted reports whether a call's outcome served it, for a throttle.
func accepted(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.ResourceExhausted, codes.DeadlineExceeded, codes.Internal, codes.Unknown:
		return false
	}
	return true
}

// reportPause tells the pause hook of the pause an answer to cl imposed.
func (c *Client) reportPause(cl *outCall, out pacer.Outcome) {
	if out.Pause > 0 && c.onPause != nil {
		c.onPause(cl.ctx, cl.method, out.Pause)
	}
}

// Unary returns the unary client interceptor: it waits for the limiter and
// any pause before sending a call, pauses the call's scope when the server
// answers ResourceExhausted with a RetryInfo, and retries calls marked
// with [MarkRetrySafe] up to [WithRetries] times, each retry waiting for
// the pause and the limiter again. A call is not retried when the pause is
// longer than [WithMaxRetryWait], or when the retry cannot be sent (its
// wait, for the pause or the limiter, would outlast the context's
// deadline, or the context ends meanwhile): the server's answer is
// returned. Install it with
// grpc.WithChainUnaryInterceptor(c.Unary()).
func (c *Client) Unary() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		cl, err := c.start(ctx, cc, method, req)
		if err != nil {
			return err
		}
		if c.throttle != nil && !c.throttle.Attempt(ctx, c.scopeKey(&cl)).Allowed {
			return notSent(ErrThrottled)
		}
		m := captures.Get().(*mdCapture)
		defer m.release()
		callOpts := m.opts[:]
		if len(opts) > 0 {
			callOpts = append(opts[:len(opts):len(opts)], callOpts...)
		}
		var refusal error // the server's answer the retry in preparation follows
		for attempt := 0; ; attempt++ {
			tk, err := c.ready(&cl)
			if err != nil {
				if refusal != nil {
					// The retry cannot be sent (its wait would outlast the
					// deadline, the context ended, the limiter refused):
					// the caller gets the server's answer.
					return refusal
				}
				return err
			}
			m.header, m.trailer = nil, nil
			err = invoker(ctx, method, req, reply, cc, callOpts...)
			d, refused := c.obey(&cl, tk, err, m.header, m.trailer)
			if err == nil || !refused || attempt >= c.retries || d > c.maxRetry || !retrySafe(ctx) || timesrc.Outlasts(ctx, d) ||
				c.throttle != nil && !c.throttle.Retry(ctx, c.scopeKey(&cl)).Allowed {
				return err
			}
			refusal = err
		}
	}
}

// mdCapture receives a unary call's response metadata. It is pooled with
// its two call options, so that asking for the metadata allocates nothing
// of the interceptor's own.
type mdCapture struct {
	header, trailer metadata.MD
	opts            [2]grpc.CallOption
}

var captures = sync.Pool{New: func() any {
	m := &mdCapture{}
	m.opts = [2]grpc.CallOption{grpc.Header(&m.header), grpc.Trailer(&m.trailer)}
	return m
}}

func (m *mdCapture) release() {
	m.header, m.trailer = nil, nil
	captures.Put(m)
}

// Stream returns the stream client interceptor: it waits for the limiter
// and any pause before creating a stream, and pauses the stream's scope
// when the server ends it with ResourceExhausted and a RetryInfo (once per
// stream), as the stream reports it: grpc-go returns a stream's status
// from RecvMsg (CloseAndRecv, Recv), and from NewStream, Header, SendMsg
// or CloseSend only in some cases; every one of them is watched. Streams
// are never retried. Install it with
// grpc.WithChainStreamInterceptor(c.Stream()).
func (c *Client) Stream() grpc.StreamClientInterceptor {
	return func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		cl, err := c.start(ctx, cc, method, nil)
		if err != nil {
			return nil, err
		}
		if c.throttle != nil && !c.throttle.Attempt(ctx, c.scopeKey(&cl)).Allowed {
			return nil, notSent(ErrThrottled)
		}
		tk, err := c.ready(&cl)
		if err != nil {
			return nil, err
		}
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			c.obey(&cl, tk, err, nil, nil)
			return nil, err
		}
		// A stream may run for long, or never be read to its end: it is
		// not kept in flight. Its end is read for a refusal only.
		c.pacer.Lost(tk)
		s := &clientStream{ClientStream: cs, c: c, cl: cl}
		s.recorded.Store(c.throttle == nil)
		return s, nil
	}
}

// clientStream watches a stream's errors for a server's pause.
type clientStream struct {
	grpc.ClientStream
	c      *Client
	cl     outCall
	obeyed atomic.Bool // the stream's pause has been taken: a stream ends once
	// recorded: the stream's outcome has been told to the throttle (or
	// there is none).
	recorded atomic.Bool
}

func (s *clientStream) seen(err error) {
	if err != nil && err != io.EOF && !s.recorded.Load() && s.recorded.CompareAndSwap(false, true) {
		cl := s.cl
		s.c.record(&cl, err)
	}
	if err == nil || err == io.EOF || status.Code(err) != codes.ResourceExhausted {
		return
	}
	if s.obeyed.CompareAndSwap(false, true) {
		cl := s.cl // scopeKey writes; the stream's goroutines may race here otherwise
		var h hints.Hints
		now := s.c.ts.Time()
		a, _ := s.c.answer(&h, now, err, nil, nil)
		s.c.reportPause(&cl, s.c.pacer.Note(s.c.scopeKey(&cl), now, a))
	}
}

func (s *clientStream) Header() (metadata.MD, error) {
	md, err := s.ClientStream.Header()
	s.seen(err)
	return md, err
}

func (s *clientStream) CloseSend() error {
	err := s.ClientStream.CloseSend()
	s.seen(err)
	return err
}

func (s *clientStream) SendMsg(m any) error {
	err := s.ClientStream.SendMsg(m)
	s.seen(err)
	return err
}

func (s *clientStream) RecvMsg(m any) error {
	err := s.ClientStream.RecvMsg(m)
	if err == io.EOF && !s.recorded.Load() && s.recorded.CompareAndSwap(false, true) {
		// The stream ended well (io.EOF from SendMsg only says that it
		// ended: its status comes from RecvMsg).
		cl := s.cl
		s.c.record(&cl, nil)
	}
	s.seen(err)
	return err
}

// retryInfo reads the errdetails.RetryInfo of a ResourceExhausted error:
// whether it has one, and the longest valid RetryDelay among them (valid:
// set, in range, not negative). Any other error has none. A huge delay
// saturates; the pacer caps it.
func retryInfo(err error) (d time.Duration, has, valid bool) {
	if err == nil || status.Code(err) != codes.ResourceExhausted {
		return 0, false, false
	}
	st, _ := status.FromError(err)
	for _, det := range st.Details() {
		ri, ok := det.(*errdetails.RetryInfo)
		if !ok {
			continue
		}
		has = true
		rd := ri.GetRetryDelay()
		if rd == nil || rd.CheckValid() != nil {
			continue
		}
		if dur := rd.AsDuration(); dur >= 0 {
			d = max(d, dur)
			valid = true
		}
	}
	return d, has, valid
}
