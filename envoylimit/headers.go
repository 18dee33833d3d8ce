package envoylimit

import (
	"strconv"
	"time"

	corepb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/rlkit/ratelimit"
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
	if limit == 0 && c.limit != nil {
		limit = int64(c.limit.RequestsPerUnit)
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
	limitset.WriteDecision(h, &limitset.HTTPNames, limitset.IETFFields, d, name, c.windowLength(), now)
	out := make([]*corepb.HeaderValue, 0, len(h))
	for _, k := range []string{limitset.HTTPNames.Policy, limitset.HTTPNames.RateLimit, limitset.HTTPNames.RetryAfter} {
		for _, v := range h[k] {
			out = append(out, &corepb.HeaderValue{Key: k, Value: v})
		}
	}
	return out
}

// windowLength is the time c's limit counts its quota over, for
// RateLimit-Policy's w: the window of a window algorithm, the time a
// bucket takes to refill or drain from empty; 0 (unknown) for a calendar
// quota, whose periods vary.
func (c *charge) windowLength() time.Duration {
	if c.window > 0 {
		return c.window
	}
	if c.spec == nil {
		return 0
	}
	p := c.spec.policy
	switch p.Algorithm {
	case ratelimit.SlidingLogAlgorithm, ratelimit.SlidingCounterAlgorithm:
		return p.Period
	case ratelimit.TokenBucketAlgorithm:
		if p.Refill > 0 {
			return time.Duration(int64(p.Period) * int64(p.Limit) / int64(p.Refill))
		}
	case ratelimit.LeakyBucketAlgorithm:
		return p.Period * time.Duration(p.Limit)
	}
	return 0
}

// ceilSeconds is d in whole seconds, rounded up.
func ceilSeconds(d time.Duration) int64 {
	s := int64(d / time.Second)
	if d%time.Second > 0 {
		s++
	}
	return s
}
