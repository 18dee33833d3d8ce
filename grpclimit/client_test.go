package grpclimit

import (
	"context"
	"errors"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

var unaryReq = &grpc_testing.SimpleRequest{}

// callAsync makes a UnaryCall in a goroutine and returns its result channel.
func callAsync(ctx context.Context, tc grpc_testing.TestServiceClient) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := tc.UnaryCall(ctx, unaryReq)
		done <- err
	}()
	return done
}

// pending fails if done already holds a result.
func pending(t *testing.T, done <-chan error, what string) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s returned %v, want it still waiting", what, err)
	default:
	}
}

// assertNotSent checks a call's error for what the interceptor promises:
// a status with code, matching every one of sentinels.
func assertNotSent(t *testing.T, err error, code codes.Code, sentinels ...error) {
	t.Helper()
	require.Error(t, err)
	assert.Equal(t, code, status.Code(err), "status.Code(%v)", err)
	for _, s := range sentinels {
		assert.ErrorIs(t, err, s)
	}
	assert.Regexp(t, `ratelimit: `, err.Error())
}

func newBucket(t *testing.T, r ratelimit.Rate, capacity int, clk ratelimit.Clock) *ratelimit.TokenBucket {
	t.Helper()
	tb, err := ratelimit.NewTokenBucket(r, capacity, ratelimit.WithClock(clk))
	require.NoError(t, err)
	return tb
}

// TestClientWaitsForLimiter: a call waits for the local limiter on the
// clock, and only then reaches the server.
func TestClientWaitsForLimiter(t *testing.T) {
	t.Parallel()
	svc, addr := startServer(t)
	clk := fakeclock.NewAnnouncing(clientEpoch)
	c := newTestClient(t, newBucket(t, ratelimit.Per(1, 10*time.Second), 1, clk), nil, nil, clk)
	tc, _ := dial(t, addr, c)
	ctx := context.Background()

	_, err := tc.UnaryCall(ctx, unaryReq)
	require.NoError(t, err)
	clk.None(t)

	done := callAsync(ctx, tc)
	assert.Equal(t, 10*time.Second, clk.Next(t), "the second call waits for the next token")
	pending(t, done, "UnaryCall before the token")
	assert.Equal(t, 1, svc.count(methodUnary), "calls sent before the token")
	clk.Add(10 * time.Second)
	require.NoError(t, <-done)
	assert.Equal(t, 2, svc.count(methodUnary))
}

// TestClientRefusals: calls the limiter cannot admit in time are refused
// at once, with a status code and errors.Is sentinels, and never sent.
func TestClientRefusals(t *testing.T) {
	t.Parallel()
	svc, addr := startServer(t)
	clk := fakeclock.NewAnnouncing(clientEpoch)
	lim := newBucket(t, ratelimit.Per(1, time.Hour), 2, clk)
	c := newTestClient(t, lim, nil, nil, clk, WithCost(nil))
	tc, _ := dial(t, addr, c)
	require.True(t, lim.AllowN(2).Allowed, "drain the bucket")

	t.Run("wait outlasts deadline", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		_, err := tc.UnaryCall(ctx, unaryReq)
		assertNotSent(t, err, codes.DeadlineExceeded, ratelimit.ErrDeadline, context.DeadlineExceeded)
		clk.None(t)
	})
	t.Run("canceled while waiting", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		done := callAsync(ctx, tc)
		clk.Next(t)
		cancel()
		assertNotSent(t, <-done, codes.Canceled, context.Canceled)
	})
	t.Run("done before", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		_, err := tc.UnaryCall(ctx, unaryReq)
		assertNotSent(t, err, codes.Canceled, context.Canceled)
	})
	assert.Equal(t, 0, svc.count(methodUnary), "refused calls must not reach the server")
}

