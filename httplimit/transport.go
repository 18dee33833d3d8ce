package httplimit

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/adapter"
	"github.com/rlkit/ratelimit/internal/hints"
	"github.com/rlkit/ratelimit/internal/pacer"
	"github.com/rlkit/ratelimit/internal/timesrc"
	"github.com/rlkit/ratelimit/internal/typednil"
)

// ErrPauseDeadline is returned by [Transport.RoundTrip], without waiting,
// when the server has asked for a pause that outlasts the request's
// context deadline (a request refused already, whose retry would wait
// that long, gets its answer instead). It also matches
// context.DeadlineExceeded with errors.Is. It is grpclimit.ErrPauseDeadline
// too: errors.Is matches it whichever package returned it.
var ErrPauseDeadline = adapter.ErrPauseDeadline

// ErrNoKey is returned by [Transport.RoundTrip], without sending the
// request, when the [KeyFunc] of a transport from [NewKeyedTransport]
// reports that it has no key for the request. It is grpclimit.ErrNoKey too.
var ErrNoKey = adapter.ErrNoKey

// ErrThrottled is returned by [Transport.RoundTrip], without sending the
// request, when the transport's throttle ([WithThrottle]) refuses it: its
// key's server has been failing. It is grpclimit.ErrThrottled too.
var ErrThrottled = adapter.ErrThrottled

// Transport is an [http.RoundTripper] for clients of rate-limited APIs.
// Each request first waits for the transport's limiter (honouring its
// context), then for whatever the server's earlier answers asked of its
// key, then goes to the base transport. It paces itself by the server's
// own words, on every answer, so that a well-behaved client is not refused:
//
//   - Every answer (not only refusals) that reports a quota, remaining r
//     until a reset t, in any of the dialects servers use, bounds the
//     key's requests: at most r more before the reset, less the requests
//     the server may have counted after the answered one (those in flight,
//     and those answered since it was sent), whatever order the answers
//     come back in. A key whose quota is spent waits for the reset; each
//     reset gives back what the server has restored by then, whether it
//     is a fixed window or a token bucket whose t is the time until it is
//     full: the limit the server stated less the remaining count the
//     answer reported, up to that limit less the requests in flight, so
//     that requests released together do not all go. A reset whose limit
//     no answer stated ends with a probe (below). The
//     dialects: the IETF RateLimit field (draft-08 onward,
//     `"name";r=0;t=3`, and the renamed a/w parameters), its draft-07
//     dictionary (`limit=5, remaining=0, reset=3`), the draft-06
//     RateLimit-Limit/-Remaining/-Reset fields, and X-RateLimit-Remaining
//     with X-RateLimit-Reset (or X-Rate-Limit-*) read as a delay in
//     seconds or a Unix time, told apart by the answer's Date (else the
//     transport's clock): values below half of now as Unix seconds are
//     delays, larger ones Unix seconds, and from 500 times that Unix
//     milliseconds. And the LLM APIs' (as the providers' rate-limit pages
//     describe them, https://platform.openai.com/docs/guides/rate-limits
//     and https://docs.anthropic.com/en/api/rate-limits):
//     x-ratelimit-{limit,remaining,reset}-{requests,tokens}
//     with a reset written as a duration ("6m0s", "12ms", "1m30.5s", or
//     bare seconds), as OpenAI, Azure OpenAI and Groq send them, and
//     anthropic-ratelimit-{requests,tokens,input-tokens,output-tokens}-{limit,remaining,reset}
//     with a reset written as an RFC 3339 time, read against the answer's
//     Date (else the transport's clock), and remaining token counts
//     rounded to the nearest thousand (read as 500 less). Both providers
//     describe token buckets whose reset is the time until full: their
//     quotas refill pro rata, and a request waits only until what it
//     needs has come in. Values that cannot be true (a
//     limit of 0 or -1, a negative remaining count, one above its limit,
//     a negative or unreadable reset, such as the -1 and 0 some gateways
//     send) drop their quota: never a pause, never a burst.
//     Several quotas in one answer each bind: the tightest wins.
//   - Two budgets at once: a quota of requests counts each request as
//     one, a quota of tokens counts its token estimate ([WithTokenCost]),
//     and a request waits until both have room for it. The estimates in
//     flight are subtracted from what an answer reports left, as requests
//     in flight are; the server's own count replaces them when it
//     answers, so that the real charge, known only to the server, is
//     learned from its remaining-tokens fields.
//   - A 429 Too Many Requests or 503 Service Unavailable pauses the key
//     for its Retry-After (delay-seconds or an HTTP date) when that is
//     positive; otherwise for the longest reset of the quotas it reports
//     spent (or, for X-RateLimit-Reset, does not say are left); otherwise,
//     having named no usable pause, for a jittered exponential backoff
//     ([WithBackoff]): the k-th such refusal in a row waits a random time
//     between half the first delay and min(max, first·2^k). The next
//     request to that key never goes out at once.
//   - When a refusal's pause ends, or a reset that was capped
//     ([WithMaxPause]), one request of the key goes out alone, a probe:
//     the others wait for its answer, then go by what it says. A server
//     said when to come back, not how many may. If the probe gets no
//     answer (a network error, its context ended) the next request
//     probes at once; if it takes longer than the pause it ended (at
//     least the first backoff delay), the next probes too.
//   - With [WithPolicyShaping], the policies an answer advertises
//     (RateLimit-Policy: q per w) space the key's requests at least w/q
//     apart, so that a burst is spread instead of spent at once.
//
// Every pause, reset and spacing read from an answer is capped
// ([WithMaxPause]); values that are negative, malformed or absurd are
// ignored or capped, never trusted. A refused request is retried only if
// it may be ([WithRetries]).
//
// A transport from [NewTransport] paces all its requests as one key; one
// from [NewKeyedTransport] paces each key apart, so that one API's quota
// does not stall requests to another.
//
// A request whose context is done is never sent, nor one the transport's
// throttle refuses ([WithThrottle]: the server has been failing).
//
// Create one with [NewTransport] or [NewKeyedTransport]; the zero value is
// not usable. A Transport is safe for concurrent use.
type Transport struct {
	base     http.RoundTripper
	wait     func(ctx context.Context, key string, n int) error // nil: no limiter
	key      KeyFunc                                            // nil: one key, ""
	common                                                      // WithClock, WithCost
	ts       timesrc.Source
	retries  int
	maxRetry time.Duration
	pacing   pacer.Config // from the options
	onPause  func(r *http.Request, resp *http.Response, d time.Duration)
	tokens   func(r *http.Request) int // WithTokenCost; nil: no estimate
	pacer    *pacer.Pacer              // what the server's answers allow, per key
	throttle *ratelimit.Throttle       // WithThrottle; nil: none

	maxKeysSet bool // WithMaxKeys, which NewTransport refuses
}

