package envoylimit

import (
	"strconv"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/rlkit/ratelimit/internal/limitset"
)

// The names of EnvoyHeaders, envoyproxy/ratelimit's defaults.
const (
	headerLimit     = "RateLimit-Limit"
	headerRemaining = "RateLimit-Remaining"
	headerReset     = "RateLimit-Reset"
)

// headers are the response_headers_to_add of a response whose most
// restrictive charge is c.
func (s *Service) headers(c *charge, now int64) []*corepb.HeaderValue {
	limit := int64(c.d.Limit)
	if limit == 0 {
		limit = int64(c.spec.current.RequestsPerUnit)
	}
	if s.opts.headers == EnvoyHeaders {
		return []*corepb.HeaderValue{
			{Key: headerLimit, Value: strconv.FormatInt(limit, 10)},
			{Key: headerRemaining, Value: strconv.Itoa(max(c.d.Remaining, 0))},
			{Key: headerReset, Value: strconv.FormatInt(ceilSeconds(c.untilReset(now)), 10)},
		}
	}
	name := c.name
	if !limitset.ValidName(name) {
		name = "rls"
	}
	d := c.d
	if c.shadow {
		d.Allowed = true
	}
	h := make(map[string][]string, 3)
	limitset.WriteDecision(h, &limitset.HTTPNames, limitset.IETFFields, d, name, c.windowLength(now), now)
	out := make([]*corepb.HeaderValue, 0, len(h))
	for _, k := range []string{limitset.HTTPNames.Policy, limitset.HTTPNames.RateLimit, limitset.HTTPNames.RetryAfter} {
		for _, v := range h[k] {
			out = append(out, &corepb.HeaderValue{Key: k, Value: v})
		}
	}
	return out
}

// windowLength is the time c's limit counts its quota over, for
// RateLimit-Policy's w, at now: its policy's [ratelimit.Policy.WindowAt],
// or the fixed window of a limit of 0 requests per unit.
func (c *charge) windowLength(now int64) time.Duration {
	if c.spec.never {
		return c.spec.window
	}
	return c.spec.policy.WindowAt(time.Unix(0, now))
}

// ceilSeconds is d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return s
}