// TestClientCostExceedsLimit: a cost above the limiter's capacity fails at
// once with ResourceExhausted matching ratelimit.ErrExceedsLimit; a cost
// of 0 skips the limiter.
func TestClientCostExceedsLimit(t *testing.T) {
	t.Parallel()
	svc, addr := startServer(t)
	clk := fakeclock.NewAnnouncing(clientEpoch)
	lim := newBucket(t, ratelimit.Per(1, time.Hour), 2, clk)
	c := newTestClient(t, lim, nil, nil, clk, WithCost(func(_ context.Context, method string, _ any) int {
		if method == methodEmpty {
			return 0
		}
		return 3
	}))
	tc, _ := dial(t, addr, c)
	_, err := tc.UnaryCall(context.Background(), unaryReq)
	assertNotSent(t, err, codes.ResourceExhausted, ratelimit.ErrExceedsLimit)
	assert.Equal(t, 0, svc.count(methodUnary))
	for range 5 {
		_, err = tc.EmptyCall(context.Background(), &grpc_testing.Empty{})
		require.NoError(t, err, "a call of cost 0 is not limited")
	}
	assert.Equal(t, 2, lim.AllowN(0).Remaining, "a cost-0 call must not be charged")
}

// TestClientCostFromRequest: WithCost is given a unary call's request,
// so a batch waits for its size; a stream's creation is priced with a nil
// request.
func TestClientCostFromRequest(t *testing.T) {
	t.Parallel()
	_, addr := startServer(t)
	clk := fakeclock.NewAnnouncing(clientEpoch)
	lim := newBucket(t, ratelimit.Per(1, time.Hour), 10, clk)
	var streamReq []any
	c := newTestClient(t, lim, nil, nil, clk, WithCost(func(_ context.Context, method string, req any) int {
		if r, ok := req.(*grpc_testing.SimpleRequest); ok {
			return int(r.GetResponseSize())
		}
		streamReq = append(streamReq, req)
		return 1
	}))
	tc, _ := dial(t, addr, c)
	_, err := tc.UnaryCall(context.Background(), &grpc_testing.SimpleRequest{ResponseSize: 4})
	require.NoError(t, err)
	assert.Equal(t, 6, lim.AllowN(0).Remaining, "a batch of 4 waits for 4")
	s, err := tc.FullDuplexCall(context.Background())
	require.NoError(t, err)
	require.NoError(t, s.CloseSend())
	assert.Equal(t, []any{nil}, streamReq, "a stream's creation has no request")
	assert.Equal(t, 5, lim.AllowN(0).Remaining)
}

// TestClientPauseByTarget: a denial with RetryInfo pauses every call to
// that target, not calls to another target; the call is not retried
// unless marked.
func TestClientPauseByTarget(t *testing.T) {
	t.Parallel()
	svc, addr := startServer(t)
	other, addr2 := startServer(t)
	clk := fakeclock.NewAnnouncing(clientEpoch)
	var hooked []time.Duration
	c := newTestClient(t, nil, nil, nil, clk, WithRetries(3), WithPauseHook(func(_ context.Context, method string, d time.Duration) {
		assert.Equal(t, methodUnary, method)
		hooked = append(hooked, d)
	}))
	tc, conn := dial(t, addr, c)
	tc2, conn2 := dial(t, addr2, c)
	svc.answer(denial(7 * time.Second))

	_, err := tc.UnaryCall(context.Background(), unaryReq)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "the server's answer is returned")
	assert.Equal(t, []time.Duration{7 * time.Second}, hooked)
	assert.Equal(t, 1, svc.count(methodUnary), "an unmarked call is not retried")
	assert.Equal(t, 7*time.Second, c.PausedFor(conn.Target(), "any method", ""))
	assert.Equal(t, time.Duration(0), c.PausedFor(conn2.Target(), methodUnary, ""))

	_, err = tc2.UnaryCall(context.Background(), unaryReq)
	require.NoError(t, err, "another target is not paused")
	assert.Equal(t, 1, other.count(methodUnary))
	clk.None(t)

	done := make(chan error, 1)
	go func() {
		_, err := tc.EmptyCall(context.Background(), &grpc_testing.Empty{})
		done <- err
	}()
	assert.Equal(t, 7*time.Second, clk.Next(t), "another method of the target waits for the pause")
	pending(t, done, "EmptyCall during the pause")
	clk.Add(7 * time.Second)
	require.NoError(t, <-done)
	assert.Equal(t, 1, svc.count(methodEmpty))
	assert.Equal(t, time.Duration(0), c.PausedFor(conn.Target(), "", ""))
}

