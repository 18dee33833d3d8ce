package benchmarks

import (
	"context"

	"github.com/rlkit/ratelimit"
)

func init() {
	clientPolicies = append(clientPolicies, clientPolicy{name: "ratelimit-throttle", ours: true, make: func() clientThrottle {
		t, err := ratelimit.NewThrottle(ratelimit.ThrottleConfig{})
		if err != nil {
			panic(err) // the zero config is valid: a bug here
		}
		return oursThrottle{t}
	}})
}

// oursThrottle is ratelimit.Throttle for one key.
type oursThrottle struct{ t *ratelimit.Throttle }

const outageKey = "api.example"

func (o oursThrottle) Attempt() bool { return o.t.Attempt(context.Background(), outageKey).Allowed }
func (o oursThrottle) Retry() bool   { return o.t.Retry(context.Background(), outageKey).Allowed }
func (o oursThrottle) Record(accepted bool) {
	o.t.Record(outageKey, accepted)
}
