package grpclimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/grpclimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"google.golang.org/grpc"
)

// TestKeyHelpersRefuseNil: a key helper given a nil function or an empty
// metadata name used to pass New and panic on the first call, which takes
// the whole gRPC server down (grpc-go does not recover handler panics).
// New now refuses it with an error, and a broken key that New cannot see
// (inside a KeyFunc of the caller's own) keys every call alike: limited
// together, never a panic, never uncharged.
func TestKeyHelpersRefuseNil(t *testing.T) {
	method := grpclimit.KeyByMethod()
	broken := map[string]grpclimit.KeyFunc{
		"KeyByUser(nil)":           grpclimit.KeyByUser(nil),
		"KeyByMetadata(\"\")":      grpclimit.KeyByMetadata(""),
		"When(nil, method)":        grpclimit.When(nil, method),
		"When(IsMethod, nil)":      grpclimit.When(grpclimit.IsMethod(mUnary), nil),
		"FirstOf(nil)":             grpclimit.FirstOf(nil),
		"FirstOf()":                grpclimit.FirstOf(),
		"Combine(nil, method)":     grpclimit.Combine(nil, method),
		"Combine()":                grpclimit.Combine(),
		"Combine(KeyByUser(nil))":  grpclimit.Combine(method, grpclimit.KeyByUser(nil)),
		"FirstOf(When(nil,...))":   grpclimit.FirstOf(grpclimit.When(nil, method)),
		"When(m, KeyByMetadata())": grpclimit.When(grpclimit.IsMethod(mUnary), grpclimit.KeyByMetadata("")),
	}
	for name, k := range broken {
		t.Run(name, func(t *testing.T) {
			lim := newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Minute), fakeclock.New(epoch))
			_, err := grpclimit.New([]grpclimit.Limit{{Name: "u", Key: k, Limiter: lim}})
			require.Error(t, err, "New accepted a Limit whose key helper was given nil")
			assert.True(t, errors.Is(err, ratelimit.ErrInvalidConfig), "%v", err)
			assert.Contains(t, err.Error(), `ratelimit: invalid configuration: grpclimit.Limit.Key of limit "u"`)

			// Hidden from New in a closure of the caller's own: every call
			// shares one key, so the second is denied.
			hidden := func(ctx context.Context, m string) (string, bool) { return k(ctx, m) }
			ic := newIC(t, []grpclimit.Limit{{Name: "u", Key: hidden, Limiter: lim}})
			call := func() error {
				_, err := ic.Unary()(context.Background(), nil, &grpc.UnaryServerInfo{FullMethod: mUnary},
					func(context.Context, any) (any, error) { return nil, nil })
				return err
			}
			require.NotPanics(t, func() { assert.NoError(t, call(), "first call") })
			assert.Error(t, call(), "second call: a broken key must limit, not let through")
		})
	}
}

// TestClientRefusesTypedNilAndInvalidKeys: a typed nil limiter used to be
// taken for "no limiter" (every call sent unlimited), and a key helper
// given nothing to key by went unnoticed. Both are configuration errors.
func TestClientRefusesTypedNilAndInvalidKeys(t *testing.T) {
	var tb *ratelimit.TokenBucket
	_, err := grpclimit.NewClient(tb)
	require.Error(t, err, "NewClient(typed nil)")
	assert.True(t, errors.Is(err, ratelimit.ErrInvalidConfig), "%v", err)
	assert.Contains(t, err.Error(), "grpclimit.NewClient: the limiter is a nil *ratelimit.TokenBucket")

	_, err = grpclimit.NewClient(nil)
	assert.NoError(t, err, "an untyped nil limiter is documented: obey the server alone")

	lim := newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Minute), fakeclock.New(epoch))
	_, err = grpclimit.NewKeyedClient(lim, grpclimit.KeyByUser(nil))
	require.Error(t, err, "NewKeyedClient(KeyByUser(nil))")
	assert.True(t, errors.Is(err, ratelimit.ErrInvalidConfig), "%v", err)
}

// TestInvalidMethodsRefused: a method or service name no call can have (gRPC
// names every method "/service/method") used to make a limit that never
// applied, silently. New refuses it, naming the problem.
func TestInvalidMethodsRefused(t *testing.T) {
	t.Parallel()
	method := grpclimit.KeyByMethod()
	for name, k := range map[string]grpclimit.KeyFunc{
		`IsMethod("")`:                 grpclimit.When(grpclimit.IsMethod(""), method),
		`IsMethod("pkg.Svc/M")`:        grpclimit.When(grpclimit.IsMethod("pkg.Svc/M"), method),
		`IsMethod("/pkg.Svc/")`:        grpclimit.When(grpclimit.IsMethod("/pkg.Svc/"), method),
		`IsMethod("//M")`:              grpclimit.When(grpclimit.IsMethod("//M"), method),
		`IsMethod("/pkg.Svc")`:         grpclimit.When(grpclimit.IsMethod("/pkg.Svc"), method),
		`IsMethod("/a/b/c")`:           grpclimit.When(grpclimit.IsMethod("/a/b/c"), method),
		`IsService("")`:                grpclimit.When(grpclimit.IsService(""), method),
		`IsService("pkg.Svc/M")`:       grpclimit.When(grpclimit.IsService("pkg.Svc/M"), method),
		`FirstOf(When(IsService("")))`: grpclimit.FirstOf(grpclimit.When(grpclimit.IsService("/"), method)),
	} {
		_, err := grpclimit.New([]grpclimit.Limit{{Name: "login", Key: k, Limiter: newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Minute), fakeclock.New(epoch))}})
		require.Error(t, err, name)
		assert.True(t, errors.Is(err, ratelimit.ErrInvalidConfig), "%v", err)
		assert.Contains(t, err.Error(), `grpclimit.Limit.Key of limit "login"`, name)
		assert.Contains(t, err.Error(), "never match", "%s: %v", name, err)
	}
	for name, k := range map[string]grpclimit.KeyFunc{
		"IsMethod":          grpclimit.When(grpclimit.IsMethod(mUnary), method),
		"IsService":         grpclimit.When(grpclimit.IsService(mService), method),
		"IsService(/svc)":   grpclimit.When(grpclimit.IsService("/"+mService), method),
		"IsMethod(no pkg)":  grpclimit.When(grpclimit.IsMethod("/Svc/M"), method),
		"IsService(no pkg)": grpclimit.When(grpclimit.IsService("Svc"), method),
	} {
		_, err := grpclimit.New([]grpclimit.Limit{{Name: "login", Key: k, Limiter: newKeyed(t, ratelimit.FixedWindowPolicy(1, time.Minute), fakeclock.New(epoch))}})
		assert.NoError(t, err, name)
	}
}
