package grpclimit

import (
	"context"
	"log/slog"
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
// exactly what the option's doc says ("For [New], [NewClient] ...") and
// what each constructor's doc lists ("The options that apply are ...").
// An option or a constructor without a sample here fails the test: give
// it one, and document where it applies.
func TestOptionDocsMatchConstructors(t *testing.T) {
	t.Parallel()
	docs, err := doccheck.Read(".", "Option")
	require.NoError(t, err)
	lim, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(5, time.Second))
	require.NoError(t, err)
	cost := func(context.Context, string, any) int { return 1 }
	samples := map[string]Option{
		"WithCost":                  WithCost(cost),
		"WithClock":                 WithClock(nil),
		"WithMessageCost":           WithMessageCost(cost),
		"WithFields":                WithFields(AllFields),
		"WithShadowFields":          WithShadowFields(true),
		"WithDeniedHandler":         WithDeniedHandler(func(_ context.Context, d Denial) error { return DeniedError(d) }),
		"WithLogger":                WithLogger(slog.Default()),
		"WithErrorReportInterval":   WithErrorReportInterval(time.Second),
		"WithObserver":              WithObserver(nil),
		"ChargeHealthAndReflection": ChargeHealthAndReflection(true),
		"TrustedProxies":            TrustedProxies("10.0.0.0/8"),
		"TrustedPrefixes":           TrustedPrefixes(netip.MustParsePrefix("10.0.0.0/8")),
		"ProxyMetadata":             ProxyMetadata("x-forwarded-for"),
		"IPv4Prefix":                IPv4Prefix(24),
		"IPv6Prefix":                IPv6Prefix(64),
		"WithRetries":               WithRetries(1),
		"WithMaxRetryWait":          WithMaxRetryWait(time.Second),
		"WithMaxPause":              WithMaxPause(time.Second),
		"WithBackoff":               WithBackoff(time.Second, time.Minute),
		"WithPolicyShaping":         WithPolicyShaping(true),
		"WithPauseScope":            WithPauseScope(PauseByMethod),
		"WithMaxKeys":               WithMaxKeys(10),
		"WithPauseHook":             WithPauseHook(func(context.Context, string, time.Duration) {}),
	}
	constructors := map[string]func(Option) error{
		"New": func(o Option) error {
			_, err := New([]Limit{{Key: KeyByMethod(), Limiter: lim}}, o)
			return err
		},
		"NewClient": func(o Option) error { _, err := NewClient(nil, o); return err },
		"NewKeyedClient": func(o Option) error {
			_, err := NewKeyedClient(lim, KeyByMethod(), o)
			return err
		},
		"NewIPResolver": func(o Option) error { _, err := NewIPResolver(o); return err },
	}
	doccheck.Check(t, docs, samples, constructors)
}
