package limitset

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"

	"github.com/rlkit/ratelimit"
)

// reportedKey is the context key of a request's reported cost.
type reportedKey struct{}

// reported is the cell a handler reports its request's cost in: the cost
// plus one, 0 while none was reported.
type reported struct{ n atomic.Int64 }

// WithReportedCost returns a copy of ctx carrying an empty cell for the
// cost its handler reports (ReportCost), which Release reads: give it to
// the handler of a request whose Verdict Counts.
func WithReportedCost(ctx context.Context) context.Context {
	return context.WithValue(ctx, reportedKey{}, new(reported))
}

// ReportCost records n as the actual cost of the request whose context
// is ctx, for the limits that count it by outcome (the last report
// counts). It returns an error wrapping ratelimit.ErrInvalidN, naming
// pkg's function, when n is negative, and records nothing; it does
// nothing when ctx carries no cell (no limit counts the request).
func ReportCost(pkg string, ctx context.Context, n int) error {
	if n < 0 {
		return fmt.Errorf("%w: %s.ReportCost n must be >= 0, got %d", ratelimit.ErrInvalidN, pkg, n)
	}
	if ctx == nil {
		return nil
	}
	if c, ok := ctx.Value(reportedKey{}).(*reported); ok {
		c.n.Store(min(int64(n), math.MaxInt64-1) + 1)
	}
	return nil
}

// reportedCost returns the cost reported in ctx, and whether one was.
func reportedCost(ctx context.Context) (int, bool) {
	c, ok := ctx.Value(reportedKey{}).(*reported)
	if !ok {
		return 0, false
	}
	n := c.n.Load()
	return int(n - 1), n > 0
}
