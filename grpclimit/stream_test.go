package grpclimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/grpclimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// input is the end of a StreamingInputCall: the server's count of
// messages, the stream's error, its header and trailer metadata.
type input struct {
	n            int32
	err          error
	hdr, trailer metadata.MD
}

// sendInput opens a StreamingInputCall, sends n messages and closes it.
func sendInput(t *testing.T, c testgrpc.TestServiceClient, key string, n int) input {
	t.Helper()
	ctx := withKey(context.Background(), key)
	s, err := c.StreamingInputCall(ctx)
	require.NoError(t, err)
	for i := 0; i < n; i++ {
		if err := s.Send(&testgrpc.StreamingInputCallRequest{Payload: &testgrpc.Payload{Body: []byte("item")}}); err != nil {
			break // the server ended the stream: CloseAndRecv has its status
		}
	}
	resp, err := s.CloseAndRecv()
	hdr, _ := s.Header()
	return input{resp.GetAggregatedPayloadSize(), err, hdr, s.Trailer()}
}

// TestStreamCreationLimited: opening a stream is charged like a unary
// call, with the fields in its header; its messages are not charged in
// call limits.
func TestStreamCreationLimited(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	lim := newKeyed(t, ratelimit.FixedWindowPolicy(2, time.Minute), mock)
	svc := &testService{}
	c := serve(t, svc, newIC(t, []grpclimit.Limit{{Name: "streams", Key: grpclimit.KeyByMetadata("x-api-key"), Limiter: lim}}, grpclimit.WithClock(mock)))
	for i, rem := range []string{"1", "0"} {
		in := sendInput(t, c, "k1", 10)
		require.NoError(t, in.err, "stream %d", i+1)
		assert.Equal(t, int32(10), in.n, "messages are not charged in call limits")
		assert.Equal(t, rem, fieldsOf(in.hdr).remaining)
	}
	in := sendInput(t, c, "k1", 1)
	st, d := decode(t, in.err)
	assert.Equal(t, codes.ResourceExhausted, st.Code())
	require.NotNil(t, d.retry)
	assert.Equal(t, time.Minute, d.retry.GetRetryDelay().AsDuration())
	assert.Equal(t, "60", fieldsOf(in.hdr).retry)
	assert.Equal(t, int64(2), svc.served.Load(), "a denied stream reached its handler")
	// Unary calls share the quota.
	_, err := unary(t, c, "k1")
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
}

// TestStreamMessagesLimited: a Messages limit charges each received
// message at its cost; the denied message is dropped and ends the stream
// with ResourceExhausted; unary calls and stream creation are not
// charged in it.
func TestStreamMessagesLimited(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		cost   int
		admits int32
	}{{"cost 1", 0, 5}, {"cost 2", 2, 2}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mock := fakeclock.New(epoch)
			msgs := newKeyed(t, ratelimit.FixedWindowPolicy(5, time.Minute), mock)
			var opts []grpclimit.Option
			opts = append(opts, grpclimit.WithClock(mock))
			if tc.cost > 0 {
				opts = append(opts, grpclimit.WithMessageCost(func(_ context.Context, method string, msg any) int {
					if _, ok := msg.(*testgrpc.StreamingInputCallRequest); !ok || method != mInput {
						return 100
					}
					return tc.cost
				}))
			}
			svc := &testService{}
			c := serve(t, svc, newIC(t, []grpclimit.Limit{{Name: "msgs", Key: grpclimit.KeyByMetadata("x-api-key"), Limiter: msgs, Messages: true}}, opts...))
			for i := 0; i < 3; i++ {
				_, err := unary(t, c, "k1")
				require.NoError(t, err, "unary calls are not charged in a Messages limit")
			}
			in := sendInput(t, c, "k1", 10)
			st, d := decode(t, in.err)
			assert.Equal(t, codes.ResourceExhausted, st.Code(), "%v", in.err)
			assert.Zero(t, in.n)
			require.NotNil(t, d.retry)
			assert.Equal(t, time.Minute, d.retry.GetRetryDelay().AsDuration())
			require.NotNil(t, d.quota)
			assert.Equal(t, "quota of 5 exhausted (stream message denied)", d.quota.GetViolations()[0].GetDescription())
			assert.Equal(t, "60", fieldsOf(in.trailer).retry, "the denial's fields are in the trailer")
			assert.Equal(t, int64(tc.admits), svc.received.Load(), "messages delivered to the handler")
			// Another key has its own quota.
			in = sendInput(t, c, "k2", int(tc.admits))
			require.NoError(t, in.err)
			assert.Equal(t, tc.admits, in.n)
		})
	}
}

