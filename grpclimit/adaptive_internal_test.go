package grpclimit

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/rlkit/ratelimit/internal/limitset"
)

// TestFlightEnd: how a call's flight ends, by its code, its context and
// its handler: a passed deadline, Unavailable and DeadlineExceeded are
// dropped; a client gone (whatever the code), Canceled and a panic are
// ignored; the rest succeed.
func TestFlightEnd(t *testing.T) {
	t.Parallel()
	live := context.Background()
	past, cancel := context.WithDeadline(live, time.Unix(1767225600, 0))
	t.Cleanup(cancel)
	gone, leave := context.WithCancel(live)
	leave()
	for _, c := range []struct {
		name string
		ctx  context.Context
		err  error
		done bool
		want limitset.FlightEnd
	}{
		{"OK", live, nil, true, limitset.EndSuccess},
		{"NotFound", live, status.Error(codes.NotFound, ""), true, limitset.EndSuccess},
		{"ResourceExhausted", live, status.Error(codes.ResourceExhausted, ""), true, limitset.EndSuccess},
		{"Internal", live, status.Error(codes.Internal, ""), true, limitset.EndSuccess},
		{"Unavailable", live, status.Error(codes.Unavailable, ""), true, limitset.EndDropped},
		{"DeadlineExceeded", live, status.Error(codes.DeadlineExceeded, ""), true, limitset.EndDropped},
		{"context.DeadlineExceeded", live, context.DeadlineExceeded, true, limitset.EndDropped},
		{"context.Canceled", live, context.Canceled, true, limitset.EndIgnored},
		{"Unknown", live, errors.New("oops"), true, limitset.EndSuccess},
		{"Canceled", live, status.Error(codes.Canceled, ""), true, limitset.EndIgnored},
		{"deadline passed, OK", past, nil, true, limitset.EndDropped},
		{"client gone, OK", gone, nil, true, limitset.EndIgnored},
		{"client gone, Unavailable", gone, status.Error(codes.Unavailable, ""), true, limitset.EndIgnored},
		{"deadline passed, Canceled", past, status.Error(codes.Canceled, ""), true, limitset.EndDropped},
		{"panic", live, nil, false, limitset.EndIgnored},
	} {
		assert.Equalf(t, c.want, flightEnd(c.ctx, c.err, c.done), "%s", c.name)
	}
}

// TestStreamFlightEnd: a stream's flight ends as a call's, but its success
// (however long the client kept it) is ignored, not a latency sample.
func TestStreamFlightEnd(t *testing.T) {
	t.Parallel()
	live := context.Background()
	assert.Equal(t, limitset.EndIgnored, streamFlightEnd(live, nil, true), "OK")
	assert.Equal(t, limitset.EndIgnored, streamFlightEnd(live, status.Error(codes.NotFound, ""), true), "NotFound")
	assert.Equal(t, limitset.EndDropped, streamFlightEnd(live, status.Error(codes.Unavailable, ""), true), "Unavailable")
	assert.Equal(t, limitset.EndIgnored, streamFlightEnd(live, nil, false), "panic")
}
