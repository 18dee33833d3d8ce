package grpclimit_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/benbjohnson/clock"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/grpclimit"
	"github.com/rlkit/ratelimit/internal/testkit/eventrec"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// epoch is a whole minute in 2026, so fixed windows of a minute start on it.
var epoch = time.Unix(1767225600, 0)

func newKeyed(t testing.TB, p ratelimit.Policy, c ratelimit.Clock, opts ...ratelimit.Option) *ratelimit.Keyed {
	t.Helper()
	k, err := ratelimit.NewKeyed(p, append([]ratelimit.Option{ratelimit.WithClock(c)}, opts...)...)
	require.NoError(t, err)
	return k
}

func newIC(t testing.TB, limits []grpclimit.Limit, opts ...grpclimit.Option) *grpclimit.Interceptor {
	t.Helper()
	ic, err := grpclimit.New(limits, opts...)
	require.NoError(t, err)
	return ic
}

// withKey returns ctx carrying the API key as outgoing metadata.
func withKey(ctx context.Context, key string) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "x-api-key", key)
}

// unary calls UnaryCall with key and returns its error and header metadata.
func unary(t testing.TB, c testgrpc.TestServiceClient, key string) (metadata.MD, error) {
	t.Helper()
	var md metadata.MD
	ctx := context.Background()
	if key != "" {
		ctx = withKey(ctx, key)
	}
	_, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.Header(&md))
	return md, err
}

// fields are the rate-limit fields of one answer.
type fields struct {
	limit, remaining, reset, policy, ratelimit, retry string
}

func fieldsOf(md metadata.MD) fields {
	get := func(k string) string {
		if v := md.Get(k); len(v) > 0 {
			return strings.Join(v, ",")
		}
		return ""
	}
	return fields{
		limit:     get("x-ratelimit-limit"),
		remaining: get("x-ratelimit-remaining"),
		reset:     get("x-ratelimit-reset"),
		policy:    get("ratelimit-policy"),
		ratelimit: get("ratelimit"),
		retry:     get("retry-after"),
	}
}

