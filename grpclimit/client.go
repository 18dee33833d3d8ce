package grpclimit

import (
	"context"
	"io"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/pausemap"
	"github.com/rlkit/ratelimit/internal/timesrc"
	"github.com/rlkit/ratelimit/internal/typednil"
)

// Client holds the client interceptors of a gRPC client of rate-limited
// services: [Client.Unary] and [Client.Stream], installed with
// grpc.WithUnaryInterceptor and grpc.WithStreamInterceptor (or their
// chained forms). Each call first waits for the client's limiter
// (honouring its context), then goes out. When a server answers
// codes.ResourceExhausted with an errdetails.RetryInfo, the client pauses
// the calls of that answer's scope ([WithPauseScope]: the target by
// default) for the RetryDelay, capped ([WithMaxPause]), and retries the
// call if the caller marked it safe ([MarkRetrySafe], [WithRetries]). A
// ResourceExhausted answer without RetryInfo (a server saying the call can
// never fit) is neither paused for nor retried.
//
// A call the interceptors do not send fails with a gRPC status error
// whose code says why (Canceled, DeadlineExceeded, ResourceExhausted,
// InvalidArgument for [ErrNoKey]) and which matches its cause with
// errors.Is: context.Canceled, context.DeadlineExceeded,
// [ratelimit.ErrDeadline] (the limiter's wait would outlast the deadline),
// [ErrPauseDeadline] (a pause would), [ratelimit.ErrExceedsLimit], ... A
// call whose context is done is never sent.
//
// Create one with [NewClient] or [NewKeyedClient]; the zero value is not
// usable. A Client is safe for concurrent use, and one Client may serve
// several connections: pauses belong to each connection's target.
type Client struct {
	wait     func(ctx context.Context, key string, n int) error    // nil: no limiter
	key      KeyFunc                                               // nil: one key, ""
	cost     func(ctx context.Context, method string, req any) int // nil: 1
	clock    ratelimit.Clock                                       // nil: the real clock
	ts       timesrc.Source
	retries  int
	maxRetry time.Duration
	maxPause time.Duration
	scope    PauseScope
	onPause  func(ctx context.Context, method string, d time.Duration)
	pauses   pausemap.Map // no call of a scope is sent before its time
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
// [WithMaxRetryWait], [WithMaxPause], [WithPauseScope] (not
// [PauseByKey]) and [WithPauseHook]; any other, or an invalid one, is an
// error wrapping [ratelimit.ErrInvalidConfig].
func NewClient(lim ratelimit.Limiter, opts ...Option) (*Client, error) {
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
// It returns an error wrapping [ratelimit.ErrInvalidConfig] when lim or
// key is nil, or for an invalid option or one that does not apply (see
// [NewClient]).
func NewKeyedClient(lim ratelimit.KeyedLimiter, key KeyFunc, opts ...Option) (*Client, error) {
	if lim == nil || typednil.Is(lim) {
		return nil, configError("grpclimit.NewKeyedClient: the limiter must not be nil, got %T", lim)
	}
	if isInvalid(key) {
		return nil, configError("grpclimit.NewKeyedClient: the key function must not be nil or a key helper given nothing to key by (such as KeyByUser(nil))")
	}
	wait := func(ctx context.Context, k string, n int) error { return lim.WaitN(ctx, k, n) }
	return newClient("NewKeyedClient", wait, key, opts)
}

func newClient(name string, wait func(context.Context, string, int) error, key KeyFunc, opts []Option) (*Client, error) {
	c := &Client{wait: wait, key: key, maxRetry: time.Minute, maxPause: time.Hour}
	if err := applyOptions(&config{to: forClient, c: c}, opts); err != nil {
		return nil, err
	}
	if c.scope == PauseByKey && key == nil {
		return nil, configError("grpclimit.WithPauseScope(PauseByKey) applies to NewKeyedClient, not %s", name)
	}
	c.ts = timesrc.New(c.clock)
	return c, nil
}

// PausedFor returns how long, from now, calls of method to target (the
// string a connection was created with, as grpc.ClientConn.Target
// returns it) are paused at a server's request; 0 if they are not. Under
// [PauseByTarget] method is ignored. A client paused [PauseByKey] reports
// its pauses through [Client.PausedForKey]; PausedFor returns 0 for it.
func (c *Client) PausedFor(target, method string) time.Duration {
	switch c.scope {
	case PauseByTarget:
		return c.pausedFor(target)
	case PauseByMethod:
		return c.pausedFor(methodScope(target, method))
	}
	return 0
}

// PausedForKey returns how long, from now, calls of key are paused at a
// server's request, for a client paused [PauseByKey]; 0 if they are not,
// and for every other client.
func (c *Client) PausedForKey(key string) time.Duration {
	if c.scope != PauseByKey {
		return 0
	}
	return c.pausedFor(key)
}

func (c *Client) pausedFor(scope string) time.Duration {
	return pausemap.Left(c.pauses.Until(scope), c.ts.Time())
}

// methodScope is the pause key of method on target under PauseByMethod.
func methodScope(target, method string) string { return target + "\x00" + method }

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
			cl.scope = methodScope(cl.target, cl.method)
		case PauseByKey:
			cl.scope = cl.key
		default:
			cl.scope = cl.target
		}
		cl.built = true
	}
	return cl.scope
}

