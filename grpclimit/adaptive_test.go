package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"strconv"
	"testing"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/grpclimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// fixedAdaptive is an Adaptive whose limit is pinned at limit (Min = Max),
// with the default Reserve of 0.2.
func fixedAdaptive(t *testing.T, limit int, opts ...ratelimit.Option) *ratelimit.Adaptive {
	t.Helper()
	a, err := ratelimit.NewAdaptive(ratelimit.AdaptiveConfig{Initial: limit, Min: limit, Max: limit}, opts...)
	require.NoError(t, err)
	return a
}

// mdValue returns the first value of the incoming metadata name.
func mdValue(ctx context.Context, name string) string {
	md, _ := metadata.FromIncomingContext(ctx)
	if v := md.Get(name); len(v) > 0 {
		return v[0]
	}
	return ""
}

// priorityOf reads a call's priority from the metadata x-priority.
func priorityOf(ctx context.Context, _ string) ratelimit.Priority {
	switch mdValue(ctx, "x-priority") {
	case "critical":
		return ratelimit.PriorityCritical
	case "sheddable":
		return ratelimit.PrioritySheddable
	}
	return ratelimit.PriorityDefault
}

// heldService is a testService whose UnaryCall, given the metadata
// x-hold, tells entered and waits for release, and given x-code ends with
// that code.
func heldService() (svc *testService, entered, release chan struct{}) {
	entered, release = make(chan struct{}), make(chan struct{})
	svc = &testService{unaryErr: func(ctx context.Context) error {
		if mdValue(ctx, "x-hold") != "" {
			entered <- struct{}{}
			<-release
		}
		if c := mdValue(ctx, "x-code"); c != "" {
			n, _ := strconv.Atoi(c)
			return status.Error(codes.Code(n), "as asked")
		}
		return nil
	}}
	return svc, entered, release
}

// holdCall starts a UnaryCall with the metadata pairs kv that the service
// holds, and returns once its handler is running; its error comes on the
// channel.
func holdCall(t *testing.T, c testgrpc.TestServiceClient, entered chan struct{}, kv ...string) <-chan error {
	t.Helper()
	out := make(chan error, 1)
	ctx := metadata.AppendToOutgoingContext(context.Background(), append([]string{"x-hold", "1"}, kv...)...)
	go func() {
		_, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		out <- err
	}()
	select {
	case <-entered:
	case err := <-out:
		t.Fatalf("held call ended at once: %v", err)
	}
	return out
}

// callMD calls UnaryCall with the metadata pairs kv, and returns its error
// and trailer.
func callMD(c testgrpc.TestServiceClient, kv ...string) (metadata.MD, error) {
	var trailer metadata.MD
	ctx := metadata.AppendToOutgoingContext(context.Background(), kv...)
	_, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.Trailer(&trailer))
	return trailer, err
}

// assertShed checks that err and trailer are a shed call's: UNAVAILABLE,
// the message, a RetryInfo of a second, and grpc-retry-pushback-ms 1000.
func assertShed(t *testing.T, err error, trailer metadata.MD, what string) {
	t.Helper()
	st := status.Convert(err)
	require.Equalf(t, codes.Unavailable, st.Code(), "%s: %v", what, err)
	assert.Equal(t, "server overloaded, retry in 1 s", st.Message())
	var retry []time.Duration
	for _, d := range st.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			retry = append(retry, ri.GetRetryDelay().AsDuration())
		}
	}
	assert.Equalf(t, []time.Duration{time.Second}, retry, "%s: RetryInfo", what)
	assert.Equalf(t, []string{"1000"}, trailer.Get("grpc-retry-pushback-ms"), "%s: trailer", what)
}

// adaptiveOutcomes returns the outcomes of the Events named "adaptive".
func adaptiveOutcomes(es []ratelimit.Event) []ratelimit.Outcome {
	var out []ratelimit.Outcome
	for _, e := range es {
		if e.Name == "adaptive" {
			out = append(out, e.Outcome)
		}
	}
	return out
}

// countOutcome counts o in os.
func countOutcome(os []ratelimit.Outcome, o ratelimit.Outcome) int {
	n := 0
	for _, x := range os {
		if x == o {
			n++
		}
	}
	return n
}

