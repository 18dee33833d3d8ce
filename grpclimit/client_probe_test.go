package grpclimit

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// gate is a server interceptor that holds every unary call until the test
// answers it: each arrival is announced on arrived, and answered with the
// function the test sends on its reply channel.
type gate struct {
	arrived chan gateCall
	quit    chan struct{}
}

type gateCall struct {
	reply chan func(ctx context.Context) error
}

func (g *gate) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	c := gateCall{reply: make(chan func(context.Context) error, 1)}
	g.arrived <- c
	select {
	case f := <-c.reply:
		if err := f(ctx); err != nil {
			return nil, err
		}
		return handler(ctx, req)
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-g.quit:
		return nil, status.Error(codes.Unavailable, "test over")
	}
}

func startGate(t *testing.T) (*gate, string) {
	g := &gate{arrived: make(chan gateCall, 64), quit: make(chan struct{})}
	_, addr := startServer(t, grpc.UnaryInterceptor(g.unary))
	t.Cleanup(func() { close(g.quit) }) // before the server stops
	return g, addr
}

func (g *gate) next(t *testing.T) gateCall {
	t.Helper()
	select {
	case c := <-g.arrived:
		return c
	case <-time.After(5 * time.Second):
		t.Fatal("no call arrived")
		return gateCall{}
	}
}

func (g *gate) none(t *testing.T) {
	t.Helper()
	select {
	case <-g.arrived:
		t.Fatal("a call reached the server")
	case <-time.After(50 * time.Millisecond):
	}
}

// sendHeader answers a call with md as its header metadata.
func sendHeader(md metadata.MD) func(ctx context.Context) error {
	return func(ctx context.Context) error { return grpc.SetHeader(ctx, md) }
}

// TestClientCappedPauseEndsWithOneProbe: a server asking for a day's pause
// (RetryInfo of 24 h) capped at 10 s: when the cap has passed, one call
// goes out and the others wait for its answer, then go by what it says.
// Before, all 20 waiting calls reached the server at once.
func TestClientCappedPauseEndsWithOneProbe(t *testing.T) {
	t.Parallel()
	const waiting = 20
	g, addr := startGate(t)
	clk := fakeclock.NewAnnouncing(clientEpoch)
	c := newTestClient(t, nil, nil, nil, clk, WithMaxPause(10*time.Second))
	client, _ := dial(t, addr, c)

	first := callAsync(context.Background(), client)
	g.next(t).reply <- func(context.Context) error { return denial(24 * time.Hour) }
	require.Equal(t, codes.ResourceExhausted, status.Code(<-first))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	results := make(chan error, waiting)
	for range waiting {
		go func() { results <- <-callAsync(ctx, client) }()
	}
	for range waiting {
		require.Equal(t, 10*time.Second, clk.Next(t), "each waits for the capped pause")
	}
	clk.Add(10 * time.Second)
	probe := g.next(t)
	g.none(t)
	// Its answer: 3 left for a minute. Three go; the rest wait.
	probe.reply <- sendHeader(metadata.Pairs("ratelimit", `"daily";r=3;t=60`))
	for range 3 {
		g.next(t).reply <- sendHeader(metadata.Pairs("ratelimit", `"daily";r=0;t=60`))
	}
	for range 4 {
		require.NoError(t, <-results)
	}
	g.none(t)
	cancel()
	for range waiting - 4 {
		assert.Equal(t, codes.Canceled, status.Code(<-results))
	}
}

// TestClientRetryTooLateReturnsAnswer: a call marked for retries whose
// retry cannot be sent (the client's limiter would wait past the call's
// deadline; the context ends while it waits) gets the server's refusal
// back, as without retries, not an error of its own. Before, the call
// failed with DeadlineExceeded (or Canceled) and the server's status, with
// its RetryInfo, was lost.
func TestClientRetryTooLateReturnsAnswer(t *testing.T) {
	t.Parallel()
	for _, cancelled := range []bool{false, true} {
		t.Run(map[bool]string{false: "limiter outlasts the deadline", true: "cancelled while waiting"}[cancelled], func(t *testing.T) {
			t.Parallel()
			svc, addr := startServer(t)
			clk := fakeclock.NewAnnouncing(clientEpoch)
			var lim ratelimit.Limiter
			if !cancelled {
				tb, err := ratelimit.NewTokenBucket(ratelimit.Per(1, time.Minute), 1, ratelimit.WithClock(clk))
				require.NoError(t, err)
				lim = tb
			}
			c := newTestClient(t, lim, nil, nil, clk, WithRetries(3))
			client, _ := dial(t, addr, c)
			svc.answer(denial(time.Second))
			ctx, cancel := context.WithTimeout(MarkRetrySafe(context.Background()), 5*time.Second)
			defer cancel()
			done := callAsync(ctx, client)
			assert.Equal(t, time.Second, clk.Next(t), "the server's pause")
			if cancelled {
				cancel()
			} else {
				clk.Add(time.Second) // then the limiter: a minute, past the deadline
			}
			err := <-done
			st, _ := status.FromError(err)
			assert.Equal(t, codes.ResourceExhausted, st.Code(), "the server's answer: %v", err)
			d, has, valid := retryInfo(err)
			assert.True(t, has && valid, "with its RetryInfo")
			assert.Equal(t, time.Second, d)
			assert.Equal(t, 1, svc.count(methodUnary), "not retried")
		})
	}
}

