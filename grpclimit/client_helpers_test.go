package grpclimit

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/protoadapt"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rlkit/ratelimit"
)

var clientEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

const (
	methodUnary  = "/grpc.testing.TestService/UnaryCall"
	methodEmpty  = "/grpc.testing.TestService/EmptyCall"
	methodInput  = "/grpc.testing.TestService/StreamingInputCall"
	methodDuplex = "/grpc.testing.TestService/FullDuplexCall"
)

// newTestClient is NewClient (or NewKeyedClient when key is not nil, with
// a keyed limiter klim) on the clock clk.
func newTestClient(t *testing.T, lim ratelimit.Limiter, klim ratelimit.KeyedLimiter, key KeyFunc, clk ratelimit.Clock, opts ...ClientOption) *Client {
	t.Helper()
	var c *Client
	var err error
	opts = append([]ClientOption{WithClock(clk)}, opts...)
	if key != nil {
		c, err = NewKeyedClient(klim, key, opts...)
	} else {
		c, err = NewClient(lim, opts...)
	}
	require.NoError(t, err)
	return c
}

// testService is a TestService whose unary and stream handlers answer
// from a script of errors (nil: success), and count their calls.
type testService struct {
	grpc_testing.UnimplementedTestServiceServer
	mu      sync.Mutex
	answers []error
	calls   map[string]int
}

// answer queues the answers of the next calls, of any method.
func (s *testService) answer(errs ...error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.answers = append(s.answers, errs...)
}

func (s *testService) next(method string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.calls == nil {
		s.calls = make(map[string]int)
	}
	s.calls[method]++
	if len(s.answers) == 0 {
		return nil
	}
	err := s.answers[0]
	s.answers = s.answers[1:]
	return err
}

// count returns how many calls of method reached the handler.
func (s *testService) count(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[method]
}

func (s *testService) UnaryCall(context.Context, *grpc_testing.SimpleRequest) (*grpc_testing.SimpleResponse, error) {
	if err := s.next(methodUnary); err != nil {
		return nil, err
	}
	return &grpc_testing.SimpleResponse{}, nil
}

func (s *testService) EmptyCall(context.Context, *grpc_testing.Empty) (*grpc_testing.Empty, error) {
	if err := s.next(methodEmpty); err != nil {
		return nil, err
	}
	return &grpc_testing.Empty{}, nil
}

// StreamingInputCall answers from the script after reading the client's
// messages.
func (s *testService) StreamingInputCall(stream grpc.ClientStreamingServer[grpc_testing.StreamingInputCallRequest, grpc_testing.StreamingInputCallResponse]) error {
	for {
		if _, err := stream.Recv(); err != nil {
			if err != io.EOF {
				return err
			}
			break
		}
	}
	if err := s.next(methodInput); err != nil {
		return err
	}
	return stream.SendAndClose(&grpc_testing.StreamingInputCallResponse{})
}

// FullDuplexCall answers from the script after the first message, then
// echoes until the client closes.
func (s *testService) FullDuplexCall(stream grpc.BidiStreamingServer[grpc_testing.StreamingOutputCallRequest, grpc_testing.StreamingOutputCallResponse]) error {
	if _, err := stream.Recv(); err != nil {
		return err
	}
	if err := s.next(methodDuplex); err != nil {
		return err
	}
	for {
		if err := stream.Send(&grpc_testing.StreamingOutputCallResponse{}); err != nil {
			return err
		}
		if _, err := stream.Recv(); err != nil {
			if err == io.EOF {
				return nil
			}
			return err
		}
	}
}

// startServer serves a testService on loopback TCP until the test ends.
func startServer(t *testing.T, opts ...grpc.ServerOption) (*testService, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	svc := &testService{}
	srv := grpc.NewServer(opts...)
	grpc_testing.RegisterTestServiceServer(srv, svc)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	t.Cleanup(func() {
		srv.Stop()
		<-done
	})
	return svc, lis.Addr().String()
}

// dial connects to addr through c's interceptors until the test ends.
func dial(t *testing.T, addr string, c *Client) (grpc_testing.TestServiceClient, *grpc.ClientConn) {
	t.Helper()
	conn, err := grpc.NewClient(addr,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(c.Unary()),
		grpc.WithChainStreamInterceptor(c.Stream()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return grpc_testing.NewTestServiceClient(conn), conn
}

// denial is a server's rate-limit answer asking for a pause of d, with a
// QuotaFailure as grpclimit's server sends.
func denial(d time.Duration) error {
	return denialWith(&errdetails.RetryInfo{RetryDelay: durationpb.New(d)})
}

// denialWith is a ResourceExhausted answer with the given details besides
// a QuotaFailure.
func denialWith(details ...protoadapt.MessageV1) error {
	st := status.New(codes.ResourceExhausted, `rate limit "api" exceeded`)
	quota := &errdetails.QuotaFailure{Violations: []*errdetails.QuotaFailure_Violation{{Subject: "limit:api", Description: "rate limit exceeded"}}}
	st, err := st.WithDetails(append([]protoadapt.MessageV1{quota}, details...)...)
	if err != nil {
		panic(err)
	}
	return st.Err()
}
