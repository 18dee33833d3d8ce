package httplimit

import (
	"net/netip"

	"github.com/rlkit/ratelimit/internal/clientip"
)

// The names this package's tests use for what moved to internal/clientip.

const maxForwardedHops = clientip.MaxForwardedHops

func forwardedFor(elem string) string { return clientip.ForwardedFor(elem) }

func (res *IPResolver) isTrusted(a netip.Addr) bool { return res.core.Trusts(a) }
