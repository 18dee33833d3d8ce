package httplimit

import (
	"log/slog"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/doccheck"
)

// TestOptionDocsMatchConstructors: every exported option of the package
// (read from its source, so that a new one is found) is applied to every
// constructor that takes options, and which ones accept it must be
// exactly what the option's doc says ("For [New], [NewTransport] ...")
// and what each constructor's doc lists ("The options that apply are
// ..."). An option or a constructor without a sample below fails the
// test: give it one, and document where it applies.
func TestOptionDocsMatchConstructors(t *testing.T) {
	t.Parallel()
	docs, err := doccheck.Read(".", "Option")
	require.NoError(t, err)
	lim, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(5, time.Second))
	require.NoError(t, err)
	res, err := NewIPResolver()
	require.NoError(t, err)
	samples := map[string]Option{
		"WithClock":               WithClock(nil),
		"WithCost":                WithCost(func(*http.Request) int { return 1 }),
		"WithHeaders":             WithHeaders(AllHeaders),
		"WithDeniedHandler":       WithDeniedHandler(WriteDenied),
		"WithLogger":              WithLogger(slog.Default()),
		"WithErrorReportInterval": WithErrorReportInterval(time.Second),
		"WithShadowHeaders":       WithShadowHeaders(true),
		"WithDecisionInContext":   WithDecisionInContext(true),
		"WithRetries":             WithRetries(1),
		"WithMaxRetryWait":        WithMaxRetryWait(time.Second),
		"WithMaxPause":            WithMaxPause(time.Second),
		"WithBackoff":             WithBackoff(time.Second, time.Minute),
		"WithPolicyShaping":       WithPolicyShaping(true),
		"WithMaxKeys":             WithMaxKeys(10),
		"WithPauseHook":           WithPauseHook(func(*http.Request, *http.Response, time.Duration) {}),
		"WithIPResolver":          WithIPResolver(res),
		"WithObserver":            WithObserver(nil),
		"ExemptNetworks":          ExemptNetworks("10.0.0.0/8"),
		"DeniedNetworks":          DeniedNetworks("192.0.2.0/24"),
		"ExemptPrefixes":          ExemptPrefixes(netip.MustParsePrefix("10.0.0.0/8")),
		"DeniedPrefixes":          DeniedPrefixes(netip.MustParsePrefix("192.0.2.0/24")),
		"TrustedProxies":          TrustedProxies("10.0.0.0/8"),
		"TrustedPrefixes":         TrustedPrefixes(netip.MustParsePrefix("10.0.0.0/8")),
		"ProxyHeaders":            ProxyHeaders("X-Forwarded-For"),
		"IPv4Prefix":              IPv4Prefix(24),
		"IPv6Prefix":              IPv6Prefix(64),
	}
	constructors := map[string]func(Option) error{
		"New": func(o Option) error {
			_, err := New([]Limit{{Key: KeyByIP(), Limiter: lim}}, o)
			return err
		},
		"NewTransport": func(o Option) error { _, err := NewTransport(nil, nil, o); return err },
		"NewKeyedTransport": func(o Option) error {
			_, err := NewKeyedTransport(nil, lim, KeyByIP(), o)
			return err
		},
		"NewIPResolver": func(o Option) error { _, err := NewIPResolver(o); return err },
	}
	doccheck.Check(t, docs, samples, constructors)
}
