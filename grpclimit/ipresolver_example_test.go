package grpclimit_test

import (
	"context"
	"fmt"
	"log"
	"net"
	"time"

	"github.com/benbjohnson/clock"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/grpclimit"
)

// A server behind a proxy that appends the address it accepted each call
// from to x-forwarded-for, allowing each client one call a minute. Here
// the proxy is the loopback client itself: the resolver trusts 127.0.0.1
// and keys each call by the rightmost address the proxy did not vouch for,
// whatever the client wrote to its left. The clock is a fake one, so that
// the output is always the same.
func ExampleNewIPResolver() {
	res, err := grpclimit.NewIPResolver(grpclimit.TrustedProxies("127.0.0.1", "10.0.0.0/8"))
	if err != nil {
		log.Fatal(err)
	}
	mock := clock.NewMock()
	perClient, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(1, time.Minute), ratelimit.WithClock(mock))
	if err != nil {
		log.Fatal(err)
	}
	ic, err := grpclimit.New([]grpclimit.Limit{
		{Name: "per-client", Key: res.Key, Limiter: perClient},
	}, grpclimit.WithClock(mock))
	if err != nil {
		log.Fatal(err)
	}
	// Shows each call's key and outcome (the key is logged here for the
	// example's sake: the interceptor never logs it).
	show := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		key, _ := res.Key(ctx, info.FullMethod)
		resp, err := handler(ctx, req)
		fmt.Printf("%-18s %v\n", key, status.Code(err))
		return resp, err
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(show, ic.Unary()))
	testgrpc.RegisterTestServiceServer(srv, exampleService{})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := testgrpc.NewTestServiceClient(conn)

	for _, xff := range []string{
		"198.51.100.9",                    // a client, through one proxy
		"6.6.6.6, 198.51.100.9",           // the same client, forging a hop to its left
		"6.6.6.6, 198.51.100.9, 10.0.0.2", // the same, through an inner proxy
		"2001:db8:1:2::7",                 // IPv6 clients are keyed by /64
		"",                                // no proxy header: the peer itself
	} {
		ctx := context.Background()
		if xff != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-forwarded-for", xff)
		}
		_, _ = client.UnaryCall(ctx, &testgrpc.SimpleRequest{})
	}
	// Output:
	// 198.51.100.9       OK
	// 198.51.100.9       ResourceExhausted
	// 198.51.100.9       ResourceExhausted
	// 2001:db8:1:2::/64  OK
	// 127.0.0.1          OK
}