// TestExactCountsUnderConcurrentClients: 8 clients racing for a quota of
// 50 get exactly 50 calls through, and only those reach the handler.
func TestExactCountsUnderConcurrentClients(t *testing.T) {
	t.Parallel()
	const quota, clients, each = 50, 8, 25
	for _, tc := range []struct {
		name    string
		two     bool
		bufconn bool
	}{{"one limit", false, false}, {"two limits", true, false}, {"bufconn", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mock := fakeclock.New(epoch)
			limits := []grpclimit.Limit{{Name: "method", Key: grpclimit.KeyByMethod(), Limiter: newKeyed(t, ratelimit.FixedWindowPolicy(quota, time.Minute), mock)}}
			if tc.two {
				limits = append(limits, grpclimit.Limit{Name: "service", Key: grpclimit.KeyByService(), Limiter: newKeyed(t, ratelimit.FixedWindowPolicy(1000, time.Minute), mock)})
			}
			svc := &testService{}
			ic := newIC(t, limits, grpclimit.WithClock(mock))
			c := serve(t, svc, ic)
			if tc.bufconn {
				c = serveBufconn(t, svc, ic)
			}
			var ok, exhausted, other atomic.Int64
			var wg sync.WaitGroup
			for g := 0; g < clients; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < each; i++ {
						_, err := c.UnaryCall(context.Background(), &testgrpc.SimpleRequest{})
						switch status.Code(err) {
						case codes.OK:
							ok.Add(1)
						case codes.ResourceExhausted:
							exhausted.Add(1)
						default:
							other.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			assert.Equal(t, int64(quota), ok.Load(), "admitted")
			assert.Equal(t, int64(clients*each-quota), exhausted.Load(), "ResourceExhausted")
			assert.Zero(t, other.Load(), "other codes")
			assert.Equal(t, int64(quota), svc.served.Load(), "calls that reached the handler")
		})
	}
}

// TestUnaryFieldsAndDenial walks a fixed window of 3 a minute and checks
// the header metadata of every answer, read with grpc.Header, and the
// denial's status as a standard client decodes it. The key appears
// nowhere in what the client gets.
func TestUnaryFieldsAndDenial(t *testing.T) {
	t.Parallel()
	const key = "secret-api-key-7731"
	mock := fakeclock.New(epoch.Add(10500 * time.Millisecond))
	lim := newKeyed(t, ratelimit.FixedWindowPolicy(3, time.Minute), mock)
	svc := &testService{}
	c := serve(t, svc, newIC(t, []grpclimit.Limit{{Name: "api", Key: grpclimit.KeyByMetadata("x-api-key"), Limiter: lim}}, grpclimit.WithClock(mock)))

	reset := strconv.FormatInt(epoch.Unix()+60, 10)
	for i, rem := range []string{"2", "1", "0"} {
		md, err := unary(t, c, key)
		require.NoError(t, err, "call %d", i+1)
		assert.Equal(t, fields{limit: "3", remaining: rem, reset: reset, policy: `"api";q=3;w=60`, ratelimit: `"api";r=` + rem + `;t=50`}, fieldsOf(md), "call %d", i+1)
	}
	md, err := unary(t, c, key)
	assert.Equal(t, fields{limit: "3", remaining: "0", reset: reset, policy: `"api";q=3;w=60`, ratelimit: `"api";r=0;t=50`, retry: "50"}, fieldsOf(md), "denied call")
	st, d := decode(t, err)
	assert.Equal(t, codes.ResourceExhausted, st.Code())
	assert.Equal(t, `rate limit "api" exceeded, retry in 50 s`, st.Message())
	require.NotNil(t, d.retry)
	assert.Equal(t, 50*time.Second, d.retry.GetRetryDelay().AsDuration(), "49.5 s rounded up")
	require.NotNil(t, d.quota)
	require.Len(t, d.quota.GetViolations(), 1)
	assert.Equal(t, "limit:api", d.quota.GetViolations()[0].GetSubject())
	assert.Equal(t, "api", d.quota.GetViolations()[0].GetQuotaId())
	assert.Equal(t, int64(3), d.quota.GetViolations()[0].GetQuotaValue())
	raw, merr := proto.Marshal(st.Proto())
	require.NoError(t, merr)
	assert.NotContains(t, string(raw), key, "the key is in the status")
	for k, v := range md {
		assert.NotContains(t, k+strings.Join(v, ","), key, "the key is in the metadata")
	}
	assert.Equal(t, int64(3), svc.served.Load())

	// A call of another key is not charged in k's quota; one with no key
	// is not limited and gets no fields.
	md, err = unary(t, c, "other")
	require.NoError(t, err)
	assert.Equal(t, "2", fieldsOf(md).remaining)
	md, err = unary(t, c, "")
	require.NoError(t, err)
	assert.Equal(t, fields{}, fieldsOf(md))
}

// TestFieldSets: WithFields chooses the fields; NoFields still sends
// retry-after on a denial.
func TestFieldSets(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		set              grpclimit.FieldSet
		admitted, denied fields
	}{
		{grpclimit.XRateLimitFields, fields{limit: "1", remaining: "0", reset: "1767225660"}, fields{limit: "1", remaining: "0", reset: "1767225660", retry: "60"}},
		{grpclimit.IETFFields, fields{policy: `"api";q=1;w=60`, ratelimit: `"api";r=0;t=60`}, fields{policy: `"api";q=1;w=60`, ratelimit: `"api";r=0;t=60`, retry: "60"}},
		{grpclimit.NoFields, fields{}, fields{retry: "60"}},
	} {
		t.Run(fmt.Sprint(tc.set), func(t *testing.T) {
			t.Parallel()
			mock := fakeclock.New(epoch)
			lim := newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Minute), mock)
			c := serve(t, &testService{}, newIC(t, []grpclimit.Limit{{Name: "api", Key: grpclimit.KeyByMethod(), Limiter: lim}}, grpclimit.WithClock(mock), grpclimit.WithFields(tc.set)))
			md, err := unary(t, c, "")
			require.NoError(t, err)
			assert.Equal(t, tc.admitted, fieldsOf(md), "admitted")
			md, err = unary(t, c, "")
			assert.Equal(t, codes.ResourceExhausted, status.Code(err))
			assert.Equal(t, tc.denied, fieldsOf(md), "denied")
		})
	}
}

