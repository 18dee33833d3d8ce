package grpclimit_test

import (
	"context"
	"testing"

	"github.com/rlkit/ratelimit/grpclimit"
	"google.golang.org/grpc/metadata"
)

type userKey struct{}

func userFrom(ctx context.Context) (string, bool) {
	u, ok := ctx.Value(userKey{}).(string)
	return u, ok
}

func TestKeyFuncs(t *testing.T) {
	t.Parallel()
	bg := context.Background()
	withMD := func(kv ...string) context.Context {
		return metadata.NewIncomingContext(bg, metadata.Pairs(kv...))
	}
	withUser := func(ctx context.Context, u string) context.Context {
		return context.WithValue(ctx, userKey{}, u)
	}
	const m = "/pkg.Svc/Get"
	cases := []struct {
		name   string
		key    grpclimit.KeyFunc
		ctx    context.Context
		method string
		want   string
		wantOK bool
	}{
		{"method", grpclimit.KeyByMethod(), bg, m, m, true},
		{"service", grpclimit.KeyByService(), bg, m, "pkg.Svc", true},
		{"service nested", grpclimit.KeyByService(), bg, "/a.b.C/D", "a.b.C", true},
		{"service malformed", grpclimit.KeyByService(), bg, "/nomethod", "", false},
		{"service empty", grpclimit.KeyByService(), bg, "", "", false},
		{"api key", grpclimit.KeyByMetadata("x-api-key"), withMD("x-api-key", "k1"), m, "k1", true},
		{"api key absent", grpclimit.KeyByMetadata("x-api-key"), bg, m, "", false},
		{"api key empty then set", grpclimit.KeyByMetadata("x-api-key"), withMD("x-api-key", "", "x-api-key", "k2"), m, "k2", true},
		{"api key only empty", grpclimit.KeyByMetadata("x-api-key"), withMD("x-api-key", ""), m, "", false},
		{"metadata name lower-cased", grpclimit.KeyByMetadata("X-Tenant"), withMD("x-tenant", "acme"), m, "acme", true},
		{"user", grpclimit.KeyByUser(userFrom), withUser(bg, "alice"), m, "alice", true},
		{"user empty", grpclimit.KeyByUser(userFrom), withUser(bg, ""), m, "", false},
		{"anonymous", grpclimit.KeyByUser(userFrom), bg, m, "", false},
		{"combine", grpclimit.Combine(grpclimit.KeyByUser(userFrom), grpclimit.KeyByMethod()), withUser(bg, "alice"), m, "alice|" + m, true},
		{"combine escapes", grpclimit.Combine(grpclimit.KeyByUser(userFrom), grpclimit.KeyByMethod()), withUser(bg, `a|b\`), m, `a\|b\\|` + m, true},
		{"combine needs all", grpclimit.Combine(grpclimit.KeyByUser(userFrom), grpclimit.KeyByMethod()), bg, m, "", false},
		{"first of: api key", grpclimit.FirstOf(grpclimit.KeyByMetadata("x-api-key"), grpclimit.KeyByMethod()), withMD("x-api-key", "k1"), m, "k1", true},
		{"first of: method", grpclimit.FirstOf(grpclimit.KeyByMetadata("x-api-key"), grpclimit.KeyByMethod()), bg, m, m, true},
		{"first of: none", grpclimit.FirstOf(grpclimit.KeyByMetadata("x-api-key")), bg, m, "", false},
		{"when method", grpclimit.When(grpclimit.IsMethod(m), grpclimit.KeyByMetadata("x-api-key")), withMD("x-api-key", "k1"), m, "k1", true},
		{"when other method", grpclimit.When(grpclimit.IsMethod(m), grpclimit.KeyByMetadata("x-api-key")), withMD("x-api-key", "k1"), "/pkg.Svc/Put", "", false},
		{"when service", grpclimit.When(grpclimit.IsService("pkg.Svc"), grpclimit.KeyByMethod()), bg, "/pkg.Svc/Put", "/pkg.Svc/Put", true},
		{"when service slash", grpclimit.When(grpclimit.IsService("/pkg.Svc"), grpclimit.KeyByMethod()), bg, "/pkg.Svc/Put", "/pkg.Svc/Put", true},
		{"when other service", grpclimit.When(grpclimit.IsService("pkg.Svc"), grpclimit.KeyByMethod()), bg, "/pkg.SvcX/Put", "", false},
	}
	for _, c := range cases {
		got, ok := c.key(c.ctx, c.method)
		if got != c.want || ok != c.wantOK {
			t.Errorf("%s: key(%q) = %q, %v; want %q, %v", c.name, c.method, got, ok, c.want, c.wantOK)
		}
	}
	// Combine is unambiguous: parts that differ give keys that differ.
	ab := grpclimit.Combine(grpclimit.KeyByMetadata("a"), grpclimit.KeyByMetadata("b"))
	k1, _ := ab(withMD("a", `x|`, "b", "y"), m)
	k2, _ := ab(withMD("a", "x", "b", "|y"), m)
	if k1 == k2 {
		t.Errorf("Combine collides: %q", k1)
	}
}

func TestKeyFuncsAllocateNothing(t *testing.T) {
	ctx := context.Background()
	for name, k := range map[string]grpclimit.KeyFunc{
		"method":  grpclimit.KeyByMethod(),
		"service": grpclimit.KeyByService(),
		"when":    grpclimit.When(grpclimit.IsService("pkg.Svc"), grpclimit.KeyByMethod()),
	} {
		if a := testing.AllocsPerRun(100, func() { k(ctx, "/pkg.Svc/Get") }); a != 0 {
			t.Errorf("%s: %v allocations per call, want 0", name, a)
		}
	}
}
