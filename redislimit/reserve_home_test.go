package redislimit

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/rlkit/ratelimit/internal/testkit/redistest"
	"github.com/stretchr/testify/require"
)

// recordKeys returns the reservation records under l's prefix.
func recordKeys(t *testing.T, c redis.UniversalClient, l *Limiter) []string {
	t.Helper()
	keys, err := c.Keys(bg(), l.base+recordInfix+"*").Result()
	require.NoError(t, err)
	return keys
}

// TestReserveCluster: reserve and settle on the 3-master Cluster (every
// key of a script in one slot), with memory's Decisions, keys spread over
// the masters, and no record left behind.
func TestReserveCluster(t *testing.T) {
	t.Parallel()
	cl := redistest.StartCluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { _ = c.Close() })
	for _, algo := range reservationAlgorithms {
		t.Run(algo.String(), func(t *testing.T) {
			t.Parallel()
			p := reconfigPolicy(algo, 10)
			pr := &resPair{pair: newPair(t, c, p)}
			for i := range 24 {
				key := "user" + strconv.Itoa(i)
				for j, st := range []resStep{
					{key: key, kind: 'v', n: 4, expiry: time.Hour, slot: 0},
					{key: key, kind: 'v', n: 4, expiry: time.Hour, slot: 1},
					{key: key, kind: 's', n: 1, slot: 0},
					{key: key, kind: 's', n: 9, slot: 1},
					{key: key, kind: 's', n: 9, slot: 1},
					{key: key, kind: 'p', n: 0},
				} {
					pr.run(t, i*10+j, st)
				}
			}
			var left atomic.Int64 // ForEachMaster runs concurrently
			require.NoError(t, c.ForEachMaster(bg(), func(ctx context.Context, m *redis.Client) error {
				keys, err := m.Keys(ctx, pr.pair.rl.base+recordInfix+"*").Result()
				left.Add(int64(len(keys)))
				return err
			}))
			require.Zero(t, left.Load(), "records left after every reservation settled")
		})
	}
}

// TestReserveRecordExpires: a reservation never settled is reclaimed on
// time on the real server (server time): its record has a TTL of its
// expiry, is gone after it, and Settle then reports it settled, changing
// nothing; the estimate stays charged.
func TestReserveRecordExpires(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	l := mustNew(t, c, ratelimit.FixedWindowPolicy(10, time.Hour), WithPrefix(uniquePrefix(t)))
	const expiry = 300 * time.Millisecond
	r, err := l.ReserveN(bg(), "k", 4, expiry)
	require.NoError(t, err)
	require.True(t, r.Allowed)
	keys := recordKeys(t, c, l)
	require.Len(t, keys, 1)
	require.True(t, strings.Contains(keys[0], "{"+l.Key("k")[strings.IndexByte(l.Key("k"), '{')+1:]), "record %s outside the state's hash tag %s", keys[0], l.Key("k"))
	ttl, err := c.PTTL(bg(), keys[0]).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, time.Duration(0))
	require.LessOrEqual(t, ttl, expiry)
	require.Eventually(t, func() bool {
		n, err := c.Exists(bg(), keys[0]).Result()
		return err == nil && n == 0
	}, 5*time.Second, 10*time.Millisecond, "record outlived its expiry")
	require.ErrorIs(t, r.Settle(bg(), 0), ratelimit.ErrReservationSettled)
	d, err := l.Peek(bg(), "k", 0)
	require.NoError(t, err)
	require.Equal(t, 6, d.Remaining, "an expired reservation is settled at its estimate")
}

// TestReserveRecordExpiresClientTime: with WithClock, expiry is on the
// caller's clock (the script compares the record's until with the time
// passed), and the record's TTL is the expiry plus the client-time slack.
func TestReserveRecordExpiresClientTime(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	mock := fakeclock.NewManual(mockStart)
	l := mustNew(t, c, ratelimit.TokenBucketPolicy(ratelimit.Per(1, time.Hour), 10), WithClock(mock), WithPrefix(uniquePrefix(t)))
	r, err := l.ReserveN(bg(), "k", 4, time.Second)
	require.NoError(t, err)
	keys := recordKeys(t, c, l)
	require.Len(t, keys, 1)
	ttl, err := c.PTTL(bg(), keys[0]).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, time.Minute)
	require.LessOrEqual(t, ttl, time.Minute+time.Second)
	mock.Add(time.Second)
	require.ErrorIs(t, r.Settle(bg(), 0), ratelimit.ErrReservationSettled)
	require.Empty(t, recordKeys(t, c, l), "an expired record is deleted when found")
	d, err := l.Peek(bg(), "k", 0)
	require.NoError(t, err)
	require.Equal(t, 6, d.Remaining)
}

