package timerclock

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestAnnouncesTimers: each After is announced with its duration, and the
// mock fires it when time reaches it.
func TestAnnouncesTimers(t *testing.T) {
	start := time.Unix(1_000_000, 0)
	c := New(start)
	assert.Equal(t, start, c.Now())
	c.None(t)
	ch := c.After(3 * time.Second)
	assert.Equal(t, 3*time.Second, c.Next(t))
	c.None(t)
	c.Add(3 * time.Second)
	assert.Equal(t, start.Add(3*time.Second), <-ch)
}
