package benchmarks

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/grpc-ecosystem/go-grpc-middleware/v2/interceptors/ratelimit"
	"golang.org/x/time/rate"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/test/bufconn"
	"google.golang.org/protobuf/types/known/emptypb"
)

// The gRPC suites measure what a rate-limiting server interceptor adds to
// each admitted unary call, with a limit no run reaches, in one run. Names
// are Benchmark<Suite>/<library>/<mode>:
//
//	bare                          no interceptor, the baseline
//	grpcmw-xtimerate              go-grpc-middleware/v2's
//	                              ratelimit.UnaryServerInterceptor with a
//	                              Limiter whose Limit is one
//	                              golang.org/x/time/rate Limiter's Allow (one
//	                              limit for the whole server: no key, no
//	                              metadata)
//	ratelimit-grpclimit           grpclimit, one limit keyed by the full
//	                              method name (a token bucket), with all the
//	                              rate-limit fields as header metadata
//	                              (both sets, the default)
//	ratelimit-grpclimit-nofields  the same with NoFields: no metadata, the
//	                              like-for-like comparison with grpcmw
//
// Both limiters are token buckets of 2^30 tokens refilled at 2^30 a minute,
// so every call is admitted. An interceptor's added cost is its ns/op minus
// bare's in the same run and mode (benchratio -minus bare); the goal
// is ours at most 0.5x grpcmw's added cost, with no allocation beyond
// gRPC's own.
//
// BenchmarkGRPCUnary calls the interceptor function directly with a no-op
// handler, as gRPC does for a unary call: the context holds a fake
// grpc.ServerTransportStream (so grpc.SetHeader works and costs nothing
// beyond the interceptor's own metadata) and the method's UnaryServerInfo.
// bare calls the handler alone. serial is one caller; in parallel every
// goroutine is its own call context (as every call is on a server) and all
// charge the same key, the method, as grpcmw's one limiter is shared.
//
// BenchmarkGRPCBufconn makes real unary calls (an empty request and
// response, a hand-written service) through a grpc.ClientConn to a
// grpc.Server over an in-memory bufconn listener, so it counts what the
// interceptor makes gRPC do besides (sending the header metadata, for
// both sets). A call costs tens of microseconds, two orders of magnitude
// above the interceptors, so the added cost is a small difference of two
// noisy numbers: read it with the spread benchratio -minus prints.
//
// Modes run outer and libraries inner, so compared numbers are taken
// seconds apart.

// grpcMethod is the one method of the benchmark service.
const grpcMethod = "/bench.Echo/Unary"

// grpcLimit and grpcPer configure every limiter compared: 2^30 calls a
// minute, a bucket of 2^30, so no run is ever refused.
const (
	grpcLimit = 1 << 30
	grpcPer   = time.Minute
)

// grpcLib is one interceptor compared; unary returns a fresh one, or nil
// for bare.
type grpcLib struct {
	name  string
	unary func(tb testing.TB) grpc.UnaryServerInterceptor
}

func grpcLibs() []grpcLib {
	return []grpcLib{
		{"bare", func(testing.TB) grpc.UnaryServerInterceptor { return nil }},
		{"grpcmw-xtimerate", func(testing.TB) grpc.UnaryServerInterceptor {
			return ratelimit.UnaryServerInterceptor(newXTimeLimiter())
		}},
		{"ratelimit-grpclimit", func(tb testing.TB) grpc.UnaryServerInterceptor { return oursGRPC(tb, true) }},
		{"ratelimit-grpclimit-nofields", func(tb testing.TB) grpc.UnaryServerInterceptor { return oursGRPC(tb, false) }},
	}
}

// xtimeLimiter is the ratelimit.Limiter go-grpc-middleware's documentation
// suggests: one x/time/rate Limiter for the server.
type xtimeLimiter struct{ l *rate.Limiter }

var errXTimeLimited = errors.New("rate limit exceeded")

func newXTimeLimiter() xtimeLimiter {
	return xtimeLimiter{rate.NewLimiter(rate.Limit(float64(grpcLimit)/grpcPer.Seconds()), grpcLimit)}
}

// Limit refuses the call when the bucket is empty.
func (x xtimeLimiter) Limit(context.Context) error {
	if !x.l.Allow() {
		return errXTimeLimited
	}
	return nil
}

// fakeStream is the grpc.ServerTransportStream of a direct call: it keeps
// the last header metadata set (without copying it, so that it costs
// nothing) and discards the rest.
type fakeStream struct {
	header metadata.MD
	sets   int
}

func (s *fakeStream) Method() string { return grpcMethod }
func (s *fakeStream) SetHeader(md metadata.MD) error {
	s.header = md
	s.sets++
	return nil
}
func (s *fakeStream) SendHeader(md metadata.MD) error { return s.SetHeader(md) }
func (s *fakeStream) SetTrailer(metadata.MD) error    { return nil }

// noopHandler is the unary handler of every direct call.
func noopHandler(_ context.Context, req any) (any, error) { return req, nil }

var grpcInfo = &grpc.UnaryServerInfo{FullMethod: grpcMethod}