// TestReserveFailurePolicies: with Redis unreachable, FailOpen admits a
// reservation that holds nothing (Settle returns nil), FailClosed denies,
// WithLocalFallback reserves in the local fallback; each with an error
// wrapping ErrUnavailable.
func TestReserveFailurePolicies(t *testing.T) {
	t.Parallel()
	dead := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = dead.Close() })
	p := ratelimit.FixedWindowPolicy(5, time.Second)
	opts := func(o ...Option) []Option {
		return append(o, WithLogger(nil), WithTimeout(200*time.Millisecond))
	}

	open := mustNew(t, dead, p, opts()...)
	r, err := open.ReserveN(bg(), "k", 2, time.Second)
	require.ErrorIs(t, err, ErrUnavailable)
	require.True(t, r.Allowed)
	require.NoError(t, r.Settle(bg(), 9))
	require.ErrorIs(t, r.Settle(bg(), 9), ratelimit.ErrReservationSettled)

	closed := mustNew(t, dead, p, opts(WithFailurePolicy(FailClosed))...)
	r, err = closed.ReserveN(bg(), "k", 2, time.Second)
	require.ErrorIs(t, err, ErrUnavailable)
	require.False(t, r.Allowed)
	require.ErrorIs(t, r.Settle(bg(), 1), ratelimit.ErrReservationSettled)

	local := mustNew(t, dead, p, opts(WithLocalFallback(1))...)
	for range 2 {
		r, err = local.ReserveN(bg(), "k", 2, time.Second)
		require.ErrorIs(t, err, ErrUnavailable)
		require.True(t, r.Allowed)
	}
	r, err = local.ReserveN(bg(), "k", 2, time.Second)
	require.ErrorIs(t, err, ErrUnavailable)
	require.False(t, r.Allowed, "the local fallback's limit of 5 holds 4")
}

// TestSettleUnreachable: a Settle that cannot reach Redis returns an
// error wrapping ErrUnavailable (the record then expires, settled at its
// estimate).
func TestSettleUnreachable(t *testing.T) {
	t.Parallel()
	s, c := startRedis(t)
	l := mustNew(t, c, ratelimit.FixedWindowPolicy(5, time.Second), WithPrefix(uniquePrefix(t)),
		WithLogger(nil), WithTimeout(200*time.Millisecond))
	r, err := l.ReserveN(bg(), "k", 2, time.Second)
	require.NoError(t, err)
	require.True(t, r.Allowed)
	s.Kill()
	require.ErrorIs(t, r.Settle(bg(), 0), ErrUnavailable)
}

// TestReserveBypassesLeases: with WithLeases, a reservation goes to Redis
// (its record is there) and settles there.
func TestReserveBypassesLeases(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	l := mustNew(t, c, ratelimit.FixedWindowPolicy(1000, time.Hour), WithPrefix(uniquePrefix(t)),
		WithLeases(LeaseConfig{Target: 10 * time.Millisecond, Lifetime: 50 * time.Millisecond, MaxShare: 16}))
	r, err := l.ReserveN(bg(), "k", 10, time.Minute)
	require.NoError(t, err)
	require.True(t, r.Allowed)
	require.Len(t, recordKeys(t, c, l), 1)
	require.NoError(t, r.Settle(bg(), 30))
	require.Empty(t, recordKeys(t, c, l))
	v, err := c.Get(bg(), l.Key("k")).Result()
	require.NoError(t, err)
	require.True(t, strings.HasSuffix(v, " 30"), "state %q: the settle charged 30 on Redis", v)
}

