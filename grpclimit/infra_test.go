package grpclimit_test

import (
	"context"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/grpclimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/reflection"
	reflectionv1 "google.golang.org/grpc/reflection/grpc_reflection_v1"
	reflectionv1alpha "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
	"google.golang.org/grpc/status"
)

// infraConn serves the test service, server reflection (v1 and v1alpha)
// and the health service on loopback behind ic, and returns a connection
// that sends the API key on every call, as grpcurl -H does (on the
// reflection stream too).
func infraConn(t *testing.T, ic *grpclimit.Interceptor, svc *testService) *grpc.ClientConn {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := grpc.NewServer(grpc.ChainUnaryInterceptor(ic.Unary()), grpc.ChainStreamInterceptor(ic.Stream()))
	testgrpc.RegisterTestServiceServer(srv, svc)
	reflection.Register(srv) // v1 and v1alpha
	hs := health.NewServer()
	healthpb.RegisterHealthServer(srv, hs)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = srv.Serve(lis)
	}()
	addKey := func(ctx context.Context, method string, req, reply any, cc *grpc.ClientConn, invoker grpc.UnaryInvoker, opts ...grpc.CallOption) error {
		return invoker(withKey(ctx, "key-1"), method, req, reply, cc, opts...)
	}
	addKeyStream := func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		return streamer(withKey(ctx, "key-1"), desc, cc, method, opts...)
	}
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithChainUnaryInterceptor(addKey), grpc.WithChainStreamInterceptor(addKeyStream))
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = conn.Close()
		hs.Shutdown()
		srv.Stop()
		<-done
	})
	return conn
}

// useInfra lists the services over both reflection versions (one stream
// each, two requests per stream, as grpcurl sends to describe a service)
// and checks health three times, reporting the first error.
func useInfra(ctx context.Context, conn *grpc.ClientConn) error {
	v1, err := reflectionv1.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		return err
	}
	for range 2 {
		if err := v1.Send(&reflectionv1.ServerReflectionRequest{MessageRequest: &reflectionv1.ServerReflectionRequest_ListServices{}}); err != nil {
			return err
		}
		if _, err := v1.Recv(); err != nil {
			return err
		}
	}
	_ = v1.CloseSend()
	alpha, err := reflectionv1alpha.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	if err != nil {
		return err
	}
	for range 2 {
		//lint:ignore SA1019 v1alpha is deprecated, but servers still serve it and older clients still ask it
		if err := alpha.Send(&reflectionv1alpha.ServerReflectionRequest{MessageRequest: &reflectionv1alpha.ServerReflectionRequest_FileContainingSymbol{FileContainingSymbol: "grpc.testing.TestService"}}); err != nil {
			return err
		}
		if _, err := alpha.Recv(); err != nil {
			return err
		}
	}
	_ = alpha.CloseSend()
	hc := healthpb.NewHealthClient(conn)
	for range 3 {
		resp, err := hc.Check(ctx, &healthpb.HealthCheckRequest{})
		if err != nil {
			return err
		}
		if resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
			return status.Errorf(codes.Internal, "health: %v", resp.GetStatus())
		}
	}
	return nil
}

// TestReflectionAndHealthExempt: server reflection (v1, v1alpha) and
// health checks are not charged by default, neither as calls nor as
// stream messages: grpcurl sends the caller's metadata on the reflection
// stream too, so a per-key limit used to charge it (each grpcurl call cost
// 2, and the first denial read "failed to query for service descriptor").
// ChargeHealthAndReflection(true) charges them like any call. Real
// reflection and health services and clients on loopback.
func TestReflectionAndHealthExempt(t *testing.T) {
	t.Parallel()
	for _, charge := range []bool{false, true} {
		t.Run(map[bool]string{false: "default", true: "charged"}[charge], func(t *testing.T) {
			t.Parallel()
			mock := fakeclock.New(epoch)
			var (
				mu     sync.Mutex
				events []ratelimit.Event
			)
			obs := ratelimit.ObserverFunc(func(_ context.Context, e ratelimit.Event) {
				mu.Lock()
				defer mu.Unlock()
				events = append(events, e)
			})
			limits := []grpclimit.Limit{
				{Name: "api", Key: grpclimit.KeyByMetadata("x-api-key"), Limiter: newKeyed(t, ratelimit.FixedWindowPolicy(2, time.Minute), mock)},
				{Name: "msgs", Key: grpclimit.KeyByMetadata("x-api-key"), Limiter: newKeyed(t, ratelimit.FixedWindowPolicy(3, time.Minute), mock), Messages: true},
			}
			opts := []grpclimit.Option{grpclimit.WithClock(mock)}
			if charge {
				opts = append(opts, grpclimit.ChargeHealthAndReflection(true), grpclimit.WithObserver(obs))
			} else {
				opts = append(opts, grpclimit.WithObserver(obs))
			}
			svc := &testService{}
			conn := infraConn(t, newIC(t, limits, opts...), svc)
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := useInfra(ctx, conn)
			if charge {
				require.Error(t, err, "reflection and health charged: 7 calls and 4 messages under limits of 2 and 3")
				assert.Equal(t, codes.ResourceExhausted, status.Code(err), "%v", err)
				return
			}
			require.NoError(t, err, "reflection and health must not be charged")
			c := testgrpc.NewTestServiceClient(conn)
			for i, want := range []codes.Code{codes.OK, codes.OK, codes.ResourceExhausted} {
				_, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{})
				assert.Equal(t, want, status.Code(err), "API call %d after reflection and health: %v", i+1, err)
			}
			var exempt int
			mu.Lock()
			defer mu.Unlock()
			for _, e := range events {
				if e.Outcome == ratelimit.OutcomeExempt {
					exempt++
				}
			}
			// 5 exempt calls (2 reflection streams, 3 health checks) in the
			// call limit, and the 2 streams in the message limit: the
			// observer sees them.
			assert.Equal(t, 7, exempt, "exempt Events: %+v", events)
		})
	}
}
