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
// [ratelimit.Tiered] for plans read from the call's context, or a Redis
// limiter) and a [KeyFunc] that picks the key to charge: the method
// ([KeyByMethod]), the service ([KeyByService]), metadata such as the API
// key ([KeyByMetadata]), the peer address ([KeyByIP], [IPResolver]), the
// user ([KeyByUser]) or a combination ([Combine], [FirstOf], [When] with
// [IsMethod] or [IsService]). A call is charged in every Limit whose
// KeyFunc applies to it, all or nothing ([ratelimit.AllowAll]); [WithCost]
// sets its cost. [Limit.Concurrency] bounds the calls in flight instead;
// [Limit.Count] counts only failures, or the tokens a handler reports
// ([ReportCost]): reserved before the handler runs, settled once it returns.
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
// t is, on every call, the seconds until the quota resets (the instant of
// x-ratelimit-reset); when a denied call can succeed is retry-after's to
// say. A denied call carries the fields too (gRPC sends header metadata
// before the status), with retry-after, and never reaches the handler. It
// ends with codes.ResourceExhausted, a message such as
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
// per limit per [WithErrorReportInterval], one line per failure. A key
// whose tier has no limiter is the server's fault: codes.Internal, not a
// denial. A call whose context ends before the limiters answer ends with
// codes.Canceled or DeadlineExceeded: the caller's error, not the
// backend's, so no failure policy admits it and nothing is reported.
//
// [Limit.ExemptKeys] let keys through uncharged; [Limit.DeniedKeys] refuse
// them with codes.PermissionDenied, "request denied", no details and no
// fields ([ErrDenied]); denial beats exemption. A limit in shadow mode
// ([Limit.Shadow]) charges and reports without enforcing, and the call is
// served. [WithObserver] hears every decision of every limit once, under
// the Limit's name, [ratelimit.OutcomeShadow] for a shadow limit's denial.
//
// # Client IP
//
// [KeyByIP] keys calls by the address of the connection's peer, as
// peer.FromContext gives it: IPv4 clients one by one, IPv6 clients by /64
// network, since a single host commonly holds a whole /64. Calls whose peer
// is not an IP address (a Unix socket, an in-memory bufconn listener) share
// the key "unknown": they are limited together rather than not at all.
//
// Behind a reverse proxy (Envoy, a cloud load balancer) every call comes
// from the proxy. Name the proxies in an [IPResolver] ([NewIPResolver] with
// [TrustedProxies]) and key the Limit by its [IPResolver.Key]. When the peer is a trusted proxy, the resolver reads the
// incoming metadata the proxies write ([ProxyMetadata]: x-forwarded-for by
// default, forwarded as RFC 7239 defines it, or x-real-ip) from right to
// left, skipping trusted proxies' addresses, and takes the first address
// that is not one. What the client wrote to its left is never read, and
// metadata from an untrusted peer is ignored: a client cannot pick its own
// key by sending x-forwarded-for. These are httplimit's rules, from one
// implementation, so an HTTP and a gRPC server behind the same proxies key
// the same client the same way.
//
// # Client
//
// [NewClient] and [NewKeyedClient] build client interceptors,
// [Client.Unary] and [Client.Stream], for clients of rate-limited gRPC
// services. Each call first waits for the client's limiter (refused at
// once when the wait would outlast its deadline), then for what servers'
// answers asked of its scope ([WithPauseScope]: the target by default, or
// the method, or the limiter key). A unary call's response metadata that
// reports a quota (the fields this package's server interceptors send, in
// any dialect) bounds the scope's calls, and a spent quota holds them
// until its reset, so that the server need not refuse them. A server
// answering codes.ResourceExhausted with an errdetails.RetryInfo pauses
// the scope for the RetryDelay, capped by [WithMaxPause] (1 h); a
// RetryInfo naming no usable delay backs the scope off with jitter
// ([WithBackoff]). Calls whose context carries [MarkRetrySafe] are retried
// after the pause, up to [WithRetries] times; gRPC methods say nothing
// about idempotency, so no other call is. A ResourceExhausted without
// RetryInfo (a cost that can never fit) is neither paused for nor
// retried. Streams are paused for, never retried.
// A call the client does not send fails with a gRPC status error
// (Canceled, DeadlineExceeded, ResourceExhausted) that also matches its
// cause with errors.Is: context.DeadlineExceeded, [ErrPauseDeadline],
// [ratelimit.ErrDeadline], [ratelimit.ErrExceedsLimit], ...
package grpclimit
