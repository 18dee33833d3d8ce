// Package envoylimit is an Envoy rate limit service: it implements the
// gRPC service Envoy, Istio and Envoy Gateway call for global rate limits,
// envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit, from the
// configuration files of envoyproxy/ratelimit, with this repository's
// algorithms as extensions, over any [ratelimit.KeyedLimiter]: in memory
// by default, in Redis with package redislimit ([WithLimiters]).
//
//	cfg, err := envoylimit.LoadConfig("/etc/ratelimit/config")
//	svc, err := envoylimit.NewService(cfg)
//	srv := grpc.NewServer()
//	rlspb.RegisterRateLimitServiceServer(srv, svc)
//	go svc.Watch(ctx, time.Second, logReload, "/etc/ratelimit/config")
//
// Command envoylimit-server (cmd/envoylimit-server) serves a configuration
// directory this way.
//
// # Configuration
//
// envoyproxy/ratelimit's YAML loads unchanged: a domain per file, nested
// descriptors of key and optional value (a value with '*' matches as a
// wildcard), rate_limit with unit (second, minute, hour, day, week, month
// of 30 days, year of 365) and requests_per_unit, unlimited, name and
// replaces, shadow_mode, quota_mode, detailed_metric, value_to_metric,
// share_threshold; metadata is accepted and not used. A descriptor matches
// as there: key and value first, then the key's wildcards in file order,
// then the key alone, level by level; its limit applies only when the
// request's descriptor ends on it. A rate_limit block takes extensions:
//
//	rate_limit:
//	  algorithm: slidinglog  # fixedwindow (the default), slidinglog, slidingcounter,
//	                         # tokenbucket, leakybucket, quota
//	  window: 30s            # any window, in place of unit
//	  requests_per_unit: 100
//	  burst: 200             # tokenbucket: the capacity; leakybucket: the queue
//	  calendar:              # quota: periods of unit day, week, month or year
//	    timezone: Europe/Paris
//	    hour: 9              # also minute, week_start (monday...), month_day
//
// and a descriptor may list several limits, all of which must admit a
// request, in place of one:
//
//	rate_limits:
//	  - {unit: second, requests_per_unit: 10}
//	  - {unit: day, requests_per_unit: 10000}
//
// A bad file is a [*ConfigError] naming the file and line ("ratelimit:
// envoylimit: rl.yaml:12: unknown key \"rate_limt\" in a descriptor"); a
// reload that fails keeps the configuration in force.
//
// # Decisions
//
// Each descriptor is charged its hits_addend (the request's, 0 meaning 1;
// a descriptor's own, where 0 only looks) against every limit its match
// gives, or against the limit it carries itself (a fixed window, as in
// envoyproxy/ratelimit; a domain the configuration lacks limits nothing). A limit's counters are keyed by the descriptor's
// values (the pattern for a share_threshold wildcard), one limiter per
// limit. The call is all or nothing: OVER_LIMIT when any limit denies,
// and then no limit is charged, where envoyproxy/ratelimit counts every
// hit, denied or not, so that a client over its limit stays over it while
// it keeps trying. A shadow_mode limit is charged on its own and answers
// OK; a quota_mode descriptor is charged on its own and denies only when
// every quota_mode descriptor of the call is over its limit; an unlimited
// one answers OK with limit_remaining 4294967295; 0 requests per unit
// denies every hit. Each status carries current_limit, limit_remaining
// and duration_until_reset (until the end of a fixed window; for other
// algorithms until the limit is whole again). [WithHeaders] adds the
// RateLimit fields. A limiter that fails answers [FailToEnvoy]'s gRPC
// error, or its own failure policy's decision ([FailAsLimiter]).
//
// Limits of other algorithms report current_limit with their
// requests_per_unit and unit, UNKNOWN for a window that is no unit. The
// differences from envoyproxy/ratelimit, measured against it on the same
// Redis, are listed in the repository's benchmarks/RESULTS.md.
package envoylimit