// TestAdaptiveShedsByPriority: with a limit pinned at 10 and the default
// Reserve of 0.2, sheddable calls fill 8 places, default ones 10 and
// critical ones 12; each tier beyond its ceiling is shed (UNAVAILABLE,
// RetryInfo, grpc-retry-pushback-ms, its rate limit refunded) while the
// tiers above still pass. The interceptors' observer hears every
// decision under "adaptive"; every place is free once the calls end.
// Real server on loopback TCP.
func TestAdaptiveShedsByPriority(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	lim := newKeyed(t, ratelimit.FixedWindowPolicy(100, time.Minute), mock)
	ad := fixedAdaptive(t, 10)
	var obs eventLog
	svc, entered, release := heldService()
	c := serve(t, svc, newIC(t, []grpclimit.Limit{{Name: "api", Key: grpclimit.KeyByMetadata("x-api-key"), Limiter: lim}},
		grpclimit.WithClock(mock), grpclimit.WithObserver(&obs), grpclimit.WithAdaptive(ad, priorityOf)))

	var held []<-chan error
	for _, step := range []struct {
		prio    string
		ceiling int
		add     int
	}{
		{"sheddable", 8, 8},
		{"default", 10, 2},
		{"critical", 12, 2},
	} {
		for range step.add {
			held = append(held, holdCall(t, c, entered, "x-api-key", "held", "x-priority", step.prio))
		}
		require.Equalf(t, step.ceiling, ad.InFlight(), "in flight once %s calls fill their places", step.prio)
		trailer, err := callMD(c, "x-api-key", "shed", "x-priority", step.prio)
		assertShed(t, err, trailer, step.prio+" call beyond its ceiling")
		assert.Equal(t, step.ceiling, ad.InFlight(), "a shed call takes no place")
	}
	d, err := lim.Peek(context.Background(), "shed", 0)
	require.NoError(t, err)
	assert.Equal(t, 100, d.Remaining, "the shed calls were refunded")

	got := adaptiveOutcomes(obs.All())
	assert.Equal(t, 12, countOutcome(got, ratelimit.OutcomeAllowed))
	assert.Equal(t, 3, countOutcome(got, ratelimit.OutcomeShed))
	close(release)
	for _, h := range held {
		require.NoError(t, <-h)
	}
	assert.Equal(t, 0, ad.InFlight())
}

// TestAdaptiveStreamHoldsItsPlace: a stream takes its place at its
// creation and holds it for its life: while it is open, a unary call is
// shed, as is a new stream (UNAVAILABLE, RetryInfo, the pushback trailer);
// once it has ended, calls are served. With no call limit (only a
// Messages one), the Adaptive still applies.
func TestAdaptiveStreamHoldsItsPlace(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	ad := fixedAdaptive(t, 1)
	msgs := newKeyed(t, ratelimit.FixedWindowPolicy(100, time.Minute), mock)
	for _, limits := range [][]grpclimit.Limit{
		{{Name: "api", Key: grpclimit.KeyByMethod(), Limiter: newKeyed(t, ratelimit.FixedWindowPolicy(100, time.Minute), mock)}},
		{{Name: "msgs", Key: grpclimit.KeyByMethod(), Limiter: msgs, Messages: true}},
	} {
		c := serve(t, &testService{}, newIC(t, limits, grpclimit.WithClock(mock), grpclimit.WithAdaptive(ad, nil)))
		s, err := c.FullDuplexCall(context.Background())
		require.NoError(t, err)
		require.NoError(t, s.Send(&testgrpc.StreamingOutputCallRequest{}))
		_, err = s.Recv()
		require.NoError(t, err)
		require.Equal(t, 1, ad.InFlight(), "the open stream holds the place")

		trailer, err := callMD(c)
		assertShed(t, err, trailer, "a unary call while the stream is open")
		s2, err := c.FullDuplexCall(context.Background())
		require.NoError(t, err)
		_, err = s2.Recv()
		assertShed(t, err, s2.Trailer(), "a stream while the stream is open")

		require.NoError(t, s.CloseSend())
		_, err = s.Recv()
		require.ErrorIs(t, err, io.EOF)
		assert.Equal(t, 0, ad.InFlight(), "the ended stream gave its place back")
		_, err = callMD(c)
		require.NoError(t, err)
	}
}

