package otellimit

import (
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/errs"
)

// defaultMaxLimits is the number of distinct limit names an Observer keeps
// unless WithMaxLimits says otherwise.
const defaultMaxLimits = 100

// Option configures an [Observer].
type Option interface {
	apply(*config)
}

// config holds every optional setting.
type config struct {
	allHomes  bool
	maxLimits int
	err       error // the first invalid option
}

type optionFunc func(*config)

func (f optionFunc) apply(c *config) { f(c) }

// WithDurationForAllHomes records ratelimit.decision.duration for the
// in-memory limiters too ([ratelimit.HomeMemory], [ratelimit.HomeKeyed]),
// not only for the Redis ones. An in-memory decision takes well under a
// microsecond, so by default its duration is not recorded.
func WithDurationForAllHomes() Option {
	return optionFunc(func(c *config) { c.allHomes = true })
}

// WithMaxLimits sets how many distinct limit names the Observer reports
// under their own names (default 100); the decisions of further names are
// reported under the limit name "other". It bounds the Observer's memory and the
// number of time series. n must be positive.
func WithMaxLimits(n int) Option {
	return optionFunc(func(c *config) {
		if n <= 0 {
			if c.err == nil {
				c.err = errs.Config(ratelimit.ErrInvalidConfig, "otellimit.WithMaxLimits must be positive, got %d", n)
			}
			return
		}
		c.maxLimits = n
	})
}
