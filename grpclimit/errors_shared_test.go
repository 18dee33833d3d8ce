package grpclimit_test

import (
	"errors"
	"testing"

	"github.com/rlkit/ratelimit/grpclimit"
	"github.com/rlkit/ratelimit/httplimit"
)

// TestSentinelsSharedWithHTTP: the adapters' sentinel errors are defined
// once, so that errors.Is matches them whichever package returned them (a
// service using both need not test twice).
func TestSentinelsSharedWithHTTP(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name       string
		grpc, http error
	}{
		{"ErrNoKey", grpclimit.ErrNoKey, httplimit.ErrNoKey},
		{"ErrDenied", grpclimit.ErrDenied, httplimit.ErrDenied},
		{"ErrPauseDeadline", grpclimit.ErrPauseDeadline, httplimit.ErrPauseDeadline},
	} {
		if !errors.Is(c.grpc, c.http) || !errors.Is(c.http, c.grpc) {
			t.Errorf("%s: grpclimit's (%v) and httplimit's (%v) do not match each other", c.name, c.grpc, c.http)
		}
	}
}
