package httplimit

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/adapter"
	"github.com/rlkit/ratelimit/internal/report"
	"github.com/rlkit/ratelimit/internal/typednil"
)

// Option configures the middleware [New] builds. Each constructor family
// has its own option type, so that an option given to a constructor it
// does not apply to does not compile: [Option] for [New], [ClientOption]
// for [NewTransport] and [NewKeyedTransport], [ResolverOption] for
// [NewIPResolver]; a [CommonOption] ([WithClock], [WithCost]) is both an
// Option and a ClientOption. Options are applied in order; a nil one is
// ignored.
type Option interface {
	applyServer(m *Middleware) error
}

// ClientOption configures the transport [NewTransport] or
// [NewKeyedTransport] builds (see [Option]).
type ClientOption interface {
	applyClient(t *Transport) error
}

// ResolverOption configures the resolver [NewIPResolver] builds (see
// [Option]).
type ResolverOption interface {
	applyResolver(r *IPResolver) error
}

// CommonOption is an option of both sides, an [Option] and a
// [ClientOption]: it configures [New], [NewTransport] and
// [NewKeyedTransport] alike.
type CommonOption interface {
	Option
	ClientOption
}

// The implementations of the option types: each is a function setting
// what its constructor builds.
type (
	serverOption   func(m *Middleware) error
	clientOption   func(t *Transport) error
	resolverOption func(r *IPResolver) error
	// commonOption sets what the middleware and the transport share.
	commonOption func(c *common) error
)

func (f serverOption) applyServer(m *Middleware) error     { return f(m) }
func (f clientOption) applyClient(t *Transport) error      { return f(t) }
func (f resolverOption) applyResolver(r *IPResolver) error { return f(r) }
func (f commonOption) applyServer(m *Middleware) error     { return f(&m.common) }
func (f commonOption) applyClient(t *Transport) error      { return f(&t.common) }

// common is what [CommonOption]s set, in a middleware or a transport.
type common struct {
	clock ratelimit.Clock           // nil: the real clock
	cost  func(r *http.Request) int // nil: 1
}

// The defaults, in one place: of the middleware ([New]) ...
const defaultReportEvery = 10 * time.Second // WithErrorReportInterval

// ... and of the transports ([newTransport]).
const (
	defaultMaxRetryWait = time.Minute // WithMaxRetryWait
	defaultMaxPause     = time.Hour   // WithMaxPause
	defaultBackoffFirst = time.Second // WithBackoff
	defaultBackoffMax   = time.Minute // WithBackoff
	defaultMaxKeys      = 1 << 16     // WithMaxKeys
)

// configError builds a configuration error of this package; format names
// the option or argument, as in "httplimit.WithMaxPause must be positive,
// got %v".
func configError(format string, args ...any) error {
	return adapter.ConfigError(format, args...)
}

// WithClock makes the middleware or transport read time from c instead of
// the real clock, such as a fake clock in tests: the middleware computes
// X-RateLimit-Reset and paces its error reports on it, the transport times
// the pauses servers ask for. Limiters have their own clocks
// ([ratelimit.WithClock]). A nil c selects the real clock; a typed nil is
// an error. For [New], [NewTransport] and [NewKeyedTransport].
func WithClock(c ratelimit.Clock) CommonOption {
	return commonOption(func(cfg *common) error {
		if c != nil && typednil.Is(c) {
			return configError("httplimit.WithClock: clock is a nil %T", c)
		}
		cfg.clock = c
		return nil
	})
}

// WithCost sets each request's cost, default 1: for the middleware the n
// charged in every limit (for instance the size of a batch), for a
// transport the n it waits for in its limiter. A cost <= 0 exempts the
// request from the limiters (a transport still honours the pauses servers
// ask for). In the middleware, a cost above a limit's capacity can never
// succeed (see the package documentation). For [New], [NewTransport] and
// [NewKeyedTransport].
func WithCost(cost func(r *http.Request) int) CommonOption {
	return commonOption(func(cfg *common) error {
		cfg.cost = cost
		return nil
	})
}

// WithHeaders chooses which rate-limit fields the middleware sends
// (default both: XRateLimitHeaders|IETFHeaders). For [New].
func WithHeaders(set HeaderSet) Option {
	return serverOption(func(m *Middleware) error {
		if set&^allHeaders != 0 {
			return configError("httplimit.WithHeaders: unknown header set, got %#x", uint8(set))
		}
		m.headers = set
		return nil
	})
}