// TestSeveralLimitsAllOrNothing: a call denied by one limit is charged in
// none.
func TestSeveralLimitsAllOrNothing(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	perKey := newKeyed(t, ratelimit.FixedWindowPolicy(5, time.Minute), mock)
	perMethod := newKeyed(t, ratelimit.FixedWindowPolicy(2, time.Minute), mock)
	svc := &testService{}
	c := serve(t, svc, newIC(t, []grpclimit.Limit{
		{Name: "key", Key: grpclimit.KeyByMetadata("x-api-key"), Limiter: perKey},
		{Name: "method", Key: grpclimit.When(grpclimit.IsMethod(mUnary), grpclimit.KeyByMethod()), Limiter: perMethod},
	}, grpclimit.WithClock(mock)))
	for i := 0; i < 2; i++ {
		_, err := unary(t, c, "k1")
		require.NoError(t, err)
	}
	for i := 0; i < 3; i++ {
		md, err := unary(t, c, "k1")
		st, d := decode(t, err)
		require.Equal(t, codes.ResourceExhausted, st.Code())
		assert.Equal(t, "method", d.quota.GetViolations()[0].GetQuotaId(), "the denying limit is named")
		assert.Equal(t, `"method";q=2;w=60`, fieldsOf(md).policy)
	}
	d, err := perKey.Peek(context.Background(), "k1", 0)
	require.NoError(t, err)
	assert.Equal(t, 3, d.Remaining, "denied calls were charged in the key's limit")
	// The key's limit alone still admits calls to another method, which
	// the method limit does not apply to.
	_, err = c.EmptyCall(withKey(context.Background(), "k1"), &testgrpc.Empty{})
	require.NoError(t, err)
	assert.Equal(t, int64(3), svc.served.Load())
}

type planKey struct{}

// TestTiers: a *ratelimit.Tiered picks each call's limiter from the plan
// an earlier interceptor stored in the context.
func TestTiers(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	free := newKeyed(t, ratelimit.FixedWindowPolicy(2, time.Minute), mock)
	pro := newKeyed(t, ratelimit.FixedWindowPolicy(100, time.Hour), mock)
	var tierCalls atomic.Int64
	tiered, err := ratelimit.NewTiered(func(ctx context.Context, _ string) string {
		tierCalls.Add(1)
		plan, _ := ctx.Value(planKey{}).(string)
		return plan
	}, map[string]ratelimit.KeyedLimiter{"free": free, "pro": pro})
	require.NoError(t, err)
	ic := newIC(t, []grpclimit.Limit{{Name: "plan", Key: grpclimit.KeyByMetadata("x-api-key"), Limiter: tiered}}, grpclimit.WithClock(mock))
	// auth stores the plan the "x-plan" metadata names, as an
	// authentication interceptor would.
	auth := func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		if v := metadata.ValueFromIncomingContext(ctx, "x-plan"); len(v) > 0 {
			ctx = context.WithValue(ctx, planKey{}, v[0])
		}
		return h(ctx, req)
	}
	svc := &testService{}
	c := serveWith(t, svc, grpc.ChainUnaryInterceptor(auth, ic.Unary()))
	call := func(key, plan string) (metadata.MD, error) {
		var md metadata.MD
		ctx := metadata.AppendToOutgoingContext(context.Background(), "x-api-key", key, "x-plan", plan)
		_, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.Header(&md))
		return md, err
	}
	for i := 0; i < 3; i++ {
		md, err := call("p1", "pro")
		require.NoError(t, err)
		assert.Equal(t, `"plan";q=100;w=3600`, fieldsOf(md).policy)
	}
	for i := 0; i < 2; i++ {
		_, err := call("f1", "free")
		require.NoError(t, err)
	}
	md, err := call("f1", "free")
	assert.Equal(t, codes.ResourceExhausted, status.Code(err))
	assert.Equal(t, `"plan";q=2;w=60`, fieldsOf(md).policy)
	assert.Equal(t, int64(6), tierCalls.Load(), "the tier function runs once per call")
	// An unknown tier is the server's misconfiguration: Internal, not a
	// denial the client caused (no RetryInfo, no QuotaFailure), never
	// served unlimited, and its error is not sent.
	_, err = call("x1", "gold")
	st, d := decode(t, err)
	assert.Equal(t, codes.Internal, st.Code())
	assert.NotContains(t, st.Message(), "tier")
	assert.NotContains(t, st.Message(), "gold")
	assert.Nil(t, d.quota)
	assert.Nil(t, d.retry)
	assert.Equal(t, int64(5), svc.served.Load())
}

