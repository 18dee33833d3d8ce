package httplimit

import (
	"errors"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/doccheck"
)

// TestOptionDocsMatchConstructors: every exported option of the package
// (read from its source, so that a new one is found) is given to every
// constructor that takes options, and which ones accept it (by its type,
// or at run time for WithMaxKeys and NewTransport) must be exactly what
// the option's doc says ("For [New], [NewTransport] ...") and what each
// constructor's doc lists ("The options that apply are ..."). An option
// or a constructor without a sample below fails the test: give it one,
// and document where it applies.
func TestOptionDocsMatchConstructors(t *testing.T) {
	t.Parallel()
	docs, err := doccheck.Read(".", "Option", "ClientOption", "ResolverOption", "CommonOption")
	require.NoError(t, err)
	lim, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(5, time.Second))
	require.NoError(t, err)
	res, err := NewIPResolver()
	require.NoError(t, err)
	ad, err := ratelimit.NewAdaptive(ratelimit.AdaptiveConfig{})
	require.NoError(t, err)
	samples := map[string]any{
		"WithAdaptive":            WithAdaptive(ad, nil),
		"WithClock":               WithClock(nil),
		"WithCost":                WithCost(func(*http.Request) int { return 1 }),
		"WithHeaders":             WithHeaders(allHeaders),
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
		"WithTokenCost":           WithTokenCost(func(*http.Request) int { return 1 }),
		"WithThrottle":            WithThrottle(nil),
		"WithIPResolver":          WithIPResolver(res),
		"WithObserver":            WithObserver(nil),
		"ExemptNetworks":          ExemptNetworks("10.0.0.0/8"),
		"DeniedNetworks":          DeniedNetworks("192.0.2.0/24"),
		"TrustedProxies":          TrustedProxies("10.0.0.0/8"),
		"ProxyHeaders":            ProxyHeaders("X-Forwarded-For"),
		"IPPrefixes":              IPPrefixes(24, 64),
	}
	constructors := map[string]func(any) error{
		"New": func(o any) error {
			opt, ok := o.(Option)
			if !ok {
				return errWrongType
			}
			_, err := New([]Limit{{Key: KeyByIP(), Limiter: lim}}, opt)
			return err
		},
		"NewTransport": func(o any) error {
			opt, ok := o.(ClientOption)
			if !ok {
				return errWrongType
			}
			_, err := NewTransport(nil, nil, opt)
			return err
		},
		"NewKeyedTransport": func(o any) error {
			opt, ok := o.(ClientOption)
			if !ok {
				return errWrongType
			}
			_, err := NewKeyedTransport(nil, lim, KeyByIP(), opt)
			return err
		},
		"NewIPResolver": func(o any) error {
			opt, ok := o.(ResolverOption)
			if !ok {
				return errWrongType
			}
			_, err := NewIPResolver(opt)
			return err
		},
	}
	doccheck.Check(t, docs, samples, constructors)
}

// errWrongType stands for an option of a type the constructor does not
// take: it would not compile (TestWrongOptionDoesNotCompile).
var errWrongType = errors.New("the option's type applies to other constructors")

// TestWrongOptionDoesNotCompile: an option given to a constructor it does
// not apply to is a compile error, not a run-time one: a snippet calling
// the constructors is type-checked against the package, and exactly the
// lines marked so compile.
func TestWrongOptionDoesNotCompile(t *testing.T) {
	t.Parallel()
	// Each line gives one constructor options, compiling or not.
	lines := []struct {
		call     string
		compiles bool
	}{
		{`httplimit.NewTransport(nil, nil, httplimit.WithHeaders(httplimit.XRateLimitHeaders|httplimit.IETFHeaders))`, false},
		{`httplimit.NewKeyedTransport(nil, nil, nil, httplimit.WithLogger(nil))`, false},
		{`httplimit.NewIPResolver(httplimit.WithRetries(1))`, false},
		{`httplimit.NewIPResolver(httplimit.ExemptNetworks("10.0.0.0/8"))`, false},
		{`httplimit.NewIPResolver(httplimit.WithCost(nil))`, false},
		{`httplimit.New(nil, httplimit.WithRetries(1))`, false},
		{`httplimit.New(nil, httplimit.WithPauseHook(nil))`, false},
		{`httplimit.New(nil, httplimit.TrustedProxies("10.0.0.0/8"))`, false},
		{`httplimit.New(nil, httplimit.WithClock(nil), httplimit.WithCost(nil), httplimit.WithHeaders(0))`, true},
		{`httplimit.NewTransport(nil, nil, httplimit.WithClock(nil), httplimit.WithCost(nil), httplimit.WithRetries(1))`, true},
		{`httplimit.NewIPResolver(httplimit.TrustedProxies("10.0.0.0/8"), httplimit.IPPrefixes(24, 64))`, true},
	}
	const head = "package snippet\n\nimport \"github.com/rlkit/ratelimit/httplimit\"\n\n" // 4 lines
	src := head
	for _, l := range lines {
		src += "var _, _ = " + l.call + "\n"
	}
	failed := map[int]bool{}
	for _, e := range doccheck.TypeErrors(t, ".", src) {
		failed[e.Fset.Position(e.Pos).Line-5] = true
		t.Logf("%v", e)
	}
	for i, l := range lines {
		if failed[i] == l.compiles {
			t.Errorf("%s: compiles = %v, want %v", l.call, !failed[i], l.compiles)
		}
	}
}
