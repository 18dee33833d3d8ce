package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/grpclimit"
)

// deniedOnce answers its first UnaryCall as a rate-limited server does:
// ResourceExhausted with a RetryInfo of 2 s.
type deniedOnce struct {
	grpc_testing.UnimplementedTestServiceServer
	calls atomic.Int32
}

func (s *deniedOnce) UnaryCall(context.Context, *grpc_testing.SimpleRequest) (*grpc_testing.SimpleResponse, error) {
	if s.calls.Add(1) == 1 {
		st, err := status.New(codes.ResourceExhausted, `rate limit "api" exceeded, retry in 2 s`).
			WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(2 * time.Second)})
		if err != nil {
			return nil, err
		}
		return nil, st.Err()
	}
	return &grpc_testing.SimpleResponse{}, nil
}

func ExampleNewClient() {
	// A server on an in-memory listener; a real client dials an address.
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer()
	grpc_testing.RegisterTestServiceServer(srv, &deniedOnce{})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	// At most 10 calls a second leave this client, and it obeys the
	// pauses servers ask for.
	limiter, err := ratelimit.NewTokenBucket(ratelimit.PerSecond(10), 10)
	if err != nil {
		panic(err)
	}
	client, err := grpclimit.NewClient(limiter,
		grpclimit.WithMaxPause(time.Minute),
		grpclimit.WithPauseHook(func(_ context.Context, method string, d time.Duration) {
			fmt.Printf("server paused %s for %v\n", method, d)
		}))
	if err != nil {
		panic(err)
	}
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(client.Unary()),
		grpc.WithChainStreamInterceptor(client.Stream()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	api := grpc_testing.NewTestServiceClient(conn)

	_, err = api.UnaryCall(context.Background(), &grpc_testing.SimpleRequest{})
	fmt.Println("first call:", status.Code(err))
	fmt.Println("paused 2 s:", client.PausedFor(conn.Target(), "") > time.Second)

	// The target is paused for 2 s: a call that cannot wait that long is
	// refused at once, without reaching the server.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = api.UnaryCall(ctx, &grpc_testing.SimpleRequest{})
	fmt.Println("second call:", status.Code(err), errors.Is(err, grpclimit.ErrPauseDeadline))
	// Output:
	// server paused /grpc.testing.TestService/UnaryCall for 2s
	// first call: ResourceExhausted
	// paused 2 s: true
	// second call: DeadlineExceeded true
}