type retrySafeKey struct{}

// MarkRetrySafe returns a copy of ctx marking the requests made with it as
// safe to send more than once, so that [WithRetries] retries them whatever
// their method: for instance a POST the server deduplicates.
func MarkRetrySafe(ctx context.Context) context.Context {
	return context.WithValue(ctx, retrySafeKey{}, true)
}

// retrySafe reports whether req may be sent again.
func retrySafe(req *http.Request) bool {
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace, http.MethodPut, http.MethodDelete:
		return true
	}
	if _, ok := req.Header["Idempotency-Key"]; ok {
		return true
	}
	if _, ok := req.Header["X-Idempotency-Key"]; ok {
		return true
	}
	safe, _ := req.Context().Value(retrySafeKey{}).(bool)
	return safe
}

// NewTransport returns a transport sending requests through base
// (http.DefaultTransport if nil) after waiting for lim. A nil lim waits for
// nothing but the pauses servers ask for; a typed nil (a nil
// *ratelimit.TokenBucket, say) is a mistake, not "no limiter", and an
// error. The options that apply are [WithClock], [WithCost],
// [WithRetries], [WithMaxRetryWait], [WithMaxPause], [WithBackoff],
// [WithPolicyShaping], [WithTokenCost], [WithPauseHook] and [WithThrottle]; [WithMaxKeys] (for a keyed
// transport), or an invalid option, is an error wrapping
// [ratelimit.ErrInvalidConfig].
func NewTransport(base http.RoundTripper, lim ratelimit.Limiter, opts ...ClientOption) (*Transport, error) {
	if lim != nil && typednil.Is(lim) {
		return nil, configError("httplimit.NewTransport: the limiter is a nil %T; pass nil for no limiter", lim)
	}
	var wait func(context.Context, string, int) error
	if lim != nil {
		wait = func(ctx context.Context, _ string, n int) error { return lim.WaitN(ctx, n) }
	}
	return newTransport(base, wait, nil, opts)
}

