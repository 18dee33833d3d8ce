package redislimit

import (
	"testing"
	"time"

	"github.com/rlkit/ratelimit"
)

// TestAllowAll charges two Redis limits all-or-nothing through
// ratelimit.AllowAll, which refunds the first when the second denies.
func TestAllowAll(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	perUser := mustNew(t, c, ratelimit.SlidingLogPolicy(5, time.Hour), WithPrefix(uniquePrefix(t)))
	perRoute := mustNew(t, c, ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 3), WithPrefix(uniquePrefix(t)))
	dims := []ratelimit.Dimension{
		{Name: "user", Limiter: perUser, Key: "alice"},
		{Name: "route", Limiter: perRoute, Key: "/search"},
	}
	for i := range 5 {
		d, err := ratelimit.AllowAll(bg(), 1, dims...)
		if err != nil {
			t.Fatal(err)
		}
		if want := i < 3; d.Allowed != want {
			t.Fatalf("request %d: Allowed = %t, want %t (route allows 3)", i+1, d.Allowed, want)
		}
		if !d.Allowed && d.Index != 1 {
			t.Errorf("request %d denied by dimension %d, want 1 (route)", i+1, d.Index)
		}
	}
	// The two denied requests were refunded on the user limit: 2 left.
	d, err := perUser.Peek(bg(), "alice", 0)
	if err != nil || d.Remaining != 2 {
		t.Errorf("user limit after 3 admitted and 2 refunded: Remaining %d (%v), want 2", d.Remaining, err)
	}
}
