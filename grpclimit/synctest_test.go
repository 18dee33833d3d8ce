//go:build go1.25

package grpclimit

import (
	"context"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"

	"github.com/rlkit/ratelimit"
)

// TestSynctestReadsOwnResetMetadata: this package's server interceptors and
// client, both on the default clock inside a testing/synctest bubble
// (whose time starts in 2000), over loopback: the client reads the
// server's x-ratelimit-reset (a Unix time near 946,684,800) by its own
// clock (gRPC metadata has no Date) and pauses for the window's 3 s.
// Before, the value was below the fixed threshold of 1e9 and read as a
// delay of 30 years: PausedFor was the cap, 1 h. Nothing here waits on the
// bubble's clock.
func TestSynctestReadsOwnResetMetadata(t *testing.T) {
	t.Parallel()
	synctest.Test(t, func(t *testing.T) {
		require.Less(t, time.Now().Unix(), int64(1e9), "the bubble's clock starts before 2001")
		lim, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(5, 3*time.Second))
		require.NoError(t, err)
		ic, err := New([]Limit{{Name: "w", Key: KeyByMethod(), Limiter: lim}}, WithFields(XRateLimitFields))
		require.NoError(t, err)
		_, addr := startServer(t, grpc.ChainUnaryInterceptor(ic.Unary()))
		c, err := NewClient(nil)
		require.NoError(t, err)
		client, conn := dial(t, addr, c)
		for i := range 5 {
			_, err := client.UnaryCall(context.Background(), unaryReq)
			require.NoError(t, err, "call %d", i)
		}
		got := c.PausedFor(conn.Target(), "", "")
		assert.Greater(t, got, time.Duration(0), "the quota is spent")
		assert.LessOrEqual(t, got, 3*time.Second, "paused until the window's end, not the cap")
		// The server and connection close before the bubble ends.
		_ = conn.Close()
	})
}
