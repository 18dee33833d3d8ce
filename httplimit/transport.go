package httplimit

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/hints"
	"github.com/rlkit/ratelimit/internal/pausemap"
	"github.com/rlkit/ratelimit/internal/timesrc"
	"github.com/rlkit/ratelimit/internal/typednil"
)

// ErrPauseDeadline is returned by [Transport.RoundTrip], without waiting,
// when the server has asked for a pause that outlasts the request's
// context deadline. It also matches context.DeadlineExceeded with
// errors.Is.
var ErrPauseDeadline = errors.New("ratelimit: server-requested pause would exceed context deadline")

// ErrNoKey is returned by [Transport.RoundTrip], without sending the
// request, when the [KeyFunc] of a transport from [NewKeyedTransport]
// reports that it has no key for the request.
var ErrNoKey = errors.New("ratelimit: no key for the request")

// Transport is an [http.RoundTripper] for clients of rate-limited APIs.
// Each request first waits for the transport's limiter (honouring its
// context), then goes to the base transport. When the server answers 429
// Too Many Requests or 503 Service Unavailable and names a pause, the
// transport pauses the requests it stands for until that time, and
// retries the request if it may ([WithRetries]).
//
// The pause is the Retry-After field (delay-seconds or an HTTP date) when
// the answer has a valid one. Otherwise it is the longest t of the
// RateLimit items that are exhausted (r=0): an item with quota left does
// not hold the client back, however far away its reset is. Otherwise,
// unless X-RateLimit-Remaining says quota is left, it is X-RateLimit-Reset
// ([ParseXRateLimitReset]). Every pause is capped ([WithMaxPause]).
//
// A transport from [NewTransport] has one pause for all its requests; one
// from [NewKeyedTransport] has one per key, so that one API's 429 does not
// stall requests to another.
//
// A request whose context is done is never sent.
//
// Create one with [NewTransport] or [NewKeyedTransport]; the zero value is
// not usable. A Transport is safe for concurrent use.
type Transport struct {
	base     http.RoundTripper
	wait     func(ctx context.Context, key string, n int) error // nil: no limiter
	key      KeyFunc                                            // nil: one key, ""
	cost     func(r *http.Request) int
	clock    ratelimit.Clock // nil: the real clock
	ts       timesrc.Source
	retries  int
	maxRetry time.Duration
	maxPause time.Duration
	onPause  func(r *http.Request, resp *http.Response, d time.Duration)
	pauses   pausemap.Map // no request of a key is sent before its time
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
// [WithRetries], [WithMaxRetryWait], [WithMaxPause] and [WithPauseHook];
// any other is an error wrapping [ratelimit.ErrInvalidConfig].
func NewTransport(base http.RoundTripper, lim ratelimit.Limiter, opts ...Option) (*Transport, error) {
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
// It returns an error wrapping [ratelimit.ErrInvalidConfig] when lim or
// key is nil, or for an invalid option or one that does not apply to a
// transport (see [NewTransport]).
func NewKeyedTransport(base http.RoundTripper, lim ratelimit.KeyedLimiter, key KeyFunc, opts ...Option) (*Transport, error) {
	if lim == nil || typednil.Is(lim) {
		return nil, configError("httplimit.NewKeyedTransport: the limiter must not be nil, got %T", lim)
	}
	if isInvalid(key) {
		return nil, configError("httplimit.NewKeyedTransport: the key function must not be nil or a key helper given nothing to key by (such as KeyByUser(nil))")
	}
	wait := func(ctx context.Context, k string, n int) error { return lim.WaitN(ctx, k, n) }
	return newTransport(base, wait, key, opts)
}

func newTransport(base http.RoundTripper, wait func(context.Context, string, int) error, key KeyFunc, opts []Option) (*Transport, error) {
	if base == nil || typednil.Is(base) {
		base = http.DefaultTransport
	}
	t := &Transport{base: base, wait: wait, key: key, maxRetry: time.Minute, maxPause: time.Hour}
	if err := applyOptions(&config{to: forTransport, t: t}, opts); err != nil {
		return nil, err
	}
	t.ts = timesrc.New(t.clock)
	return t, nil
}

// PausedFor returns how long requests through t are paused from now at
// the server's request; 0 if they are not. For a transport from
// [NewKeyedTransport] it is the longest pause of any key.
func (t *Transport) PausedFor() time.Duration {
	return pausemap.Left(t.pauses.Latest(), t.now())
}

// PausedForKey returns how long requests of key are paused from now, for a
// transport from [NewKeyedTransport]; for one from [NewTransport] every key
// gives [Transport.PausedFor].
func (t *Transport) PausedForKey(key string) time.Duration {
	if t.key == nil {
		key = ""
	}
	return pausemap.Left(t.pauses.Until(key), t.now())
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
	key := ""
	if t.key != nil {
		k, ok := t.key(req)
		if !ok {
			closeBody(req)
			return nil, ErrNoKey
		}
		key = k
	}
	send := req
	for attempt := 0; ; attempt++ {
		if err := t.ready(ctx, key, n); err != nil {
			closeBody(send)
			return nil, err
		}
		resp, err := t.base.RoundTrip(send)
		if err != nil {
			return nil, err
		}
		d, ok := serverPause(resp, t.now())
		if !ok {
			return resp, nil
		}
		d = min(d, t.maxPause)
		t.pause(key, d)
		if t.onPause != nil {
			t.onPause(req, resp, d)
		}
		if attempt >= t.retries || d > t.maxRetry || !replayable(req) || !retrySafe(req) {
			return resp, nil
		}
		next, err := rewind(req)
		if err != nil {
			return resp, nil // cannot replay after all: hand the answer over
		}
		// Drain a little so the connection can be reused, then let go.
		_, _ = io.CopyN(io.Discard, resp.Body, 4<<10)
		_ = resp.Body.Close()
		send = next
	}
}

// ready waits for any pause of key, then for the limiter, then for any
// pause that began meanwhile. It returns ctx's error when ctx is done, even
// if the limiter admitted the request (a limiter failing open): a request
// whose caller has gone is never sent.
func (t *Transport) ready(ctx context.Context, key string, n int) error {
	if err := t.waitPause(ctx, key); err != nil {
		return err
	}
	if t.wait != nil && n > 0 {
		if err := t.wait(ctx, key, n); err != nil {
			return err
		}
		return t.waitPause(ctx, key)
	}
	return nil
}

func (t *Transport) pause(key string, d time.Duration) { t.pauses.Pause(key, t.now(), d) }

func (t *Transport) waitPause(ctx context.Context, key string) error {
	return t.pauses.Wait(ctx, &t.ts, key, ErrPauseDeadline)
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

// maxPauseSeconds bounds the pauses read from servers (about 34 years), so
// that no arithmetic overflows.
const maxPauseSeconds = 1 << 30

// serverPause returns the pause a 429 or 503 answer asks for: its
// Retry-After when valid; else the longest t among exhausted RateLimit
// items; else X-RateLimit-Reset, unless X-RateLimit-Remaining says quota is
// left. It reports false when the answer is of another status or names no
// pause.
func serverPause(resp *http.Response, now time.Time) (time.Duration, bool) {
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
		return 0, false
	}
	h := resp.Header
	if d, ok := ParseRetryAfter(h.Get(HeaderRetryAfter), now); ok {
		return d, true
	}
	if d, ok := ParseRateLimitReset(h.Values(HeaderRateLimit)); ok {
		return d, true
	}
	if rem := strings.TrimSpace(h.Get(HeaderXRateLimitRemaining)); rem != "" {
		if left, ok := parseSeconds(rem); !ok || left != 0 {
			return 0, false // quota left, or unreadable: no pause from Reset
		}
	}
	return ParseXRateLimitReset(h.Get(HeaderXRateLimitReset), now)
}

// ParseXRateLimitReset parses an X-RateLimit-Reset value, which servers
// write as delay-seconds ("17"), as a Unix time in seconds ("1767225617",
// as GitHub does) or in milliseconds ("1767225617000"), each perhaps with
// a fraction ("64.57", "1470173023.123", as Discord does), read relative
// to now: values below 1,000,000,000 are delays, values from there to
// below 1,000,000,000,000 Unix seconds, larger ones Unix milliseconds. A
// fraction finer than the millisecond is rounded up to one; a time in the
// past gives 0; every reading saturates at about 34 years. It reports
// false for an empty or malformed value (a sign, an exponent, anything
// but digits with at most one '.' between them).
func ParseXRateLimitReset(v string, now time.Time) (time.Duration, bool) {
	return hints.ResetValue(v, now)
}

// ParseRetryAfter parses a Retry-After value: delay-seconds ("120") or an
// HTTP date ("Wed, 21 Oct 2026 07:28:00 GMT", and the other formats
// http.ParseTime accepts), read relative to now. A date in the past gives
// 0; either form saturates at about 34 years. It reports false for an
// empty or malformed value.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	return hints.RetryAfter(v, now)
}

// parseSeconds parses non-negative decimal seconds, saturating at
// maxPauseSeconds.
func parseSeconds(v string) (time.Duration, bool) {
	s, ok := parseDecimal(v, maxPauseSeconds)
	return time.Duration(s) * time.Second, ok
}

// parseDecimal parses a non-empty string of decimal digits, saturating at
// limit.
func parseDecimal(v string, limit int64) (int64, bool) {
	if v == "" {
		return 0, false
	}
	var s int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if s < limit {
			s = s*10 + int64(c-'0')
		}
	}
	return min(s, limit), true
}

// ParseRateLimitReset returns how long until the quota a RateLimit field
// describes is available again: the largest t parameter (seconds) among the
// exhausted items (r=0) of field lines such as
// `"burst";r=0;t=17, "daily";r=4000;t=80000`. Items with quota left, or
// without a valid r, are not waited for, however distant their t. It
// reports false when no exhausted item has a valid t.
func ParseRateLimitReset(lines []string) (time.Duration, bool) {
	return hints.ExhaustedReset(lines)
}

var _ http.RoundTripper = (*Transport)(nil)
