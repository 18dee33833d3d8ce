package ratelimit

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit/internal/testkit/doccheck"
)

// TestOptionDocsMatchConstructors: every exported option of the package
// (read from its source, so that a new one is found) is given to every
// constructor that takes options, and which ones accept it must be what
// the option's doc says in its "It applies to ..." sentence: links or
// names of constructors, "the single limiters" (every constructor whose
// limiter is not keyed), or "where [WithX] does". An option or a
// constructor without a sample here fails the test. (The constructors'
// docs list no options, so there is nothing to compare on their side.)
func TestOptionDocsMatchConstructors(t *testing.T) {
	t.Parallel()
	docs, err := doccheck.Read(".", "Option")
	require.NoError(t, err)
	samples := map[string]Option{
		"WithClock":       WithClock(nil),
		"WithMaxKeys":     WithMaxKeys(10),
		"WithObserver":    WithObserver(nil),
		"WithName":        WithName("n"),
		"WithDefaultTier": WithDefaultTier("free"),
	}
	constructors := map[string]func(Option) (any, error){
		"NewTokenBucket":    func(o Option) (any, error) { return NewTokenBucket(Per(1, time.Second), 1, o) },
		"NewLeakyBucket":    func(o Option) (any, error) { return NewLeakyBucket(1, time.Second, o) },
		"NewFixedWindow":    func(o Option) (any, error) { return NewFixedWindow(1, time.Second, o) },
		"NewSlidingLog":     func(o Option) (any, error) { return NewSlidingLog(1, time.Second, o) },
		"NewSlidingCounter": func(o Option) (any, error) { return NewSlidingCounter(1, time.Second, o) },
		"NewQuota":          func(o Option) (any, error) { return NewQuota(1, Calendar{Unit: Daily}, o) },
		"NewKeyed":          func(o Option) (any, error) { return NewKeyed(FixedWindowPolicy(1, time.Second), o) },
		"NewConcurrency":    func(o Option) (any, error) { return NewConcurrency(1, o) },
		"NewAdaptive":       func(o Option) (any, error) { return NewAdaptive(AdaptiveConfig{}, o) },
		"NewThrottle":       func(o Option) (any, error) { return NewThrottle(ThrottleConfig{}, o) },
		"NewTiered": func(o Option) (any, error) {
			k, err := NewKeyed(FixedWindowPolicy(1, time.Second))
			if err != nil {
				return nil, err
			}
			return NewTiered(func(context.Context, string) string { return "free" }, map[string]KeyedLimiter{"free": k}, o)
		},
	}
	assert.ElementsMatch(t, mapKeys(docs.Options), mapKeys(samples), "exported options (from the source) and the samples here")
	assert.ElementsMatch(t, mapKeys(docs.Constructors), mapKeys(constructors), "constructors taking ...Option (from the source) and the wrappers here")

	// The single limiters: the constructors of a Limiter.
	var single []string
	for name, ctor := range constructors {
		l, err := ctor(nil)
		require.NoError(t, err, name)
		if _, isSingle := l.(Limiter); isSingle {
			single = append(single, name)
		}
	}
	var targets func(name string, depth int) []string
	targets = func(name string, depth int) []string {
		m := appliesTo.FindStringSubmatch(docs.Docs[name])
		if m == nil || depth > 3 {
			return nil
		}
		var out []string
		for _, part := range appliesSplit.Split(m[1], -1) {
			part = strings.TrimSuffix(strings.Trim(part, "[] "), " only")
			part = strings.Trim(part, "[]")
			switch {
			case part == "":
			case part == "the single limiters":
				out = append(out, single...)
			case strings.HasPrefix(part, "where "):
				ref := strings.Trim(strings.TrimSuffix(strings.TrimPrefix(part, "where "), " does"), "[]")
				out = append(out, targets(ref, depth+1)...)
			default:
				out = append(out, part)
			}
		}
		return out
	}
	for _, oname := range mapKeys(samples) {
		said := targets(oname, 0)
		if len(said) == 0 {
			t.Errorf("%s's doc has no \"It applies to ...\" sentence: %q", oname, docs.Docs[oname])
			continue
		}
		for _, cname := range mapKeys(constructors) {
			_, err := constructors[cname](samples[oname])
			accepted := err == nil
			if err != nil && !strings.Contains(err.Error(), "does not apply to") {
				t.Errorf("%s given to %s: %v (the sample should be valid)", oname, cname, err)
				continue
			}
			if slices.Contains(said, cname) != accepted {
				t.Errorf("%s: %s accepts it = %v, but its doc says it applies to %v", oname, cname, accepted, said)
			}
		}
	}
}

// appliesTo finds the constructors an option's doc names: "It applies to
// the single limiters and to [NewKeyed]", "It applies where [WithObserver]
// does", up to the end of the clause.
var (
	appliesTo    = regexp.MustCompile(`It applies ((?:to )?[^.:;]*)`)
	appliesSplit = regexp.MustCompile(`, and to |, and | and to | and |, |^to `)
)

func mapKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
