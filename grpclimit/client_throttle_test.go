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
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

func newTestThrottle(t *testing.T, clk ratelimit.Clock) *ratelimit.Throttle {
	t.Helper()
	th, err := ratelimit.NewThrottle(ratelimit.ThrottleConfig{}, ratelimit.WithClock(clk))
	require.NoError(t, err)
	return th
}

// pushbacks is a server interceptor sending, on the answer to the i-th
// call, the i-th pushback as trailer grpc-retry-pushback-ms ("" for none).
type pushbacks struct {
	mu     sync.Mutex
	values []string
}

func (p *pushbacks) intercept(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
	p.mu.Lock()
	var v string
	if len(p.values) > 0 {
		v, p.values = p.values[0], p.values[1:]
	}
	p.mu.Unlock()
	if v != "" {
		_ = grpc.SetTrailer(ctx, metadata.Pairs(pushbackKey, v))
	}
	return h(ctx, req)
}

// The client asks its throttle before each call, on a loopback server:
// Unavailable and Internal are not accepts, a throttled call never
// reaches the server and fails Unavailable with ErrThrottled.
func TestClientThrottle(t *testing.T) {
	t.Parallel()
	svc, addr := startServer(t)
	clk := fakeclock.NewAnnouncing(clientEpoch)
	c := newTestClient(t, nil, nil, nil, clk, WithThrottle(newTestThrottle(t, clk)))
	client, _ := dial(t, addr, c)
	svc.answer(nil, status.Error(codes.Unavailable, "down"), status.Error(codes.Internal, "broken"), status.Error(codes.NotFound, "no such"))
	ctx := context.Background()
	for i, want := range []codes.Code{codes.OK, codes.Unavailable, codes.Internal} {
		_, err := client.UnaryCall(ctx, unaryReq)
		require.Equal(t, want, status.Code(err), "call %d: %v", i, err)
	}
	_, err := client.UnaryCall(ctx, unaryReq)
	assertNotSent(t, err, codes.Unavailable, ErrThrottled)
	assert.Equal(t, 3, svc.count(methodUnary), "the throttled call was not sent")
	// A second later a probe goes; NotFound is an accept, which forgives.
	clk.Add(time.Second)
	_, err = client.UnaryCall(ctx, unaryReq)
	assert.Equal(t, codes.NotFound, status.Code(err))
	_, err = client.UnaryCall(ctx, unaryReq)
	assert.NoError(t, err)

	// Streams too.
	_, err = c.Stream()(ctx, &grpc.StreamDesc{}, nil, methodDuplex, func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
		return nil, status.Error(codes.Unavailable, "down")
	})
	assert.Equal(t, codes.Unavailable, status.Code(err))
}

// grpc-retry-pushback-ms: 0 or more pauses the scope and the call is
// retried after it (if marked); negative: not retried, even with a
// RetryInfo. Retries go within the budget.
func TestClientPushback(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		answers   []error
		pushbacks []string
		opts      []ClientOption
		waits     []time.Duration
		wantCalls int
		wantCode  codes.Code
	}{
		{"pushback on Unavailable", []error{status.Error(codes.Unavailable, "busy")}, []string{"2000"},
			[]ClientOption{WithRetries(2)}, []time.Duration{2 * time.Second}, 2, codes.OK},
		{"pushback over a shorter RetryInfo", []error{denial(time.Second)}, []string{"3000"},
			[]ClientOption{WithRetries(2)}, []time.Duration{3 * time.Second}, 2, codes.OK},
		{"negative pushback: no retry", []error{denial(time.Second)}, []string{"-1"},
			[]ClientOption{WithRetries(2)}, nil, 1, codes.ResourceExhausted},
		{"unreadable pushback: no retry", []error{status.Error(codes.Unavailable, "busy")}, []string{"soon"},
			[]ClientOption{WithRetries(2)}, nil, 1, codes.Unavailable},
		{"no pushback on Unavailable: no retry", []error{status.Error(codes.Unavailable, "busy")}, nil,
			[]ClientOption{WithRetries(2)}, nil, 1, codes.Unavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			pb := &pushbacks{values: tc.pushbacks}
			svc, addr := startServer(t, grpc.UnaryInterceptor(pb.intercept))
			clk := fakeclock.NewAnnouncing(clientEpoch)
			c := newTestClient(t, nil, nil, nil, clk, tc.opts...)
			client, _ := dial(t, addr, c)
			svc.answer(tc.answers...)
			done := callAsync(MarkRetrySafe(context.Background()), client)
			for _, w := range tc.waits {
				assert.Equal(t, w, clk.Next(t), "the retry waits for the pushback")
				clk.Add(w)
			}
			err := <-done
			clk.None(t)
			assert.Equal(t, tc.wantCode, status.Code(err), "UnaryCall error %v", err)
			assert.Equal(t, tc.wantCalls, svc.count(methodUnary), "calls reaching the server")
		})
	}
}