// TestClientPauseByMethod: under PauseByMethod, a pause holds back only
// its method on its target.
func TestClientPauseByMethod(t *testing.T) {
	t.Parallel()
	svc, addr := startServer(t)
	other, addr2 := startServer(t)
	clk := fakeclock.NewAnnouncing(clientEpoch)
	c := newTestClient(t, nil, nil, nil, clk, WithPauseScope(PauseByMethod))
	tc, conn := dial(t, addr, c)
	tc2, conn2 := dial(t, addr2, c)
	svc.answer(denial(5 * time.Second))

	_, err := tc.UnaryCall(context.Background(), unaryReq)
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Equal(t, 5*time.Second, c.PausedFor(conn.Target(), methodUnary, ""))
	assert.Equal(t, time.Duration(0), c.PausedFor(conn.Target(), methodEmpty, ""))
	assert.Equal(t, time.Duration(0), c.PausedFor(conn2.Target(), methodUnary, ""))

	_, err = tc.EmptyCall(context.Background(), &grpc_testing.Empty{})
	require.NoError(t, err, "another method is not paused")
	_, err = tc2.UnaryCall(context.Background(), unaryReq)
	require.NoError(t, err, "the same method on another target is not paused")
	clk.None(t)
	assert.Equal(t, 1, other.count(methodUnary))

	done := callAsync(context.Background(), tc)
	assert.Equal(t, 5*time.Second, clk.Next(t))
	pending(t, done, "UnaryCall during its pause")
	clk.Add(5 * time.Second)
	require.NoError(t, <-done)
	assert.Equal(t, 2, svc.count(methodUnary))
}

type tenantKey struct{}

func byTenant(ctx context.Context, _ string) (string, bool) {
	k, ok := ctx.Value(tenantKey{}).(string)
	return k, ok
}

// TestClientPauseByKey: a keyed client paused by key holds back the calls
// of the denied key only, and waits in the keyed limiter per key.
func TestClientPauseByKey(t *testing.T) {
	t.Parallel()
	svc, addr := startServer(t)
	clk := fakeclock.NewAnnouncing(clientEpoch)
	kl, err := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 5), ratelimit.WithClock(clk))
	require.NoError(t, err)
	c := newTestClient(t, nil, kl, byTenant, clk, WithPauseScope(PauseByKey))
	tc, conn := dial(t, addr, c)
	a := context.WithValue(context.Background(), tenantKey{}, "a")
	b := context.WithValue(context.Background(), tenantKey{}, "b")
	svc.answer(denial(3 * time.Second))

	_, err = tc.UnaryCall(a, unaryReq)
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Equal(t, 3*time.Second, c.PausedFor(conn.Target(), methodUnary, "a"))
	assert.Equal(t, 3*time.Second, c.PausedFor("dns:///elsewhere", methodEmpty, "a"), "a key's pause holds on every target and method")
	assert.Equal(t, time.Duration(0), c.PausedFor(conn.Target(), methodUnary, "b"), "only key a is paused, not the target")

	_, err = tc.UnaryCall(b, unaryReq)
	require.NoError(t, err, "key b is not paused")
	clk.None(t)
	done := callAsync(a, tc)
	assert.Equal(t, 3*time.Second, clk.Next(t))
	clk.Add(3 * time.Second)
	require.NoError(t, <-done)

	d, err := kl.Peek(context.Background(), "a", 0)
	require.NoError(t, err)
	assert.Equal(t, 3, d.Remaining, "key a charged for its two calls")
	d, err = kl.Peek(context.Background(), "b", 0)
	require.NoError(t, err)
	assert.Equal(t, 4, d.Remaining, "key b charged for its one call")

	_, err = tc.UnaryCall(context.Background(), unaryReq)
	assertNotSent(t, err, codes.InvalidArgument, ErrNoKey)
	assert.Equal(t, 3, svc.count(methodUnary), "a call without a key is not sent")
}

