package grpclimit

import (
	"context"
	"time"

	"github.com/rlkit/ratelimit"
)

// PauseScope says which calls a server's pause holds back ([WithPauseScope]).
type PauseScope uint8

const (
	// PauseByTarget pauses every call to the target (the connection's
	// server or load-balanced service) that asked for the pause. The
	// default.
	PauseByTarget PauseScope = iota
	// PauseByMethod pauses only the calls of the method that was answered
	// with the pause, on that target: other methods, and the same method
	// on other targets, go on.
	PauseByMethod
	// PauseByKey pauses the calls of the limiter key ([NewKeyedClient]'s
	// [KeyFunc]) of the call that was answered with the pause, whatever
	// their target. Only for [NewKeyedClient].
	PauseByKey
)

// WithRetries sets how many times a client retries a call its server
// answered with codes.ResourceExhausted and a RetryInfo (default 0: never),
// waiting for the announced pause and for the limiter before each retry.
// Only calls whose context is marked with [MarkRetrySafe] are retried. A
// retry that cannot be sent (a wait past the call's deadline, the context
// ended) gives the caller the server's answer. For [NewClient] and
// [NewKeyedClient]; streams are never retried.
func WithRetries(n int) ClientOption {
	return clientOption(func(c *Client) error {
		if n < 0 {
			return configError("grpclimit.WithRetries must not be negative, got %d", n)
		}
		c.retries = n
		return nil
	})
}

// WithMaxRetryWait sets the longest pause after which a client still
// retries a call (default one minute). A longer pause is honoured by later
// calls, but the answer that asked for it is returned to the caller. For
// [NewClient] and [NewKeyedClient].
func WithMaxRetryWait(d time.Duration) ClientOption {
	return clientOption(func(c *Client) error {
		if d < 0 {
			return configError("grpclimit.WithMaxRetryWait must not be negative, got %v", d)
		}
		c.maxRetry = d
		return nil
	})
}

// WithMaxPause caps the pause a single answer can impose on a client
// (default one hour), so that a wrong or hostile RetryInfo cannot stop the
// client for days. When the cap has passed, one call of the scope goes
// out (a probe) and the others wait for its answer: a server still
// refusing asks for another pause, one that answers lets them go by what
// it says. For [NewClient] and [NewKeyedClient].
func WithMaxPause(d time.Duration) ClientOption {
	return clientOption(func(c *Client) error {
		if d <= 0 {
			return configError("grpclimit.WithMaxPause must be positive, got %v", d)
		}
		c.pacing.MaxPause = d
		return nil
	})
}

// WithBackoff sets the backoff after a ResourceExhausted answer whose
// RetryInfo names no usable delay (zero, negative, out of range, unset)
// and whose metadata names no spent quota: the k-th such answer of a scope
// in a row (k from 0) pauses the scope for a time drawn uniformly between
// first/2 and min(max, first·2^k), so that clients refused together do
// not come back together, and none comes back at once. Any other answer
// starts the count again. Defaults: first one second, max one minute; the
// pause is also capped by [WithMaxPause]. first
// must be positive and max at least first. For [NewClient] and
// [NewKeyedClient].
func WithBackoff(first, max time.Duration) ClientOption {
	return clientOption(func(c *Client) error {
		if first <= 0 || max < first {
			return configError("grpclimit.WithBackoff needs 0 < first <= max, got first=%v, max=%v", first, max)
		}
		c.pacing.First, c.pacing.Cap = first, max
		return nil
	})
}

// WithPolicyShaping makes a client space the unary calls of a scope by
// the quota policies the server advertises in its response metadata
// (ratelimit-policy: q calls per w seconds): at least w/q apart, by the
// slowest policy, so that a burst is spread over the window instead of
// spent at its start. Off by default. For [NewClient] and
// [NewKeyedClient].
func WithPolicyShaping(on bool) ClientOption {
	return clientOption(func(c *Client) error {
		c.pacing.Shape = on
		return nil
	})
}

// WithPauseScope chooses which calls a server's pause holds back:
// [PauseByTarget] (the default), [PauseByMethod] or, for [NewKeyedClient]
// only, [PauseByKey]. For [NewClient] and [NewKeyedClient].
func WithPauseScope(s PauseScope) ClientOption {
	return clientOption(func(c *Client) error {
		if s > PauseByKey {
			return configError("grpclimit.WithPauseScope: unknown scope, got PauseScope(%d)", uint8(s))
		}
		c.scope = s
		return nil
	})
}

// WithMaxKeys caps the scopes ([WithPauseScope]: targets, methods of a
// target, or limiter keys) whose pacing a client holds at n (default
// 65,536): a scope costs about 260 bytes besides its name while it is
// held, so the default bounds the pacing state to about 16 MB. A scope is
// forgotten once it holds nothing live: no pause, backoff or probe
// pending, no call in flight, every quota its server reported full again
// (which leaves it as one the client has never seen). When n are held and
// none can be forgotten, one free to go makes room: nothing in flight,
// nothing to wait for, and every quota its server reported at least half
// left (at least one call left when no limit was stated); it becomes a
// scope never seen, paced again by its next answer. When there is none
// either, a call of a new scope is not sent: it fails with
// codes.ResourceExhausted, matching [ratelimit.ErrTooManyKeys]. A scope
// paused, backing off or nearly spent is never forgotten to make room:
// its calls would go out as if its server had not asked them to wait. n
// must be positive. For [NewClient] and
// [NewKeyedClient].
func WithMaxKeys(n int) ClientOption {
	return clientOption(func(c *Client) error {
		if n <= 0 {
			return configError("grpclimit.WithMaxKeys must be positive, got %d", n)
		}
		c.pacing.MaxKeys = n
		return nil
	})
}

// WithPauseHook makes a client report each pause an answer imposes on a
// scope, with the context and full method name of the call that was
// answered, and the pause after the cap ([WithMaxPause]): a RetryInfo's
// delay, a backoff, or the wait until the reset of a quota the response
// metadata reports spent. The hook observes: it is called synchronously,
// on the call's goroutine, and must be quick. For [NewClient] and
// [NewKeyedClient].
func WithPauseHook(hook func(ctx context.Context, method string, d time.Duration)) ClientOption {
	return clientOption(func(c *Client) error {
		c.onPause = hook
		return nil
	})
}

// WithThrottle makes a client ask th before sending each call, under the
// call's pause scope ([WithPauseScope]: its target by default), and tell
// it each answer: Unavailable, ResourceExhausted, DeadlineExceeded,
// Internal and Unknown are not accepted, every other code is (a call
// cancelled is not counted). A call th refuses is not sent: it fails with
// [ErrThrottled] at once. The retries of [WithRetries] go only while th's
// retry budget allows. A nil th throttles nothing; see
// docs/overload-client.md. For [NewClient] and [NewKeyedClient].
func WithThrottle(th *ratelimit.Throttle) ClientOption {
	return clientOption(func(c *Client) error {
		c.throttle = th
		return nil
	})
}
