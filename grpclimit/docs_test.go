package grpclimit

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/doccheck"
)

// TestOptionDocsMatchConstructors: every exported option of the package
// (read from its source, so that a new one is found) is applied to every
// constructor that takes options, and which ones accept it (by its type)
// must be exactly what the option's doc says ("For [New], [NewClient] ...") and
// what each constructor's doc lists ("The options that apply are ...").
// An option or a constructor without a sample here fails the test: give
// it one, and document where it applies.
func TestOptionDocsMatchConstructors(t *testing.T) {
	t.Parallel()
	docs, err := doccheck.Read(".", "Option", "ClientOption", "ResolverOption", "CommonOption")
	require.NoError(t, err)
	lim, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(5, time.Second))
	require.NoError(t, err)
	cost := func(context.Context, string, any) int { return 1 }
	ad, err := ratelimit.NewAdaptive(ratelimit.AdaptiveConfig{})
	require.NoError(t, err)
	samples := map[string]any{
		"WithAdaptive":              WithAdaptive(ad, nil),
		"WithCost":                  WithCost(cost),
		"WithClock":                 WithClock(nil),
		"WithMessageCost":           WithMessageCost(cost),
		"WithFields":                WithFields(XRateLimitFields | IETFFields),
		"WithShadowFields":          WithShadowFields(true),
		"WithDeniedHandler":         WithDeniedHandler(func(_ context.Context, d Denial) error { return DeniedError(d) }),
		"WithLogger":                WithLogger(slog.Default()),
		"WithErrorReportInterval":   WithErrorReportInterval(time.Second),
		"WithObserver":              WithObserver(nil),
		"ChargeHealthAndReflection": ChargeHealthAndReflection(true),
		"TrustedProxies":            TrustedProxies("10.0.0.0/8"),
		"ProxyMetadata":             ProxyMetadata("x-forwarded-for"),
		"IPPrefixes":                IPPrefixes(24, 64),
		"WithRetries":               WithRetries(1),
		"WithMaxRetryWait":          WithMaxRetryWait(time.Second),
		"WithMaxPause":              WithMaxPause(time.Second),
		"WithBackoff":               WithBackoff(time.Second, time.Minute),
		"WithPolicyShaping":         WithPolicyShaping(true),
		"WithPauseScope":            WithPauseScope(PauseByMethod),
		"WithMaxKeys":               WithMaxKeys(10),
		"WithPauseHook":             WithPauseHook(func(context.Context, string, time.Duration) {}),
		"WithThrottle":              WithThrottle(nil),
	}
	constructors := map[string]func(any) error{
		"New": func(o any) error {
			opt, ok := o.(Option)
			if !ok {
				return errWrongType
			}
			_, err := New([]Limit{{Key: KeyByMethod(), Limiter: lim}}, opt)
			return err
		},
		"NewClient": func(o any) error {
			opt, ok := o.(ClientOption)
			if !ok {
				return errWrongType
			}
			_, err := NewClient(nil, opt)
			return err
		},
		"NewKeyedClient": func(o any) error {
			opt, ok := o.(ClientOption)
			if !ok {
				return errWrongType
			}
			_, err := NewKeyedClient(lim, KeyByMethod(), opt)
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
		{`grpclimit.NewClient(nil, grpclimit.WithFields(grpclimit.XRateLimitFields|grpclimit.IETFFields))`, false},
		{`grpclimit.NewKeyedClient(nil, nil, grpclimit.WithObserver(nil))`, false},
		{`grpclimit.NewIPResolver(grpclimit.WithRetries(1))`, false},
		{`grpclimit.NewIPResolver(grpclimit.WithFields(grpclimit.NoFields))`, false},
		{`grpclimit.NewIPResolver(grpclimit.WithClock(nil))`, false},
		{`grpclimit.New(nil, grpclimit.WithPolicyShaping(true))`, false},
		{`grpclimit.New(nil, grpclimit.WithPauseScope(grpclimit.PauseByMethod))`, false},
		{`grpclimit.New(nil, grpclimit.TrustedProxies("10.0.0.0/8"))`, false},
		{`grpclimit.New(nil, grpclimit.WithClock(nil), grpclimit.WithCost(nil), grpclimit.WithFields(0))`, true},
		{`grpclimit.NewClient(nil, grpclimit.WithClock(nil), grpclimit.WithCost(nil), grpclimit.WithRetries(1))`, true},
		{`grpclimit.NewIPResolver(grpclimit.TrustedProxies("10.0.0.0/8"), grpclimit.IPPrefixes(24, 64))`, true},
	}
	const head = "package snippet\n\nimport \"github.com/rlkit/ratelimit/grpclimit\"\n\n" // 4 lines
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