// TestClientCapsPause: a pause longer than WithMaxPause is cut to it.
func TestClientCapsPause(t *testing.T) {
	t.Parallel()
	svc, addr := startServer(t)
	clk := fakeclock.NewAnnouncing(clientEpoch)
	var hooked time.Duration
	c := newTestClient(t, nil, nil, nil, clk, WithMaxPause(time.Minute), WithPauseHook(func(_ context.Context, _ string, d time.Duration) { hooked = d }))
	tc, conn := dial(t, addr, c)
	svc.answer(denial(10 * time.Hour))
	_, err := tc.UnaryCall(context.Background(), unaryReq)
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Equal(t, time.Minute, c.PausedFor(conn.Target(), "", ""))
	assert.Equal(t, time.Minute, hooked)

	done := callAsync(context.Background(), tc)
	assert.Equal(t, time.Minute, clk.Next(t))
	clk.Add(time.Minute)
	require.NoError(t, <-done)
}

// TestClientRetries: only calls marked safe are retried, each after the
// pause, up to WithRetries, and never for a pause above WithMaxRetryWait
// or beyond the deadline. Server calls are counted exactly.
func TestClientRetries(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		answers   []error
		marked    bool
		deadline  time.Duration // 0: none
		opts      []ClientOption
		wantCalls int
		waits     []time.Duration // timers the call starts, each then advanced
		wantCode  codes.Code
	}{
		{"unmarked", []error{denial(time.Second)}, false, 0, []ClientOption{WithRetries(2)}, 1, nil, codes.ResourceExhausted},
		{"marked, then admitted", []error{denial(2 * time.Second), denial(3 * time.Second)}, true, 0, []ClientOption{WithRetries(2)}, 3, []time.Duration{2 * time.Second, 3 * time.Second}, codes.OK},
		{"marked, retries spent", []error{denial(time.Second), denial(time.Second), denial(time.Second)}, true, 0, []ClientOption{WithRetries(2)}, 3, []time.Duration{time.Second, time.Second}, codes.ResourceExhausted},
		{"marked, no retries configured", []error{denial(time.Second)}, true, 0, nil, 1, nil, codes.ResourceExhausted},
		{"pause above max retry wait", []error{denial(2 * time.Minute)}, true, 0, []ClientOption{WithRetries(2)}, 1, nil, codes.ResourceExhausted},
		{"pause beyond deadline", []error{denial(10 * time.Minute)}, true, time.Minute, []ClientOption{WithRetries(2), WithMaxRetryWait(time.Hour)}, 1, nil, codes.ResourceExhausted},
		{"no RetryInfo: never fits", []error{denialWith()}, true, 0, []ClientOption{WithRetries(2)}, 1, nil, codes.ResourceExhausted},
		{"other code", []error{status.Error(codes.Unavailable, "down")}, true, 0, []ClientOption{WithRetries(2)}, 1, nil, codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			svc, addr := startServer(t)
			clk := fakeclock.NewAnnouncing(clientEpoch)
			c := newTestClient(t, nil, nil, nil, clk, tc.opts...)
			client, _ := dial(t, addr, c)
			svc.answer(tc.answers...)
			ctx := context.Background()
			if tc.marked {
				ctx = MarkRetrySafe(ctx)
			}
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.deadline)
				defer cancel()
			}
			done := callAsync(ctx, client)
			for _, w := range tc.waits {
				assert.Equal(t, w, clk.Next(t), "retry waits for the pause")
				clk.Add(w)
			}
			err := <-done
			clk.None(t)
			assert.Equal(t, tc.wantCode, status.Code(err), "UnaryCall error %v", err)
			assert.Equal(t, tc.wantCalls, svc.count(methodUnary), "calls reaching the server")
		})
	}
}

