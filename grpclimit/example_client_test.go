package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
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
	limiter, err := ratelimit.NewTokenBucket(ratelimit.Per(10, time.Second), 10)
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
	fmt.Println("paused 2 s:", client.PausedFor(conn.Target(), "", "") > time.Second)

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

// emptyService answers every EmptyCall.
type emptyService struct {
	grpc_testing.UnimplementedTestServiceServer
}

func (emptyService) EmptyCall(context.Context, *grpc_testing.Empty) (*grpc_testing.Empty, error) {
	return &grpc_testing.Empty{}, nil
}

// instantClock is a fake clock on which every wait ends at once: After
// moves the time forward by d. Shared by goroutines, so it has a mutex.
type instantClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *instantClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *instantClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(max(d, 0))
	ch := make(chan time.Time, 1)
	ch <- c.now
	return ch
}

// A client retries the calls marked safe after the pause the server asks
// for; the others get the server's answer. The server here runs this
// package's interceptors, one call a minute, on a fake clock shared with
// the client, so that the example's waits take no time. It sends no
// rate-limit metadata (NoFields), so the client learns of the limit only
// from a refusal; with the fields, it would wait before the call instead
// and never be refused (see ExampleNewClient_pacing).
func ExampleMarkRetrySafe() {
	clk := &instantClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	perMinute, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(1, time.Minute), ratelimit.WithClock(clk))
	if err != nil {
		panic(err)
	}
	server, err := grpclimit.New([]grpclimit.Limit{{Name: "api", Key: grpclimit.KeyByMethod(), Limiter: perMinute}},
		grpclimit.WithClock(clk), grpclimit.WithFields(grpclimit.NoFields))
	if err != nil {
		panic(err)
	}
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.UnaryInterceptor(server.Unary()))
	grpc_testing.RegisterTestServiceServer(srv, emptyService{})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	client, err := grpclimit.NewClient(nil, grpclimit.WithClock(clk), grpclimit.WithRetries(1),
		grpclimit.WithPauseHook(func(_ context.Context, _ string, d time.Duration) {
			fmt.Println("server asked for a pause of", d)
		}))
	if err != nil {
		panic(err)
	}
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(client.Unary()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	api := grpc_testing.NewTestServiceClient(conn)

	_, err = api.EmptyCall(context.Background(), &grpc_testing.Empty{})
	fmt.Println("first:", status.Code(err))
	_, err = api.EmptyCall(grpclimit.MarkRetrySafe(context.Background()), &grpc_testing.Empty{})
	fmt.Println("second, marked safe:", status.Code(err))
	_, err = api.EmptyCall(context.Background(), &grpc_testing.Empty{})
	fmt.Println("third, not marked:", status.Code(err))
	// Output:
	// first: OK
	// server asked for a pause of 1m0s
	// second, marked safe: OK
	// server asked for a pause of 1m0s
	// third, not marked: ResourceExhausted
}

// A client paces itself by the rate-limit metadata of the server's answers
// (this package's server interceptors send it): the server allows 2 calls
// a minute, and the client, told on the second answer that the quota is
// spent, waits for the window's end instead of being refused. The clock is
// fake, shared by both, so the minute takes no time.
func ExampleNewClient_pacing() {
	clk := &instantClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	start := clk.Now()
	perMinute, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(2, time.Minute), ratelimit.WithClock(clk))
	if err != nil {
		panic(err)
	}
	server, err := grpclimit.New([]grpclimit.Limit{{Name: "api", Key: grpclimit.KeyByMethod(), Limiter: perMinute}}, grpclimit.WithClock(clk))
	if err != nil {
		panic(err)
	}
	lis := bufconn.Listen(1 << 20)
	srv := grpc.NewServer(grpc.UnaryInterceptor(server.Unary()))
	grpc_testing.RegisterTestServiceServer(srv, emptyService{})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	client, err := grpclimit.NewClient(nil, grpclimit.WithClock(clk))
	if err != nil {
		panic(err)
	}
	conn, err := grpc.NewClient("passthrough:///bufnet",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(client.Unary()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()
	api := grpc_testing.NewTestServiceClient(conn)
	for range 5 {
		_, err := api.EmptyCall(context.Background(), &grpc_testing.Empty{})
		fmt.Printf("t=%v: %v\n", clk.Now().Sub(start), status.Code(err))
	}
	// Output:
	// t=0s: OK
	// t=0s: OK
	// t=1m0s: OK
	// t=1m0s: OK
	// t=2m0s: OK
}
