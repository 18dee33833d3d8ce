package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/grpclimit"
	"github.com/rlkit/ratelimit/internal/testkit/eventrec"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// gatedService holds each unary call until the gate opens (or the call's
// context ends), and each FullDuplexCall stream until the client closes
// its side; entered gets one value per call or stream that reached a
// handler.
type gatedService struct {
	testgrpc.UnimplementedTestServiceServer
	gate    chan struct{}
	entered chan struct{}
	panics  bool // UnaryCall panics once entered
}

func (s *gatedService) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	s.entered <- struct{}{}
	if s.panics {
		panic("boom")
	}
	select {
	case <-s.gate:
		return &testgrpc.SimpleResponse{}, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (s *gatedService) FullDuplexCall(stream testgrpc.TestService_FullDuplexCallServer) error {
	s.entered <- struct{}{}
	for {
		if _, err := stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		if err := stream.Send(&testgrpc.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
}

// gatedServer serves a gatedService behind ic on loopback; served gets one
// value per call or stream whose interceptor returned (its permits
// released). A panic in a handler is recovered outside ic and answered
// codes.Internal, as a recovery interceptor would.
type gatedServer struct {
	svc    *gatedService
	client testgrpc.TestServiceClient
	served chan struct{}
}

func newGatedServer(t *testing.T, ic *grpclimit.Interceptor, panics bool) *gatedServer {
	t.Helper()
	g := &gatedServer{
		svc:    &gatedService{gate: make(chan struct{}), entered: make(chan struct{}, 64), panics: panics},
		served: make(chan struct{}, 64),
	}
	outerUnary := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				err = status.Error(codes.Internal, "panic")
			}
			g.served <- struct{}{}
		}()
		return h(ctx, req)
	}
	outerStream := func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, h grpc.StreamHandler) error {
		defer func() { g.served <- struct{}{} }()
		return h(srv, ss)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(outerUnary, ic.Unary()), grpc.ChainStreamInterceptor(outerStream, ic.Stream()))
	testgrpc.RegisterTestServiceServer(srv, g.svc)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
		<-done
	})
	g.client = testgrpc.NewTestServiceClient(conn)
	return g
}

// unaryReply is the outcome of one unary call.
type unaryReply struct {
	err error
	md  metadata.MD
}

// startUnary makes a unary call with key in the background.
func (g *gatedServer) startUnary(ctx context.Context, key string) <-chan unaryReply {
	ch := make(chan unaryReply, 1)
	go func() {
		var md metadata.MD
		ctx := metadata.AppendToOutgoingContext(ctx, "x-api-key", key)
		_, err := g.client.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.Header(&md))
		ch <- unaryReply{err: err, md: md}
	}()
	return ch
}

func newConcurrency(t *testing.T, limit int, opts ...ratelimit.Option) *ratelimit.Concurrency {
	t.Helper()
	c, err := ratelimit.NewConcurrency(limit, opts...)
	require.NoError(t, err)
	return c
}

func newInterceptor(t *testing.T, limits []grpclimit.Limit, opts ...grpclimit.Option) *grpclimit.Interceptor {
	t.Helper()
	ic, err := grpclimit.New(limits, opts...)
	require.NoError(t, err)
	return ic
}

// quotaFailure returns the QuotaFailure and whether a RetryInfo is among
// the details of err's status.
func quotaFailure(err error) (*errdetails.QuotaFailure, bool) {
	var qf *errdetails.QuotaFailure
	retry := false
	for _, d := range status.Convert(err).Details() {
		switch d := d.(type) {
		case *errdetails.QuotaFailure:
			qf = d
		case *errdetails.RetryInfo:
			retry = true
		}
	}
	return qf, retry
}

