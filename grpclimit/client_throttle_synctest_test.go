//go:build go1.25

package grpclimit

import (
	"context"
	"sync"
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
// httplimit's TestSynctestThrottleOutage: ten clients with a Throttle
// each (defaults), 10 calls a second each, marked retry-safe, retried up
// to 3 times after the server's pushback; a 30 s outage a minute in.
func TestSynctestClientThrottleOutage(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		sc := outage.Scenario{Start: time.Now(), Down: time.Minute, Up: 90 * time.Second, End: 210 * time.Second,
			Clients: 10, Every: 100 * time.Millisecond, Window: time.Minute, K: 2, Share: 0.1,
			RecoverFor: 2 * time.Minute, Lead: 20 * time.Millisecond, Probe: time.Second}
		log := outage.New(sc)
		var wg sync.WaitGroup
		var throttled [10]int
		for cl := range sc.Clients {
			th, err := ratelimit.NewThrottle(ratelimit.ThrottleConfig{})
			require.NoError(t, err)
			c, err := NewClient(nil, WithThrottle(th), WithRetries(3))
			require.NoError(t, err)
			unary, invoke := c.Unary(), outageInvoker(log, cl)
			wg.Add(1)
			go func() {
				defer wg.Done()
				ctx := MarkRetrySafe(context.Background())
				for i := 0; ; i++ {
					at := sc.Start.Add(time.Duration(i) * sc.Every)
					if at.Sub(sc.Start) >= sc.End {
						return
					}
					time.Sleep(time.Until(at))
					err := unary(ctx, methodUnary, new(int), nil, nil, invoke)
					if status.Code(err) == codes.Unavailable && isThrottled(err) {
						throttled[cl]++
					}
					log.Result(at, cl, err == nil)
				}
			}()
		}
		wg.Wait()
		f := log.Check()
		total := 0
		for _, n := range throttled {
			total += n
		}
		t.Logf("grpc: %v; refused locally: %d", f, total)
		assert.Empty(t, f.AttemptViolations, "attempts per window <= K·accepts + 1: %s", f.Violations())
		assert.Empty(t, f.RetryViolations, "retries within the budget: %s", f.Violations())
		assert.GreaterOrEqual(t, f.RecoveredShare(), 0.95, "recovered within two windows")
		assert.Positive(t, f.OutageRetries, "the pushback's retries were sent")
	})
}
