package envoylimit_test

import (
	"context"
	"testing"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/rlkit/ratelimit/envoylimit"
)

// Any YAML either loads or is refused with a "ratelimit:" error; a loaded
// one serves a request without panicking.
func FuzzParseConfig(f *testing.F) {
	for _, s := range []string{
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
		"domain: d\ndescriptors:\n  - key: a\n    value: 'x*'\n    share_threshold: true\n    rate_limits: [{unit: day, requests_per_unit: 3, algorithm: quota, calendar: {timezone: UTC}}]\n",
		"domain: &x d\ndescriptors: [{key: *x}]\n",
		"---\n---\ndomain: d\n",
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, requests_per_unit: 3, algorithm: leakybucket, burst: 2}\n    descriptors: [{key: b, value: c, rate_limit: {unlimited: true}}]\n",
	} {
		f.Add(s, "a", "x")
	}
	f.Fuzz(func(t *testing.T, y, k, v string) {
		cfg, err := envoylimit.ParseConfig("f.yaml", []byte(y))
		if err != nil {
			if len(err.Error()) < 10 || err.Error()[:10] != "ratelimit:" {
				t.Fatalf("error without prefix: %v", err)
			}
			return
		}
		svc, err := envoylimit.NewService(cfg)
		if err != nil {
			t.Fatalf("a loaded config the service refuses: %v", err)
		}
		for _, d := range cfg.Domains() {
			_, _ = svc.ShouldRateLimit(context.Background(), &rlspb.RateLimitRequest{Domain: d, Descriptors: []*rlcommon.RateLimitDescriptor{desc(k, v), desc(k, v, "b", "c")}})
		}
	})
}