// TestSettleRunTwice: the settle script run again for one reservation, as
// a retry after a lost reply would run it, finds no record and changes
// nothing; garbage or another type at a record's key settles nothing.
func TestSettleRunTwice(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	l := mustNew(t, c, ratelimit.FixedWindowPolicy(100, time.Hour), WithPrefix(uniquePrefix(t)))
	r, err := l.ReserveN(bg(), "k", 4, time.Minute)
	require.NoError(t, err)
	require.True(t, r.Allowed)
	keys := recordKeys(t, c, l)
	require.Len(t, keys, 1)
	h := &redisHold{l: l, key: "k", record: keys[0]}
	require.NoError(t, h.Settle(bg(), 9))
	require.ErrorIs(t, h.Settle(bg(), 9), ratelimit.ErrReservationSettled)
	require.ErrorIs(t, r.Settle(bg(), 0), ratelimit.ErrReservationSettled)
	d, err := l.Peek(bg(), "k", 0)
	require.NoError(t, err)
	require.Equal(t, 91, d.Remaining, "settled once at 9")

	for _, bad := range []func(key string) error{
		func(key string) error { return c.Set(bg(), key, "garbage", time.Minute).Err() },
		func(key string) error { return c.Set(bg(), key, "1 -3 99999999999999", time.Minute).Err() },
		func(key string) error { return c.RPush(bg(), key, "x").Err() },
	} {
		r, err := l.ReserveN(bg(), "k", 1, time.Minute)
		require.NoError(t, err)
		keys := recordKeys(t, c, l)
		require.Len(t, keys, 1)
		require.NoError(t, c.Del(bg(), keys[0]).Err())
		require.NoError(t, bad(keys[0]))
		require.ErrorIs(t, r.Settle(bg(), 0), ratelimit.ErrReservationSettled)
		require.Empty(t, recordKeys(t, c, l))
	}
}

// TestOverLimitStateIsItsPolicys: state beyond the limit is honoured only
// in the form that carries this policy's limit; the same numbers with
// another limit (another policy's key, or garbage) read as fresh, so
// they lock nobody out.
func TestOverLimitStateIsItsPolicys(t *testing.T) {
	t.Parallel()
	_, c := startRedis(t)
	mock := fakeclock.NewManual(mockStart)
	nowUS := mockStart.UnixMicro()
	for _, tc := range []struct {
		p          ratelimit.Policy
		own, other string
	}{
		// Per(10, 1s): r/p = 1/100000; full = 10 x 100000.
		{ratelimit.TokenBucketPolicy(ratelimit.Per(10, time.Second), 10), "%[1]d 3000000 1000000", "%[1]d 3000000 1000001"},
		{ratelimit.LeakyBucketPolicy(10, 100*time.Millisecond), "%[1]d 1000000", "%[1]d 999999"},
		{ratelimit.FixedWindowPolicy(10, time.Second), "%[2]d 30 10", "%[2]d 30 11"},
		{ratelimit.SlidingCounterPolicy(10, time.Second), "%[2]d 30 0 10", "%[2]d 30 0 9"},
	} {
		t.Run(name(tc.p), func(t *testing.T) {
			l := mustNew(t, c, tc.p, WithClock(mock), WithPrefix(uniquePrefix(t)), WithDenyCache(0))
			first := nowUS
			if tc.p.Algorithm == ratelimit.LeakyBucketAlgorithm {
				first = nowUS + 3_000_000 // empty 3s from now
			}
			k := nowUS / tc.p.Period.Microseconds()
			require.NoError(t, c.Set(bg(), l.Key("own"), fmt.Sprintf(tc.own, first, k), time.Hour).Err())
			require.NoError(t, c.Set(bg(), l.Key("other"), fmt.Sprintf(tc.other, first, k), time.Hour).Err())
			d, err := l.AllowN(bg(), "own", 1)
			require.NoError(t, err)
			require.False(t, d.Allowed, "an overrun of its own policy holds: %+v", d)
			d, err = l.AllowN(bg(), "other", 1)
			require.NoError(t, err)
			require.True(t, d.Allowed, "another limit's state beyond the limit reads as fresh: %+v", d)
			require.Equal(t, tc.p.Limit-1, d.Remaining)
		})
	}
}
