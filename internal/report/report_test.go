package report

import (
	"bytes"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestThrottleAdmitsOnePerIntervalAndCountsTheRest(t *testing.T) {
	var th Throttle
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
	sup, ok := th.Admit(start, time.Second)
	assert.True(t, ok, "the first report")
	assert.Zero(t, sup)
	for i := 1; i <= 3; i++ {
		_, ok = th.Admit(start+int64(i)*int64(100*time.Millisecond), time.Second)
		assert.False(t, ok, "within the interval")
	}
	th.Skip()
	_, ok = th.Admit(start+int64(time.Second)-1, time.Second)
	assert.False(t, ok, "1 ns before the interval ends")
	sup, ok = th.Admit(start+int64(time.Second), time.Second)
	assert.True(t, ok, "once the interval has passed")
	assert.Equal(t, int64(5), sup, "three throttled, one skipped, one 1 ns early")
}

func TestThrottleWithoutIntervalAdmitsEveryReport(t *testing.T) {
	var th Throttle
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, ok := th.Admit(42, 0); ok {
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, 50, admitted, "concurrent reports at the same instant, no interval")
}

func TestThrottleConcurrentAdmitsOne(t *testing.T) {
	var th Throttle
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, ok := th.Admit(42, time.Second); ok {
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, 1, admitted)
	sup, ok := th.Admit(42+int64(time.Second), time.Second)
	assert.True(t, ok)
	assert.Equal(t, int64(49), sup)
}

func TestLogger(t *testing.T) {
	assert.Same(t, slog.Default(), Logger{}.Get(), "the zero Logger is slog.Default()")
	assert.Nil(t, To(nil).Get(), "WithLogger(nil) turns reports off")
	l := slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil))
	assert.Same(t, l, To(l).Get())
}