// serveWith is serve with the server options given instead of an
// Interceptor's.
func serveWith(t testing.TB, svc *testService, opts ...grpc.ServerOption) testgrpc.TestServiceClient {
	t.Helper()
	return serveOpts(t, svc, opts)
}

// eventLog records Events.
type eventLog struct{ eventrec.Recorder }

func (l *eventLog) outcomes() map[string][]ratelimit.Outcome {
	m := map[string][]ratelimit.Outcome{}
	for _, e := range l.All() {
		m[e.Name] = append(m[e.Name], e.Outcome)
	}
	return m
}

// TestShadowMode: a shadow limit charges and reports, but every call is
// served and its fields are the enforced limit's. The interceptor's
// observer hears every decision under the limit's name (not the
// limiter's) and the shadow limit's denials as OutcomeShadow.
func TestShadowMode(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	var obs eventLog
	live := newKeyed(t, ratelimit.FixedWindowPolicy(10, time.Minute), mock, ratelimit.WithName("live-limiter"))
	trial := newKeyed(t, ratelimit.FixedWindowPolicy(2, time.Minute), mock)
	svc := &testService{}
	c := serve(t, svc, newIC(t, []grpclimit.Limit{
		{Name: "live", Key: grpclimit.KeyByMethod(), Limiter: live},
		{Name: "trial", Key: grpclimit.KeyByMethod(), Limiter: trial, Shadow: true},
	}, grpclimit.WithClock(mock), grpclimit.WithObserver(&obs)))
	for i := 0; i < 4; i++ {
		md, err := unary(t, c, "")
		require.NoError(t, err, "call %d", i+1)
		assert.Equal(t, `"live";q=10;w=60`, fieldsOf(md).policy, "call %d", i+1)
	}
	assert.Equal(t, int64(4), svc.served.Load())
	o := obs.outcomes()
	assert.Equal(t, []ratelimit.Outcome{ratelimit.OutcomeAllowed, ratelimit.OutcomeAllowed, ratelimit.OutcomeShadow, ratelimit.OutcomeShadow}, o["trial"])
	assert.Len(t, o["live"], 4)
	assert.Len(t, o, 2, "one name per limit: %v", o)

	// With shadow fields the trial limit shows when most restrictive, with
	// no retry-after: the call is served.
	c = serve(t, svc, newIC(t, []grpclimit.Limit{
		{Name: "live", Key: grpclimit.KeyByMethod(), Limiter: live},
		{Name: "trial", Key: grpclimit.KeyByMethod(), Limiter: trial, Shadow: true},
	}, grpclimit.WithClock(mock), grpclimit.WithShadowFields(true)))
	md, err := unary(t, c, "")
	require.NoError(t, err)
	assert.Equal(t, `"trial";r=0;t=60`, fieldsOf(md).ratelimit)
	assert.Empty(t, fieldsOf(md).retry)
}

