package grpclimit_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/grpclimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// failedCalls counts the calls that did not end OK.
func failedCalls(c codes.Code, _ int) int {
	if c != codes.OK {
		return 1
	}
	return 0
}

// reportedCost counts the cost the handler reported (or the call's).
func reportedCost(_ codes.Code, cost int) int { return cost }

// standing returns a fixed window of limit an hour on a clock that
// stands still: no quota comes back on its own.
func standing(t *testing.T, limit int) *ratelimit.Keyed {
	t.Helper()
	k, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(limit, time.Hour), ratelimit.WithClock(fakeclock.New(time.Unix(1767225600, 0))))
	require.NoError(t, err)
	return k
}

// remaining is what key has left in k.
func remaining(t *testing.T, k *ratelimit.Keyed, key string) int {
	t.Helper()
	d, err := k.Peek(context.Background(), key, 0)
	require.NoError(t, err)
	return d.Remaining
}

// asUser returns a context sending x-user and x-password.
func asUser(user, password string) context.Context {
	return metadata.AppendToOutgoingContext(context.Background(), "x-user", user, "x-password", password)
}

// badPassword fails the calls whose x-password is "bad" with
// Unauthenticated, counting them in failed; with gate set, it first waits
// for gate to close, after signalling entered.
func badPassword(failed *atomic.Int64, gate, entered chan struct{}) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		if gate != nil {
			entered <- struct{}{}
			<-gate
		}
		md, _ := metadata.FromIncomingContext(ctx)
		if p := md.Get("x-password"); len(p) == 1 && p[0] == "bad" {
			failed.Add(1)
			return status.Error(codes.Unauthenticated, "bad password")
		}
		return nil
	}
}

func newCounted(t *testing.T, limits ...grpclimit.Limit) *grpclimit.Interceptor {
	t.Helper()
	ic, err := grpclimit.New(limits)
	require.NoError(t, err)
	return ic
}

// TestCountFailuresExactUnderConcurrency: with a limit of 5 failures, 64
// concurrent calls with a bad password run exactly 5 handlers; the other
// 59 are refused before their handler runs, and so is a 65th.
func TestCountFailuresExactUnderConcurrency(t *testing.T) {
	t.Parallel()
	k := standing(t, 5)
	var failed atomic.Int64
	gate, entered := make(chan struct{}), make(chan struct{}, 64)
	svc := &testService{unaryErr: badPassword(&failed, gate, entered)}
	c := serve(t, svc, newCounted(t, grpclimit.Limit{Name: "login", Key: grpclimit.KeyByMetadata("x-user"), Limiter: k, Count: failedCalls}))

	const attempts = 64
	got := make(chan codes.Code, attempts)
	for range attempts {
		go func() {
			_, err := c.UnaryCall(asUser("alice", "bad"), &testgrpc.SimpleRequest{})
			got <- status.Code(err)
		}()
	}
	for range 5 {
		<-entered
	}
	close(gate)
	count := map[codes.Code]int{}
	for range attempts {
		count[<-got]++
	}
	assert.Equal(t, map[codes.Code]int{codes.Unauthenticated: 5, codes.ResourceExhausted: attempts - 5}, count)
	assert.EqualValues(t, 5, svc.served.Load(), "handlers run")
	assert.EqualValues(t, 5, failed.Load(), "handlers ended in failure")

	svc.unaryErr = badPassword(&failed, nil, nil)
	_, err := c.UnaryCall(asUser("alice", "bad"), &testgrpc.SimpleRequest{})
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "a 65th")
	assert.EqualValues(t, 5, svc.served.Load(), "refused before its handler runs")
	assert.Equal(t, 0, remaining(t, k, "alice"))
}

