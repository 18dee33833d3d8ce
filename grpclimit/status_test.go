package grpclimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/grpclimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	testgrpc "google.golang.org/grpc/interop/grpc_testing"
	"google.golang.org/grpc/status"
)

// details is what a standard client decodes from a status.
type details struct {
	retry *errdetails.RetryInfo
	quota *errdetails.QuotaFailure
	other int
}

func decode(t testing.TB, err error) (*status.Status, details) {
	t.Helper()
	st, ok := status.FromError(err)
	require.True(t, ok, "not a status error: %v", err)
	var d details
	for _, x := range st.Details() {
		switch x := x.(type) {
		case *errdetails.RetryInfo:
			d.retry = x
		case *errdetails.QuotaFailure:
			d.quota = x
		default:
			d.other++
		}
	}
	return st, d
}

// TestDeniedErrorDecodedByStandardClient sends DeniedError's statuses over
// a real connection and decodes them as any gRPC client would.
func TestDeniedErrorDecodedByStandardClient(t *testing.T) {
	t.Parallel()
	errBackend := errors.New("redis: connection refused to 10.1.2.3:6379")
	cases := []struct {
		name      string
		d         grpclimit.Denial
		code      codes.Code
		msg       string
		retry     time.Duration // 0: no RetryInfo
		quota     bool
		quotaDesc string
	}{
		{
			name:  "over quota",
			d:     grpclimit.Denial{Method: mUnary, Limit: "api", Decision: ratelimit.Decision{Limit: 100, RetryAfter: 16200 * time.Millisecond}, RetryAfter: 17 * time.Second},
			code:  codes.ResourceExhausted,
			msg:   `rate limit "api" exceeded, retry in 17 s`,
			retry: 17 * time.Second, quota: true, quotaDesc: "quota of 100 exhausted (call denied)",
		},
		{
			name:  "stream message",
			d:     grpclimit.Denial{Method: mInput, Limit: "msgs", Decision: ratelimit.Decision{Limit: 5, RetryAfter: time.Millisecond}, RetryAfter: time.Second, Message: true},
			code:  codes.ResourceExhausted,
			msg:   `rate limit "msgs" exceeded, retry in 1 s`,
			retry: time.Second, quota: true, quotaDesc: "quota of 5 exhausted (stream message denied)",
		},
		{
			name:  "never",
			d:     grpclimit.Denial{Method: mUnary, Limit: "api", Decision: ratelimit.Decision{Limit: 100, RetryAfter: ratelimit.RetryNever}, Never: true},
			code:  codes.ResourceExhausted,
			msg:   `request cost exceeds rate limit "api" (quota 100): it can never succeed, do not retry`,
			quota: true, quotaDesc: "the call's cost exceeds the quota of 100",
		},
		{
			name:  "fail closed",
			d:     grpclimit.Denial{Method: mUnary, Limit: "api", Decision: ratelimit.Decision{RetryAfter: time.Second}, RetryAfter: time.Second, Err: errBackend},
			code:  codes.ResourceExhausted,
			msg:   `rate limit "api" exceeded, retry in 1 s`,
			retry: time.Second,
		},
		{
			name: "unknown tier",
			d:    grpclimit.Denial{Method: mUnary, Limit: "api", Decision: ratelimit.Decision{RetryAfter: ratelimit.RetryNever}, Never: true, Err: errBackend},
			code: codes.ResourceExhausted,
			msg:  `request refused by rate limit "api": it can never succeed, do not retry`,
		},
		{
			name: "denylist",
			d:    grpclimit.Denial{Method: mUnary, Limit: "api", Decision: ratelimit.Decision{RetryAfter: ratelimit.RetryNever}, Never: true, Err: grpclimit.ErrDenied},
			code: codes.PermissionDenied,
			msg:  "request denied",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			svc := &testService{unaryErr: func(context.Context) error { return grpclimit.DeniedError(c.d) }}
			client := serve(t, svc, nil)
			_, err := client.UnaryCall(context.Background(), &testgrpc.SimpleRequest{})
			st, d := decode(t, err)
			assert.Equal(t, c.code, st.Code())
			assert.Equal(t, c.msg, st.Message())
			assert.NotContains(t, st.Message(), "redis", "the limiter's error must not reach the client")
			assert.Zero(t, d.other, "unexpected details")
			if c.retry > 0 {
				require.NotNil(t, d.retry, "RetryInfo")
				assert.Equal(t, c.retry, d.retry.GetRetryDelay().AsDuration())
			} else {
				assert.Nil(t, d.retry, "RetryInfo")
			}
			if !c.quota {
				assert.Nil(t, d.quota, "QuotaFailure")
				return
			}
			require.NotNil(t, d.quota, "QuotaFailure")
			require.Len(t, d.quota.GetViolations(), 1)
			v := d.quota.GetViolations()[0]
			assert.Equal(t, "limit:"+c.d.Limit, v.GetSubject())
			assert.Equal(t, c.d.Limit, v.GetQuotaId())
			assert.Equal(t, int64(c.d.Decision.Limit), v.GetQuotaValue())
			assert.Equal(t, c.quotaDesc, v.GetDescription())
		})
	}
}
