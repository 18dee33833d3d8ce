package envoylimit_test

import (
	"context"
	"strconv"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/rlkit/ratelimit/envoylimit"
)

const benchConfig = `
domain: edge
descriptors:
  - key: remote_address
    rate_limit: {unit: second, requests_per_unit: 1000000}
  - key: path
    value: /api/*
    rate_limit: {unit: minute, requests_per_unit: 100000000}
`

// BenchmarkShouldRateLimit is one decision of two descriptors (a per-IP
// limit over 10,000 addresses and a wildcard path limit), in memory,
// called directly: the service's own cost, without gRPC.
func BenchmarkShouldRateLimit(b *testing.B) {
	cfg, err := envoylimit.ParseConfig("bench.yaml", []byte(benchConfig))
	if err != nil {
		b.Fatal(err)
	}
	svc, err := envoylimit.NewService(cfg)
	if err != nil {
		b.Fatal(err)
	}
	reqs := make([]*rlspb.RateLimitRequest, 10000)
	for i := range reqs {
		reqs[i] = &rlspb.RateLimitRequest{Domain: "edge", Descriptors: []*rlcommon.RateLimitDescriptor{
			{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "remote_address", Value: "10.0." + strconv.Itoa(i/256) + "." + strconv.Itoa(i%256)}}},
			{Entries: []*rlcommon.RateLimitDescriptor_Entry{{Key: "path", Value: "/api/items/" + strconv.Itoa(i%100)}}},
		}}
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			resp, err := svc.ShouldRateLimit(ctx, reqs[i%len(reqs)])
			if err != nil || resp.GetOverallCode() != rlspb.RateLimitResponse_OK {
				b.Fatal(err, resp.GetOverallCode())
			}
			i++
		}
	})
}
