// Package httplimit limits HTTP traffic with the limiters of package
// ratelimit: a server middleware in the standard shape
// func(http.Handler) http.Handler, and an outbound [http.RoundTripper] that
// waits for quota and obeys a server's 429 and Retry-After.
//
// # Server
//
// [New] builds a [Middleware] from one or more [Limit]s. Each Limit names a
// keyed limiter (an in-memory [ratelimit.Keyed], a [ratelimit.Tiered] for
// plans read from the request context, or a Redis limiter) and a [KeyFunc]
// that picks the key to charge: a header such as the API key
// ([KeyByHeader]), the client address ([KeyByIP], [IPResolver]), the user
// ([KeyByUser]), the route ([KeyByRoute]) or a combination ([Combine],
// [FirstOf], [When]). A request is charged in every Limit whose KeyFunc
// applies to it, all or nothing ([ratelimit.AllowAll]). A Limit with
// [Limit.Concurrency] bounds the requests in flight per key instead,
// holding permits until the handler returns; [Limit.Count] counts only
// failures, or the tokens a handler reports ([ReportCost]): reserved
// before the handler runs, settled once it returns.
//
// Every limited response carries the most restrictive Limit's state, both
// in the widespread X-RateLimit-* fields and in the fields of the IETF
// draft draft-ietf-httpapi-ratelimit-headers ([WithHeaders] chooses):
//
//	X-RateLimit-Limit: 100           the quota (Decision.Limit)
//	X-RateLimit-Remaining: 42        requests still admitted now
//	X-RateLimit-Reset: 1767225660    Unix time, in seconds rounded up, at which
//	                                 the quota is full again
//	RateLimit-Policy: "api";q=100;w=60
//	RateLimit: "api";r=42;t=17
//
// In RateLimit-Policy, q is the quota and w the window in seconds (rounded
// up; for a token bucket the time it takes to refill from empty; for a
// calendar quota the length of the period the request falls in, such as
// 82800 on a day of 23 hours). The window is read from the limiter's
// policy on each request, so it follows a policy changed while serving. In
// RateLimit, r is the remaining quota and t, on every response, the seconds
// until the quota resets (a bucket is full, a window ends), rounded up: the
// instant X-RateLimit-Reset names (they differ by under a second). When a
// denied request can succeed is Retry-After's to say, never t's.
//
// A denied request is answered 429 Too Many Requests with Retry-After in
// whole seconds, rounded up and never 0 (so a client that waits that long
// and retries succeeds if nobody else spent the quota), and a JSON body:
//
//	{"error":"Too Many Requests","message":"rate limit \"api\" exceeded, retry in 17 s","retryAfter":17}
//
// [WithDeniedHandler] replaces that answer, for instance with a cached or
// reduced response (graceful degradation).
//
// A request whose cost exceeds a limit's capacity can never succeed
// (ratelimit.RetryNever): it is answered 429 with no Retry-After and
// "retryNever": true in the body, so that clients do not retry it;
// [Denial.Never] tells a custom handler, which may prefer 413.
//
// Errors from a limiter (Redis down) never reach the client: the limiter's
// own failure policy decides (fail open, fail closed, local fallback) and
// the request is admitted or denied as its Decision says, whatever the
// error. The quota fields are then left out (no quota was measured; a
// fail-closed denial still carries Retry-After), and the error is logged
// ([WithLogger], default [log/slog.Default]) at most once per limit per
// [WithErrorReportInterval], one line per failure. A key whose tier has no
// limiter is the server's fault: 500, not a denial. [WithObserver] hears
// every decision of every limit once, under the Limit's name (the one in the
// fields), [ratelimit.OutcomeShadow] for a shadow limit's denial.
//
// A request whose context is done by the time a limiter answers it with an
// error (the client went away, a deadline passed) is the caller's error,
// not the backend's, so no failure policy admits it free: it is answered
// 503, the handler not called, the error not reported.
//
// # Exemptions and denylists
//
// Some clients are never limited (health checkers, internal services) and
// some are always refused (a leaked key, an abusive network), without a
// custom key function: [Limit.ExemptKeys] and [Limit.DeniedKeys] per
// limit, compared with the key its KeyFunc returns, and [ExemptNetworks]
// and [DeniedNetworks] for the whole middleware, matched against the
// client address of [WithIPResolver]'s resolver (the peer only, unless it
// trusts proxies: a forged X-Forwarded-For exempts nobody). An exempt
// request is served uncharged, with no rate-limit fields; a denied one is
// charged nowhere and answered 403 Forbidden ([ErrDenied]). Denial always
// beats exemption, an [Override] with Exempt included; see [New] for the
// order. [WithObserver] reports exemptions and denials as Events with
// Outcome [ratelimit.OutcomeExempt] or [ratelimit.OutcomeDenied] and Home
// [ratelimit.HomeNone]. Matching costs nothing when none is configured.
// With [WithDecisionInContext], the handler finds the middleware's decision
// ([ResultFrom]): the limit that bound the request and its Decision.
//
// # Options
//
// Each constructor family takes its own option type, so that a wrong one
// does not compile: [Option] for the middleware, [ClientOption] for the
// transports, [ResolverOption] for [NewIPResolver]; [CommonOption]s
// ([WithClock], [WithCost]) apply to both.
//
// # Client IP
//
// Forwarded headers are read only from peers named trusted
// ([TrustedProxies]), from the right, the end a proxy appends to: no text a
// client puts before its proxy's entry (an unbalanced quote, garbage, any
// number of lines) can hide or replace the address that proxy vouched for.
//
// # Client
//
// [NewTransport] and [NewKeyedTransport] wrap an [http.RoundTripper] so that
// each request first waits for the limiter (keyed by the same [KeyFunc]s as
// the middleware, for NewKeyedTransport), then for what the server's
// answers asked of its key (every request, for [NewTransport]). Every
// answer is read for the quotas it reports, in each dialect in use (IETF
// RateLimit of every draft, X-RateLimit-*, OpenAI's and Anthropic's request
// and token budgets, see [WithTokenCost]): a key sends at most what is
// left, waits for the reset when it is spent, and is not refused. A 429
// or 503 pauses the key for its Retry-After, else its spent quotas' reset,
// else a jittered exponential backoff ([WithBackoff]); [WithPolicyShaping]
// spreads requests by the advertised policy. With [WithRetries] the transport retries the requests
// that are safe to send twice: idempotent methods, and requests marked
// with [MarkRetrySafe] or carrying an Idempotency-Key. A request whose
// context is done is never sent.
package httplimit
