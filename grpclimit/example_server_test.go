package grpclimit_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/grpclimit"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/test/bufconn"
)

// exampleService answers UnaryCall, and each message of a FullDuplexCall.
type exampleService struct {
	testgrpc.UnimplementedTestServiceServer
}

func (exampleService) UnaryCall(context.Context, *testgrpc.SimpleRequest) (*testgrpc.SimpleResponse, error) {
	return &testgrpc.SimpleResponse{}, nil
}

func (exampleService) FullDuplexCall(stream testgrpc.TestService_FullDuplexCallServer) error {
	for {
		if _, err := stream.Recv(); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err // such as the denial of a message
		}
		if err := stream.Send(&testgrpc.StreamingOutputCallResponse{}); err != nil {
			return err
		}
	}
}

// A server allowing each API key 2 calls a minute, and what a standard
// client sees: the rate-limit fields in the header metadata, and on the
// third call ResourceExhausted with the delay to wait in RetryInfo. The
// clock is a fake one, so that the output is always the same.
func ExampleNew() {
	mock := clock.NewMock()
	mock.Set(time.Date(2026, 1, 1, 0, 0, 10, 0, time.UTC))
	perKey, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(2, time.Minute), ratelimit.WithClock(mock))
	if err != nil {
		panic(err)
	}
	ic, err := grpclimit.New([]grpclimit.Limit{
		{Name: "api", Key: grpclimit.KeyByMetadata("x-api-key"), Limiter: perKey},
	}, grpclimit.WithClock(mock))
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ic.Unary()), grpc.ChainStreamInterceptor(ic.Stream()))
	testgrpc.RegisterTestServiceServer(srv, exampleService{})
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

	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "k1")
	for i := 1; i <= 3; i++ {
		var md metadata.MD
		_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.Header(&md))
		st := status.Convert(err)
		fmt.Printf("call %d: %v, ratelimit: %s, ratelimit-policy: %s\n", i, st.Code(), md.Get("ratelimit"), md.Get("ratelimit-policy"))
		if err == nil {
			continue
		}
		fmt.Printf("  message: %s\n", st.Message())
		for _, d := range st.Details() {
			switch d := d.(type) {
			case *errdetails.RetryInfo:
				fmt.Printf("  RetryInfo: retry in %v\n", d.GetRetryDelay().AsDuration())
			case *errdetails.QuotaFailure:
				v := d.GetViolations()[0]
				fmt.Printf("  QuotaFailure: %s, quota %d\n", v.GetSubject(), v.GetQuotaValue())
			}
		}
	}
	// Output:
	// call 1: OK, ratelimit: ["api";r=1;t=50], ratelimit-policy: ["api";q=2;w=60]
	// call 2: OK, ratelimit: ["api";r=0;t=50], ratelimit-policy: ["api";q=2;w=60]
	// call 3: ResourceExhausted, ratelimit: ["api";r=0;t=50], ratelimit-policy: ["api";q=2;w=60]
	//   message: rate limit "api" exceeded, retry in 50 s
	//   RetryInfo: retry in 50s
	//   QuotaFailure: limit:api, quota 2
}

// A limit on the messages clients send on streams: each message the
// handler receives costs 1 of 3 a minute per method; the fourth ends the
// stream with ResourceExhausted.
func ExampleLimit_messages() {
	mock := clock.NewMock()
	mock.Set(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	perMethod, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(3, time.Minute), ratelimit.WithClock(mock))
	if err != nil {
		panic(err)
	}
	ic, err := grpclimit.New([]grpclimit.Limit{
		{Name: "messages", Key: grpclimit.KeyByMethod(), Limiter: perMethod, Messages: true},
	}, grpclimit.WithClock(mock))
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.ChainStreamInterceptor(ic.Stream()))
	testgrpc.RegisterTestServiceServer(srv, exampleService{})
	lis := bufconn.Listen(1 << 16)
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()
	conn, err := grpc.NewClient("passthrough:///example",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		panic(err)
	}
	defer conn.Close()

	stream, err := testgrpc.NewTestServiceClient(conn).FullDuplexCall(context.Background())
	if err != nil {
		panic(err)
	}
	for i := 1; i <= 4; i++ {
		if err := stream.Send(&testgrpc.StreamingOutputCallRequest{}); err != nil {
			break
		}
		_, err := stream.Recv()
		fmt.Printf("message %d: %v\n", i, status.Code(err))
	}
	// Output:
	// message 1: OK
	// message 2: OK
	// message 3: OK
	// message 4: ResourceExhausted
}

// A concurrency limit: each API key may have one stream open at a time.
// A second stream is refused with ResourceExhausted, and no RetryInfo
// (nobody knows when the first will end); once the first ends, a new one
// is admitted.
func ExampleLimit_concurrency() {
	streams, err := ratelimit.NewConcurrency(1)
	if err != nil {
		panic(err)
	}
	ic, err := grpclimit.New([]grpclimit.Limit{
		{Name: "streams", Key: grpclimit.KeyByMetadata("x-api-key"), Concurrency: streams},
	})
	if err != nil {
		panic(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ic.Unary()), grpc.ChainStreamInterceptor(ic.Stream()))
	testgrpc.RegisterTestServiceServer(srv, exampleService{})
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
	ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", "k1")

	first, err := client.FullDuplexCall(ctx)
	if err != nil {
		panic(err)
	}
	_ = first.Send(&testgrpc.StreamingOutputCallRequest{})
	_, _ = first.Recv()
	hdr, _ := first.Header() // sent with the first answer
	fmt.Println("first:", hdr.Get("ratelimit"))

	second, err := client.FullDuplexCall(ctx)
	if err != nil {
		panic(err)
	}
	_, err = second.Recv()
	st := status.Convert(err)
	retry := false
	for _, d := range st.Details() {
		_, ok := d.(*errdetails.RetryInfo)
		retry = retry || ok
	}
	hdr, _ = second.Header()
	fmt.Println("second:", st.Code(), hdr.Get("ratelimit-policy"), "RetryInfo:", retry)

	_ = first.CloseSend()
	_, err = first.Recv() // io.EOF: the stream ended, its permit is back
	fmt.Println("first ended:", errors.Is(err, io.EOF))
	third, err := client.FullDuplexCall(ctx)
	if err != nil {
		panic(err)
	}
	_ = third.Send(&testgrpc.StreamingOutputCallRequest{})
	_, _ = third.Recv()
	hdr, _ = third.Header()
	fmt.Println("third:", hdr.Get("ratelimit"))
	_ = third.CloseSend()
	_, _ = third.Recv()
	// Output:
	// first: ["streams";r=0]
	// second: ResourceExhausted ["streams";q=1;qu="concurrent-requests"] RetryInfo: false
	// first ended: true
	// third: ["streams";r=0]
}
