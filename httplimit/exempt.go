package httplimit

import (
	"net/http"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/adapter"
	"github.com/rlkit/ratelimit/internal/typednil"
)

// ErrDenied is the Err of the [Denial] of a request refused by a denylist:
// a client network of [DeniedNetworks] or a key of [Limit.DeniedKeys]. Such
// a request is refused whatever its quota, so [WriteDenied] answers it 403
// Forbidden rather than 429. It is grpclimit.ErrDenied too: errors.Is
// matches it whichever package returned it.
var ErrDenied = adapter.ErrDenied

// WithIPResolver sets the resolver that finds the client address the
// networks of [ExemptNetworks] and [DeniedNetworks] are matched against.
// The default, like a nil res, is a resolver with no options: the
// connection's peer (RemoteAddr) alone, never a forwarded header. Behind
// reverse proxies pass a resolver that trusts them ([TrustedProxies]), the
// same one the limits' [IPResolver.Key] use, so that both see the same
// client. For [New].
func WithIPResolver(res *IPResolver) Option {
	return serverOption(func(m *Middleware) error {
		m.resolver = res
		return nil
	})
}

// ExemptNetworks names client networks (CIDR, such as "10.0.0.0/8" or
// "fd00::/8", or single addresses such as "192.0.2.10") whose requests no
// limit charges: health checkers, internal services. Such a request is
// served uncharged and without rate-limit fields, and reported as exempt
// to the middleware's observer ([WithObserver]), unless a denylist refuses
// it ([DeniedNetworks], [Limit.DeniedKeys]): denial beats exemption.
//
// The client address is the one [WithIPResolver]'s resolver finds, so a
// forwarded header counts only when it comes from a trusted proxy: a client
// cannot exempt itself by forging X-Forwarded-For. IPv4-mapped IPv6
// addresses and networks (::ffff:10.0.0.0/104) are matched as the IPv4
// ones they map; a request whose client address cannot be read (a Unix
// socket) matches no network. Networks are matched one by one, in order:
// keep the list short. Repeated options add up. It returns an error
// wrapping [ratelimit.ErrInvalidConfig] that names the value for one that
// does not parse. For [New].
func ExemptNetworks(cidrs ...string) Option {
	return serverOption(func(m *Middleware) error {
		ps, err := parseNetworks("ExemptNetworks", cidrs)
		m.exemptNets = append(m.exemptNets, ps...)
		return err
	})
}

// DeniedNetworks names client networks (as [ExemptNetworks] does) whose
// requests are always refused, without being charged anywhere: they are
// answered through the denied handler ([WithDeniedHandler]) with a Denial
// whose Err is
// [ErrDenied], Never set and Limit empty ([WriteDenied]: 403 Forbidden,
// no Retry-After, no rate-limit fields), and reported to the middleware's
// observer ([WithObserver]) as denied by every limit. Nothing exempts such
// a request, not even [ExemptNetworks] or an [Override] with Exempt, so an
// exempt network can hold a denied one. For [New].
func DeniedNetworks(cidrs ...string) Option {
	return serverOption(func(m *Middleware) error {
		ps, err := parseNetworks("DeniedNetworks", cidrs)
		m.deniedNets = append(m.deniedNets, ps...)
		return err
	})
}

// WithObserver makes the middleware report to o every decision it takes
// for its limits, each once, with Limit the [Limit]'s Name (the name its
// rate-limit fields carry; the limiter's own name, [ratelimit.WithName],
// plays no part), N the request's cost. A decision a limiter took has the
// limiter's (or its tier's) Home and Algorithm, as the limiter would
// report them, and Latency the time the limiters took to decide the
// request (with several limits, all of them):
//
//   - a request the enforced limits admit: one Event per enforced Limit
//     that applied, Outcome [ratelimit.OutcomeAllowed], or
//     [ratelimit.OutcomeFallback] when the limiter's failure policy
//     decided (its store failed; Err says why);
//   - a request they refuse: one Event for the Limit that refused it
//     ([ratelimit.OutcomeDenied], OutcomeFallback, or
//     [ratelimit.OutcomeError] for a cost above the quota or a key cap),
//     and one for each other Limit whose limiter answered an error;
//   - a Limit whose tier has no limiter (the server's misconfiguration):
//     Outcome [ratelimit.OutcomeError], Err the error;
//   - each shadow Limit consulted: one Event, Outcome
//     [ratelimit.OutcomeShadow] for its denial.
//
// The Decision of an Event is the Limit's own when the middleware knows it
// (one enforced Limit, the one the fields report, shadow Limits), else
// only its Allowed. The middleware's own decisions, with Home
// [ratelimit.HomeNone], Algorithm that of the limiter's policy (0 when it
// has none to tell, or is a [ratelimit.Tiered]) and Latency 0:
//
//   - a request exempt from every limit (an [ExemptNetworks] client, an
//     [Override] with Exempt, a cost <= 0): one Event per Limit of the
//     middleware, applying to the request or not, with Outcome
//     [ratelimit.OutcomeExempt] and Decision{Allowed: true};
//   - a request whose key a Limit exempts ([Limit.ExemptKeys]): one such
//     Event, for that Limit;
//   - a request refused by a denylist: Outcome [ratelimit.OutcomeDenied],
//     Err [ErrDenied] and a Decision with RetryAfter
//     [ratelimit.RetryNever]: one Event for the Limit whose
//     [Limit.DeniedKeys] hold the key, or one per Limit for a client of
//     [DeniedNetworks];
//   - a key in the DeniedKeys of a limit in shadow mode: the same Event
//     with Outcome [ratelimit.OutcomeShadow], when the enforced limits
//     admit the request (as shadow limits are consulted only then).
//
// A limiter given to the middleware with an Observer of its own would
// have each decision counted twice: [New] refuses it. A nil o reports
// nothing (the default); a typed nil is an error. For [New].
func WithObserver(o ratelimit.Observer) Option {
	return serverOption(func(m *Middleware) error {
		if o != nil && typednil.Is(o) {
			return configError("httplimit.WithObserver: observer is a nil %T", o)
		}
		m.observer = o
		return nil
	})
}

// netVerdict is what the client networks say of a request.
type netVerdict uint8

const (
	netNone netVerdict = iota
	netExempt
	netDenied
)

// matchNetwork matches r's client address against the denied networks,
// then the exempt ones.
func (m *Middleware) matchNetwork(r *http.Request) netVerdict {
	a, _, ok := m.resolver.resolve(r)
	switch {
	case !ok:
		return netNone
	case inNetworks(m.deniedNets, a):
		return netDenied
	case inNetworks(m.exemptNets, a):
		return netExempt
	}
	return netNone
}