// ready waits for any pause of the call's scope, then for the limiter,
// then for any pause that began meanwhile. It returns a status error
// (notSent) when the call must not be sent, including when its context is
// done even though the limiter admitted it.
func (c *Client) ready(cl *outCall) error {
	if err := c.waitPause(cl); err != nil {
		return notSent(err)
	}
	if c.wait != nil && cl.n > 0 {
		if err := c.wait(cl.ctx, cl.key, cl.n); err != nil {
			return notSent(err)
		}
		if err := c.waitPause(cl); err != nil {
			return notSent(err)
		}
	}
	return nil
}

func (c *Client) waitPause(cl *outCall) error {
	if c.pauses.Idle() {
		return cl.ctx.Err()
	}
	return c.pauses.Wait(cl.ctx, &c.ts, c.scopeKey(cl), ErrPauseDeadline)
}

// obey pauses the call's scope when err is a ResourceExhausted answer with
// a RetryInfo, and returns the pause (capped) and whether there was one.
func (c *Client) obey(cl *outCall, err error) (time.Duration, bool) {
	d, ok := serverPause(err)
	if !ok {
		return 0, false
	}
	d = min(d, c.maxPause)
	c.pauses.Pause(c.scopeKey(cl), c.ts.Time(), d)
	if c.onPause != nil {
		c.onPause(cl.ctx, cl.method, d)
	}
	return d, true
}

// Unary returns the unary client interceptor: it waits for the limiter and
// any pause before sending a call, pauses the call's scope when the server
// answers ResourceExhausted with a RetryInfo, and retries calls marked
// with [MarkRetrySafe] up to [WithRetries] times, each retry waiting for
// the pause and the limiter again. A call is not retried when the pause is
// longer than [WithMaxRetryWait] or outlasts its context's deadline: the
// server's answer is returned. Install it with
// grpc.WithChainUnaryInterceptor(c.Unary()).
func (c *Client) Unary() grpc.UnaryClientInterceptor {
	return func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		cl, err := c.start(ctx, cc, method, req)
		if err != nil {
			return err
		}
		for attempt := 0; ; attempt++ {
			if err := c.ready(&cl); err != nil {
				return err
			}
			err := invoker(ctx, method, req, reply, cc, opts...)
			if err == nil {
				return nil
			}
			d, ok := c.obey(&cl, err)
			if !ok || attempt >= c.retries || d > c.maxRetry || !retrySafe(ctx) || timesrc.Outlasts(ctx, d) {
				return err
			}
		}
	}
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
		if err := c.ready(&cl); err != nil {
			return nil, err
		}
		cs, err := streamer(ctx, desc, cc, method, opts...)
		if err != nil {
			c.obey(&cl, err)
			return nil, err
		}
		return &clientStream{ClientStream: cs, c: c, cl: cl}, nil
	}
}

// clientStream watches a stream's errors for a server's pause.
type clientStream struct {
	grpc.ClientStream
	c      *Client
	cl     outCall
	obeyed atomic.Bool // the stream's pause has been taken: a stream ends once
}

func (s *clientStream) seen(err error) {
	if err == nil || err == io.EOF || status.Code(err) != codes.ResourceExhausted {
		return
	}
	if s.obeyed.CompareAndSwap(false, true) {
		cl := s.cl // scopeKey writes; the stream's goroutines may race here otherwise
		s.c.obey(&cl, err)
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
	s.seen(err)
	return err
}

// serverPause returns the pause a call's error asks for: the longest
// valid RetryDelay among the RetryInfo details of a ResourceExhausted
// status. It reports false for any other error, and for a
// ResourceExhausted without a usable RetryInfo: none, a nil, negative or
// out-of-range (invalid) RetryDelay. A huge delay saturates; callers cap
// it.
func serverPause(err error) (time.Duration, bool) {
	if status.Code(err) != codes.ResourceExhausted {
		return 0, false
	}
	st, _ := status.FromError(err)
	var best time.Duration
	found := false
	for _, d := range st.Details() {
		ri, ok := d.(*errdetails.RetryInfo)
		if !ok {
			continue
		}
		rd := ri.GetRetryDelay()
		if rd == nil || rd.CheckValid() != nil {
			continue
		}
		if dur := rd.AsDuration(); dur >= 0 {
			best = max(best, dur)
			found = true
		}
	}
	return best, found
}