// TestStreamMessagesBidi: on a bidirectional stream the handler gets the
// admitted messages one by one and the denial ends the stream.
func TestStreamMessagesBidi(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	calls := newKeyed(t, ratelimit.FixedWindowPolicy(10, time.Minute), mock)
	msgs := newKeyed(t, ratelimit.FixedWindowPolicy(2, time.Minute), mock)
	svc := &testService{}
	c := serve(t, svc, newIC(t, []grpclimit.Limit{
		{Name: "calls", Key: grpclimit.KeyByMethod(), Limiter: calls},
		{Name: "msgs", Key: grpclimit.KeyByMethod(), Limiter: msgs, Messages: true},
	}, grpclimit.WithClock(mock)))
	s, err := c.FullDuplexCall(context.Background())
	require.NoError(t, err)
	for i := 0; i < 2; i++ {
		require.NoError(t, s.Send(&testgrpc.StreamingOutputCallRequest{}))
		_, err := s.Recv()
		require.NoError(t, err, "message %d", i+1)
	}
	hdr, err := s.Header()
	require.NoError(t, err)
	assert.Equal(t, `"calls";q=10;w=60`, fieldsOf(hdr).policy, "the creation's fields")
	require.NoError(t, s.Send(&testgrpc.StreamingOutputCallRequest{}))
	_, err = s.Recv()
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Contains(t, status.Convert(err).Message(), `rate limit "msgs" exceeded`)
	assert.Equal(t, int64(2), svc.received.Load())
	d, perr := calls.Peek(context.Background(), mDuplex, 0)
	require.NoError(t, perr)
	assert.Equal(t, 9, d.Remaining, "messages charged in the call limit")
}

// TestStreamMessagesDeniedKey: a key of a Messages limit's DeniedKeys ends
// the stream with PermissionDenied at its first message.
func TestStreamMessagesDeniedKey(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	msgs := newKeyed(t, ratelimit.FixedWindowPolicy(5, time.Minute), mock)
	svc := &testService{}
	c := serve(t, svc, newIC(t, []grpclimit.Limit{{Name: "msgs", Key: grpclimit.KeyByMetadata("x-api-key"), Limiter: msgs, Messages: true, DeniedKeys: []string{"leaked"}}}, grpclimit.WithClock(mock)))
	in := sendInput(t, c, "leaked", 3)
	assert.Equal(t, codes.PermissionDenied, status.Code(in.err))
	assert.Zero(t, svc.received.Load())
}

// TestStreamRecvErrorsPassThrough: the wrapper charges nothing for a
// failed receive (the client's end of stream) and returns its error as is.
func TestStreamRecvErrorsPassThrough(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	msgs := newKeyed(t, ratelimit.FixedWindowPolicy(5, time.Minute), mock)
	svc := &testService{}
	c := serve(t, svc, newIC(t, []grpclimit.Limit{{Name: "msgs", Key: grpclimit.KeyByMethod(), Limiter: msgs, Messages: true}}, grpclimit.WithClock(mock)))
	for i := 0; i < 3; i++ {
		in := sendInput(t, c, "k", 1)
		require.NoError(t, in.err)
		assert.Equal(t, int32(1), in.n)
	}
	d, err := msgs.Peek(context.Background(), mInput, 0)
	require.NoError(t, err)
	assert.Equal(t, 2, d.Remaining, "io.EOF was charged")
}

// TestStreamDeniedMessagesTrailerOnce: a handler that skips denied
// messages and keeps receiving gets the denial's fields in its trailer
// once, however many messages are denied: each denial appending its own
// fields grew the trailer without bound, past the client's header limit.
// A denied message is not left in the message RecvMsg was given.
func TestStreamDeniedMessagesTrailerOnce(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	msgs := newKeyed(t, ratelimit.FixedWindowPolicy(2, time.Minute), mock)
	svc := &testService{keepOnDenial: true}
	c := serve(t, svc, newIC(t, []grpclimit.Limit{{Name: "msgs", Key: grpclimit.KeyByMetadata("x-api-key"), Limiter: msgs, Messages: true}}, grpclimit.WithClock(mock)))
	const sent = 2000
	in := sendInput(t, c, "k1", sent)
	require.NoError(t, in.err, "the handler skipped the denied messages")
	assert.Equal(t, int32(2), in.n)
	assert.Equal(t, int64(sent-2), svc.dropped.Load())
	assert.Zero(t, svc.leaked.Load(), "a denied message was left decoded in the handler's message")
	for _, name := range []string{"ratelimit-policy", "ratelimit", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset", "retry-after"} {
		assert.Equal(t, 1, len(in.trailer.Get(name)), "values of trailer field %s", name)
	}
	assert.Equal(t, "60", fieldsOf(in.trailer).retry)
}

// TestStreamTrailerOnlyForLastDenial: a handler that skipped a denied
// message and then received admitted ones ends without the denial's
// fields in its trailer: they no longer describe the stream's quota.
func TestStreamTrailerOnlyForLastDenial(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	msgs := newKeyed(t, ratelimit.FixedWindowPolicy(2, time.Minute), mock)
	svc := &testService{keepOnDenial: true}
	c := serve(t, svc, newIC(t, []grpclimit.Limit{{Name: "msgs", Key: grpclimit.KeyByMetadata("x-api-key"), Limiter: msgs, Messages: true}}, grpclimit.WithClock(mock)))
	s, err := c.StreamingInputCall(withKey(context.Background(), "k1"))
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		require.NoError(t, s.Send(&testgrpc.StreamingInputCallRequest{}))
	}
	require.Eventually(t, func() bool { return svc.dropped.Load() == 1 }, 10*time.Second, time.Millisecond, "the third message is denied")
	mock.Add(time.Minute)
	require.NoError(t, s.Send(&testgrpc.StreamingInputCallRequest{}))
	resp, err := s.CloseAndRecv()
	require.NoError(t, err)
	assert.Equal(t, int32(3), resp.GetAggregatedPayloadSize())
	assert.Empty(t, s.Trailer().Get("retry-after"), "a stale denial's fields in the trailer")
	assert.Empty(t, s.Trailer().Get("ratelimit"))
}
