package httplimit

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/rlkit/ratelimit"
)

// ErrPauseDeadline is returned by [Transport.RoundTrip], without waiting,
// when the server has asked for a pause that outlasts the request's
// context deadline. It also matches context.DeadlineExceeded with
// errors.Is.
var ErrPauseDeadline = errors.New("httplimit: server-requested pause would exceed context deadline")

type pauseDeadlineError struct{ wait time.Duration }

func (e *pauseDeadlineError) Error() string {
	return fmt.Sprintf("%v (needs %v)", ErrPauseDeadline, e.wait)
}
func (e *pauseDeadlineError) Unwrap() []error {
	return []error{ErrPauseDeadline, context.DeadlineExceeded}
}

// Transport is an [http.RoundTripper] for clients of rate-limited APIs.
// Each request first waits for the transport's limiter (honouring its
// context), then goes to the base transport. When the server answers 429
// Too Many Requests or 503 Service Unavailable with a Retry-After field
// (delay-seconds or an HTTP date) or a RateLimit field with a t parameter,
// the transport pauses every request through it until that time, and
// retries the request if it may ([WithRetries]).
//
// Create one with [NewTransport] or [NewKeyedTransport]; the zero value is
// not usable. A Transport is safe for concurrent use.
type Transport struct {
	base     http.RoundTripper
	wait     func(ctx context.Context, r *http.Request, n int) error // nil: no limiter
	cost     func(r *http.Request) int
	clock    ratelimit.Clock
	retries  int
	maxRetry time.Duration
	maxPause time.Duration
	onPause  func(r *http.Request, resp *http.Response, d time.Duration)

	mu    sync.Mutex
	until time.Time // guarded by mu; no request is sent before it
}

// TransportOption configures a [Transport].
type TransportOption struct {
	apply func(*Transport) error
}

// WithRetries retries a request that was answered 429 or 503 with a pause,
// after the pause, up to n times (default 0: the answer is returned to the
// caller, and later requests still wait for the pause). Only requests whose
// body can be sent again are retried: those without a body and those with
// GetBody set (as http.NewRequest sets for in-memory bodies). A 429 or 503
// with a pause says the server did not process the request, so any method
// qualifies; a body that cannot be replayed never does.
func WithRetries(n int) TransportOption {
	return TransportOption{func(t *Transport) error {
		if n < 0 {
			return fmt.Errorf("httplimit: WithRetries must not be negative, got %d", n)
		}
		t.retries = n
		return nil
	}}
}

// WithMaxRetryWait sets the longest pause after which a request is still
// retried (default one minute). A longer pause is honoured by later
// requests, but the answer that asked for it is returned to the caller.
func WithMaxRetryWait(d time.Duration) TransportOption {
	return TransportOption{func(t *Transport) error {
		if d < 0 {
			return fmt.Errorf("httplimit: WithMaxRetryWait must not be negative, got %v", d)
		}
		t.maxRetry = d
		return nil
	}}
}

// WithMaxPause caps the pause a single answer can impose (default one
// hour), so that a wrong or hostile Retry-After cannot stop the client for
// days. When the cap has passed, the next request goes out, and a server
// still refusing asks for another pause.
func WithMaxPause(d time.Duration) TransportOption {
	return TransportOption{func(t *Transport) error {
		if d <= 0 {
			return fmt.Errorf("httplimit: WithMaxPause must be positive, got %v", d)
		}
		t.maxPause = d
		return nil
	}}
}

// WithTransportClock makes the transport time its pauses on c instead of
// the real clock, such as a *clock.Mock in tests. The limiter has its own
// clock ([ratelimit.WithClock]).
func WithTransportClock(c ratelimit.Clock) TransportOption {
	return TransportOption{func(t *Transport) error { t.clock = c; return nil }}
}

