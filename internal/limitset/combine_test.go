package limitset

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestAppendKeyPart: parts are joined by '|' with '|' and '\' escaped, so
// that different lists of parts never make the same key.
func TestAppendKeyPart(t *testing.T) {
	join := func(parts ...string) string {
		var b strings.Builder
		for i, p := range parts {
			AppendKeyPart(&b, i, p)
		}
		return b.String()
	}
	assert.Equal(t, "a|b", join("a", "b"))
	assert.Equal(t, `a\|b|c`, join("a|b", "c"))
	assert.Equal(t, `a|b\|c`, join("a", "b|c"))
	assert.Equal(t, `a\\|\\b`, join(`a\`, `\b`))
	assert.Equal(t, `a\\\||b`, join(`a\|`, "b"))
	assert.NotEqual(t, join(`a\`, "b"), join("a", `\b`))
	assert.Equal(t, "|", join("", ""))
}