// TestClientHostileRetryInfo: absurd RetryInfo never panics, never pauses
// beyond WithMaxPause; an unusable one (unset, zero, negative, out of
// range) names no pause, so the scope backs off (the first backoff: between
// half the first delay and the first delay), and the call is not retried
// at once.
func TestClientHostileRetryInfo(t *testing.T) {
	t.Parallel()
	const maxPause = 30 * time.Minute
	const backoff = -1 // a first backoff: in [defaultBackoffFirst/2, defaultBackoffFirst]
	for _, tc := range []struct {
		name  string
		err   error
		pause time.Duration
	}{
		{"nil delay", denialWith(&errdetails.RetryInfo{}), backoff},
		{"negative", denialWith(&errdetails.RetryInfo{RetryDelay: &durationpb.Duration{Seconds: -5}}), backoff},
		{"negative nanos", denialWith(&errdetails.RetryInfo{RetryDelay: &durationpb.Duration{Nanos: -1}}), backoff},
		{"out of range seconds", denialWith(&errdetails.RetryInfo{RetryDelay: &durationpb.Duration{Seconds: 1 << 62}}), backoff},
		{"out of range nanos", denialWith(&errdetails.RetryInfo{RetryDelay: &durationpb.Duration{Seconds: 1, Nanos: 2e9}}), backoff},
		{"mixed signs", denialWith(&errdetails.RetryInfo{RetryDelay: &durationpb.Duration{Seconds: 5, Nanos: -1}}), backoff},
		{"zero", denialWith(&errdetails.RetryInfo{RetryDelay: &durationpb.Duration{}}), backoff},
		{"10000 years", denialWith(&errdetails.RetryInfo{RetryDelay: &durationpb.Duration{Seconds: 315_576_000_000}}), maxPause},
		{"longest of two", denialWith(&errdetails.RetryInfo{RetryDelay: durationpb.New(time.Second)}, &errdetails.RetryInfo{RetryDelay: durationpb.New(4 * time.Second)}), 4 * time.Second},
		{"valid and hostile", denialWith(&errdetails.RetryInfo{RetryDelay: &durationpb.Duration{Seconds: -1 << 62}}, &errdetails.RetryInfo{RetryDelay: durationpb.New(2 * time.Second)}), 2 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			svc, addr := startServer(t)
			clk := fakeclock.NewAnnouncing(clientEpoch)
			c := newTestClient(t, nil, nil, nil, clk, WithMaxPause(maxPause), WithRetries(1), WithMaxRetryWait(0))
			client, conn := dial(t, addr, c)
			svc.answer(tc.err)
			_, err := client.UnaryCall(MarkRetrySafe(context.Background()), unaryReq)
			got := c.PausedFor(conn.Target(), "", "")
			if tc.pause == backoff {
				assert.GreaterOrEqual(t, got, defaultBackoffFirst/2)
				assert.LessOrEqual(t, got, defaultBackoffFirst)
			} else {
				assert.Equal(t, tc.pause, got)
			}
			assert.Equal(t, codes.ResourceExhausted, status.Code(err), "not retried: the pause is longer than WithMaxRetryWait(0)")
			assert.Equal(t, 1, svc.count(methodUnary))
			clk.None(t)
		})
	}
}

// TestClientPauseDeadline: a call whose deadline ends before the pause is
// refused at once, with DeadlineExceeded matching ErrPauseDeadline.
func TestClientPauseDeadline(t *testing.T) {
	t.Parallel()
	svc, addr := startServer(t)
	clk := fakeclock.NewAnnouncing(clientEpoch)
	c := newTestClient(t, nil, nil, nil, clk)
	tc, _ := dial(t, addr, c)
	svc.answer(denial(time.Hour))
	_, err := tc.UnaryCall(context.Background(), unaryReq)
	require.Equal(t, codes.ResourceExhausted, status.Code(err))

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = tc.UnaryCall(ctx, unaryReq)
	assertNotSent(t, err, codes.DeadlineExceeded, ErrPauseDeadline, context.DeadlineExceeded)
	stream, err := tc.FullDuplexCall(ctx)
	assert.Nil(t, stream)
	assertNotSent(t, err, codes.DeadlineExceeded, ErrPauseDeadline, context.DeadlineExceeded)
	clk.None(t)
	assert.Equal(t, 1, svc.count(methodUnary))
	assert.Equal(t, 0, svc.count(methodDuplex))
}