// directCall returns a function making one call through icpt (nil: the
// handler alone) on its own call context, and that context's stream.
func directCall(icpt grpc.UnaryServerInterceptor) (func() error, *fakeStream) {
	st := &fakeStream{}
	ctx := grpc.NewContextWithServerTransportStream(context.Background(), st)
	req := &emptypb.Empty{}
	if icpt == nil {
		return func() error { _, err := noopHandler(ctx, req); return err }, st
	}
	return func() error { _, err := icpt(ctx, req, grpcInfo, noopHandler); return err }, st
}

func BenchmarkGRPCUnary(b *testing.B) {
	for _, mode := range []struct {
		name  string
		bench func(*testing.B, grpc.UnaryServerInterceptor)
	}{
		{"serial", benchGRPCUnarySerial},
		{"parallel", benchGRPCUnaryParallel},
	} {
		for _, lib := range grpcLibs() {
			b.Run(lib.name+"/"+mode.name, func(b *testing.B) { mode.bench(b, lib.unary(b)) })
		}
	}
}

func benchGRPCUnarySerial(b *testing.B, icpt grpc.UnaryServerInterceptor) {
	call, st := directCall(icpt)
	if err := call(); err != nil { // warm: the key exists before timing
		b.Fatal(err)
	}
	b.ReportAllocs()
	cpu0 := cpuTime()
	var err error
	for b.Loop() {
		st.header = nil
		err = call()
	}
	reportHTTP(b, cpu0)
	if err != nil {
		b.Fatal(err)
	}
}

func benchGRPCUnaryParallel(b *testing.B, icpt grpc.UnaryServerInterceptor) {
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		call, st := directCall(icpt)
		var err error
		for pb.Next() {
			st.header = nil
			err = call()
		}
		if err != nil {
			b.Error(err)
		}
	})
	reportHTTP(b, cpu0)
}

// echoDesc is the benchmark service, written by hand (no protoc): one
// unary method taking and returning google.protobuf.Empty.
var echoDesc = grpc.ServiceDesc{
	ServiceName: "bench.Echo",
	HandlerType: (*any)(nil),
	Methods:     []grpc.MethodDesc{{MethodName: "Unary", Handler: echoUnary}},
}

// echoUnary is the method handler, shaped as protoc-gen-go-grpc generates
// them.
func echoUnary(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
	in := new(emptypb.Empty)
	if err := dec(in); err != nil {
		return nil, err
	}
	if icpt == nil {
		return noopHandler(ctx, in)
	}
	return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: grpcMethod}, noopHandler)
}

// bufconnServer serves echoDesc through icpt (nil: none) on an in-memory
// listener and returns a client connection to it; both are closed by
// tb.Cleanup.
func bufconnServer(tb testing.TB, icpt grpc.UnaryServerInterceptor) *grpc.ClientConn {
	tb.Helper()
	lis := bufconn.Listen(1 << 20)
	var opts []grpc.ServerOption
	if icpt != nil {
		opts = append(opts, grpc.UnaryInterceptor(icpt))
	}
	srv := grpc.NewServer(opts...)
	srv.RegisterService(&echoDesc, struct{}{})
	served := make(chan error, 1)
	go func() { served <- srv.Serve(lis) }()
	cc, err := grpc.NewClient("passthrough:///bufconn",
		grpc.WithContextDialer(func(ctx context.Context, _ string) (net.Conn, error) { return lis.DialContext(ctx) }),
		grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		srv.Stop()
		tb.Fatal(err)
	}
	tb.Cleanup(func() {
		_ = cc.Close()
		srv.Stop()
		if err := <-served; err != nil {
			tb.Errorf("Serve: %v", err)
		}
	})
	return cc
}

func BenchmarkGRPCBufconn(b *testing.B) {
	for _, mode := range []struct {
		name  string
		bench func(*testing.B, *grpc.ClientConn)
	}{
		{"serial", benchGRPCBufconnSerial},
		{"parallel", benchGRPCBufconnParallel},
	} {
		for _, lib := range grpcLibs() {
			b.Run(lib.name+"/"+mode.name, func(b *testing.B) { mode.bench(b, bufconnServer(b, lib.unary(b))) })
		}
	}
}

func benchGRPCBufconnSerial(b *testing.B, cc *grpc.ClientConn) {
	ctx := context.Background()
	in, out := &emptypb.Empty{}, &emptypb.Empty{}
	if err := cc.Invoke(ctx, grpcMethod, in, out); err != nil { // warm: connected, key exists
		b.Fatal(err)
	}
	b.ReportAllocs()
	cpu0 := cpuTime()
	var err error
	for b.Loop() {
		if err = cc.Invoke(ctx, grpcMethod, in, out); err != nil {
			break
		}
	}
	reportHTTP(b, cpu0)
	if err != nil {
		b.Fatal(err)
	}
}

func benchGRPCBufconnParallel(b *testing.B, cc *grpc.ClientConn) {
	ctx := context.Background()
	if err := cc.Invoke(ctx, grpcMethod, &emptypb.Empty{}, &emptypb.Empty{}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.RunParallel(func(pb *testing.PB) {
		in, out := &emptypb.Empty{}, &emptypb.Empty{}
		for pb.Next() {
			if err := cc.Invoke(ctx, grpcMethod, in, out); err != nil {
				b.Error(err)
				return
			}
		}
	})
	reportHTTP(b, cpu0)
}