// TestExemptAndDeniedKeys: an exempt key is served uncharged, a denied one
// refused with PermissionDenied, no details and no fields, whatever its
// cost; the interceptor's observer sees both.
func TestExemptAndDeniedKeys(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	lim := newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Minute), mock)
	var obs eventLog
	svc := &testService{}
	c := serve(t, svc, newIC(t, []grpclimit.Limit{{
		Name: "api", Key: grpclimit.KeyByMetadata("x-api-key"), Limiter: lim,
		ExemptKeys: []string{"internal"}, DeniedKeys: []string{"leaked"},
	}}, grpclimit.WithClock(mock), grpclimit.WithObserver(&obs), grpclimit.WithCost(func(ctx context.Context, _ string, _ any) int {
		if v := metadata.ValueFromIncomingContext(ctx, "x-free"); len(v) > 0 {
			return 0
		}
		return 1
	})))
	for i := 0; i < 3; i++ {
		md, err := unary(t, c, "internal")
		require.NoError(t, err)
		assert.Equal(t, fields{}, fieldsOf(md))
	}
	for _, free := range []bool{false, true} {
		ctx := withKey(context.Background(), "leaked")
		if free {
			ctx = metadata.AppendToOutgoingContext(ctx, "x-free", "1")
		}
		var md metadata.MD
		_, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{}, grpc.Header(&md))
		st, d := decode(t, err)
		assert.Equal(t, codes.PermissionDenied, st.Code(), "free=%v", free)
		assert.Equal(t, "request denied", st.Message())
		assert.Equal(t, details{}, d)
		assert.Equal(t, fields{}, fieldsOf(md))
	}
	d, err := lim.Peek(context.Background(), "leaked", 0)
	require.NoError(t, err)
	assert.Equal(t, 1, d.Remaining, "a denied key was charged")
	assert.Equal(t, int64(3), svc.served.Load())
	assert.Equal(t, []ratelimit.Outcome{ratelimit.OutcomeExempt, ratelimit.OutcomeExempt, ratelimit.OutcomeExempt, ratelimit.OutcomeDenied, ratelimit.OutcomeDenied}, obs.outcomes()["api"])
}

// failing is a KeyedLimiter whose backend is down: AllowN answers dec with
// err (its failure policy's Decision).
type failing struct {
	ratelimit.KeyedLimiter
	dec ratelimit.Decision
	err error
}

func (f *failing) AllowN(context.Context, string, int) (ratelimit.Decision, error) {
	return f.dec, f.err
}

// syncBuffer is a bytes.Buffer safe for concurrent use, for a logger.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestLimiterFailure: the limiter's failure policy decides, the raw error
// never reaches the client, and it is logged once per interval, without
// the key.
func TestLimiterFailure(t *testing.T) {
	t.Parallel()
	errBackend := errors.New("redis: dial tcp 10.9.8.7:6379: connection refused")
	for _, tc := range []struct {
		name   string
		dec    ratelimit.Decision
		served bool
	}{
		{"fail open", ratelimit.Decision{Allowed: true}, true},
		{"fail closed", ratelimit.Decision{RetryAfter: 1500 * time.Millisecond}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			mock := fakeclock.New(epoch)
			var logs syncBuffer
			svc := &testService{}
			c := serve(t, svc, newIC(t, []grpclimit.Limit{{Name: "api", Key: grpclimit.KeyByMetadata("x-api-key"), Limiter: &failing{dec: tc.dec, err: errBackend}}},
				grpclimit.WithClock(mock), grpclimit.WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))))
			for i := 0; i < 3; i++ {
				md, err := unary(t, c, "secret-k")
				if tc.served {
					require.NoError(t, err)
					assert.Equal(t, fields{}, fieldsOf(md), "no quota was measured")
					continue
				}
				st, d := decode(t, err)
				assert.Equal(t, codes.ResourceExhausted, st.Code())
				assert.Equal(t, `rate limit "api" exceeded, retry in 2 s`, st.Message())
				assert.NotContains(t, st.Message(), "redis")
				require.NotNil(t, d.retry)
				assert.Equal(t, 2*time.Second, d.retry.GetRetryDelay().AsDuration())
				assert.Nil(t, d.quota, "no quota was measured")
				assert.Equal(t, fields{retry: "2"}, fieldsOf(md))
			}
			if tc.served {
				assert.Equal(t, int64(3), svc.served.Load())
			} else {
				assert.Zero(t, svc.served.Load())
			}
			out := logs.String()
			assert.Equal(t, 1, strings.Count(out, "ratelimit: limiter error"), "reports in one interval: %s", out)
			assert.Contains(t, out, "limit=api")
			assert.Contains(t, out, "method="+mUnary)
			assert.Contains(t, out, "connection refused")
			assert.NotContains(t, out, "secret-k")
		})
	}
}

