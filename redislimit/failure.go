package redislimit

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/report"
)

// FailurePolicy says what a [Limiter] decides when Redis cannot.
type FailurePolicy uint8

const (
	// FailOpen admits every request while Redis is unavailable: the
	// Decision is allowed, with Remaining = Limit - n. The default: a
	// Redis outage does not become an outage of the service.
	FailOpen FailurePolicy = iota + 1
	// FailClosed denies every request while Redis is unavailable, with
	// Remaining 0 and RetryAfter [FailClosedRetryAfter].
	FailClosed
	// failLocal decides with an in-memory [ratelimit.Keyed] limiter
	// holding a share of the limit: [WithLocalFallback] selects it and
	// gives the share.
	failLocal
)

// String returns "open", "closed" or, for [WithLocalFallback]'s policy,
// "local".
func (f FailurePolicy) String() string {
	switch f {
	case FailOpen:
		return "open"
	case FailClosed:
		return "closed"
	case failLocal:
		return "local"
	}
	return fmt.Sprintf("FailurePolicy(%d)", uint8(f))
}

// FailClosedRetryAfter is the RetryAfter of the Decisions a [FailClosed]
// limiter returns while Redis is unavailable, and of the denial any
// [Limiter] returns when the caller's ctx is done before Redis decides:
// in both cases there is no answer to count from.
const FailClosedRetryAfter = time.Second

// fail applies the failure policy to a call Redis could not decide.
func (l *Limiter) fail(ctx context.Context, g *generation, op, key string, n int, cause error) (ratelimit.Decision, error) {
	err := l.unavailable(ctx, op, key, cause)
	limit := g.policy.Limit
	if n <= 0 || n > limit {
		return ratelimit.Decision{Limit: limit, RetryAfter: ratelimit.RetryNever}, err
	}
	switch l.failure {
	case FailClosed:
		return ratelimit.Decision{Limit: limit, RetryAfter: FailClosedRetryAfter}, err
	case failLocal:
		d, _ := g.fallback.AllowN(ctx, key, n)
		return d, err
	}
	return ratelimit.Decision{Allowed: true, Limit: limit, Remaining: limit - n}, err
}

// unavailable returns the error of a call Redis could not decide (not the
// caller's cancellation: callers check that first), with its truthful
// cause, and reports it.
func (l *Limiter) unavailable(ctx context.Context, op, key string, cause error) error {
	quiet := errors.Is(cause, ErrBreakerOpen)
	err := &unavailableError{op: op, digest: keyDigest(key), err: cause}
	l.report(ctx, err, quiet)
	return err
}

// localShare returns the policy one of instances processes runs when
// Redis is down.
func localShare(p ratelimit.Policy, instances int) (ratelimit.Policy, error) {
	if instances == 1 {
		return p, nil
	}
	p.Limit = max(p.Limit/instances, 1)
	switch p.Algorithm {
	case ratelimit.TokenBucketAlgorithm:
		if p.Refill%instances == 0 {
			p.Refill /= instances
		} else {
			p.Period *= time.Duration(instances)
		}
	case ratelimit.LeakyBucketAlgorithm:
		p.Period *= time.Duration(instances)
	}
	if err := p.Validate(); err != nil {
		return p, invalid("WithLocalFallback(%d) gives each instance a share of the policy that is invalid, %v: %v", instances, p, strings.TrimPrefix(err.Error(), ratelimit.ErrInvalidConfig.Error()+": "))
	}
	return p, nil
}

// report logs err, the error of a call Redis could not decide, at most
// once per reportEvery, or counts it. quiet says the breaker answered the
// call: counted, never reported on its own.
func (l *Limiter) report(ctx context.Context, err error, quiet bool) {
	reportUnavailable(ctx, &l.logger, &l.reports, l.ts.Now, l.reportEvery, l.name, l.cur.Load().policy.Algorithm, err, quiet)
}

// reportUnavailable is the error report of a limiter named name running
// algorithm: it logs err to logger, at most once per every (now tells the
// time, in ns, to reports), or counts it; quiet counts it only.
func reportUnavailable(ctx context.Context, logger *report.Logger, reports *report.Throttle, now func() int64, every time.Duration,
	name string, algorithm ratelimit.Algorithm, err error, quiet bool) {
	lg := logger.Get()
	if lg == nil {
		return
	}
	if quiet {
		reports.Skip()
		return
	}
	suppressed, ok := reports.Admit(now(), every)
	if !ok {
		return
	}
	lg.LogAttrs(ctx, slog.LevelError, ErrUnavailable.Error(),
		slog.String("limit", name),
		slog.String("algorithm", algorithm.String()),
		slog.Any("error", err),
		slog.Int64("suppressed", suppressed))
}
