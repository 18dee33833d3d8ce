package envoylimit_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/envoylimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc/status"
)

func withLimit(d *rlcommon.RateLimitDescriptor, rpu uint32) *rlcommon.RateLimitDescriptor {
	d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: typev3.RateLimitUnit_MINUTE}
	return d
}

// Errors of the library start with "ratelimit:".
func TestOverrideLimiterErrorPrefixed(t *testing.T) {
	cfg, err := envoylimit.ParseConfig("t.yaml", []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 1}\n"))
	require.NoError(t, err)
	svc, err := envoylimit.NewService(cfg, envoylimit.WithLimiters(func(name string, p ratelimit.Policy) (ratelimit.KeyedLimiter, error) {
		if strings.HasPrefix(name, "#override.") {
			return nil, errors.New("no room")
		}
		return ratelimit.NewKeyed(p)
	}))
	require.NoError(t, err)
	_, err = svc.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{withLimit(desc("a", "1"), 5)}})
	require.Error(t, err)
	assert.True(t, strings.HasPrefix(status.Convert(err).Message(), "ratelimit:"), status.Convert(err).Message())
}

// 1024 distinct limits carried by requests do not lock later ones out:
// a limit's limiter unused for a whole window makes room.
func TestOverrideCapFreesIdleLimiters(t *testing.T) {
	r := serve(t, "domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 1}\n")
	for i := range 1024 {
		r.call("d", withLimit(desc("a", "x"), uint32(i+1)))
	}
	cfg, err := envoylimit.ParseConfig("t.yaml", []byte("domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 2}\n"))
	require.NoError(t, err)
	require.NoError(t, r.svc.SetConfig(cfg))
	r.clock.Add(24 * 3600e9)
	_, err = r.send(&rlspb.RateLimitRequest{Domain: "d", Descriptors: []*rlcommon.RateLimitDescriptor{withLimit(desc("a", "y"), 5000)}})
	assert.NoError(t, err, "a legitimate override a day later")
}
