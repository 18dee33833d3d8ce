package redislimit

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// TestWaitRetryAfterSucceedsRedis: on Redis, waiting exactly the RetryAfter
// a denial announced (with no other traffic) admits the same request, for
// every algorithm but the sliding counter (whose RetryAfter is an
// estimate), and one microsecond less does not.
func TestWaitRetryAfterSucceedsRedis(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for _, p := range []ratelimit.Policy{
		ratelimit.TokenBucketPolicy(ratelimit.Per(2, time.Second), 3),
		ratelimit.LeakyBucketPolicy(3, 700*time.Millisecond),
		ratelimit.FixedWindowPolicy(3, time.Minute),
		ratelimit.SlidingLogPolicy(3, 10*time.Second),
	} {
		t.Run(name(p), func(t *testing.T) {
			mock := fakeclock.NewManual(mockStart)
			l := mustNew(t, c, p, WithClock(mock), WithPrefix(uniquePrefix(t)))
			for i := range 3 {
				d, err := l.AllowN(bg(), "k", 1)
				require.NoError(t, err)
				require.Truef(t, d.Allowed, "AllowN(1) #%d", i+1)
				mock.Add(100 * time.Millisecond)
			}
			d, err := l.AllowN(bg(), "k", 2)
			require.NoError(t, err)
			require.False(t, d.Allowed)
			require.Positive(t, d.RetryAfter)
			mock.Add(d.RetryAfter - time.Microsecond)
			early, err := l.Peek(bg(), "k", 2)
			require.NoError(t, err)
			require.Falsef(t, early.Allowed, "Peek(2) 1µs before the announced RetryAfter %v", d.RetryAfter)
			mock.Add(time.Microsecond)
			d, err = l.AllowN(bg(), "k", 2)
			require.NoError(t, err)
			require.Truef(t, d.Allowed, "AllowN(2) after the announced RetryAfter: %+v", d)
		})
	}
}

// TestAllowAllRedisReportsLongestRetryAfter: with a 1/s and a 1/h limit on
// Redis, in either order, AllowAll reports the hour (the longest
// RetryAfter), waiting it admits the request, and nothing stays charged by
// the denials.
func TestAllowAllRedisReportsLongestRetryAfter(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	for _, order := range []string{"second-first", "hour-first"} {
		t.Run(order, func(t *testing.T) {
			mock := fakeclock.NewManual(mockStart)
			perSecond := mustNew(t, c, ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Second), 1),
				WithClock(mock), WithPrefix(uniquePrefix(t)))
			perHour := mustNew(t, c, ratelimit.FixedWindowPolicy(1, time.Hour),
				WithClock(mock), WithPrefix(uniquePrefix(t)))
			dims := []ratelimit.Dimension{
				{Name: "second", Limiter: perSecond, Key: "k"},
				{Name: "hour", Limiter: perHour, Key: "k"},
			}
			if order == "hour-first" {
				dims[0], dims[1] = dims[1], dims[0]
			}
			d, err := ratelimit.AllowAll(bg(), 1, dims...)
			require.NoError(t, err)
			require.True(t, d.Allowed)

			d, err = ratelimit.AllowAll(bg(), 1, dims...)
			require.NoError(t, err)
			require.False(t, d.Allowed)
			require.Equal(t, "hour", dims[d.Index].Name, "the denial reported")
			hourLeft := time.Hour - time.Duration(mock.Now().UnixNano()%int64(time.Hour))
			require.Equal(t, roundUS(hourLeft), d.RetryAfter)

			// A retry after one second is still denied (by the hour), and
			// leaves nothing charged on the per-second limit.
			mock.Add(time.Second)
			d, err = ratelimit.AllowAll(bg(), 1, dims...)
			require.NoError(t, err)
			require.False(t, d.Allowed)
			ps, err := perSecond.Peek(bg(), "k", 0)
			require.NoError(t, err)
			require.Equal(t, 1, ps.Remaining, "per-second limit after refunded denials")

			// Waiting what was announced admits it.
			mock.Add(d.RetryAfter)
			d, err = ratelimit.AllowAll(bg(), 1, dims...)
			require.NoError(t, err)
			require.Truef(t, d.Allowed, "AllowAll after the announced RetryAfter: %+v", d)
		})
	}
}
