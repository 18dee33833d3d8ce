package grpclimit

import (
	"context"
	"fmt"
	"sync"
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

// bucketService is this package's own server interceptors over a token
// bucket of 5 refilling 1 a second, on a clock shared with the client. A
// second interceptor, after the limits, holds each call once decided
// (admitted, or refused through the denied handler) while holding is on.
type bucketService struct {
	mu      sync.Mutex
	hold    bool
	held    []chan struct{} // in the order the calls were decided
	arrived chan struct{}
}

func (b *bucketService) wait() {
	b.mu.Lock()
	if !b.hold {
		b.mu.Unlock()
		return
	}
	release := make(chan struct{})
	b.held = append(b.held, release)
	b.mu.Unlock()
	b.arrived <- struct{}{}
	<-release
}

func startBucketService(t *testing.T, clk ratelimit.Clock, keyed bool) (*bucketService, string) {
	t.Helper()
	lim, err := ratelimit.NewKeyed(ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Second), 5), ratelimit.WithClock(clk))
	require.NoError(t, err)
	key := KeyFunc(func(context.Context, string) (string, bool) { return "all", true })
	if keyed {
		key = KeyByMethod()
	}
	b := &bucketService{arrived: make(chan struct{}, 64)}
	ic, err := New([]Limit{{Name: "bucket", Key: key, Limiter: lim}}, WithClock(clk),
		WithDeniedHandler(func(ctx context.Context, d Denial) error {
			b.wait()
			return DeniedError(d)
		}))
	require.NoError(t, err)
	holdAfter := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		b.wait()
		return handler(ctx, req)
	}
	_, addr := startServer(t, grpc.ChainUnaryInterceptor(ic.Unary(), holdAfter))
	return b, addr
}

// driveCalls makes workers goroutines send each unary calls one after
// another through c, moving clk by each timer the client starts, once no
// call is out (time stands still on the wire). It returns the calls'
// errors.
func driveCalls(t *testing.T, clk *fakeclock.Mock, c *Client, client grpc_testing.TestServiceClient, workers, each int) []error {
	t.Helper()
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				_, err := client.UnaryCall(context.Background(), unaryReq)
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	for timers := 0; ; timers++ {
		require.Less(t, timers, 1000, "the client does not converge")
		select {
		case <-done:
			return errs
		case d := <-clk.Timers:
			deadline := time.Now().Add(5 * time.Second)
			for c.pacer.InFlight() > 0 {
				require.False(t, time.Now().After(deadline), "calls out for 5 s")
				time.Sleep(100 * time.Microsecond)
			}
			clk.Add(d)
		case <-time.After(5 * time.Second):
			t.Fatal("the clients neither finish nor wait")
		}
	}
}

// TestClientTokenBucketReorderedAnswers: grpclimit's client against
// grpclimit's server interceptors over a token bucket of 5 (refill 1/s): a
// blind round of calls, their answers released in reverse order of the
// server's decisions (the last decided first), then rounds sent together.
// Once an answer has been read, no call is refused. Before, the last
// answer read (the first decided: 4 left, full in 1 s) restored all 5 at
// its reset while the bucket held 1: 4 of the next 5 were refused.
func TestClientTokenBucketReorderedAnswers(t *testing.T) {
	t.Parallel()
	for _, keyed := range []bool{false, true} {
		for _, blind := range []int{5, 10} {
			t.Run(fmt.Sprintf("keyed=%v/blind=%d", keyed, blind), func(t *testing.T) {
				t.Parallel()
				clk := fakeclock.NewAnnouncing(clientEpoch)
				b, addr := startBucketService(t, clk, keyed)
				c := newTestClient(t, nil, nil, nil, clk)
				client, _ := dial(t, addr, c)

				// The blind round, sent one by one so that the server
				// decides them in that order, all held.
				b.mu.Lock()
				b.hold = true
				b.mu.Unlock()
				results := make([]<-chan error, blind)
				for i := range results {
					results[i] = callAsync(context.Background(), client)
					select {
					case <-b.arrived:
					case <-time.After(5 * time.Second):
						t.Fatal("the server did not decide the call")
					}
				}
				b.mu.Lock()
				b.hold = false
				held := b.held
				b.mu.Unlock()
				refused := 0
				for i := len(held) - 1; i >= 0; i-- {
					close(held[i])
					if err := <-results[i]; err != nil {
						require.Equal(t, codes.ResourceExhausted, status.Code(err), "call %d: %v", i, err)
						refused++
					}
				}
				require.Equal(t, blind-5, refused, "the bucket admits 5 of the blind round")

				for _, round := range [][2]int{{5, 1}, {10, 2}} {
					for _, err := range driveCalls(t, clk, c, client, round[0], round[1]) {
						assert.NoError(t, err, "a call after answers were read")
					}
				}
			})
		}
	}
}
