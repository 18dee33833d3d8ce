package grpclimit

import (
	"context"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/adapter"
)

// Option configures the server interceptors [New] builds. Each
// constructor family has its own option type, so that an option given to
// a constructor it does not apply to does not compile: [Option] for
// [New], [ClientOption] for [NewClient] and [NewKeyedClient],
// [ResolverOption] for [NewIPResolver]; a [CommonOption] ([WithClock],
// [WithCost]) is both an Option and a ClientOption. Options are applied in
// order; a nil one is ignored.
type Option interface {
	applyServer(i *Interceptor) error
}

// ClientOption configures the client interceptors [NewClient] or
// [NewKeyedClient] builds (see [Option]).
type ClientOption interface {
	applyClient(c *Client) error
}

// ResolverOption configures the resolver [NewIPResolver] builds (see
// [Option]).
type ResolverOption interface {
	applyResolver(r *IPResolver) error
}

// CommonOption is an option of both sides, an [Option] and a
// [ClientOption]: it configures [New], [NewClient] and [NewKeyedClient]
// alike.
type CommonOption interface {
	Option
	ClientOption
}

// The implementations of the option types: each is a function setting
// what its constructor builds.
type (
	serverOption   func(i *Interceptor) error
	clientOption   func(c *Client) error
	resolverOption func(r *IPResolver) error
	// commonOption sets what the server and client interceptors share.
	commonOption func(c *common) error
)

func (f serverOption) applyServer(i *Interceptor) error    { return f(i) }
func (f clientOption) applyClient(c *Client) error         { return f(c) }
func (f resolverOption) applyResolver(r *IPResolver) error { return f(r) }
func (f commonOption) applyServer(i *Interceptor) error    { return f(&i.common) }
func (f commonOption) applyClient(c *Client) error         { return f(&c.common) }

// common is what [CommonOption]s set, in server or client interceptors.
type common struct {
	clock ratelimit.Clock                                       // nil: the real clock
	cost  func(ctx context.Context, method string, req any) int // nil: 1
}

// The defaults, in one place: of the server interceptors ([New]) ...
const defaultReportEvery = 10 * time.Second // WithErrorReportInterval

// ... and of the clients ([newClient]).
const (
	defaultMaxRetryWait = time.Minute // WithMaxRetryWait
	defaultMaxPause     = time.Hour   // WithMaxPause
	defaultBackoffFirst = time.Second // WithBackoff
	defaultBackoffMax   = time.Minute // WithBackoff
	defaultMaxKeys      = 1 << 16     // WithMaxKeys
)

// configError builds a configuration error of this package; format names
// the option or argument, as in "grpclimit.WithMaxPause must be positive,
// got %v".
func configError(format string, args ...any) error {
	return adapter.ConfigError(format, args...)
}
