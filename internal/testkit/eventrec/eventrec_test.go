package eventrec

import (
	"context"
	"sync"
	"testing"

	"github.com/rlkit/ratelimit"
	"github.com/stretchr/testify/assert"
)

// TestRecorder: every Event observed, from any goroutine, is kept in order
// per goroutine; All reads without forgetting, Take forgets.
func TestRecorder(t *testing.T) {
	var r Recorder
	var _ ratelimit.Observer = &r
	assert.Empty(t, r.Take())
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 25 {
				r.Observe(context.Background(), ratelimit.Event{Name: "a"})
			}
		}()
	}
	wg.Wait()
	assert.Len(t, r.All(), 100)
	assert.Len(t, r.All(), 100, "All forgets nothing")
	assert.Len(t, r.Take(), 100)
	assert.Empty(t, r.All(), "Take forgets")
	r.Observe(context.Background(), ratelimit.Event{Name: "b"})
	assert.Equal(t, []ratelimit.Event{{Name: "b"}}, r.Take())
}
