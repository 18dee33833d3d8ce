package grpclimit_test

import (
	"context"
	"errors"
	"io"
	"net"
	"sync/atomic"
	"testing"

	"github.com/rlkit/ratelimit/grpclimit"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

// testService is grpc_testing's TestService, counting what its handlers
// see.
type testService struct {
	testgrpc.UnimplementedTestServiceServer
	served   atomic.Int64 // unary calls and streams that reached a handler
	received atomic.Int64 // stream messages the handlers received
	// unaryErr, when set, is the error UnaryCall returns.
	unaryErr func(ctx context.Context) error
	// keepOnDenial makes StreamingInputCall count a ResourceExhausted
	// receive in dropped and go on receiving, as a handler that skips
	// denied messages does; leaked counts the denied messages whose
	// payload was still in the message RecvMsg filled.
	keepOnDenial    bool
	dropped, leaked atomic.Int64
	// inputEnd, when set, is called when a StreamingInputCall's client
	// closes its side, with the stream's context and the messages
	// received; its error ends the stream in place of the answer.
	inputEnd func(ctx context.Context, n int32) error
}

func (s *testService) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	s.served.Add(1)
	if s.unaryErr != nil {
		if err := s.unaryErr(ctx); err != nil {
			return nil, err
		}
	}
	return &testgrpc.SimpleResponse{}, nil
}

func (s *testService) EmptyCall(context.Context, *testgrpc.Empty) (*testgrpc.Empty, error) {
	s.served.Add(1)
	return &testgrpc.Empty{}, nil
}

// StreamingInputCall counts the messages it receives until the client
// closes its side, and answers their number; a receive error ends the
// stream with that error. It receives with RecvMsg into one message, as
// handlers that reuse a message do.
func (s *testService) StreamingInputCall(stream testgrpc.TestService_StreamingInputCallServer) error {
	s.served.Add(1)
	var n int32
	m := new(testgrpc.StreamingInputCallRequest)
	for {
		err := stream.RecvMsg(m)
		if errors.Is(err, io.EOF) {
			if s.inputEnd != nil {
				if err := s.inputEnd(stream.Context(), n); err != nil {
					return err
				}
			}
			return stream.SendAndClose(&testgrpc.StreamingInputCallResponse{AggregatedPayloadSize: n})
		}
		if err != nil {
			if s.keepOnDenial && status.Code(err) == codes.ResourceExhausted {
				s.dropped.Add(1)
				if m.GetPayload() != nil {
					s.leaked.Add(1)
				}
				continue
			}
			return err
		}
		n++
		s.received.Add(1)
	}
}

// FullDuplexCall answers each message it receives with one message.
func (s *testService) FullDuplexCall(stream testgrpc.TestService_FullDuplexCallServer) error {
	s.served.Add(1)
	for {
		_, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		s.received.Add(1)
		if err := stream.Send(&testgrpc.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
}

// Full method names of the TestService.
const (
	mUnary   = "/grpc.testing.TestService/UnaryCall"
	mEmpty   = "/grpc.testing.TestService/EmptyCall"
	mInput   = "/grpc.testing.TestService/StreamingInputCall"
	mDuplex  = "/grpc.testing.TestService/FullDuplexCall"
	mService = "grpc.testing.TestService"
)

// serve starts a gRPC server on loopback TCP serving svc behind ic (when
// not nil), and returns a client connected to it. Both are closed when the
// test ends.
func serve(t testing.TB, svc *testService, ic *grpclimit.Interceptor) testgrpc.TestServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return serveOn(t, svc, ic, lis, lis.Addr().String(), nil)
}

// serveBufconn is serve over an in-memory bufconn listener.
func serveBufconn(t testing.TB, svc *testService, ic *grpclimit.Interceptor) testgrpc.TestServiceClient {
	t.Helper()
	lis := bufconn.Listen(1 << 20)
	dial := grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) })
	return serveOn(t, svc, ic, lis, "passthrough:///bufconn", dial)
}

// serveOpts is serve with the server options given.
func serveOpts(t testing.TB, svc *testService, opts []grpc.ServerOption) testgrpc.TestServiceClient {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	return serveListener(t, svc, opts, lis, lis.Addr().String(), nil)
}

func serveOn(t testing.TB, svc *testService, ic *grpclimit.Interceptor, lis net.Listener, target string, dial grpc.DialOption) testgrpc.TestServiceClient {
	t.Helper()
	var opts []grpc.ServerOption
	if ic != nil {
		opts = append(opts, grpc.ChainUnaryInterceptor(ic.Unary()), grpc.ChainStreamInterceptor(ic.Stream()))
	}
	return serveListener(t, svc, opts, lis, target, dial)
}

func serveListener(t testing.TB, svc *testService, opts []grpc.ServerOption, lis net.Listener, target string, dial grpc.DialOption) testgrpc.TestServiceClient {
	t.Helper()
	srv := grpc.NewServer(opts...)
	testgrpc.RegisterTestServiceServer(srv, svc)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	dopts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if dial != nil {
		dopts = append(dopts, dial)
	}
	conn, err := grpc.NewClient(target, dopts...)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = conn.Close()
		srv.Stop()
		<-done
	})
	return testgrpc.NewTestServiceClient(conn)
}