// WithRequestCost sets how many events each request takes from the
// limiter (default 1). A cost <= 0 lets the request through without
// waiting for the limiter (server-requested pauses still apply).
func WithRequestCost(cost func(r *http.Request) int) TransportOption {
	return TransportOption{func(t *Transport) error { t.cost = cost; return nil }}
}

// WithPauseHook reports each pause a server asks for, with the request and
// the response that asked for it.
func WithPauseHook(hook func(r *http.Request, resp *http.Response, d time.Duration)) TransportOption {
	return TransportOption{func(t *Transport) error { t.onPause = hook; return nil }}
}

// NewTransport returns a transport sending requests through base
// (http.DefaultTransport if nil) after waiting for lim. A nil lim waits for
// nothing but the pauses servers ask for.
func NewTransport(base http.RoundTripper, lim ratelimit.Limiter, opts ...TransportOption) (*Transport, error) {
	var wait func(context.Context, *http.Request, int) error
	if lim != nil {
		wait = func(ctx context.Context, _ *http.Request, n int) error { return lim.WaitN(ctx, n) }
	}
	return newTransport(base, wait, opts)
}

// NewKeyedTransport is [NewTransport] with a keyed limiter: each request
// waits in lim under key(r), such as its host, so that one transport can
// respect a different quota per API.
func NewKeyedTransport(base http.RoundTripper, lim ratelimit.KeyedLimiter, key func(r *http.Request) string, opts ...TransportOption) (*Transport, error) {
	if lim == nil || key == nil {
		return nil, errors.New("httplimit: NewKeyedTransport needs a limiter and a key function")
	}
	wait := func(ctx context.Context, r *http.Request, n int) error { return lim.WaitN(ctx, key(r), n) }
	return newTransport(base, wait, opts)
}

func newTransport(base http.RoundTripper, wait func(context.Context, *http.Request, int) error, opts []TransportOption) (*Transport, error) {
	if base == nil {
		base = http.DefaultTransport
	}
	t := &Transport{base: base, wait: wait, maxRetry: time.Minute, maxPause: time.Hour}
	for _, o := range opts {
		if o.apply == nil {
			continue
		}
		if err := o.apply(t); err != nil {
			return nil, err
		}
	}
	return t, nil
}

// PausedFor returns how long requests through t are paused from now at
// the server's request; 0 if they are not.
func (t *Transport) PausedFor() time.Duration {
	t.mu.Lock()
	until := t.until
	t.mu.Unlock()
	if until.IsZero() {
		return 0
	}
	return max(until.Sub(t.now()), 0)
}

func (t *Transport) now() time.Time {
	if t.clock != nil {
		return t.clock.Now()
	}
	return time.Now()
}