// NewKeyedTransport is [NewTransport] with a keyed limiter: each request
// waits in lim under its key, such as its host, so that one transport can
// respect a different quota per API. Pauses servers ask for belong to the
// key too: a 429 answering a request of one key holds back only the
// requests of that key.
//
// A request for which key reports no key (ok == false) is not sent:
// RoundTrip returns [ErrNoKey]. To give such requests a shared quota
// instead, end the key function with a constant fallback, as in
// FirstOf(key, func(*http.Request) (string, bool) { return "other", true }).
//
// The pacing state of a key is held while the key has anything live, up
// to [WithMaxKeys] keys (65,536 by default, about 260 bytes each); at the
// cap a request for a new key gets an error matching
// [ratelimit.ErrTooManyKeys] rather than a live key being forgotten.
//
// The options that apply are [WithClock], [WithCost], [WithRetries],
// [WithMaxRetryWait], [WithMaxPause], [WithBackoff], [WithPolicyShaping],
// [WithTokenCost], [WithPauseHook], [WithThrottle] and [WithMaxKeys]. It returns an error wrapping
// [ratelimit.ErrInvalidConfig] when lim or key is nil, or for an invalid
// option.
func NewKeyedTransport(base http.RoundTripper, lim ratelimit.KeyedLimiter, key KeyFunc, opts ...ClientOption) (*Transport, error) {
	if lim == nil || typednil.Is(lim) {
		return nil, configError("httplimit.NewKeyedTransport: the limiter must not be nil, got %T", lim)
	}
	if isInvalid(key) {
		return nil, configError("httplimit.NewKeyedTransport: the key function must not be nil or a key helper given nothing to key by (such as KeyByUser(nil))")
	}
	wait := func(ctx context.Context, k string, n int) error { return lim.WaitN(ctx, k, n) }
	return newTransport(base, wait, key, opts)
}

func newTransport(base http.RoundTripper, wait func(context.Context, string, int) error, key KeyFunc, opts []ClientOption) (*Transport, error) {
	if base == nil || typednil.Is(base) {
		base = http.DefaultTransport
	}
	t := &Transport{base: base, wait: wait, key: key, maxRetry: defaultMaxRetryWait,
		pacing: pacer.Config{MaxPause: defaultMaxPause, First: defaultBackoffFirst, Cap: defaultBackoffMax,
			MaxKeys: defaultMaxKeys, Full: ratelimit.ErrTooManyKeys}}
	if err := adapter.Apply(opts, func(o ClientOption) error { return o.applyClient(t) }); err != nil {
		return nil, err
	}
	if key == nil && t.maxKeysSet {
		return nil, configError("httplimit.WithMaxKeys applies to NewKeyedTransport, not NewTransport (its transport has one key)")
	}
	t.ts = timesrc.New(t.clock)
	t.pacer = pacer.New(t.pacing)
	return t, nil
}

// PausedFor returns how long from now the next request through t must
// wait for what the server's answers asked (a pause, a spent quota's
// reset, a backoff, the policies' spacing; while a probe is out, the
// longest its answer is waited for); 0 if it may go at once, the limiter
// aside. For a transport from [NewKeyedTransport] it is the wait of the
// requests of keys, the longest of them, or without keys the longest wait
// of any key. A transport from [NewTransport] has one key: keys are
// ignored.
func (t *Transport) PausedFor(keys ...string) time.Duration {
	now := t.now()
	if len(keys) == 0 {
		return t.pacer.Longest(now)
	}
	if t.key == nil {
		return t.pacer.PausedFor("", now)
	}
	var d time.Duration
	for _, k := range keys {
		d = max(d, t.pacer.PausedFor(k, now))
	}
	return d
}

func (t *Transport) now() time.Time { return t.ts.Time() }