// WithDeniedHandler replaces [WriteDenied] as the middleware's answer to
// denied requests; nil restores WriteDenied. The rate-limit fields and
// Retry-After are already set on w's header when h is called (a handler
// serving a full response instead may delete Retry-After). It may answer
// 429 in its own format, or serve a cached or reduced response instead
// (graceful degradation). For [New].
func WithDeniedHandler(h func(w http.ResponseWriter, r *http.Request, d Denial)) Option {
	return serverOption(func(m *Middleware) error {
		m.denied = h
		return nil
	})
}

// WithAdaptive makes the middleware protect its handlers from overload
// with a, an adaptive concurrency limiter ([ratelimit.NewAdaptive]), one
// for the service. The limits decide first: a request they refuse never
// takes a place in a. A request they admit, or let through exempt or
// unlimited, asks a for a place of priority(r) (nil priority: every
// request [ratelimit.PriorityDefault]; an authentication middleware's
// context may tell it the caller) just before its handler, and holds it
// until the handler returns. The place is then given back with what the
// request says of the service's capacity: [ratelimit.Flight.Dropped] for
// a 503 or 504 answer, or a request context whose deadline passed;
// [ratelimit.Flight.Ignore] for any other 5xx, a client that went away,
// a hijacked connection, or a handler that panicked (a bug, not a sign
// of overload; the panic goes on up once the place is free); else
// [ratelimit.Flight.Success], 4xx included.
//
// A request a sheds is not served: the limits that admitted it are
// refunded (it costs its client nothing), and the denied handler
// ([WithDeniedHandler]) answers it with a [Denial] whose Err is
// [ErrShed], Limit "adaptive", Decision a's and RetryAfter its
// RetryAfter rounded up to a whole second, at least one, already set as
// Retry-After (and no rate-limit fields); [WriteDenied] answers 503 Service Unavailable with a JSON
// body such as
//
//	{"error":"Service Unavailable","message":"server overloaded, retry in 1 s","retryAfter":1}
//
// The middleware's observer ([WithObserver]) hears each of a's decisions
// under the name "adaptive" (Algorithm [ratelimit.AdaptiveAlgorithm],
// Home [ratelimit.HomeMemory], N 1): [ratelimit.OutcomeAllowed], or
// [ratelimit.OutcomeShed] for a shed request; a with an Observer of its
// own beside it would count them twice: [New] refuses it, and a nil a.
//
// The handler is given a writer that records its status, which passes
// Flush and Hijack on and unwraps for [http.ResponseController]; it is
// reused by later requests, so, as net/http requires, the handler must
// not use it once it has returned. For [New].
func WithAdaptive(a *ratelimit.Adaptive, priority func(r *http.Request) ratelimit.Priority) Option {
	return serverOption(func(m *Middleware) error {
		m.adaptive, m.priority, m.adaptiveSet = a, priority, true
		return nil
	})
}

// WithLogger sends the middleware's error reports to l instead of
// [slog.Default] (read when a report is made); a nil l turns them off.
//
// A report is made when a limiter answers with an error (a Redis backend
// down, a key cap reached, an unknown tier): the request is then treated
// as the limiter's Decision says, since limiters carry their own failure
// policy. The middleware reports at most once per limit per
// [WithErrorReportInterval], at level Error, with the message
// "ratelimit: limiter error" and these attributes: "limit" (the limit's
// name: the limit whose limiter answered the error), "error", "suppressed"
// (how many errors of the limit went unreported since the previous
// report), "method" and, when the mux has matched one, "route" (the route
// pattern, Go 1.23 and later). Reports never hold the key or the client's
// address. The caller's own cancellation (a done request context) is not
// reported.
//
// One failure is one line: a limiter that logs its errors itself (a Redis
// limiter given redislimit.WithLogger) is left to do so. Every decision,
// errors included, also goes to the middleware's observer
// ([WithObserver]). For [New].
func WithLogger(l *slog.Logger) Option {
	return serverOption(func(m *Middleware) error {
		m.logger = report.To(l)
		return nil
	})
}

