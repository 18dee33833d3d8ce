package grpclimit

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/rlkit/ratelimit"
)

// BenchmarkClientUnary measures what the unary client interceptor adds to
// a call: the interceptor called directly, with an invoker that does
// nothing, on a connection that never connects. The limiter never makes
// the call wait.
func BenchmarkClientUnary(b *testing.B) {
	conn, err := grpc.NewClient("passthrough:///bench", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = conn.Close() })
	invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	bucket := func(b *testing.B) *ratelimit.TokenBucket {
		tb, err := ratelimit.NewTokenBucket(ratelimit.Per(1_000_000_000, time.Second), 1_000_000_000)
		if err != nil {
			b.Fatal(err)
		}
		return tb
	}
	keyed := func(b *testing.B) *ratelimit.Keyed {
		kl, err := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(1_000_000_000, time.Second), 1_000_000_000))
		if err != nil {
			b.Fatal(err)
		}
		return kl
	}
	byMethod := func(_ context.Context, method string) (string, bool) { return method, true }
	for _, bc := range []struct {
		name string
		make func(b *testing.B) (*Client, error)
	}{
		{"nolimiter", func(*testing.B) (*Client, error) { return NewClient(nil) }},
		{"limiter", func(b *testing.B) (*Client, error) { return NewClient(bucket(b)) }},
		{"limiter-bymethod", func(b *testing.B) (*Client, error) { return NewClient(bucket(b), WithPauseScope(PauseByMethod)) }},
		{"keyed", func(b *testing.B) (*Client, error) {
			return NewKeyedClient(keyed(b), byMethod, WithPauseScope(PauseByKey))
		}},
		{"limiter-throttle", func(b *testing.B) (*Client, error) {
			th, err := ratelimit.NewThrottle(ratelimit.ThrottleConfig{})
			if err != nil {
				b.Fatal(err)
			}
			return NewClient(bucket(b), WithThrottle(th))
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c, err := bc.make(b)
			if err != nil {
				b.Fatal(err)
			}
			unary := c.Unary()
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := unary(ctx, methodUnary, nil, nil, conn, invoker); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestClientUnaryAllocs holds the unary client interceptor to no
// allocation per call when nothing is paused, for every pause scope.
func TestClientUnaryAllocs(t *testing.T) {
	conn, err := grpc.NewClient("passthrough:///allocs", grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	invoker := func(context.Context, string, any, any, *grpc.ClientConn, ...grpc.CallOption) error { return nil }
	tb, err := ratelimit.NewTokenBucket(ratelimit.Per(1_000_000_000, time.Second), 1_000_000_000)
	if err != nil {
		t.Fatal(err)
	}
	th, err := ratelimit.NewThrottle(ratelimit.ThrottleConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, scope := range []PauseScope{PauseByTarget, PauseByMethod} {
		for _, throttle := range []*ratelimit.Throttle{nil, th} {
			c, err := NewClient(tb, WithPauseScope(scope), WithThrottle(throttle))
			if err != nil {
				t.Fatal(err)
			}
			unary := c.Unary()
			ctx := context.Background()
			if a := testing.AllocsPerRun(1000, func() { _ = unary(ctx, methodUnary, nil, nil, conn, invoker) }); a != 0 {
				t.Errorf("%v, throttle %v: %v allocations per call, want 0", scope, throttle != nil, a)
			}
		}
	}
}
