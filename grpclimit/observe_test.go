package grpclimit_test

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/grpclimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// logLines returns the lines logged to b.
func logLines(b *syncBuffer) []string {
	return strings.Split(strings.TrimSpace(b.String()), "\n")
}

// tierByKey reads the tier from the API key, "free-..." or "pro-...".
func tierByKey(_ context.Context, key string) string {
	tier, _, _ := strings.Cut(key, "-")
	return tier
}

// TestInterceptorObserverNamesEveryDecision: the interceptor's observer
// hears every decision of its limits under the Limit's name, the one in
// the ratelimit fields, whatever its limiter's WithName (or none), with
// the limiter's home and algorithm. A limiter that has an observer of its
// own beside the interceptor's is refused: each decision would be counted
// twice. Before, decisions reached only each limiter's own observer, under
// the limiter's name ("api-free", or "").
func TestInterceptorObserverNamesEveryDecision(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	free := newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Minute), mock, ratelimit.WithName("api-free"))
	pro := newKeyed(t, ratelimit.TokenBucketPolicy(ratelimit.Per(10, time.Minute), 10), mock)
	tiers, err := ratelimit.NewTiered(tierByKey, map[string]ratelimit.KeyedLimiter{"free": free, "pro": pro})
	require.NoError(t, err)
	var obs eventLog
	c := serve(t, &testService{}, newIC(t, []grpclimit.Limit{{Name: "api", Key: grpclimit.KeyByMetadata("x-api-key"), Limiter: tiers}},
		grpclimit.WithClock(mock), grpclimit.WithObserver(&obs)))
	for i, key := range []string{"free-a", "free-a", "pro-b"} {
		md, _ := unary(t, c, key)
		assert.True(t, strings.HasPrefix(fieldsOf(md).ratelimit, `"api";`), "call %d: %q", i, fieldsOf(md).ratelimit)
	}
	var got []string
	for _, e := range obs.All() {
		got = append(got, e.Name+" "+e.Home.String()+" "+e.Algorithm.String()+" "+e.Outcome.String())
	}
	assert.Equal(t, []string{"api keyed fixedwindow allowed", "api keyed fixedwindow denied", "api keyed tokenbucket allowed"}, got)

	observed := newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Minute), mock, ratelimit.WithObserver(&eventLog{}))
	_, err = grpclimit.New([]grpclimit.Limit{{Name: "api", Key: grpclimit.KeyByMetadata("x-api-key"), Limiter: observed}}, grpclimit.WithObserver(&obs))
	require.Error(t, err)
	assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig)
	assert.Contains(t, err.Error(), "counted twice")
}

// TestMisconfiguredLimitIsInternal: a key whose tier has no limiter is the
// server's misconfiguration: codes.Internal with no RetryInfo and no
// QuotaFailure, for a call and for a stream message, reported to the
// observer (OutcomeError) and logged once each. It used to end with
// ResourceExhausted "it can never succeed, do not retry".
func TestMisconfiguredLimitIsInternal(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	tiers := func() *ratelimit.Tiered {
		tr, err := ratelimit.NewTiered(tierByKey, map[string]ratelimit.KeyedLimiter{"free": newKeyed(t, ratelimit.FixedWindowPolicy(5, time.Minute), mock)})
		require.NoError(t, err)
		return tr
	}
	var obs eventLog
	var logs syncBuffer
	svc := &testService{}
	c := serve(t, svc, newIC(t, []grpclimit.Limit{
		{Name: "plan", Key: grpclimit.KeyByMetadata("x-api-key"), Limiter: tiers()},
		{Name: "msgs", Key: grpclimit.KeyByMetadata("x-api-key"), Limiter: tiers(), Messages: true},
	}, grpclimit.WithClock(mock), grpclimit.WithObserver(&obs), grpclimit.WithErrorReportInterval(0),
		grpclimit.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))))

	_, err := unary(t, c, "gold-a")
	st, d := decode(t, err)
	assert.Equal(t, codes.Internal, st.Code(), "%v", err)
	assert.Equal(t, `rate limit "plan" is misconfigured on the server`, st.Message())
	assert.Nil(t, d.retry)
	assert.Nil(t, d.quota)
	assert.Zero(t, svc.served.Load(), "the call reached the handler")

	// A stream of a key whose tier is known for calls but not for messages.
	ctx, cancel := context.WithTimeout(withKey(context.Background(), "free-a"), 10*time.Second)
	defer cancel()
	free, err := ratelimit.NewTiered(func(context.Context, string) string { return "free" },
		map[string]ratelimit.KeyedLimiter{"free": newKeyed(t, ratelimit.FixedWindowPolicy(5, time.Minute), mock)})
	require.NoError(t, err)
	c2 := serve(t, svc, newIC(t, []grpclimit.Limit{
		{Name: "plan", Key: grpclimit.KeyByMetadata("x-api-key"), Limiter: free},
		{Name: "msgs", Key: grpclimit.KeyByMetadata("x-tenant"), Limiter: tiers(), Messages: true},
	}, grpclimit.WithClock(mock), grpclimit.WithObserver(&obs), grpclimit.WithErrorReportInterval(0),
		grpclimit.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))))
	ctx = metadata.AppendToOutgoingContext(ctx, "x-tenant", "gold-t")
	stream, err := c2.StreamingInputCall(ctx)
	require.NoError(t, err)
	require.NoError(t, stream.Send(&testgrpc.StreamingInputCallRequest{}))
	_, err = stream.CloseAndRecv()
	if err == io.EOF {
		t.Fatal("stream ended without a status")
	}
	assert.Equal(t, codes.Internal, status.Code(err), "%v", err)
	assert.Zero(t, svc.received.Load(), "a message reached the handler")

	var errs []string
	for _, e := range obs.All() {
		if e.Outcome == ratelimit.OutcomeError {
			assert.ErrorIs(t, e.Err, ratelimit.ErrUnknownTier)
			errs = append(errs, e.Name)
		}
	}
	assert.Equal(t, []string{"plan", "msgs"}, errs, "error Events")
	lines := logLines(&logs)
	if assert.Len(t, lines, 2, "log lines: %q", lines) {
		assert.Contains(t, lines[0], "limit=plan")
		assert.Contains(t, lines[1], "limit=msgs")
	}
}
