// Package grpclimit limits gRPC traffic with the limiters of package
// ratelimit: unary and stream server interceptors that take the same
// limits as httplimit's middleware, and client interceptors that wait for
// a local limiter and obey the server's RetryInfo. It is a module of its
// own, so that only its users get gRPC in their build.
//
// # Server
//
// [New] builds an [Interceptor] from one or more [Limit]s; install its
// [Interceptor.Unary] and [Interceptor.Stream] with
// grpc.ChainUnaryInterceptor and grpc.ChainStreamInterceptor. Each Limit
// names a keyed limiter (an in-memory [ratelimit.Keyed], a
// [ratelimit.Tiered] for plans whose tier function can read the plan from
// the call's context, or a Redis limiter from module redislimit) and a
// [KeyFunc] that picks the key to charge: the method ([KeyByMethod]), the
// service ([KeyByService]), the API key ([KeyByAPIKey], [KeyByMetadata]),
// the peer address ([KeyByPeer], [IPResolver]), the user ([KeyByUser]) or a
// combination ([Combine], [FirstOf], [When] with [IsMethod] or
// [IsService]). A call is charged in every Limit whose KeyFunc applies to
// it, all or nothing ([ratelimit.AllowAll]); [WithCost] sets its cost.
//
// Every limited call carries the most restrictive Limit's state as
// response header metadata, the fields httplimit sends as HTTP headers,
// with the same values, under lower-case keys ([WithFields] chooses):
//
//	x-ratelimit-limit: 100           the quota (Decision.Limit)
//	x-ratelimit-remaining: 42        calls still admitted now
//	x-ratelimit-reset: 1767225660    Unix time, in seconds rounded up, at which
//	                                 the quota is full again
//	ratelimit-policy: "api";q=100;w=60
//	ratelimit: "api";r=42;t=17
//
// A denied call carries them too (gRPC sends header metadata before the
// status), with retry-after, and never reaches the handler. It ends with
// codes.ResourceExhausted, a message such as
//
//	rate limit "api" exceeded, retry in 17 s
//
// and the details standard clients decode: an errdetails.RetryInfo whose
// delay is the limiter's, rounded up to a whole second (17 s: a client that
// waits that long and retries succeeds if nobody else spent the quota),
// and an errdetails.QuotaFailure naming the limit (Subject "limit:api",
// QuotaId "api", QuotaValue the quota). A call whose cost exceeds a
// limit's capacity can never succeed: it gets the QuotaFailure and no
// RetryInfo, so that clients do not retry it. [DeniedError] builds these
// statuses; [WithDeniedHandler] replaces them. The call's key is never in
// a status, a log or an Event: it may be a secret.
//
// Streams are charged when they are created, like unary calls. A Limit
// with [Limit.Messages] charges instead each message the stream's handler
// receives ([WithMessageCost]); a denied message is dropped and RecvMsg
// returns the denial, which ends the stream when the handler returns it
// (the denial's fields then go in the trailer metadata).
//
// Errors from a limiter (Redis down) never reach the client: the limiter's
// own failure policy decides (fail open, fail closed, local fallback) and
// the call is admitted or denied as its Decision says. The quota fields
// and the QuotaFailure are then left out (no quota was measured; a
// fail-closed denial still carries RetryInfo and retry-after), and the
// error is logged ([WithLogger], default [log/slog.Default]) at most once
// per limit per [WithErrorReportInterval]. A call whose context ends
// before the limiters answer (the client went away, a deadline passed)
// ends with codes.Canceled or codes.DeadlineExceeded: its error is the
// caller's, not the backend's, so no failure policy admits it and nothing
// is reported.
//
// [Limit.ExemptKeys] let keys through uncharged; [Limit.DeniedKeys] refuse
// them with codes.PermissionDenied, "request denied", no details and no
// fields ([ErrDenied]); denial beats exemption. A limit in shadow mode
// ([Limit.Shadow]) charges and reports without enforcing: its limiter's
// [ratelimit.Observer] sees its denials as [ratelimit.OutcomeShadow], and
// the call is served. [WithObserver] reports what the interceptor decides
// without a limiter (exemptions, denylists).
//
// # Client IP
//
// (Resolver section: [IPResolver] and [KeyByPeer].)
//
// # Client
//
// (Client section: [NewClient] and [NewKeyedClient].)
package grpclimit
