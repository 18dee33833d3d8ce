// Package envoylimit is an Envoy rate limit service: it implements the
// gRPC service Envoy, Istio and Envoy Gateway call for global rate limits,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, over the
// configuration files of envoyproxy/ratelimit, with this repository's
// algorithms as extensions, and any [ratelimit.KeyedLimiter] holding the
// counters: in memory by default, in Redis with package redislimit.
package envoylimit
