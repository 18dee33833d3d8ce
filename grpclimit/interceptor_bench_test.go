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
	return benchUnaryConc(tb, fields, false)
}

// benchUnaryConc is benchUnary, with a concurrency limit in memory beside
// the rate limit when conc.
func benchUnaryConc(tb testing.TB, fields grpclimit.FieldSet, conc bool) func(ctx context.Context) {
	tb.Helper()
	lim := newKeyed(tb, ratelimit.TokenBucketPolicy(ratelimit.Per(1e9, time.Second), 1e9), ratelimit.Clock(nil))
	limits := []grpclimit.Limit{{Name: "api", Key: grpclimit.KeyByMethod(), Limiter: lim}}
	if conc {
		c, err := ratelimit.NewConcurrency(1 << 30)
		if err != nil {
			tb.Fatal(err)
		}
		limits = append(limits, grpclimit.Limit{Name: "inflight", Key: grpclimit.KeyByMethod(), Concurrency: c})
	}
	ic := newIC(tb, limits, grpclimit.WithFields(fields))
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
		conc   bool
	}{
		{"AllFields", grpclimit.XRateLimitFields | grpclimit.IETFFields, false},
		{"NoFields", grpclimit.NoFields, false},
		// A concurrency limit beside the rate limit: compare with AllFields.
		{"AllFields+conc", grpclimit.XRateLimitFields | grpclimit.IETFFields, true},
	} {
		b.Run(v.name+"/serial", func(b *testing.B) {
			call := benchUnaryConc(b, v.fields, v.conc)
			ctx := grpc.NewContextWithServerTransportStream(context.Background(), &fakeStream{})
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				call(ctx)
			}
		})
		b.Run(v.name+"/parallel", func(b *testing.B) {
			call := benchUnaryConc(b, v.fields, v.conc)
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
	call = benchUnaryConc(t, grpclimit.NoFields, true)
	if a := testing.AllocsPerRun(1000, func() { call(ctx) }); a != 0 {
		t.Errorf("NoFields with a concurrency limit: %v allocations per call, want 0", a)
	}
	call = benchUnary(t, grpclimit.XRateLimitFields|grpclimit.IETFFields)
	if a := testing.AllocsPerRun(1000, func() { call(ctx) }); a > 4 {
		t.Errorf("AllFields: %v allocations per call, want at most 4 (the metadata map, its values)", a)
	}
}