// WithErrorReportInterval sets how often, at most, the middleware reports
// errors of one limit to its logger ([WithLogger]); default 10 s. d <= 0 reports every error, one report per
// limit per request while a backend is down. For [New].
func WithErrorReportInterval(d time.Duration) Option {
	return serverOption(func(m *Middleware) error {
		m.reportEvery = max(d, 0)
		return nil
	})
}

// WithShadowHeaders lets limits in shadow mode take part in the rate-limit
// fields (when one of them is the most restrictive), so that clients see
// them before they are enforced. Off by default: a shadow limit changes
// nothing a client can see. For [New].
func WithShadowHeaders(on bool) Option {
	return serverOption(func(m *Middleware) error {
		m.shadowHeaders = on
		return nil
	})
}

// WithDecisionInContext makes the middleware pass the handler a request
// whose context holds the middleware's decision, for [ResultFrom]. Off by
// default: it costs two allocations per admitted request (a context and
// the request copy that carries it). For [New].
func WithDecisionInContext(on bool) Option {
	return serverOption(func(m *Middleware) error {
		m.inContext = on
		return nil
	})
}

// WithRetries makes the transport retry a request that was answered 429
// or 503 with a pause, after the pause, up to n times (default 0: the
// answer is returned to the caller, and later requests still wait for the
// pause).
//
// A 503 does not prove that the server did nothing, so only requests that
// are safe to send twice are retried: those of an idempotent method (RFC
// 9110 section 9.2.2: GET, HEAD, OPTIONS, TRACE, PUT, DELETE), those whose
// context the caller marked with [MarkRetrySafe], and, as net/http's own
// Transport does, those with an Idempotency-Key or X-Idempotency-Key header
// (the caller's statement that the server deduplicates them). A POST or
// PATCH without either is handed back with its answer. In every case the
// body must be replayable: no body, or GetBody set (as http.NewRequest sets
// for in-memory bodies). A retry that cannot be sent (its wait, for the
// pause or the limiter, would outlast the request's deadline, or the
// context ends meanwhile) hands back the last answer, body intact: the
// transport keeps up to 64 KiB of it in memory while it waits, and the
// rest unread on the connection. For [NewTransport] and
// [NewKeyedTransport].
func WithRetries(n int) ClientOption {
	return clientOption(func(t *Transport) error {
		if n < 0 {
			return configError("httplimit.WithRetries must not be negative, got %d", n)
		}
		t.retries = n
		return nil
	})
}

// WithMaxRetryWait sets the longest pause after which the transport still
// retries a request (default one minute). A longer pause is honoured by
// later requests, but the answer that asked for it is returned to the
// caller. For [NewTransport] and [NewKeyedTransport].
func WithMaxRetryWait(d time.Duration) ClientOption {
	return clientOption(func(t *Transport) error {
		if d < 0 {
			return configError("httplimit.WithMaxRetryWait must not be negative, got %v", d)
		}
		t.maxRetry = d
		return nil
	})
}

// WithMaxPause caps the pause a single answer can impose on the transport
// (default one hour), so that a wrong or hostile Retry-After cannot stop
// the client for days. When the cap has passed, one request of the key
// goes out (a probe) and the others wait for its answer: a server still
// refusing asks for another pause, one that answers lets them go by what
// it says. For [NewTransport] and [NewKeyedTransport].
func WithMaxPause(d time.Duration) ClientOption {
	return clientOption(func(t *Transport) error {
		if d <= 0 {
			return configError("httplimit.WithMaxPause must be positive, got %v", d)
		}
		t.pacing.MaxPause = d
		return nil
	})
}

// WithBackoff sets the backoff after a 429 or 503 that names no usable
// pause (no positive Retry-After, no spent quota with a reset): the k-th
// such refusal of a key in a row (k from 0) pauses the key for a time drawn
// uniformly between first/2 and min(max, first·2^k) — full jitter above a
// floor, so that clients refused together do not come back together, and
// none comes back at once. An answer that is not a refusal starts the
// count again. Defaults: first one second, max one minute; the
// pause is also capped by [WithMaxPause]. first must be positive and max
// at least first. For [NewTransport] and [NewKeyedTransport].
func WithBackoff(first, max time.Duration) ClientOption {
	return clientOption(func(t *Transport) error {
		if first <= 0 || max < first {
			return configError("httplimit.WithBackoff needs 0 < first <= max, got first=%v, max=%v", first, max)
		}
		t.pacing.First, t.pacing.Cap = first, max
		return nil
	})
}