// Retries go only within the throttle's retry budget: 20 calls
// accepted, then refusals with a pushback of 0 (a backoff): retries <
// 0.1·21 + 1 lets 4 go.
func TestClientThrottleRetryBudget(t *testing.T) {
	t.Parallel()
	values := make([]string, 30)
	answers := make([]error, 30)
	for i := 20; i < 30; i++ {
		values[i], answers[i] = "1", status.Error(codes.Unavailable, "busy")
	}
	pb := &pushbacks{values: values}
	svc, addr := startServer(t, grpc.UnaryInterceptor(pb.intercept))
	clk := fakeclock.NewAnnouncing(clientEpoch)
	c := newTestClient(t, nil, nil, nil, clk, WithThrottle(newTestThrottle(t, clk)), WithRetries(8))
	client, _ := dial(t, addr, c)
	svc.answer(answers...)
	ctx := MarkRetrySafe(context.Background())
	for i := range 20 {
		_, err := client.UnaryCall(ctx, unaryReq)
		require.NoError(t, err, "call %d", i)
	}
	done := callAsync(ctx, client)
	for range 4 {
		assert.Equal(t, time.Millisecond, clk.Next(t), "the retry waits for the pushback")
		clk.Add(time.Millisecond)
	}
	err := <-done
	clk.None(t)
	assert.Equal(t, codes.Unavailable, status.Code(err))
	assert.Equal(t, 20+1+4, svc.count(methodUnary), "the 21st call and its 4 retries")
}

func isThrottled(err error) bool { return errors.Is(err, ErrThrottled) }

// fakeStream is a client stream whose RecvMsg returns recv.
type fakeStream struct {
	grpc.ClientStream
	recv error
}

func (s *fakeStream) RecvMsg(any) error { return s.recv }

// A stream's outcome is told to the throttle once, when it ends: by
// RecvMsg's io.EOF (accepted) or by its status.
func TestClientThrottleStreams(t *testing.T) {
	t.Parallel()
	clk := fakeclock.NewAnnouncing(clientEpoch)
	th := newTestThrottle(t, clk)
	c := newTestClient(t, nil, nil, nil, clk, WithThrottle(th))
	open := func(recv error) grpc.ClientStream {
		cs, err := c.Stream()(context.Background(), &grpc.StreamDesc{}, nil, methodDuplex, func(context.Context, *grpc.StreamDesc, *grpc.ClientConn, string, ...grpc.CallOption) (grpc.ClientStream, error) {
			return &fakeStream{recv: recv}, nil
		})
		require.NoError(t, err)
		return cs
	}
	ok := open(io.EOF)
	for range 3 {
		assert.Equal(t, io.EOF, ok.RecvMsg(nil))
	}
	// One accept (recorded once): two failures more still go.
	for range 2 {
		failed := open(status.Error(codes.Unavailable, "down"))
		_ = failed.RecvMsg(nil)
		_ = failed.RecvMsg(nil)
	}
	_, err := c.Stream()(context.Background(), &grpc.StreamDesc{}, nil, methodDuplex, nil)
	assertNotSent(t, err, codes.Unavailable, ErrThrottled)
}
