package grpclimit_test

import (
	"context"
	"testing"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/grpclimit"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// fakeStream is a grpc.ServerTransportStream that keeps the last header
// set, so that the interceptor can be called without a network.
type fakeStream struct {
	header metadata.MD
}

func (s *fakeStream) Method() string                  { return mUnary }
func (s *fakeStream) SetHeader(md metadata.MD) error  { s.header = md; return nil }
func (s *fakeStream) SendHeader(md metadata.MD) error { return nil }
func (s *fakeStream) SetTrailer(md metadata.MD) error { return nil }

// benchUnary returns the unary interceptor of one limit keyed by method,
// that admits every call, a context carrying a fake stream, and the call
// to make.
func benchUnary(tb testing.TB, fields grpclimit.FieldSet) func(ctx context.Context) {
	tb.Helper()
	lim := newKeyed(tb, ratelimit.TokenBucketPolicy(ratelimit.Per(1e9, time.Second), 1e9), ratelimit.Clock(nil))
	ic := newIC(tb, []grpclimit.Limit{{Name: "api", Key: grpclimit.KeyByMethod(), Limiter: lim}}, grpclimit.WithFields(fields))
	u := ic.Unary()
	info := &grpc.UnaryServerInfo{FullMethod: mUnary}
	handler := func(ctx context.Context, req any) (any, error) { return req, nil }
	return func(ctx context.Context) {
		if _, err := u(ctx, info, info, handler); err != nil {
			tb.Fatal(err)
		}
	}
}

// BenchmarkUnaryInterceptor measures the interceptor's own cost per
// admitted unary call (the limiter's included, gRPC's transport excluded).
func BenchmarkUnaryInterceptor(b *testing.B) {
	for _, v := range []struct {
		name   string
		fields grpclimit.FieldSet
	}{{"AllFields", grpclimit.XRateLimitFields | grpclimit.IETFFields}, {"NoFields", grpclimit.NoFields}} {
		b.Run(v.name+"/serial", func(b *testing.B) {
			call := benchUnary(b, v.fields)
			ctx := grpc.NewContextWithServerTransportStream(context.Background(), &fakeStream{})
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				call(ctx)
			}
		})
		b.Run(v.name+"/parallel", func(b *testing.B) {
			call := benchUnary(b, v.fields)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				ctx := grpc.NewContextWithServerTransportStream(context.Background(), &fakeStream{})
				for pb.Next() {
					call(ctx)
				}
			})
		})
	}
}

// TestUnaryInterceptorAllocs holds the hot path to its budget: nothing
// with NoFields, only the header metadata with fields.
func TestUnaryInterceptorAllocs(t *testing.T) {
	ctx := grpc.NewContextWithServerTransportStream(context.Background(), &fakeStream{})
	if a := testing.AllocsPerRun(1000, func() { benchUnary(t, grpclimit.NoFields)(ctx) }); a < 0 {
		t.Fatal(a) // warm-up only: construction allocates
	}
	call := benchUnary(t, grpclimit.NoFields)
	if a := testing.AllocsPerRun(1000, func() { call(ctx) }); a != 0 {
		t.Errorf("NoFields: %v allocations per call, want 0", a)
	}
	call = benchUnary(t, grpclimit.XRateLimitFields|grpclimit.IETFFields)
	if a := testing.AllocsPerRun(1000, func() { call(ctx) }); a > 4 {
		t.Errorf("AllFields: %v allocations per call, want at most 4 (the metadata map, its values)", a)
	}
}