// RoundTrip sends req after the limiter admits it and any pause the server
// asked for has passed. It implements [http.RoundTripper].
func (t *Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	n := 1
	if t.cost != nil {
		n = t.cost(req)
	}
	send := req
	for attempt := 0; ; attempt++ {
		if err := t.ready(ctx, req, n); err != nil {
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
		t.pause(d)
		if t.onPause != nil {
			t.onPause(req, resp, d)
		}
		if attempt >= t.retries || d > t.maxRetry || !replayable(req) {
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

// ready waits for any pause, then for the limiter, then for any pause that
// began meanwhile.
func (t *Transport) ready(ctx context.Context, req *http.Request, n int) error {
	if err := t.waitPause(ctx); err != nil {
		return err
	}
	if t.wait != nil && n > 0 {
		if err := t.wait(ctx, req, n); err != nil {
			return err
		}
		return t.waitPause(ctx)
	}
	return nil
}

func (t *Transport) pause(d time.Duration) {
	if d <= 0 {
		return
	}
	until := t.now().Add(d)
	t.mu.Lock()
	if until.After(t.until) {
		t.until = until
	}
	t.mu.Unlock()
}

func (t *Transport) waitPause(ctx context.Context) error {
	for {
		t.mu.Lock()
		until := t.until
		t.mu.Unlock()
		if until.IsZero() {
			return ctx.Err()
		}
		d := until.Sub(t.now())
		if d <= 0 {
			return ctx.Err()
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
			return &pauseDeadlineError{wait: d}
		}
		var c <-chan time.Time
		var stop func() bool
		if t.clock != nil {
			tm := t.clock.Timer(d)
			c, stop = tm.C, tm.Stop
		} else {
			tm := time.NewTimer(d)
			c, stop = tm.C, tm.Stop
		}
		select {
		case <-c:
		case <-ctx.Done():
			stop()
			return ctx.Err()
		}
	}
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

// maxPauseSeconds bounds the pauses read from servers (about 31 years), so
// that no arithmetic overflows.
const maxPauseSeconds = 1 << 30

// serverPause returns the pause a 429 or 503 answer asks for: the longer
// of Retry-After and the largest t of a RateLimit field. It reports false
// when the answer is of another status or names no pause.
func serverPause(resp *http.Response, now time.Time) (time.Duration, bool) {
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode != http.StatusServiceUnavailable {
		return 0, false
	}
	d1, ok1 := ParseRetryAfter(resp.Header.Get(HeaderRetryAfter), now)
	d2, ok2 := ParseRateLimitReset(resp.Header.Values(HeaderRateLimit))
	if !ok1 && !ok2 {
		return 0, false
	}
	return max(d1, d2), true
}

// ParseRetryAfter parses a Retry-After value: delay-seconds ("120") or an
// HTTP date ("Wed, 21 Oct 2026 07:28:00 GMT", and the other formats
// http.ParseTime accepts), read relative to now. A date in the past gives
// 0. It reports false for an empty or malformed value.
func ParseRetryAfter(v string, now time.Time) (time.Duration, bool) {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0, false
	}
	if v[0] >= '0' && v[0] <= '9' {
		s, ok := parseSeconds(v)
		return s, ok
	}
	at, err := http.ParseTime(v)
	if err != nil {
		return 0, false
	}
	return max(at.Sub(now), 0), true
}

// parseSeconds parses non-negative decimal seconds, saturating at
// maxPauseSeconds.
func parseSeconds(v string) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	var s int64
	for i := 0; i < len(v); i++ {
		c := v[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		if s < maxPauseSeconds {
			s = s*10 + int64(c-'0')
		}
	}
	return time.Duration(min(s, maxPauseSeconds)) * time.Second, true
}

// ParseRateLimitReset returns the largest t parameter (seconds until the
// quota is available) among the items of RateLimit field lines such as
// `"api";r=0;t=17`. It reports false when no item has a valid t.
func ParseRateLimitReset(lines []string) (time.Duration, bool) {
	var best time.Duration
	found := false
	for _, line := range lines {
		for item := range splitTopLevel(line, ',') {
			first := true
			for param := range splitTopLevel(item, ';') {
				if first { // the item's value (the policy name)
					first = false
					continue
				}
				k, v, ok := strings.Cut(strings.TrimSpace(param), "=")
				if !ok || k != "t" {
					continue
				}
				if d, ok := parseSeconds(v); ok {
					best = max(best, d)
					found = true
				}
			}
		}
	}
	return best, found
}

// splitTopLevel yields the parts of s separated by sep outside RFC 8941
// Strings.
func splitTopLevel(s string, sep byte) func(yield func(string) bool) {
	return func(yield func(string) bool) {
		start, quoted := 0, false
		for i := 0; i < len(s); i++ {
			switch c := s[i]; {
			case quoted && c == '\\':
				i++
			case c == '"':
				quoted = !quoted
			case !quoted && c == sep:
				if !yield(s[start:i]) {
					return
				}
				start = i + 1
			}
		}
		if start <= len(s) {
			yield(s[start:])
		}
	}
}

var _ http.RoundTripper = (*Transport)(nil)
