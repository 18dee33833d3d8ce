package grpclimit

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// startLimitedServer serves a testService behind this package's server
// interceptors on loopback TCP until the test ends.
func startLimitedServer(t *testing.T, limits []Limit, opts ...Option) (*testService, string) {
	t.Helper()
	in, err := New(limits, opts...)
	require.NoError(t, err)
	return startServer(t, grpc.UnaryInterceptor(in.Unary()), grpc.StreamInterceptor(in.Stream()))
}

// TestClientObeysServer: the client interceptors against this package's
// server interceptors. The server's metadata says when its quota is spent,
// so the client waits for the window's end before the next call instead
// of being refused; without the metadata (NoFields), a denial's RetryInfo
// pauses the client for exactly the window's rest and a marked call is
// retried once it has passed. A cost that can never fit (no RetryInfo) is
// neither paused for nor retried.
func TestClientObeysServer(t *testing.T) {
	t.Parallel()
	for _, fields := range []FieldSet{allFields, NoFields} {
		t.Run(fmt.Sprint(fields), func(t *testing.T) {
			t.Parallel()
			clk := fakeclock.NewAnnouncing(clientEpoch)
			kl, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(2, time.Minute), ratelimit.WithClock(clk))
			require.NoError(t, err)
			var denied atomic.Int64
			svc, addr := startLimitedServer(t, []Limit{{Name: "api", Key: KeyByMethod(), Limiter: kl}},
				WithClock(clk), WithFields(fields),
				WithDeniedHandler(func(context.Context, Denial) error { denied.Add(1); return nil }),
				WithCost(func(_ context.Context, method string, _ any) int {
					if method == methodEmpty {
						return 3 // above the limit: never fits
					}
					return 1
				}))
			var pauses []time.Duration
			c := newTestClient(t, nil, nil, nil, clk, WithRetries(1), WithMaxRetryWait(2*time.Minute),
				WithPauseHook(func(_ context.Context, _ string, d time.Duration) { pauses = append(pauses, d) }))
			client, conn := dial(t, addr, c)
			ctx := MarkRetrySafe(context.Background())

			for range 2 {
				_, err := client.UnaryCall(ctx, unaryReq)
				require.NoError(t, err)
			}
			if fields == allFields {
				assert.Equal(t, []time.Duration{time.Minute}, pauses, "the second answer says the quota is spent for the window")
			} else {
				assert.Empty(t, pauses, "no metadata, no pause before a refusal")
			}
			clk.Add(15 * time.Second)
			done := callAsync(ctx, client)
			assert.Equal(t, 45*time.Second, clk.Next(t), "the call waits for the rest of the window")
			pending(t, done, "the call during the pause")
			assert.Equal(t, 45*time.Second, c.PausedFor(conn.Target(), "", ""))
			clk.Add(45 * time.Second)
			require.NoError(t, <-done, "the call after the pause is admitted")
			if fields == allFields {
				assert.Equal(t, int64(0), denied.Load(), "a client reading the metadata is never refused")
			} else {
				assert.Equal(t, []time.Duration{45 * time.Second}, pauses)
				assert.Equal(t, int64(1), denied.Load(), "one refusal, then the retry after the pause")
			}
			assert.Equal(t, 3, svc.count(methodUnary), "a denied attempt never reaches the handler")

			n := len(pauses)
			_, err = client.EmptyCall(ctx, &grpc_testing.Empty{})
			assert.Equal(t, codes.ResourceExhausted, status.Code(err))
			assert.Len(t, pauses, n, "a denial without RetryInfo does not pause")
			assert.Equal(t, 0, svc.count(methodEmpty))
			clk.None(t)
		})
	}
}
