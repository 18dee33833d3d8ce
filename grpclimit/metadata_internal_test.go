package grpclimit

import (
	"testing"

	"github.com/rlkit/ratelimit/internal/limitset"
	"github.com/stretchr/testify/assert"
)

// The documented names and the sets are limitset's, which writes the fields.
func TestFieldNamesAndSetsAreLimitsets(t *testing.T) {
	assert.Equal(t, limitset.FieldNames{
		XLimit:     "x-ratelimit-limit",
		XRemaining: "x-ratelimit-remaining",
		XReset:     "x-ratelimit-reset",
		Policy:     "ratelimit-policy",
		RateLimit:  "ratelimit",
		RetryAfter: "retry-after",
	}, limitset.GRPCNames)
	assert.Equal(t, uint8(limitset.XRateLimitFields), uint8(XRateLimitFields))
	assert.Equal(t, uint8(limitset.IETFFields), uint8(IETFFields))
	assert.Equal(t, uint8(limitset.AllFields), uint8(allFields))
	assert.Equal(t, uint8(limitset.NoFields), uint8(NoFields))
}