// TestClientStreamPause: a denial ending a stream pauses the scope (seen
// through RecvMsg, Header or CloseAndRecv); stream creation waits for the
// pause and the limiter; streams are never retried.
func TestClientStreamPause(t *testing.T) {
	t.Parallel()
	t.Run("client streaming, CloseAndRecv", func(t *testing.T) {
		t.Parallel()
		svc, addr := startServer(t)
		clk := fakeclock.NewAnnouncing(clientEpoch)
		c := newTestClient(t, nil, nil, nil, clk, WithRetries(3))
		tc, conn := dial(t, addr, c)
		svc.answer(denial(4 * time.Second))
		stream, err := tc.StreamingInputCall(MarkRetrySafe(context.Background()))
		require.NoError(t, err)
		require.NoError(t, stream.Send(&grpc_testing.StreamingInputCallRequest{}))
		_, err = stream.CloseAndRecv()
		assert.Equal(t, codes.ResourceExhausted, status.Code(err))
		assert.Equal(t, 4*time.Second, c.PausedFor(conn.Target(), "", ""))
		assert.Equal(t, 1, svc.count(methodInput), "a stream is never retried")

		done := make(chan error, 1)
		go func() {
			s, err := tc.StreamingInputCall(context.Background())
			if err == nil {
				_, err = s.CloseAndRecv()
			}
			done <- err
		}()
		assert.Equal(t, 4*time.Second, clk.Next(t), "the next stream waits for the pause")
		pending(t, done, "StreamingInputCall during the pause")
		assert.Equal(t, 1, svc.count(methodInput))
		clk.Add(4 * time.Second)
		require.NoError(t, <-done)
		assert.Equal(t, 2, svc.count(methodInput))
	})
	t.Run("bidi, Recv", func(t *testing.T) {
		t.Parallel()
		svc, addr := startServer(t)
		clk := fakeclock.NewAnnouncing(clientEpoch)
		c := newTestClient(t, nil, nil, nil, clk, WithPauseScope(PauseByMethod))
		tc, conn := dial(t, addr, c)
		svc.answer(denial(6 * time.Second))
		stream, err := tc.FullDuplexCall(context.Background())
		require.NoError(t, err)
		require.NoError(t, stream.Send(&grpc_testing.StreamingOutputCallRequest{}))
		_, err = stream.Recv()
		assert.Equal(t, codes.ResourceExhausted, status.Code(err))
		_, err = stream.Recv() // the same end seen twice pauses once
		assert.Equal(t, codes.ResourceExhausted, status.Code(err))
		assert.Equal(t, 6*time.Second, c.PausedFor(conn.Target(), methodDuplex, ""))
		assert.Equal(t, time.Duration(0), c.PausedFor(conn.Target(), methodInput, ""))
	})
	t.Run("Header, then RecvMsg", func(t *testing.T) {
		t.Parallel()
		svc, addr := startServer(t)
		clk := fakeclock.NewAnnouncing(clientEpoch)
		c := newTestClient(t, nil, nil, nil, clk)
		tc, conn := dial(t, addr, c)
		svc.answer(denial(2 * time.Second))
		stream, err := tc.StreamingInputCall(context.Background())
		require.NoError(t, err)
		require.NoError(t, stream.CloseSend())
		// grpc-go's Header does not return the status of a stream that
		// ended (it leaves it to RecvMsg): the pause comes from there.
		_, err = stream.Header()
		require.NoError(t, err)
		_, err = stream.CloseAndRecv()
		assert.Equal(t, codes.ResourceExhausted, status.Code(err))
		assert.Equal(t, 2*time.Second, c.PausedFor(conn.Target(), "", ""))
	})
	t.Run("limiter", func(t *testing.T) {
		t.Parallel()
		svc, addr := startServer(t)
		clk := fakeclock.NewAnnouncing(clientEpoch)
		c := newTestClient(t, newBucket(t, ratelimit.Per(1, 8*time.Second), 1, clk), nil, nil, clk)
		tc, _ := dial(t, addr, c)
		for i := range 2 {
			done := make(chan error, 1)
			go func() {
				s, err := tc.FullDuplexCall(context.Background())
				if err == nil {
					err = s.Send(&grpc_testing.StreamingOutputCallRequest{})
				}
				if err == nil {
					_, err = s.Recv()
				}
				if err == nil {
					err = s.CloseSend()
				}
				if err == nil {
					_, err = s.Recv()
				}
				done <- err
			}()
			if i == 1 {
				assert.Equal(t, 8*time.Second, clk.Next(t), "the second stream waits for the limiter")
				pending(t, done, "FullDuplexCall before the token")
				clk.Add(8 * time.Second)
			}
			assert.ErrorIs(t, <-done, io.EOF)
		}
		assert.Equal(t, 2, svc.count(methodDuplex))
	})
}