// blocking is a KeyedLimiter whose AllowN waits for the call's context to
// end and then fails open with the context's error, as a slow backend
// would.
type blocking struct {
	ratelimit.KeyedLimiter
	entered chan struct{}
}

func (b *blocking) AllowN(ctx context.Context, _ string, _ int) (ratelimit.Decision, error) {
	close(b.entered)
	<-ctx.Done()
	return ratelimit.Decision{Allowed: true}, ctx.Err()
}

// TestCanceledCall: a call whose context ends while the limiter is deciding
// ends with Canceled, is not served (no fail-open admission), and is not
// reported as a backend failure.
func TestCanceledCall(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	lim := &blocking{entered: make(chan struct{})}
	ic := newIC(t, []grpclimit.Limit{{Name: "api", Key: grpclimit.KeyByMethod(), Limiter: lim}},
		grpclimit.WithLogger(slog.New(slog.NewTextHandler(&logs, nil))), grpclimit.WithErrorReportInterval(0))
	got := make(chan error, 1)
	record := func(ctx context.Context, req any, info *grpc.UnaryServerInfo, h grpc.UnaryHandler) (any, error) {
		resp, err := ic.Unary()(ctx, req, info, h)
		got <- err
		return resp, err
	}
	svc := &testService{}
	c := serveWith(t, svc, grpc.UnaryInterceptor(record))
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-lim.entered
		cancel()
	}()
	_, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{})
	assert.Equal(t, codes.Canceled, status.Code(err))
	serverErr := <-got
	assert.Equal(t, codes.Canceled, status.Code(serverErr), "the interceptor's answer: %v", serverErr)
	assert.Zero(t, svc.served.Load(), "served on a failure policy's admission")
	assert.Empty(t, logs.String())
}

