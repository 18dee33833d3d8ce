package observe

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestShadowMark(t *testing.T) {
	ctx := context.Background()
	assert.False(t, IsShadow(ctx), "an unmarked context")
	marked := WithShadow(ctx)
	assert.True(t, IsShadow(marked))
	assert.False(t, IsShadow(ctx), "marking returns a new context; the parent stays unmarked")
	child, cancel := context.WithCancel(marked)
	defer cancel()
	assert.True(t, IsShadow(child), "the mark is inherited")
}
