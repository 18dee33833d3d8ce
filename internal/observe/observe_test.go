package observe

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

type a struct{}
type b struct{}

// TestDescribe: the first home that knows a limiter describes it; a
// limiter no home knows gets the zero Info.
func TestDescribe(t *testing.T) {
	saved := describers
	t.Cleanup(func() { describers = saved })
	describers = nil
	assert.Equal(t, Info{}, Describe(a{}), "no home registered")
	Register(func(l any) (Info, bool) {
		_, ok := l.(a)
		return Info{Home: 1, Observed: true}, ok
	})
	Register(func(l any) (Info, bool) {
		switch l.(type) {
		case a, b:
			return Info{Home: 2, Logs: true}, true
		}
		return Info{}, false
	})
	assert.Equal(t, Info{Home: 1, Observed: true}, Describe(a{}), "the first home that knows it")
	assert.Equal(t, Info{Home: 2, Logs: true}, Describe(b{}))
	assert.Equal(t, Info{}, Describe(3), "unknown")
}
