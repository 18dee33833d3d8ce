package benchmarks

import (
	"context"
	"testing"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/grpclimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/types/known/emptypb"
)

// oursGRPC returns grpclimit's unary interceptor with one limit keyed by
// the full method name, with every rate-limit field (fields) or none.
func oursGRPC(tb testing.TB, fields bool) grpc.UnaryServerInterceptor {
	tb.Helper()
	k, err := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(grpcLimit, grpcPer), grpcLimit))
	if err != nil {
		tb.Fatal(err)
	}
	set := grpclimit.NoFields
	if fields {
		set = grpclimit.XRateLimitFields | grpclimit.IETFFields
	}
	i, err := grpclimit.New([]grpclimit.Limit{{Name: "method", Key: grpclimit.KeyByMethod(), Limiter: k}}, grpclimit.WithFields(set))
	if err != nil {
		tb.Fatal(err)
	}
	return i.Unary()
}

// TestGRPCLikeForLike checks that every interceptor compared admits the
// benchmarks' calls, called directly and over bufconn, and that only
// ratelimit-grpclimit sets header metadata: the rate-limit fields, which a
// client reads with grpc.Header.
func TestGRPCLikeForLike(t *testing.T) {
	fields := []string{"ratelimit-policy", "ratelimit", "x-ratelimit-limit", "x-ratelimit-remaining", "x-ratelimit-reset"}
	for _, lib := range grpcLibs() {
		t.Run(lib.name, func(t *testing.T) {
			call, st := directCall(lib.unary(t))
			if err := call(); err != nil {
				t.Fatalf("direct call: %v", err)
			}
			cc := bufconnServer(t, lib.unary(t))
			var md metadata.MD
			if err := cc.Invoke(context.Background(), grpcMethod, &emptypb.Empty{}, &emptypb.Empty{}, grpc.Header(&md)); err != nil {
				t.Fatalf("bufconn call: %v", err)
			}
			want := lib.name == "ratelimit-grpclimit"
			for _, f := range fields {
				if got := len(st.header.Get(f)) > 0; got != want {
					t.Errorf("direct call: header %s set = %v, want %v (%v)", f, got, want, st.header)
				}
				if got := len(md.Get(f)) > 0; got != want {
					t.Errorf("bufconn: header %s received = %v, want %v (%v)", f, got, want, md)
				}
			}
			if want {
				if got, w := md.Get("ratelimit-policy"), `"method";q=1073741824;w=60`; len(got) != 1 || got[0] != w {
					t.Errorf("bufconn: ratelimit-policy %q, want %q", got, w)
				}
			}
		})
	}
}
