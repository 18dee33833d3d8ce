package grpclimit

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// fieldScript is a server interceptor that sends, as header metadata of
// each call, the next entry of a script of metadata (none when the script
// is empty).
type fieldScript struct {
	mu     sync.Mutex
	script []metadata.MD
}

func (f *fieldScript) send(mds ...metadata.MD) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.script = append(f.script, mds...)
}

func (f *fieldScript) unary(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
	f.mu.Lock()
	var md metadata.MD
	if len(f.script) > 0 {
		md, f.script = f.script[0], f.script[1:]
	}
	f.mu.Unlock()
	if md != nil {
		_ = grpc.SetHeader(ctx, md)
	}
	return handler(ctx, req)
}

// pacedServer starts a test service behind a fieldScript.
func pacedServer(t *testing.T) (*testService, *fieldScript, string) {
	f := &fieldScript{}
	svc, addr := startServer(t, grpc.UnaryInterceptor(f.unary))
	return svc, f, addr
}

// TestClientPacesByMetadata: a server's rate-limit metadata on a
// successful answer, in each dialect, bounds the next calls: the quota
// left goes at once, a spent quota waits for its reset. The server is
// never asked for more than it said it has.
func TestClientPacesByMetadata(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		one, nil metadata.MD // one call left for 5 s; none left for 5 s
	}{
		{"ietf", metadata.Pairs("ratelimit", `"api";r=1;t=5`), metadata.Pairs("ratelimit", `"api";r=0;t=5`)},
		{"draft-7", metadata.Pairs("ratelimit", "limit=3, remaining=1, reset=5"), metadata.Pairs("ratelimit", "limit=3, remaining=0, reset=5")},
		{"draft-6", metadata.Pairs("ratelimit-remaining", "1", "ratelimit-reset", "5"), metadata.Pairs("ratelimit-remaining", "0", "ratelimit-reset", "5")},
		{"x-ratelimit", metadata.Pairs("x-ratelimit-remaining", "1", "x-ratelimit-reset", "5"), metadata.Pairs("x-ratelimit-remaining", "0", "x-ratelimit-reset", "5")},
		{"x-ratelimit epoch", metadata.Pairs("x-ratelimit-remaining", "1", "x-ratelimit-reset", "1767225605"), metadata.Pairs("x-ratelimit-remaining", "0", "x-ratelimit-reset", "1767225610")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			svc, script, addr := pacedServer(t)
			clk := fakeclock.NewAnnouncing(clientEpoch) // 2026-01-01T00:00:00Z = 1767225600
			c := newTestClient(t, nil, nil, nil, clk)
			client, conn := dial(t, addr, c)
			ctx := context.Background()

			script.send(tc.one)
			_, err := client.UnaryCall(ctx, unaryReq)
			require.NoError(t, err)
			assert.Zero(t, c.PausedFor(conn.Target(), "", ""), "one call is left")
			_, err = client.UnaryCall(ctx, unaryReq) // the last one: no wait
			require.NoError(t, err)
			clk.None(t)
			assert.Equal(t, 5*time.Second, c.PausedFor(conn.Target(), "", ""), "the quota is spent until its reset")

			done := callAsync(ctx, client)
			assert.Equal(t, 5*time.Second, clk.Next(t))
			pending(t, done, "the call over the quota")
			script.send(tc.nil)
			clk.Add(5 * time.Second)
			require.NoError(t, <-done)
			assert.Equal(t, 3, svc.count(methodUnary))
			assert.Equal(t, 5*time.Second, c.PausedFor(conn.Target(), "", ""), "the answer said the new quota is spent")
		})
	}
}

// TestClientMetadataOnRefusal: the metadata of a refusal without RetryInfo
// (a trailers-only answer) is read too: a quota it reports spent pauses
// the target until its reset.
func TestClientMetadataOnRefusal(t *testing.T) {
	t.Parallel()
	svc, script, addr := pacedServer(t)
	clk := fakeclock.NewAnnouncing(clientEpoch)
	c := newTestClient(t, nil, nil, nil, clk)
	client, conn := dial(t, addr, c)
	script.send(metadata.Pairs("ratelimit", `"api";r=0;t=7`))
	svc.answer(status.Error(codes.ResourceExhausted, "quota"))
	_, err := client.UnaryCall(context.Background(), unaryReq)
	require.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Equal(t, 7*time.Second, c.PausedFor(conn.Target(), "", ""))
}

// TestClientBackoffGrows: refusals whose RetryInfo names no usable delay
// back the target off, each pause within [first/2, min(max, first·2^k)];
// a success starts again; never a call at once.
func TestClientBackoffGrows(t *testing.T) {
	t.Parallel()
	svc, addr := startServer(t)
	clk := fakeclock.NewAnnouncing(clientEpoch)
	c := newTestClient(t, nil, nil, nil, clk, WithBackoff(time.Second, 4*time.Second))
	client, conn := dial(t, addr, c)
	zero := denialWith(&errdetails.RetryInfo{RetryDelay: &durationpb.Duration{}})
	refuse := func(k int) {
		t.Helper()
		svc.answer(zero)
		done := callAsync(context.Background(), client)
		if k > 0 {
			d := clk.Next(t) // the previous backoff, waited before this call
			clk.Add(d)
		}
		require.Equal(t, codes.ResourceExhausted, status.Code(<-done))
		got := c.PausedFor(conn.Target(), "", "")
		assert.GreaterOrEqual(t, got, 500*time.Millisecond, "refusal %d", k)
		assert.LessOrEqual(t, got, min(4*time.Second, time.Second<<k), "refusal %d", k)
	}
	for k := range 5 {
		refuse(k)
	}
	done := callAsync(context.Background(), client)
	clk.Add(clk.Next(t))
	require.NoError(t, <-done, "a success")
	refuse(0)
	assert.LessOrEqual(t, c.PausedFor(conn.Target(), "", ""), time.Second, "the success started the backoff again")
}

// TestClientPolicyShaping: with WithPolicyShaping, an advertised policy
// of q calls per w spaces the calls w/q apart.
func TestClientPolicyShaping(t *testing.T) {
	t.Parallel()
	_, script, addr := pacedServer(t)
	clk := fakeclock.NewAnnouncing(clientEpoch)
	c := newTestClient(t, nil, nil, nil, clk, WithPolicyShaping(true))
	client, _ := dial(t, addr, c)
	script.send(metadata.Pairs("ratelimit-policy", `"api";q=4;w=2`, "ratelimit", `"api";r=3;t=2`))
	_, err := client.UnaryCall(context.Background(), unaryReq)
	require.NoError(t, err)
	done := callAsync(context.Background(), client)
	assert.Equal(t, 500*time.Millisecond, clk.Next(t))
	clk.Add(500 * time.Millisecond)
	require.NoError(t, <-done)
}

func TestClientPacingOptions(t *testing.T) {
	t.Parallel()
	for _, o := range []ClientOption{WithBackoff(0, time.Second), WithBackoff(time.Second, time.Millisecond), WithBackoff(-1, -1)} {
		_, err := NewClient(nil, o)
		assert.ErrorContains(t, err, "grpclimit.WithBackoff needs 0 < first <= max")
	}
}
