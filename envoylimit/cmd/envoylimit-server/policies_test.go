package main

import (
	"testing"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A recorded policy reads back as the one written, for every algorithm.
func TestPolicyRoundTrip(t *testing.T) {
	paris, err := time.LoadLocation("Europe/Paris")
	require.NoError(t, err)
	for _, p := range []ratelimit.Policy{
		ratelimit.FixedWindowPolicy(5, time.Minute),
		ratelimit.SlidingLogPolicy(3, 30*time.Second),
		ratelimit.SlidingCounterPolicy(10, time.Hour),
		ratelimit.TokenBucketPolicy(ratelimit.Per(2, time.Second), 4),
		ratelimit.LeakyBucketPolicy(2, 250*time.Millisecond),
		ratelimit.QuotaPolicy(100, ratelimit.Calendar{Unit: ratelimit.Weekly, Location: paris, Hour: 9, Minute: 30, WeekStart: time.Monday}),
		ratelimit.QuotaPolicy(7, ratelimit.Calendar{Unit: ratelimit.Monthly, MonthDay: 15}),
	} {
		got, err := decodePolicy(encodePolicy(p))
		require.NoError(t, err, p)
		assert.Equal(t, encodePolicy(p), encodePolicy(got), p)
		assert.Equal(t, p.String(), got.String())
	}
	_, err = decodePolicy("1|2|3")
	assert.ErrorContains(t, err, "has 3 fields, want 10")
	_, err = decodePolicy("x|2|0|60000000000|0||0|0|0|0")
	assert.ErrorContains(t, err, "a recorded policy")
}