// RoundTrip sends req after the limiter admits it and any pause the server
// asked for has passed. It implements [http.RoundTripper].
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	n := 1
	if t.cost != nil {
		n = t.cost(req)
	}
	var tokens int64
	if t.tokens != nil {
		tokens = int64(max(t.tokens(req), 0))
	}
	key := ""
	if t.key != nil {
		k, ok := t.key(req)
		if !ok {
			closeBody(req)
			return nil, ErrNoKey
		}
		key = k
	}
	if t.throttle != nil && !t.throttle.Attempt(ctx, key).Allowed {
		closeBody(req)
		return nil, ErrThrottled
	}
	send := req
	var refusal *http.Response // the refusal the retry in preparation answers
	for attempt := 0; ; attempt++ {
		tk, err := t.ready(ctx, key, n, tokens)
		if err != nil {
			closeBody(send)
			if refusal != nil {
				// The retry cannot be sent (its wait would outlast the
				// deadline, the context ended, the limiter refused): the
				// caller gets the server's answer, as without retries.
				return refusal, nil
			}
			return nil, err
		}
		if refusal != nil {
			discard(refusal)
			refusal = nil
		}
		resp, err := t.base.RoundTrip(send)
		if t.throttle != nil && (err == nil || !errors.Is(ctx.Err(), context.Canceled)) {
			// A transport error is not accepted (a deadline passed
			// included); the caller's own cancellation says nothing of
			// the server.
			t.throttle.Record(key, err == nil && accepted(resp.StatusCode))
		}
		if err != nil {
			t.pacer.Lost(tk)
			return nil, err
		}
		now := t.now()
		refused := resp.StatusCode == http.StatusTooManyRequests || resp.StatusCode == http.StatusServiceUnavailable
		h := hints.Parse(resp.Header.Values, now)
		out := t.pacer.Done(tk, now, pacer.Answer{Refused: refused, Hints: &h})
		if out.Pause > 0 && t.onPause != nil {
			t.onPause(req, resp, out.Pause)
		}
		if !refused || attempt >= t.retries || out.Pause > t.maxRetry || !replayable(req) || !retrySafe(req) ||
			t.throttle != nil && !t.throttle.Retry(ctx, key).Allowed {
			return resp, nil
		}
		next, err := rewind(req)
		if err != nil {
			return resp, nil // cannot replay after all: hand the answer over
		}
		refusal = buffered(resp)
		send = next
	}
}

// accepted reports whether an answer of status code served the request,
// for a throttle: 429 and 5xx did not.
func accepted(code int) bool {
	return code != http.StatusTooManyRequests && code < 500
}

// maxBuffered is how much of a refusal's body the transport reads while
// it waits to retry, so that the connection is free meanwhile.
const maxBuffered = 64 << 10

// buffered reads resp's body into memory (up to maxBuffered, the rest left
// on the connection) and returns resp reading from there: the answer the
// caller gets, body intact, if the retry cannot be sent.
func buffered(resp *http.Response) *http.Response {
	buf, err := io.ReadAll(io.LimitReader(resp.Body, maxBuffered))
	head := bytes.NewReader(buf)
	if err != nil || len(buf) == maxBuffered {
		// Perhaps more to come (or an error to repeat): read it after what
		// was buffered.
		resp.Body = &bufferedBody{Reader: io.MultiReader(head, resp.Body), Closer: resp.Body}
		return resp
	}
	_ = resp.Body.Close()
	resp.Body = io.NopCloser(head)
	return resp
}

type bufferedBody struct {
	io.Reader
	io.Closer
}

// discard lets go of an answer the caller will not see: a little more is
// drained so that the connection can be reused.
func discard(resp *http.Response) {
	_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
	_ = resp.Body.Close()
}

// ready waits for what the server asked of key, then for the limiter, then
// reserves the request's place in key's pacing (waiting again if needed).
// It returns ctx's error when ctx is done, even if the limiter admitted the
// request (a limiter failing open): a request whose caller has gone is
// never sent.
func (t *Transport) ready(ctx context.Context, key string, n int, tokens int64) (pacer.Ticket, error) {
	if t.wait != nil && n > 0 {
		if err := t.pacer.WaitTokens(ctx, &t.ts, key, tokens, ErrPauseDeadline); err != nil {
			return pacer.Ticket{}, err
		}
		if err := t.wait(ctx, key, n); err != nil {
			return pacer.Ticket{}, err
		}
	}
	return t.pacer.AcquireTokens(ctx, &t.ts, key, tokens, ErrPauseDeadline)
}

// replayable reports whether req's body can be sent again.
func replayable(req *http.Request) bool {
	return req.Body == nil || req.Body == http.NoBody || req.GetBody != nil
}

// rewind returns a copy of req with a fresh body.
func rewind(req *http.Request) (*http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return req, nil
	}
	body, err := req.GetBody()
	if err != nil {
		return nil, err
	}
	r := req.Clone(req.Context())
	r.Body = body
	return r, nil
}

func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}

var _ http.RoundTripper = (*Transport)(nil)
