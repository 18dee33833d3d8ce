package svgplot

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestNiceStep(t *testing.T) {
	t.Parallel()
	assert.Equal(t, 20.0, NiceStep(100, 5))
	assert.Equal(t, 0.25, NiceStep(1.05, 5))
	assert.Equal(t, 50.0, NiceStep(210, 5))
	assert.Equal(t, 1.0, NiceStep(0, 5), "nothing to plot")
}

func TestNum(t *testing.T) {
	t.Parallel()
	assert.Equal(t, "5", Num(5))
	assert.Equal(t, "2.5", Num(2.5))
	assert.Equal(t, "0.25", Num(0.25))
}

func TestWrap(t *testing.T) {
	t.Parallel()
	assert.Equal(t, []string{"ab cd", "ef"}, Wrap("ab cd ef", 6))
	assert.Equal(t, []string{"abcdefgh"}, Wrap("abcdefgh", 4), "a long word stays whole")
}
