package envoylimit_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/benbjohnson/clock"
	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/envoylimit"
	"github.com/rlkit/ratelimit/internal/testkit/eventrec"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// plain hides a *Keyed behind the KeyedLimiter interface, as a Redis
// limiter is: the service then decides in order and refunds.
type plain struct{ ratelimit.KeyedLimiter }

// failing fails every call on keys that start with "bad", answering the
// failure policy's Decision open says.
type failing struct {
	ratelimit.KeyedLimiter
	open  bool
	calls *atomic.Int64
}

var errDown = errors.New("store down")

func (f failing) AllowN(ctx context.Context, key string, n int) (ratelimit.Decision, error) {
	f.calls.Add(1)
	if strings.HasPrefix(key, "bad") {
		if f.open {
			return ratelimit.Decision{Allowed: true, Limit: 1}, errDown
		}
		return ratelimit.Decision{Limit: 1, RetryAfter: 1}, errDown
	}
	return f.KeyedLimiter.AllowN(ctx, key, n)
}

func plainLimiters(mock *clock.Mock, wrap func(ratelimit.KeyedLimiter) ratelimit.KeyedLimiter) envoylimit.Option {
	return envoylimit.WithLimiters(func(name string, p ratelimit.Policy) (ratelimit.KeyedLimiter, error) {
		k, err := ratelimit.NewKeyed(p, ratelimit.WithClock(mock), ratelimit.WithName(name))
		return wrap(k), err
	})
}

// Over limiters without the atomic path, a request denied by a later
// descriptor is refunded to the earlier ones.
func TestInOrderRefunds(t *testing.T) {
	mock := clock.NewMock()
	r := serve(t, perMinute, envoylimit.WithClock(mock), plainLimiters(mock, func(k ratelimit.KeyedLimiter) ratelimit.KeyedLimiter { return plain{k} }))
	for range 3 {
		require.Equal(t, "OK", r.call("d", desc("user", "u"), desc("path", "/p")).GetOverallCode().String())
	}
	resp := r.call("d", desc("user", "u"), desc("path", "/p"), desc("user", "w"))
	assert.Equal(t, []string{"OVER_LIMIT", "OK", "OVER_LIMIT", "OK"}, codesOf(resp))
	assert.Equal(t, uint32(2), resp.Statuses[0].GetLimitRemaining(), "refunded")
	assert.Equal(t, uint32(5), resp.Statuses[2].GetLimitRemaining(), "asked, not charged")
	assert.Equal(t, 2, r.okTimes(3, "d", desc("user", "u")))
	assert.Equal(t, 5, r.okTimes(6, "d", desc("user", "w")))
}

// FailToEnvoy: a limiter's failure is the call's gRPC UNAVAILABLE, and
// what the call charged before is refunded. FailAsLimiter: the limiter's
// failure decision answers.
func TestFailurePolicy(t *testing.T) {
	for _, tc := range []struct {
		name   string
		policy envoylimit.FailurePolicy
		open   bool
		want   string // the code, or "error"
	}{
		{"to-envoy", envoylimit.FailToEnvoy, true, "error"},
		{"as-limiter open", envoylimit.FailAsLimiter, true, "OK"},
		{"as-limiter closed", envoylimit.FailAsLimiter, false, "OVER_LIMIT"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mock := clock.NewMock()
			var calls atomic.Int64
			var rec eventrec.Recorder
			r := serve(t, perMinute, envoylimit.WithClock(mock), envoylimit.WithFailurePolicy(tc.policy), envoylimit.WithObserver(&rec),
				plainLimiters(mock, func(k ratelimit.KeyedLimiter) ratelimit.KeyedLimiter { return failing{k, tc.open, &calls} }))
			resp, err := r.send(&rlspb.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{desc("user", "u"), desc("path", "bad"), desc("user", "v")}})
			events := rec.Take()
			if tc.want == "error" {
				assert.Equal(t, codes.Unavailable, status.Code(err))
				assert.ErrorContains(t, err, "ratelimit: envoylimit: limit d.path: store down")
				assert.Equal(t, int64(2), calls.Load(), "the third limit is not asked")
				require.Len(t, events, 2)
				assert.Equal(t, ratelimit.OutcomeError, events[1].Outcome)
				assert.Equal(t, uint32(4), r.call("d", desc("user", "u")).Statuses[0].GetLimitRemaining(), "refunded")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, resp.GetOverallCode().String())
			require.Len(t, events, 3)
			// A limiter of the caller's own: no home says its errors come
			// with a failure policy's decision (redislimit's do: fallback).
			assert.Equal(t, ratelimit.OutcomeError, events[1].Outcome)
			assert.Equal(t, ratelimit.HomeNone, events[1].Home)
			used := 1
			if !tc.open {
				used = 0
			}
			assert.Equal(t, uint32(4-used), r.call("d", desc("user", "u")).Statuses[0].GetLimitRemaining())
		})
	}
	// A shadow limit's failure never fails the call.
	mock := clock.NewMock()
	var calls atomic.Int64
	r := serve(t, "domain: s\ndescriptors:\n  - key: k\n    shadow_mode: true\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
		envoylimit.WithClock(mock), plainLimiters(mock, func(k ratelimit.KeyedLimiter) ratelimit.KeyedLimiter { return failing{k, false, &calls} }))
	assert.Equal(t, []string{"OK", "OK"}, codesOf(r.call("s", desc("k", "bad"))))
}