// TestCountSuccessesNeverBlocked: 1,000 successful calls in a row, then
// 1,000 from 16 concurrent clients, all succeed with 4 of 5 failures
// spent; the fifth failure spends the limit.
func TestCountSuccessesNeverBlocked(t *testing.T) {
	t.Parallel()
	k := standing(t, 5)
	var failed atomic.Int64
	svc := &testService{unaryErr: badPassword(&failed, nil, nil)}
	c := serve(t, svc, newCounted(t, grpclimit.Limit{Name: "login", Key: grpclimit.KeyByMetadata("x-user"), Limiter: k, Count: failedCalls}))
	for i := range 1000 {
		_, err := c.UnaryCall(asUser("alice", "good"), &testgrpc.SimpleRequest{})
		require.NoError(t, err, "sequential call %d", i)
	}
	for range 4 {
		_, err := c.UnaryCall(asUser("alice", "bad"), &testgrpc.SimpleRequest{})
		require.Equal(t, codes.Unauthenticated, status.Code(err))
	}
	var wg sync.WaitGroup
	var refused atomic.Int64
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 1000 / 16 {
				if _, err := c.UnaryCall(asUser("alice", "good"), &testgrpc.SimpleRequest{}); err != nil {
					refused.Add(1)
					t.Errorf("call: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	assert.Zero(t, refused.Load())
	assert.Equal(t, 1, remaining(t, k, "alice"))
	_, err := c.UnaryCall(asUser("alice", "bad"), &testgrpc.SimpleRequest{})
	require.Equal(t, codes.Unauthenticated, status.Code(err))
	_, err = c.UnaryCall(asUser("alice", "good"), &testgrpc.SimpleRequest{})
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
}

// TestCountReportedCostUnaryAndStream: a token limit reserves the call's
// estimate and settles what the handler reports; a stream holds its
// reservation for its life and settles at its end.
func TestCountReportedCostUnaryAndStream(t *testing.T) {
	t.Parallel()
	k := standing(t, 1000)
	var during atomic.Int64 // what remains while a stream is open
	svc := &testService{
		unaryErr: func(ctx context.Context) error { return grpclimit.ReportCost(ctx, 30) },
		inputEnd: func(ctx context.Context, n int32) error {
			during.Store(int64(remaining(t, k, "u")))
			if err := grpclimit.ReportCost(ctx, 10*int(n)); err != nil {
				return err
			}
			if n > 5 {
				return status.Error(codes.InvalidArgument, "too many")
			}
			return nil
		},
	}
	ic, err := grpclimit.New([]grpclimit.Limit{
		{Name: "tokens", Key: grpclimit.KeyByMetadata("x-user"), Limiter: k, Count: reportedCost},
		{Name: "failures", Key: grpclimit.KeyByMetadata("x-user"), Limiter: standing(t, 5000), Count: failedCalls},
	}, grpclimit.WithCost(func(context.Context, string, any) int { return 100 }))
	require.NoError(t, err)
	c := serve(t, svc, ic)

	var hdr metadata.MD
	_, err = c.UnaryCall(asUser("u", ""), &testgrpc.SimpleRequest{}, grpc.Header(&hdr))
	require.NoError(t, err)
	assert.Equal(t, []string{`"tokens";r=900;t=3600`}, hdr.Get("ratelimit"), "the estimate reserved; the most restrictive shown")
	assert.Equal(t, 970, remaining(t, k, "u"), "settled at the 30 reported")

	s, err := c.StreamingInputCall(asUser("u", ""))
	require.NoError(t, err)
	for range 3 {
		require.NoError(t, s.Send(&testgrpc.StreamingInputCallRequest{}))
	}
	_, err = s.CloseAndRecv()
	require.NoError(t, err)
	assert.EqualValues(t, 870, during.Load(), "held while the stream is open")
	assert.Equal(t, 940, remaining(t, k, "u"), "settled at its end at the 30 reported")

	s, err = c.StreamingInputCall(asUser("u", ""))
	require.NoError(t, err)
	for range 20 {
		require.NoError(t, s.Send(&testgrpc.StreamingInputCallRequest{}))
	}
	_, err = s.CloseAndRecv()
	assert.Equal(t, codes.InvalidArgument, status.Code(err))
	assert.Equal(t, 740, remaining(t, k, "u"), "an overrun of 100 charged")
}

// TestCountSettledOnPanic: a unary handler that panics counts as
// codes.Internal, once the panic is recovered by an outer interceptor.
func TestCountSettledOnPanic(t *testing.T) {
	t.Parallel()
	k := standing(t, 5)
	ic := newCounted(t, grpclimit.Limit{Name: "login", Key: grpclimit.KeyByMetadata("x-user"), Limiter: k, Count: failedCalls})
	handler := func(ctx context.Context, req any) (any, error) { panic("boom") }
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		ctx := metadata.NewIncomingContext(context.Background(), metadata.Pairs("x-user", "u"))
		_, _ = ic.Unary()(ctx, nil, &grpc.UnaryServerInfo{FullMethod: mUnary}, handler)
	}()
	assert.Equal(t, "boom", recovered, "the panic went on up")
	assert.Equal(t, 4, remaining(t, k, "u"), "a panic is a failure")
}

// TestCountConfigErrors: Count needs a limiter that can reserve, and no
// Messages.
func TestCountConfigErrors(t *testing.T) {
	t.Parallel()
	log, err := ratelimit.NewKeyed(ratelimit.SlidingLogPolicy(5, time.Minute))
	require.NoError(t, err)
	conc, err := ratelimit.NewConcurrency(2)
	require.NoError(t, err)
	key := grpclimit.KeyByMetadata("x-user")
	for name, l := range map[string]grpclimit.Limit{
		"sliding log":    {Name: "login", Key: key, Limiter: log, Count: failedCalls},
		"not a Reserver": {Name: "login", Key: key, Limiter: struct{ ratelimit.KeyedLimiter }{log}, Count: failedCalls},
		"concurrency":    {Name: "login", Key: key, Concurrency: conc, Count: failedCalls},
		"messages":       {Name: "login", Key: key, Limiter: standing(t, 5), Messages: true, Count: failedCalls},
	} {
		_, err := grpclimit.New([]grpclimit.Limit{l})
		require.Error(t, err, name)
		assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig, name)
		assert.Contains(t, err.Error(), `"login"`, name)
	}
	assert.True(t, errors.Is(grpclimit.ReportCost(context.Background(), -1), ratelimit.ErrInvalidN))
	assert.NoError(t, grpclimit.ReportCost(context.Background(), 3), "no limit counts the call: nothing")
}