// TestConcurrencyUnary: N slow unary calls in flight hold the N permits of
// their key; the next call ends with ResourceExhausted, the concurrency
// fields in its header metadata, a QuotaFailure and no RetryInfo; once
// they return a new call is admitted. A panicking handler and a client
// that goes away give their permits back.
func TestConcurrencyUnary(t *testing.T) {
	t.Parallel()
	const n = 3
	conc := newConcurrency(t, n)
	g := newGatedServer(t, newInterceptor(t, []grpclimit.Limit{
		{Name: "exports", Key: grpclimit.KeyByMetadata("x-api-key"), Concurrency: conc},
	}), false)
	ctx := context.Background()

	var held []<-chan unaryReply
	for range n {
		held = append(held, g.startUnary(ctx, "a"))
		<-g.svc.entered
	}
	assert.Equal(t, n, conc.InFlight("a"))

	over := <-g.startUnary(ctx, "a")
	<-g.served
	require.Equal(t, codes.ResourceExhausted, status.Code(over.err), "%v", over.err)
	assert.Equal(t, `concurrency limit "exports" exceeded: too many requests in flight, retry once one ends`, status.Convert(over.err).Message())
	qf, retry := quotaFailure(over.err)
	assert.False(t, retry, "no RetryInfo: nobody knows when a call in flight ends")
	require.NotNil(t, qf)
	assert.Equal(t, "exports", qf.Violations[0].QuotaId)
	assert.EqualValues(t, n, qf.Violations[0].QuotaValue)
	assert.Equal(t, []string{`"exports";q=3;qu="concurrent-requests"`}, over.md.Get("ratelimit-policy"))
	assert.Equal(t, []string{`"exports";r=0`}, over.md.Get("ratelimit"))
	assert.Empty(t, over.md.Get("retry-after"))
	assert.Empty(t, over.md.Get("x-ratelimit-reset"))
	assert.Equal(t, n, conc.InFlight("a"), "the refused call took no permit")

	close(g.svc.gate)
	var rs []string
	for _, ch := range held {
		r := <-ch
		<-g.served
		require.NoError(t, r.err)
		rs = append(rs, r.md.Get("ratelimit")...)
	}
	sort.Strings(rs)
	assert.Equal(t, []string{`"exports";r=0`, `"exports";r=1`, `"exports";r=2`}, rs)
	assert.Equal(t, 0, conc.InFlight("a"))

	// A client gone: the handler's context ends, it returns, the permit
	// comes back.
	cctx, cancel := context.WithCancel(ctx)
	g2 := newGatedServer(t, newInterceptor(t, []grpclimit.Limit{
		{Name: "exports", Key: grpclimit.KeyByMetadata("x-api-key"), Concurrency: conc},
	}), false)
	gone := g2.startUnary(cctx, "b")
	<-g2.svc.entered
	assert.Equal(t, 1, conc.InFlight("b"))
	cancel()
	assert.Equal(t, codes.Canceled, status.Code((<-gone).err))
	<-g2.served
	assert.Equal(t, 0, conc.InFlight("b"), "released once the handler of the client gone returned")

	// A panic: released before it reaches the recovery outside.
	g3 := newGatedServer(t, newInterceptor(t, []grpclimit.Limit{
		{Name: "exports", Key: grpclimit.KeyByMetadata("x-api-key"), Concurrency: conc},
	}), true)
	r := <-g3.startUnary(ctx, "c")
	<-g3.served
	assert.Equal(t, codes.Internal, status.Code(r.err))
	assert.Equal(t, 0, conc.InFlight("c"), "released on panic")
	assert.Equal(t, 0, conc.Len())
}

// TestConcurrencyStream: a stream holds its permit for its life, until its
// handler returns; a stream over the limit is refused at creation with
// ResourceExhausted and the fields in its header metadata.
func TestConcurrencyStream(t *testing.T) {
	t.Parallel()
	conc := newConcurrency(t, 1)
	var obs eventrec.Recorder
	g := newGatedServer(t, newInterceptor(t, []grpclimit.Limit{
		{Name: "streams", Key: grpclimit.KeyByMetadata("x-api-key"), Concurrency: conc},
	}, grpclimit.WithObserver(&obs)), false)
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "a")

	st, err := g.client.FullDuplexCall(ctx)
	require.NoError(t, err)
	<-g.svc.entered
	for range 3 { // messages go through: the stream, not each message, holds it
		require.NoError(t, st.Send(&testgrpc.StreamingOutputCallRequest{}))
		_, err := st.Recv()
		require.NoError(t, err)
		assert.Equal(t, 1, conc.InFlight("a"), "held while the stream lives")
	}
	hdr, err := st.Header()
	require.NoError(t, err)
	assert.Equal(t, []string{`"streams";q=1;qu="concurrent-requests"`}, hdr.Get("ratelimit-policy"))
	assert.Equal(t, []string{`"streams";r=0`}, hdr.Get("ratelimit"))

	over, err := g.client.FullDuplexCall(ctx)
	require.NoError(t, err)
	_, err = over.Recv()
	<-g.served
	require.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
	ohdr, herr := over.Header()
	require.NoError(t, herr)
	assert.Equal(t, []string{`"streams";r=0`}, ohdr.Get("ratelimit"))
	_, retry := quotaFailure(err)
	assert.False(t, retry)

	require.NoError(t, st.CloseSend())
	_, err = st.Recv()
	require.ErrorIs(t, err, io.EOF)
	<-g.served
	assert.Equal(t, 0, conc.InFlight("a"), "released when the stream ended")

	inFlight := 0
	count := map[ratelimit.Outcome]int{}
	for _, e := range obs.Take() {
		assert.Equal(t, "streams", e.Name)
		assert.Equal(t, ratelimit.ConcurrencyAlgorithm, e.Algorithm)
		assert.Equal(t, ratelimit.HomeKeyed, e.Home)
		count[e.Outcome]++
		switch e.Outcome {
		case ratelimit.OutcomeAllowed:
			inFlight += e.N
		case ratelimit.OutcomeReleased:
			inFlight -= e.N
		}
	}
	assert.Equal(t, map[ratelimit.Outcome]int{ratelimit.OutcomeAllowed: 1, ratelimit.OutcomeDenied: 1, ratelimit.OutcomeReleased: 1}, count)
	assert.Equal(t, 0, inFlight)
}