// TestDeniedHandler: a custom answer replaces DeniedError; nil falls back
// to it.
func TestDeniedHandler(t *testing.T) {
	t.Parallel()
	for _, custom := range []bool{true, false} {
		t.Run(fmt.Sprint("custom=", custom), func(t *testing.T) {
			t.Parallel()
			mock := fakeclock.New(epoch)
			var seen grpclimit.Denial
			c := serve(t, &testService{}, newIC(t, []grpclimit.Limit{{Name: "api", Key: grpclimit.KeyByMethod(), Limiter: newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Minute), mock)}},
				grpclimit.WithClock(mock), grpclimit.WithDeniedHandler(func(_ context.Context, d grpclimit.Denial) error {
					seen = d
					if custom {
						return status.Errorf(codes.Unavailable, "busy, back in %v", d.RetryAfter)
					}
					return nil
				})))
			_, err := unary(t, c, "")
			require.NoError(t, err)
			_, err = unary(t, c, "")
			if custom {
				assert.Equal(t, codes.Unavailable, status.Code(err))
				assert.Equal(t, "busy, back in 1m0s", status.Convert(err).Message())
			} else {
				assert.Equal(t, codes.ResourceExhausted, status.Code(err))
			}
			assert.Equal(t, grpclimit.Denial{Method: mUnary, Limit: "api", Decision: seen.Decision, RetryAfter: time.Minute}, seen)
			assert.False(t, seen.Decision.Allowed)
		})
	}
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	lim := newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Minute), mock)
	var nilKeyed *ratelimit.Keyed
	cases := []struct {
		name   string
		limits []grpclimit.Limit
		opts   []grpclimit.Option
		want   string
	}{
		{"no limits", nil, nil, "grpclimit.New: limits must not be empty"},
		{"duplicate across calls and messages", []grpclimit.Limit{{Name: "a", Key: grpclimit.KeyByMethod(), Limiter: lim}, {Name: "a", Key: grpclimit.KeyByMethod(), Limiter: lim, Messages: true}}, nil, `grpclimit.Limit.Name must be unique, got "a" twice`},
		{"duplicate default", []grpclimit.Limit{{Key: grpclimit.KeyByMethod(), Limiter: lim}, {Name: "default", Key: grpclimit.KeyByMethod(), Limiter: lim}}, nil, `got "default" twice`},
		{"no key", []grpclimit.Limit{{Name: "a", Limiter: lim}}, nil, "grpclimit.Limit.Key"},
		{"no limiter", []grpclimit.Limit{{Name: "a", Key: grpclimit.KeyByMethod()}}, nil, "grpclimit.Limit.Limiter"},
		{"typed nil limiter", []grpclimit.Limit{{Name: "a", Key: grpclimit.KeyByMethod(), Limiter: nilKeyed}}, nil, "grpclimit.Limit.Limiter"},
		{"messages no limiter", []grpclimit.Limit{{Name: "a", Key: grpclimit.KeyByMethod(), Messages: true}}, nil, "grpclimit.Limit.Limiter"},
		{"bad fields", []grpclimit.Limit{{Name: "a", Key: grpclimit.KeyByMethod(), Limiter: lim}}, []grpclimit.Option{grpclimit.WithFields(0x80)}, "grpclimit.WithFields: unknown field set"},
		{"typed nil clock", []grpclimit.Limit{{Name: "a", Key: grpclimit.KeyByMethod(), Limiter: lim}}, []grpclimit.Option{grpclimit.WithClock((*clock.Mock)(nil))}, "grpclimit.WithClock: clock is a nil"},
		{"typed nil observer", []grpclimit.Limit{{Name: "a", Key: grpclimit.KeyByMethod(), Limiter: lim}}, []grpclimit.Option{grpclimit.WithObserver((*eventLog)(nil))}, "grpclimit.WithObserver: observer is a nil"},
	}
	for _, c := range cases {
		ic, err := grpclimit.New(c.limits, c.opts...)
		assert.Nil(t, ic, c.name)
		require.Error(t, err, c.name)
		assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig, c.name)
		assert.Contains(t, err.Error(), c.want, c.name)
		assert.True(t, strings.HasPrefix(err.Error(), "ratelimit: "), "%s: %v", c.name, err)
	}
}

// TestCostFromRequest: WithCost is given a unary call's request, so a
// batch costs its size; a stream's creation is priced with a nil request.
func TestCostFromRequest(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	lim := newKeyed(t, ratelimit.FixedWindowPolicy(10, time.Minute), mock)
	var streamReq atomic.Value
	c := serve(t, &testService{}, newIC(t, []grpclimit.Limit{{Name: "api", Key: grpclimit.KeyByMetadata("x-api-key"), Limiter: lim}},
		grpclimit.WithClock(mock),
		grpclimit.WithCost(func(_ context.Context, method string, req any) int {
			if method == mInput {
				streamReq.Store(fmt.Sprintf("%T", req))
				return 1
			}
			return int(req.(*testgrpc.SimpleRequest).GetResponseSize())
		})))
	ctx := withKey(context.Background(), "k1")
	var hdr metadata.MD
	_, err := c.UnaryCall(ctx, &testgrpc.SimpleRequest{ResponseSize: 4}, grpc.Header(&hdr))
	require.NoError(t, err)
	assert.Equal(t, "6", fieldsOf(hdr).remaining, "a batch of 4 costs 4")
	_, err = c.UnaryCall(ctx, &testgrpc.SimpleRequest{ResponseSize: 7})
	assert.Equal(t, codes.ResourceExhausted, status.Code(err), "a batch of 7 does not fit in 6")
	require.NoError(t, sendInput(t, c, "k1", 1).err)
	assert.Equal(t, "<nil>", streamReq.Load(), "a stream's creation has no request")
	_, err = c.UnaryCall(ctx, &testgrpc.SimpleRequest{ResponseSize: 5}, grpc.Header(&hdr))
	require.NoError(t, err)
	assert.Equal(t, "0", fieldsOf(hdr).remaining)
}
