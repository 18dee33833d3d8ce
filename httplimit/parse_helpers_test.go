package httplimit

import (
	"time"

	"github.com/rlkit/ratelimit/internal/hints"
)

// The parsers of the fields the transport reads, under the names the tests
// knew them by when the package exported them.
func parseXRateLimitReset(v string, now time.Time) (time.Duration, bool) {
	return hints.ResetValue(v, now, now)
}

func parseRetryAfter(v string, now time.Time) (time.Duration, bool) { return hints.RetryAfter(v, now) }

func parseRateLimitReset(lines []string) (time.Duration, bool) { return hints.ExhaustedReset(lines) }