// TestConcurrencyRefundsRateLimits: a call the concurrency limit refuses
// is refunded in the rate limit that admitted it; a call the rate limit
// refuses takes no permit.
func TestConcurrencyRefundsRateLimits(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(time.Unix(1767225600, 0))
	rate, err := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 2), ratelimit.WithClock(mock))
	require.NoError(t, err)
	conc := newConcurrency(t, 1)
	g := newGatedServer(t, newInterceptor(t, []grpclimit.Limit{
		{Name: "conc", Key: grpclimit.KeyByMetadata("x-api-key"), Concurrency: conc},
		{Name: "rate", Key: grpclimit.KeyByMetadata("x-api-key"), Limiter: rate},
	}, grpclimit.WithClock(mock)), false)
	ctx := context.Background()
	peek := func() int {
		d, err := rate.Peek(ctx, "a", 0)
		require.NoError(t, err)
		return d.Remaining
	}

	first := g.startUnary(ctx, "a")
	<-g.svc.entered
	require.Equal(t, 1, peek())
	over := <-g.startUnary(ctx, "a")
	<-g.served
	require.Equal(t, codes.ResourceExhausted, status.Code(over.err))
	assert.Equal(t, []string{`"conc";r=0`}, over.md.Get("ratelimit"))
	assert.Equal(t, 1, peek(), "refunded")

	close(g.svc.gate)
	require.NoError(t, (<-first).err)
	<-g.served
	require.NoError(t, (<-g.startUnary(ctx, "a")).err)
	<-g.served
	require.Equal(t, 0, peek())
	r := <-g.startUnary(ctx, "a")
	<-g.served
	require.Equal(t, codes.ResourceExhausted, status.Code(r.err))
	assert.Equal(t, []string{`"rate";q=2;w=7200`}, r.md.Get("ratelimit-policy"))
	_, retry := quotaFailure(r.err)
	assert.True(t, retry, "a rate limit's denial has its RetryInfo")
	assert.Equal(t, 0, conc.InFlight("a"))
}

// TestConcurrencyConfig: Messages and Window do not apply to a concurrency
// limit, and a Limit has one of Limiter and Concurrency.
func TestConcurrencyConfig(t *testing.T) {
	t.Parallel()
	conc := newConcurrency(t, 1)
	rate, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(1, time.Minute))
	require.NoError(t, err)
	key := grpclimit.KeyByMethod()
	for _, c := range []struct {
		l    grpclimit.Limit
		want string
	}{
		{grpclimit.Limit{Name: "x", Key: key, Concurrency: conc, Messages: true}, `grpclimit.Limit.Messages of limit "x" must be false for a concurrency limit`},
		{grpclimit.Limit{Name: "x", Key: key, Concurrency: conc, Window: time.Second}, `grpclimit.Limit.Window of limit "x" must be zero for a concurrency limit`},
		{grpclimit.Limit{Name: "x", Key: key, Concurrency: conc, Limiter: rate}, `grpclimit.Limit of limit "x" must have one of Limiter and Concurrency, got both`},
	} {
		_, err := grpclimit.New([]grpclimit.Limit{c.l})
		require.ErrorIs(t, err, ratelimit.ErrInvalidConfig, c.want)
		assert.Contains(t, err.Error(), c.want)
	}
	// A limiter observed on its own is refused beside WithObserver.
	own := newConcurrency(t, 1, ratelimit.WithObserver(ratelimit.ObserverFunc(func(context.Context, ratelimit.Event) {})))
	_, err = grpclimit.New([]grpclimit.Limit{{Name: "x", Key: key, Concurrency: own}}, grpclimit.WithObserver(&eventrec.Recorder{}))
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
}
