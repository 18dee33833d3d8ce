package grpclimit_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/grpclimit"
)

// A priority function that panics (after the limits admitted the call,
// before the Adaptive was asked) gives back what the limits admitted, for
// a server whose recovery interceptor goes on serving: a concurrency
// permit is not leaked, so the key is not refused for good.
func TestAdaptivePriorityPanicReleasesLimits(t *testing.T) {
	t.Parallel()
	conc := newConcurrency(t, 1)
	ad := fixedAdaptive(t, 10)
	ic := newIC(t, []grpclimit.Limit{{Name: "c", Key: grpclimit.KeyByMetadata("x-api-key"), Concurrency: conc}},
		grpclimit.WithAdaptive(ad, func(ctx context.Context, _ string) ratelimit.Priority {
			if mdValue(ctx, "x-panic") != "" {
				panic("priority bug")
			}
			return ratelimit.PriorityDefault
		}))
	info := &grpc.UnaryServerInfo{FullMethod: "/svc/M"}
	call := func(panics bool) (err error, panicked bool) {
		md := metadata.Pairs("x-api-key", "k")
		if panics {
			md.Set("x-panic", "1")
		}
		ctx := metadata.NewIncomingContext(context.Background(), md)
		defer func() { panicked = recover() != nil }()
		_, err = ic.Unary()(ctx, nil, info, func(context.Context, any) (any, error) { return "ok", nil })
		return err, false
	}
	_, panicked := call(true)
	require.True(t, panicked, "the priority function's panic goes on up")
	err, _ := call(false)
	assert.NoError(t, err, "the key's one permit is free again")
	assert.Equal(t, 0, conc.InFlight("k"))
	assert.Equal(t, 0, ad.InFlight())
}
