package grpclimit_test

import (
	"context"
	"fmt"
	"log"
	"net"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	"github.com/rlkit/ratelimit/grpclimit"
)

// A server behind a proxy that appends the address it accepted the call
// from to x-forwarded-for. Here the proxy is the loopback client itself:
// the resolver trusts 127.0.0.1 and keys each call by the rightmost
// address the proxy did not vouch for, whatever the client wrote to its
// left. Use res.Key as a Limit's Key.
func ExampleNewIPResolver() {
	res, err := grpclimit.NewIPResolver(grpclimit.TrustedProxies("127.0.0.1", "10.0.0.0/8"))
	if err != nil {
		log.Fatal(err)
	}
	show := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		key, _ := res.Key(ctx, info.FullMethod)
		fmt.Println("key:", key)
		return handler(ctx, req)
	}

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer(grpc.UnaryInterceptor(show))
	healthpb.RegisterHealthServer(srv, health.NewServer())
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	client := healthpb.NewHealthClient(conn)

	for _, xff := range []string{
		"",                                // no proxy header: the peer
		"198.51.100.9",                    // one proxy
		"6.6.6.6, 198.51.100.9, 10.0.0.2", // a forged hop, the client, an inner proxy
		"2001:db8:1:2::7",                 // IPv6 clients are keyed by /64
	} {
		ctx := context.Background()
		if xff != "" {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-forwarded-for", xff)
		}
		if _, err := client.Check(ctx, &healthpb.HealthCheckRequest{}); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// key: 127.0.0.1
	// key: 198.51.100.9
	// key: 198.51.100.9
	// key: 2001:db8:1:2::/64
}
