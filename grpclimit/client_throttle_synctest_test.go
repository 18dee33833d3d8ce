//go:build go1.25

package grpclimit

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/outage"
)

// outageInvoker is an in-memory server inside the bubble (a real
// connection would not let the bubble's time move): UNAVAILABLE with a
// pushback of 10 ms during the outage, as an overloaded server answers,
// OK otherwise. It tells retries from first tries by the request, which
// the interceptor sends again as it is.
func outageInvoker(log *outage.Log, client int) grpc.UnaryInvoker {
	var mu sync.Mutex
	sent := map[any]bool{}
	return func(_ context.Context, _ string, req, _ any, _ *grpc.ClientConn, opts ...grpc.CallOption) error {
		mu.Lock()
		retry := sent[req]
		sent[req] = true
		mu.Unlock()
		if log.Serve(time.Now(), client, retry) {
			return nil
		}
		for _, o := range opts {
			if tr, ok := o.(grpc.TrailerCallOption); ok {
				*tr.TrailerAddr = metadata.Pairs(pushbackKey, "10")
			}
		}
		return status.Error(codes.Unavailable, "overloaded")
	}
}

// TestSynctestClientThrottleOutage is the gRPC client's proof, as
// httplimit's TestSynctestThrottleOutage, over outage.Scenarios: ten
// clients with a Throttle each (defaults), 10 calls a second each, marked
// retry-safe and retried up to 3 times after the server's pushback.
func TestSynctestClientThrottleOutage(t *testing.T) {
	t.Parallel()
	for name, sc := range outage.Scenarios() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			synctest.Test(t, func(t *testing.T) {
				sc.Start = time.Now()
				log := outage.New(sc)
				unary := make([]grpc.UnaryClientInterceptor, sc.Clients)
				invoke := make([]grpc.UnaryInvoker, sc.Clients)
				for c := range unary {
					th, err := ratelimit.NewThrottle(ratelimit.ThrottleConfig{})
					require.NoError(t, err)
					cl, err := NewClient(nil, WithThrottle(th), WithRetries(3))
					require.NoError(t, err)
					unary[c], invoke[c] = cl.Unary(), outageInvoker(log, c)
				}
				var throttled atomic.Int64
				ctx := MarkRetrySafe(context.Background())
				log.Run(func(c int) bool {
					err := unary[c](ctx, methodUnary, new(int), nil, nil, invoke[c])
					if isThrottled(err) {
						throttled.Add(1)
					}
					return err == nil
				})
				f := log.Check()
				t.Logf("grpc, %s outage: %v; refused locally: %d", name, f, throttled.Load())
				assert.Empty(t, f.AttemptViolations, "attempts per window <= K·accepts + 1: %s", f.Violations())
				assert.Empty(t, f.RetryViolations, "retries within the budget: %s", f.Violations())
				assert.GreaterOrEqual(t, f.RecoveredShare(), 0.95, "recovered within two windows")
				assert.Positive(t, f.OutageRetries, "the pushback's retries were sent")
			})
		})
	}
}
