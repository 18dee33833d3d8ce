package exec

import (
	"context"
	"errors"
	"io"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestBreakerStates walks the breaker through its states with errors of
// different types (a network error, a timeout, an error reply).
func TestBreakerStates(t *testing.T) {
	t.Parallel()
	b := breaker{cooldown: 100}
	step := func(now int64, wantOK, wantProbe bool) bool {
		t.Helper()
		ok, probe, err := b.allow(now)
		if ok != wantOK || probe != wantProbe || (err != nil) == ok {
			t.Fatalf("allow(%d) = %t, %t, %v; want %t, %t", now, ok, probe, err, wantOK, wantProbe)
		}
		if !ok && !errors.Is(err, ErrBreakerOpen) {
			t.Fatalf("allow(%d) error %v, want ErrBreakerOpen", now, err)
		}
		return probe
	}
	step(0, true, false)
	b.done(0, false, io.EOF, false) // opens until 100
	step(50, false, false)
	p := step(100, true, true) // the probe
	step(100, false, false)    // one probe at a time
	b.done(110, p, &timeoutError{}, false)
	step(150, false, false) // reopened until 210
	p = step(210, true, true)
	b.done(220, p, redis.ErrNoScript, false) // an error reply: Redis answered
	step(221, true, false)
	b.done(230, false, io.ErrUnexpectedEOF, true) // the caller's ctx: says nothing
	step(231, true, false)
	off := breaker{}
	if ok, _, _ := off.allow(0); !ok {
		t.Fatal("disabled breaker refused a call")
	}
}

// TestBreakerProbeCanceled: the probe of a half-open breaker whose caller
// gives up says nothing about Redis: the breaker neither closes nor
// reopens for a full cooldown, and the next call probes.
func TestBreakerProbeCanceled(t *testing.T) {
	t.Parallel()
	b := breaker{cooldown: 100}
	b.done(0, false, &timeoutError{}, false) // open until 100
	ok, probe, _ := b.allow(100)
	require.True(t, ok)
	require.True(t, probe)
	b.done(105, probe, context.Canceled, true)
	require.EqualValues(t, 100, b.openUntil.Load(), "a cancelled probe moved the breaker")
	ok, probe, _ = b.allow(106)
	require.True(t, ok, "no probe after a cancelled one")
	require.True(t, probe)
}
