package envoylimit_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/rlkit/ratelimit/envoylimit"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// rls is a Service served on loopback, with the generated Envoy client.
type rls struct {
	t      *testing.T
	svc    *envoylimit.Service
	client rlspb.RateLimitServiceClient
	clock  *clock.Mock
}

// serve starts a Service for yaml (one file) on a loopback gRPC server,
// on a mock clock at the Unix epoch (the start of every fixed window).
func serve(t *testing.T, yaml string, opts ...envoylimit.Option) *rls {
	t.Helper()
	cfg, err := envoylimit.ParseConfig("test.yaml", []byte(yaml))
	require.NoError(t, err)
	mock := clock.NewMock()
	svc, err := envoylimit.NewService(cfg, append([]envoylimit.Option{envoylimit.WithClock(mock)}, opts...)...)
	require.NoError(t, err)
	return serveService(t, svc, mock)
}

func serveService(t *testing.T, svc *envoylimit.Service, mock *clock.Mock) *rls {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer()
	rlspb.RegisterRateLimitServiceServer(srv, svc)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	conn, err := grpc.NewClient(ln.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close() })
	return &rls{t: t, svc: svc, client: rlspb.NewRateLimitServiceClient(conn), clock: mock}
}

// desc builds a descriptor of key/value pairs.
func desc(kv ...string) *rlcommon.RateLimitDescriptor {
	d := &rlcommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlcommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// withHits sets a descriptor's own hits_addend.
func withHits(d *rlcommon.RateLimitDescriptor, n uint64) *rlcommon.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

// call sends one request and fails the test on an error.
func (r *rls) call(domain string, descs ...*rlcommon.RateLimitDescriptor) *rlspb.RateLimitResponse {
	r.t.Helper()
	resp, err := r.send(&rlspb.RateLimitRequest{Domain: domain, Descriptors: descs})
	require.NoError(r.t, err)
	return resp
}

func (r *rls) send(req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return r.client.ShouldRateLimit(ctx, req)
}

// codes returns the overall code and each status's code, as "OK" and
// "OVER_LIMIT".
func codesOf(resp *rlspb.RateLimitResponse) []string {
	out := []string{resp.GetOverallCode().String()}
	for _, s := range resp.GetStatuses() {
		out = append(out, s.GetCode().String())
	}
	return out
}

// okTimes sends the same request n times and returns how many were OK.
func (r *rls) okTimes(n int, domain string, descs ...*rlcommon.RateLimitDescriptor) int {
	r.t.Helper()
	ok := 0
	for range n {
		if r.call(domain, descs...).GetOverallCode() == rlspb.RateLimitResponse_OK {
			ok++
		}
	}
	return ok
}