// TestClientBoundsScopes: a client keyed by key (PauseByKey) holds at most
// WithMaxKeys scopes whose quota is mostly spent; a call of one more is
// not sent: ResourceExhausted, matching ratelimit.ErrTooManyKeys. The
// scopes held go on; once one holds nothing live it makes room, and so
// does one with plenty left (r=100 of 101), which used to count as live
// for an hour and lock new scopes out.
func TestClientBoundsScopes(t *testing.T) {
	t.Parallel()
	svc, script, addr := pacedServer(t)
	clk := fakeclock.NewAnnouncing(clientEpoch)
	kl, err := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(1000, time.Second), 1000), ratelimit.WithClock(clk))
	require.NoError(t, err)
	byTenant := func(ctx context.Context, _ string) (string, bool) {
		k, ok := ctx.Value(tenantKey{}).(string)
		return k, ok
	}
	c := newTestClient(t, nil, kl, byTenant, clk, WithPauseScope(PauseByKey), WithMaxKeys(2))
	client, _ := dial(t, addr, c)
	left := "10"
	call := func(tenant string) error {
		script.send(metadata.Pairs("ratelimit-policy", `"hourly";q=101;w=3600`, "ratelimit", `"hourly";r=`+left+`;t=3600`))
		defer func() { // the answer of a call not sent is not the next one's
			script.mu.Lock()
			script.script = nil
			script.mu.Unlock()
		}()
		ctx := context.WithValue(context.Background(), tenantKey{}, tenant)
		_, err := client.UnaryCall(ctx, unaryReq)
		return err
	}
	require.NoError(t, call("a"))
	require.NoError(t, call("b"))
	err = call("c")
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.ErrorIs(t, err, ratelimit.ErrTooManyKeys)
	assert.Equal(t, 2, svc.count(methodUnary), "the call of a new scope is not sent")
	require.NoError(t, call("a"))
	clk.Add(time.Hour) // the quotas are full again
	require.NoError(t, call("c"))
	left = "100"
	for _, tenant := range []string{"d", "e", "f"} {
		require.NoError(t, call(tenant), "scope %s, the others but c with plenty left", tenant)
	}
	for _, n := range []int{0, -3} {
		_, err := NewClient(nil, WithMaxKeys(n))
		assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	}
}

// TestClientStreamProbeHandsOn: a stream sent as the probe after a pause is
// not waited for (a stream may run for long): once it is created, the next
// call probes, alone.
func TestClientStreamProbeHandsOn(t *testing.T) {
	t.Parallel()
	svc, addr := startServer(t)
	clk := fakeclock.NewAnnouncing(clientEpoch)
	c := newTestClient(t, nil, nil, nil, clk)
	client, conn := dial(t, addr, c)
	svc.answer(denial(5 * time.Second))
	_, err := client.UnaryCall(context.Background(), unaryReq)
	require.Equal(t, codes.ResourceExhausted, status.Code(err))

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	streamed := make(chan error, 1)
	go func() {
		st, err := client.FullDuplexCall(ctx)
		if err == nil {
			err = st.CloseSend()
		}
		streamed <- err
	}()
	require.Equal(t, 5*time.Second, clk.Next(t))
	clk.Add(5 * time.Second)
	require.NoError(t, <-streamed)
	assert.Zero(t, c.PausedFor(conn.Target(), "", ""), "the stream's probe is handed on")
	_, err = client.UnaryCall(context.Background(), unaryReq)
	require.NoError(t, err)
}
