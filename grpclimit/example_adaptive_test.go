package grpclimit_test

import (
	"context"
	"fmt"
	"net"
	"time"

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

// Overload protection beside a rate limit: an adaptive concurrency limiter
// (its limit pinned at 5 here, so that the output is exact) sheds the
// least important calls first. With 5 calls in flight, the limit is full
// for default calls: they end UNAVAILABLE with a RetryInfo and the
// trailer grpc-retry-pushback-ms, which gRPC's own retry policy honours;
// a critical call (told by its metadata here) still finds a place in the
// reserve (20% above the limit).
func ExampleWithAdaptive() {
	perMethod, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(100, time.Minute))
	if err != nil {
		panic(err)
	}
	adaptive, err := ratelimit.NewAdaptive(ratelimit.AdaptiveConfig{Initial: 5, Min: 5, Max: 5})
	if err != nil {
		panic(err)
	}
	priority := func(ctx context.Context, method string) ratelimit.Priority {
		if md, _ := metadata.FromIncomingContext(ctx); len(md.Get("x-critical")) > 0 {
			return ratelimit.PriorityCritical
		}
		return ratelimit.PriorityDefault
	}
	ic, err := grpclimit.New([]grpclimit.Limit{{Name: "method", Key: grpclimit.KeyByMethod(), Limiter: perMethod}},
		grpclimit.WithAdaptive(adaptive, priority))
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

	// Five calls in flight (taken here directly, for the example).
	var inFlight []ratelimit.Flight
	for range 5 {
		f, _ := adaptive.Acquire(context.Background(), ratelimit.PriorityDefault)
		inFlight = append(inFlight, f)
	}
	for _, md := range []metadata.MD{nil, metadata.Pairs("x-critical", "1")} {
		var trailer metadata.MD
		ctx := metadata.NewOutgoingContext(context.Background(), md)
		_, err := client.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.Trailer(&trailer))
		st := status.Convert(err)
		fmt.Printf("critical=%v: %v %q pushback=%v\n", md != nil, st.Code(), st.Message(), trailer.Get("grpc-retry-pushback-ms"))
		for _, d := range st.Details() {
			if ri, ok := d.(*errdetails.RetryInfo); ok {
				fmt.Printf("  RetryInfo: retry in %v\n", ri.GetRetryDelay().AsDuration())
			}
		}
	}
	for _, f := range inFlight {
		f.Success()
	}
	_, err = client.UnaryCall(context.Background(), &testgrpc.SimpleRequest{})
	fmt.Printf("once they ended: %v, in flight now: %d\n", status.Code(err), adaptive.InFlight())
	// Output:
	// critical=false: Unavailable "server overloaded, retry in 1 s" pushback=[1000]
	//   RetryInfo: retry in 1s
	// critical=true: OK "" pushback=[]
	// once they ended: OK, in flight now: 0
}