// TestAdaptiveRateLimitsDecideFirst: a call the rate limits refuse ends
// ResourceExhausted and never asks the Adaptive, even when it is full; a
// call they admit but the Adaptive sheds is refunded.
func TestAdaptiveRateLimitsDecideFirst(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	lim := newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Minute), mock)
	ad := fixedAdaptive(t, 1)
	var obs eventLog
	svc, entered, release := heldService()
	c := serve(t, svc, newIC(t, []grpclimit.Limit{{Name: "api", Key: grpclimit.KeyByMetadata("x-api-key"), Limiter: lim}},
		grpclimit.WithClock(mock), grpclimit.WithObserver(&obs), grpclimit.WithAdaptive(ad, nil)))

	first := holdCall(t, c, entered, "x-api-key", "a")
	obs.Take()
	_, err := callMD(c, "x-api-key", "a")
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "key a's quota is spent")
	assert.Empty(t, adaptiveOutcomes(obs.Take()), "a refused call does not ask the Adaptive")
	assert.Equal(t, 1, ad.InFlight())

	trailer, err := callMD(c, "x-api-key", "b")
	assertShed(t, err, trailer, "key b while the only place is held")
	assert.Equal(t, []ratelimit.Outcome{ratelimit.OutcomeShed}, adaptiveOutcomes(obs.Take()))
	close(release)
	require.NoError(t, <-first)
	_, err = callMD(c, "x-api-key", "b")
	require.NoError(t, err, "key b's quota is whole: its shed call was refunded")
	assert.Equal(t, 0, ad.InFlight())
}

// TestAdaptiveFlightFreedHoweverItEnds: whatever code a handler ends with,
// a Count limit settling or not, the place is free once the call ended;
// and a handler's panic (called here directly: a gRPC server does not
// recover one) frees it before it goes on up.
func TestAdaptiveFlightFreedHoweverItEnds(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	ad := fixedAdaptive(t, 1)
	failures := newKeyed(t, ratelimit.FixedWindowPolicy(100, time.Minute), mock)
	ic := newIC(t, []grpclimit.Limit{{Name: "failures", Key: grpclimit.KeyByMetadata("x-count"), Limiter: failures,
		Count: func(c codes.Code, _ int) int {
			if c != codes.OK {
				return 1
			}
			return 0
		}}}, grpclimit.WithClock(mock), grpclimit.WithAdaptive(ad, nil))
	svc, _, _ := heldService()
	c := serve(t, svc, ic)
	for _, code := range []codes.Code{codes.OK, codes.NotFound, codes.Internal, codes.Unavailable, codes.DeadlineExceeded, codes.Canceled} {
		for _, counted := range []bool{false, true} {
			kv := []string{"x-code", strconv.Itoa(int(code))}
			if counted {
				kv = append(kv, "x-count", "c")
			}
			_, err := callMD(c, kv...)
			assert.Equalf(t, code, status.Code(err), "call ending %v", code)
			assert.Equalf(t, 0, ad.InFlight(), "call ending %v (counted %v): the place is free", code, counted)
		}
	}
	d, err := failures.Peek(context.Background(), "c", 0)
	require.NoError(t, err)
	assert.Equal(t, 100-5, d.Remaining, "the five failures counted")

	info := &grpc.UnaryServerInfo{FullMethod: mUnary}
	for _, counted := range []bool{false, true} {
		ctx := context.Background()
		if counted {
			ctx = metadata.NewIncomingContext(ctx, metadata.Pairs("x-count", "c"))
		}
		var inside int
		func() {
			defer func() { assert.Equal(t, "boom", recover(), "the panic goes on up") }()
			_, _ = ic.Unary()(ctx, nil, info, func(context.Context, any) (any, error) {
				inside = ad.InFlight()
				panic("boom")
			})
		}()
		assert.Equal(t, 1, inside)
		assert.Equalf(t, 0, ad.InFlight(), "a panic (counted %v) frees the place", counted)
	}
}

// TestAdaptiveDeniedHandler: a shed call reaches the denied handler with
// a Denial of Err ErrShed, Limit "adaptive", the Adaptive's Decision and
// RetryAfter its RetryAfter rounded up to a whole second, at least one;
// the pushback trailer is set whatever it answers.
func TestAdaptiveDeniedHandler(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	ad := fixedAdaptive(t, 1)
	var got []grpclimit.Denial
	svc, entered, release := heldService()
	c := serve(t, svc, newIC(t, []grpclimit.Limit{{Key: grpclimit.KeyByMethod(), Limiter: newKeyed(t, ratelimit.FixedWindowPolicy(100, time.Minute), mock)}},
		grpclimit.WithClock(mock), grpclimit.WithAdaptive(ad, nil),
		grpclimit.WithDeniedHandler(func(_ context.Context, d grpclimit.Denial) error {
			got = append(got, d)
			return status.Error(codes.Aborted, "busy")
		})))
	held := holdCall(t, c, entered)
	trailer, err := callMD(c)
	assert.Equal(t, codes.Aborted, status.Code(err))
	assert.Equal(t, []string{"1000"}, trailer.Get("grpc-retry-pushback-ms"))
	close(release)
	require.NoError(t, <-held)
	require.Len(t, got, 1)
	d := got[0]
	assert.True(t, errors.Is(d.Err, grpclimit.ErrShed))
	assert.Positive(t, d.Decision.RetryAfter)
	assert.Equal(t, max((d.Decision.RetryAfter+time.Second-1).Truncate(time.Second), time.Second),
		d.RetryAfter, "RetryAfter: the Decision's rounded up to a whole second, at least one")
	d.Decision.RetryAfter = 0 // the Adaptive's to choose
	assert.Equal(t, grpclimit.Denial{Method: mUnary, Limit: "adaptive", Decision: ratelimit.Decision{Limit: 1},
		RetryAfter: d.RetryAfter, Err: grpclimit.ErrShed}, d)
}

