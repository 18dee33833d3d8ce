package ratelimit

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWithMaxKeysIsExact: WithMaxKeys(n) holds exactly n busy keys, over
// all shards, and refuses the next new key; Peek agrees with AllowN.
func TestWithMaxKeysIsExact(t *testing.T) {
	t.Parallel()
	for _, n := range []int{1, 7, 64, 200, 1000} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			t.Parallel()
			mock := fakeclock.NewManual(testStart)
			k, err := NewKeyed(FixedWindowPolicy(1, time.Hour), WithClock(mock), WithMaxKeys(n))
			require.NoError(t, err)
			ctx := context.Background()
			admitted := 0
			for i := 0; i < n+500; i++ {
				key := "key-" + strconv.Itoa(i)
				peek, perr := k.Peek(ctx, key, 1)
				d, err := k.AllowN(ctx, key, 1)
				require.Equal(t, d.Allowed, peek.Allowed, "Peek and AllowN for new key %d", i)
				if d.Allowed {
					require.NoError(t, perr)
					admitted++
					continue
				}
				require.ErrorIs(t, err, ErrTooManyKeys)
				require.ErrorIs(t, perr, ErrTooManyKeys, "Peek's error when the cap refuses")
				assert.Equal(t, time.Second, peek.RetryAfter, "Peek's RetryAfter when the cap refuses")
			}
			assert.Equal(t, n, admitted, "new keys admitted")
			assert.Equal(t, n, k.Len(), "keys held")
		})
	}
}

// TestWithMaxKeysReclaimsAcrossShards: once the only key of a full limiter
// is idle, a new key that lands in another shard is admitted.
func TestWithMaxKeysReclaimsAcrossShards(t *testing.T) {
	t.Parallel()
	mock := fakeclock.NewManual(testStart)
	k, err := NewKeyed(FixedWindowPolicy(1, time.Second), WithClock(mock), WithMaxKeys(1))
	require.NoError(t, err)
	ctx := context.Background()
	require.True(t, k.Allow(ctx, "first"))
	require.False(t, k.Allow(ctx, "second"), "the cap is full")
	mock.Add(2 * time.Second) // "first" is idle now
	for i := 0; i < 100; i++ {
		key := "next-" + strconv.Itoa(i)
		d, err := k.AllowN(ctx, key, 1)
		require.NoError(t, err, "new key %d after the only key went idle", i)
		require.True(t, d.Allowed)
		mock.Add(2 * time.Second)
	}
	assert.Equal(t, 1, k.Len())
}

// TestWithMaxKeysNotPositive: WithMaxKeys(0) and negative values are
// configuration errors, as documented.
func TestWithMaxKeysNotPositive(t *testing.T) {
	t.Parallel()
	for _, n := range []int{0, -1} {
		_, err := NewKeyed(FixedWindowPolicy(1, time.Second), WithMaxKeys(n))
		require.ErrorIs(t, err, ErrInvalidConfig, "WithMaxKeys(%d)", n)
		assert.Contains(t, err.Error(), "WithMaxKeys")
	}
}