// TestClientConcurrent: concurrent callers through one client; exactly
// capacity calls reach the server, the rest are refused at once because
// the next token comes after their deadline.
func TestClientConcurrent(t *testing.T) {
	t.Parallel()
	svc, addr := startServer(t)
	clk := fakeclock.NewAnnouncing(clientEpoch)
	const capacity, callers = 10, 40
	c := newTestClient(t, newBucket(t, ratelimit.Per(1, time.Hour), capacity, clk), nil, nil, clk, WithPauseScope(PauseByMethod))
	tc, conn := dial(t, addr, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	var mu sync.Mutex
	codesSeen := map[codes.Code]int{}
	for range callers {
		wg.Go(func() {
			_, err := tc.UnaryCall(ctx, unaryReq)
			if err != nil && !errors.Is(err, ratelimit.ErrDeadline) {
				t.Errorf("refusal %v does not match ratelimit.ErrDeadline", err)
			}
			mu.Lock()
			codesSeen[status.Code(err)]++
			mu.Unlock()
			_ = c.PausedFor(conn.Target(), methodUnary, "")
		})
	}
	wg.Wait()
	assert.Equal(t, map[codes.Code]int{codes.OK: capacity, codes.DeadlineExceeded: callers - capacity}, codesSeen)
	assert.Equal(t, capacity, svc.count(methodUnary))

	// Concurrent denials and pauses: every caller is answered or refused,
	// and the pause is the longest asked for.
	for i := range callers {
		svc.answer(denial(time.Duration(i+1) * time.Second))
	}
	c2 := newTestClient(t, nil, nil, nil, clk, WithPauseScope(PauseByMethod))
	tc2, conn2 := dial(t, addr, c2)
	for range callers {
		wg.Go(func() {
			_, err := tc2.UnaryCall(ctx, unaryReq)
			assert.Contains(t, []codes.Code{codes.ResourceExhausted, codes.OK}, status.Code(err), "%v", err)
		})
	}
	// Callers that start after a pause wait for it: release them.
	go func() {
		for {
			select {
			case d := <-clk.Timers:
				clk.Add(d)
			case <-ctx.Done():
				return
			}
		}
	}()
	wg.Wait()
	cancel()
	assert.Equal(t, capacity+callers, svc.count(methodUnary), "every caller reaches the server once")
	assert.LessOrEqual(t, c2.PausedFor(conn2.Target(), methodUnary, ""), time.Duration(callers)*time.Second)
}

// TestClientOptions: invalid options and constructor arguments are
// configuration errors naming them.
func TestClientOptions(t *testing.T) {
	t.Parallel()
	tb, err := ratelimit.NewTokenBucket(ratelimit.Per(1, time.Second), 1)
	require.NoError(t, err)
	kl, err := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Second), 1))
	require.NoError(t, err)
	second := func(_ *Client, err error) error { return err }
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"negative retries", second(NewClient(tb, WithRetries(-1))), "grpclimit.WithRetries must not be negative, got -1"},
		{"negative retry wait", second(NewClient(tb, WithMaxRetryWait(-time.Second))), "grpclimit.WithMaxRetryWait must not be negative, got -1s"},
		{"zero max pause", second(NewClient(tb, WithMaxPause(0))), "grpclimit.WithMaxPause must be positive, got 0s"},
		{"unknown scope", second(NewClient(tb, WithPauseScope(9))), "grpclimit.WithPauseScope: unknown scope, got PauseScope(9)"},
		{"PauseByKey unkeyed", second(NewClient(tb, WithPauseScope(PauseByKey))), "grpclimit.WithPauseScope(PauseByKey) applies to NewKeyedClient, not NewClient"},
		{"nil keyed limiter", second(NewKeyedClient(nil, KeyFunc(byTenant))), "grpclimit.NewKeyedClient: the limiter must not be nil"},
		{"typed nil keyed limiter", second(NewKeyedClient((*ratelimit.Keyed)(nil), KeyFunc(byTenant))), "grpclimit.NewKeyedClient: the limiter must not be nil, got *ratelimit.Keyed"},
		{"nil key", second(NewKeyedClient(kl, nil)), "grpclimit.NewKeyedClient: the key function must not be nil"},
	} {
		require.Error(t, tc.err, tc.name)
		assert.ErrorIs(t, tc.err, ratelimit.ErrInvalidConfig, tc.name)
		assert.Contains(t, tc.err.Error(), "ratelimit: invalid configuration: "+tc.want, tc.name)
	}
	_, err = NewClient(tb, WithClock((*fakeclock.Mock)(nil)))
	assert.ErrorContains(t, err, "grpclimit.WithClock: clock is a nil *fakeclock.Mock")

	c1, err := NewClient(nil, nil, WithPauseScope(PauseByMethod), WithPauseHook(nil))
	require.NoError(t, err, "a nil limiter and a nil option")
	assert.Nil(t, c1.wait, "a nil limiter is no limiter")
	_, err = NewKeyedClient(kl, byTenant, WithPauseScope(PauseByKey), WithRetries(1), WithMaxRetryWait(0), WithMaxPause(time.Second))
	require.NoError(t, err)
}

