package envoylimit_test

import (
	"context"
	"fmt"
	"log"
	"net"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/rlkit/ratelimit/envoylimit"
	"google.golang.org/grpc"
)

const exampleConfig = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit:
      unit: minute
      requests_per_unit: 2
  - key: api_key
    rate_limit:
      algorithm: tokenbucket # an extension: 5 a second, bursts of 10
      unit: second
      requests_per_unit: 5
      burst: 10
`

// A Service answers Envoy's calls; here called directly, as gRPC would.
func ExampleNewService() {
	cfg, err := envoylimit.ParseConfig("edge.yaml", []byte(exampleConfig))
	if err != nil {
		log.Fatal(err)
	}
	svc, err := envoylimit.NewService(cfg)
	if err != nil {
		log.Fatal(err)
	}
	req := &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{{
		Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "203.0.113.7"}},
	}}}
	for range 3 {
		resp, err := svc.ShouldRateLimit(context.Background(), req)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Println(resp.GetOverallCode(), resp.GetStatuses()[0].GetLimitRemaining())
	}
	// Output:
	// OK 1
	// OK 0
	// OVER_LIMIT 0
}

// Registering the Service on a gRPC server, as Envoy's rate limit filter
// expects it (its cluster pointing at this address).
func ExampleService_grpc() {
	cfg, err := envoylimit.ParseConfig("edge.yaml", []byte(exampleConfig))
	if err != nil {
		log.Fatal(err)
	}
	svc, err := envoylimit.NewService(cfg, envoylimit.WithHeaders(envoylimit.EnvoyHeaders))
	if err != nil {
		log.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	srv := grpc.NewServer()
	rlspb.RegisterRateLimitServiceServer(srv, svc)
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()
	fmt.Println("serving", cfg.Domains())
	// Output: serving [edge]
}