// TestAdaptiveConfig: New refuses a nil Adaptive, and one with an Observer
// of its own beside WithObserver's; alone, its own Observer is fine.
func TestAdaptiveConfig(t *testing.T) {
	t.Parallel()
	limits := []grpclimit.Limit{{Key: grpclimit.KeyByMethod(), Limiter: newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Minute), fakeclock.New(epoch))}}
	var obs eventLog
	_, err := grpclimit.New(limits, grpclimit.WithAdaptive(nil, nil))
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "grpclimit.WithAdaptive: the Adaptive is nil")
	observed := fixedAdaptive(t, 5, ratelimit.WithObserver(&obs))
	_, err = grpclimit.New(limits, grpclimit.WithAdaptive(observed, nil), grpclimit.WithObserver(&obs))
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "grpclimit.WithAdaptive: the Adaptive reports to an Observer of its own")
	_, err = grpclimit.New(limits, grpclimit.WithAdaptive(observed, nil))
	require.NoError(t, err)
}

// TestAdaptiveAllocs: an Adaptive that does not shed adds no allocation
// to a unary call, nor to a stream.
func TestAdaptiveAllocs(t *testing.T) {
	lim := newKeyed(t, ratelimit.TokenBucketPolicy(ratelimit.Per(1e9, time.Second), 1e9), ratelimit.Clock(nil))
	info := &grpc.UnaryServerInfo{FullMethod: mUnary}
	sinfo := &grpc.StreamServerInfo{FullMethod: mDuplex, IsClientStream: true, IsServerStream: true}
	handler := func(ctx context.Context, req any) (any, error) { return req, nil }
	shandler := func(any, grpc.ServerStream) error { return nil }
	ctx := grpc.NewContextWithServerTransportStream(context.Background(), &fakeStream{})
	ss := &allocStream{ctx: ctx}
	allocs := func(opts ...grpclimit.Option) (unary, stream float64) {
		ic := newIC(t, []grpclimit.Limit{{Name: "api", Key: grpclimit.KeyByMethod(), Limiter: lim}},
			append([]grpclimit.Option{grpclimit.WithFields(grpclimit.NoFields)}, opts...)...)
		u, s := ic.Unary(), ic.Stream()
		unary = testing.AllocsPerRun(200, func() { _, _ = u(ctx, info, info, handler) })
		stream = testing.AllocsPerRun(200, func() { _ = s(nil, ss, sinfo, shandler) })
		return unary, stream
	}
	u0, s0 := allocs()
	u1, s1 := allocs(grpclimit.WithAdaptive(fixedAdaptive(t, 1<<20), nil))
	t.Logf("unary %v -> %v, stream %v -> %v", u0, u1, s0, s1)
	assert.LessOrEqual(t, u1, u0, "unary: allocations with an Adaptive")
	assert.LessOrEqual(t, s1, s0, "stream: allocations with an Adaptive")
}

// allocStream is a grpc.ServerStream that only has a context.
type allocStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *allocStream) Context() context.Context { return s.ctx }

// TestAdaptiveAlone: WithAdaptive with no limits is overload protection
// alone: New accepts it (without WithAdaptive, no limits is still an
// error), and the call beyond the limit is shed. Real server on loopback.
func TestAdaptiveAlone(t *testing.T) {
	t.Parallel()
	_, err := grpclimit.New(nil)
	require.ErrorIs(t, err, ratelimit.ErrInvalidConfig)

	ad := fixedAdaptive(t, 1)
	svc, entered, release := heldService()
	c := serve(t, svc, newIC(t, nil, grpclimit.WithAdaptive(ad, priorityOf)))
	held := holdCall(t, c, entered)
	assert.Equal(t, 1, ad.InFlight())
	trailer, err := callMD(c)
	assertShed(t, err, trailer, "the call beyond the limit")
	close(release)
	require.NoError(t, <-held)
	assert.Equal(t, 0, ad.InFlight())
}