// TestClientPauseDuringLimiterWait: a pause that begins while a call waits
// for the limiter is waited for too, or refuses the call at once when it
// outlasts the deadline.
func TestClientPauseDuringLimiterWait(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		deadline time.Duration
	}{{"waits", 0}, {"outlasts deadline", 10 * time.Second}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			svc, addr := startServer(t)
			clk := fakeclock.NewAnnouncing(clientEpoch)
			c := newTestClient(t, newBucket(t, ratelimit.Per(1, 2*time.Second), 1, clk), nil, nil, clk, WithCost(func(_ context.Context, method string, _ any) int {
				if method == methodEmpty {
					return 0 // not limited: it brings the pause
				}
				return 1
			}))
			client, _ := dial(t, addr, c)
			_, err := client.UnaryCall(context.Background(), unaryReq)
			require.NoError(t, err)

			ctx := context.Background()
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.deadline)
				defer cancel()
			}
			done := callAsync(ctx, client)
			assert.Equal(t, 2*time.Second, clk.Next(t), "waiting for the limiter")
			svc.answer(denial(time.Minute))
			_, err = client.EmptyCall(context.Background(), &grpc_testing.Empty{})
			require.Equal(t, codes.ResourceExhausted, status.Code(err))
			clk.Add(2 * time.Second)
			if tc.deadline > 0 {
				assertNotSent(t, <-done, codes.DeadlineExceeded, ErrPauseDeadline, context.DeadlineExceeded)
				assert.Equal(t, 1, svc.count(methodUnary))
				return
			}
			assert.Equal(t, 58*time.Second, clk.Next(t), "then for the rest of the pause")
			pending(t, done, "UnaryCall during the pause")
			clk.Add(58 * time.Second)
			require.NoError(t, <-done)
			assert.Equal(t, 2, svc.count(methodUnary))
		})
	}
}

// TestClientStreamDirect drives the stream interceptor with fake
// streamers: a denial from NewStream itself pauses the target, and a
// keyed client without a key does not create the stream.
func TestClientStreamDirect(t *testing.T) {
	t.Parallel()
	clk := fakeclock.NewAnnouncing(clientEpoch)
	c := newTestClient(t, nil, nil, nil, clk)
	streamer := func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
		return nil, denial(9 * time.Second)
	}
	cs, err := c.Stream()(context.Background(), &grpc.StreamDesc{}, nil, methodDuplex, streamer)
	assert.Nil(t, cs)
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Equal(t, 9*time.Second, c.PausedFor("", methodDuplex, ""), "the target of a nil conn is empty")
	assert.Equal(t, 9*time.Second, c.PausedFor("", methodUnary, "any key"), "PauseByTarget ignores method and key")

	kl, err := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 5), ratelimit.WithClock(clk))
	require.NoError(t, err)
	keyed := newTestClient(t, nil, kl, byTenant, clk)
	created := false
	_, err = keyed.Stream()(context.Background(), &grpc.StreamDesc{}, nil, methodDuplex, func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
		created = true
		return nil, nil
	})
	assertNotSent(t, err, codes.InvalidArgument, ErrNoKey)
	assert.False(t, created, "a stream without a key is not created")
	assert.Equal(t, time.Duration(0), keyed.PausedFor("", methodDuplex, "a"), "no answer paused the keyed client")
}