// WithPolicyShaping makes the transport space the requests of a key by
// the quota policies the server advertises (RateLimit-Policy, any draft:
// q requests per w seconds): at least w/q apart, by the slowest policy, so
// that a burst is spread over the window instead of spent at its start.
// Off by default: without it the transport sends as fast as the limiter
// and the reported quotas allow, which finishes a batch soonest. Shaping
// never makes the transport faster than the server's quotas allow; they
// still bind. For [NewTransport] and [NewKeyedTransport].
func WithPolicyShaping(on bool) ClientOption {
	return clientOption(func(t *Transport) error {
		t.pacing.Shape = on
		return nil
	})
}

// WithMaxKeys caps the keys whose pacing a transport from
// [NewKeyedTransport] holds at n (default 65,536): a key costs about 260
// bytes besides its own string while it is held (its state, its quotas
// and its place in the table; 320 with two quotas), so the default bounds
// the pacing state to about 17 MB, whatever the number of hosts or keys the transport meets. A key is forgotten once it holds nothing live: no
// pause, backoff or probe pending, no request in flight, every quota its
// server reported full again (which leaves the key as one the transport
// has never seen). When n keys are held and none can be forgotten, one
// free to go makes room: nothing in flight, nothing to wait for, and
// every quota its server reported at least half left (at least one
// request left when no limit was stated); it becomes a key never seen,
// paced again by its next answer. When there is none either, a request
// for a new key is not sent: RoundTrip returns an error matching
// [ratelimit.ErrTooManyKeys]. A key paused, backing off or nearly spent is
// never forgotten to make room: its requests would go out as if its
// server had not asked them to wait. n must be positive. For
// [NewKeyedTransport]; [NewTransport], whose transport has one key,
// refuses it with an error wrapping [ratelimit.ErrInvalidConfig].
func WithMaxKeys(n int) ClientOption {
	return clientOption(func(t *Transport) error {
		if n <= 0 {
			return configError("httplimit.WithMaxKeys must be positive, got %d", n)
		}
		t.pacing.MaxKeys = n
		t.maxKeysSet = true
		return nil
	})
}

// WithTokenCost gives each request's token estimate, for the servers that
// count tokens as well as requests (the LLM APIs: OpenAI's
// x-ratelimit-*-tokens, Anthropic's anthropic-ratelimit-*tokens-*): a
// request waits until every token quota its key's answers reported has
// room for its estimate, as every request quota must have room for one.
// Give an upper bound, such as the prompt's tokens plus max_tokens: the
// answers then tell what the server really charged (their remaining
// count replaces the estimates of the requests it has counted), while an
// estimate below the charge may be refused. An estimate of 0 or less, or
// no WithTokenCost, waits only for a token quota reported spent; one
// above a quota's limit waits for the quota to be full. The estimate may
// come from the request's context, where the caller put it. Unlike
// [WithCost], which sets what the transport's own limiter is charged, it
// paces by the server's token budgets. For [NewTransport] and
// [NewKeyedTransport].
func WithTokenCost(tokens func(r *http.Request) int) ClientOption {
	return clientOption(func(t *Transport) error {
		t.tokens = tokens
		return nil
	})
}

// WithPauseHook makes the transport report each pause an answer imposes,
// with the request and the response: a refusal's pause or backoff, and the
// wait until the reset of a quota an answer reports spent. The hook
// observes: it is called synchronously and must not keep resp. For
// [NewTransport] and [NewKeyedTransport].
func WithPauseHook(hook func(r *http.Request, resp *http.Response, d time.Duration)) ClientOption {
	return clientOption(func(t *Transport) error {
		t.onPause = hook
		return nil
	})
}

// WithThrottle makes the transport ask th before sending each request,
// under the request's key ("" for [NewTransport]), and tell it each answer:
// 429, 5xx and a transport error are not accepted, a request past its
// deadline included (one whose caller cancelled it is not counted). A request th refuses is not sent:
// RoundTrip returns [ErrThrottled] at once. The retries of [WithRetries]
// go only while th's retry budget allows. A nil th throttles nothing; see
// docs/overload-client.md. For [NewTransport] and [NewKeyedTransport].
func WithThrottle(th *ratelimit.Throttle) ClientOption {
	return clientOption(func(t *Transport) error {
		t.throttle = th
		return nil
	})
}
