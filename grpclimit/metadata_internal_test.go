package grpclimit

import (
	"testing"

	"github.com/rlkit/ratelimit/internal/limitset"
	"github.com/stretchr/testify/assert"
)

// The exported names and sets are limitset's, which writes the fields.
func TestFieldNamesAndSetsAreLimitsets(t *testing.T) {
	assert.Equal(t, limitset.FieldNames{
		XLimit:     MetadataXRateLimitLimit,
		XRemaining: MetadataXRateLimitRemaining,
		XReset:     MetadataXRateLimitReset,
		Policy:     MetadataRateLimitPolicy,
		RateLimit:  MetadataRateLimit,
		RetryAfter: MetadataRetryAfter,
	}, limitset.GRPCNames)
	assert.Equal(t, uint8(limitset.XRateLimitFields), uint8(XRateLimitFields))
	assert.Equal(t, uint8(limitset.IETFFields), uint8(IETFFields))
	assert.Equal(t, uint8(limitset.AllFields), uint8(AllFields))
	assert.Equal(t, uint8(limitset.NoFields), uint8(NoFields))
}
