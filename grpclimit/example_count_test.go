package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/grpclimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

// loginService fails a UnaryCall whose x-password is not "secret".
type loginService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (loginService) UnaryCall(ctx context.Context, _ *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	md, _ := metadata.FromIncomingContext(ctx)
	if p := md.Get("x-password"); len(p) != 1 || p[0] != "secret" {
		return nil, status.Error(codes.Unauthenticated, "wrong password")
	}
	return &testgrpc.SimpleResponse{}, nil
}

// A login limit that counts only failed calls: 3 an hour per user.
// Successful calls are never refused; after the third failure the next
// call is refused with ResourceExhausted before the handler runs, whatever
// the password.
func ExampleLimit_failures() {
	mock := clock.NewMock() // frozen: no window ends during the example
	failed, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(3, time.Hour), ratelimit.WithClock(mock))
	if err != nil {
		panic(err)
	}
	ic, err := grpclimit.New([]grpclimit.Limit{{
		Name:    "login",
		Key:     grpclimit.KeyByMetadata("x-user"),
		Limiter: failed,
		Count: func(c codes.Code, _ int) int {
			if c != codes.OK {
				return 1
			}
			return 0
		},
	}})
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ic.Unary()), grpc.ChainStreamInterceptor(ic.Stream()))
	testgrpc.RegisterTestServiceServer(srv, loginService{})
	lis := bufconn.Listen(1 << 16) // an in-memory listener; use net.Listen in a real server
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient("passthrough:///example",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)
	login := func(password string) {
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-user", "alice", "x-password", password)
		_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
		fmt.Println(password, status.Code(err))
	}
	for range 2 {
		login("secret")
	}
	for range 3 {
		login("guess")
	}
	login("secret")
	// Output:
	// secret OK
	// secret OK
	// guess Unauthenticated
	// guess Unauthenticated
	// guess Unauthenticated
	// secret ResourceExhausted
}
