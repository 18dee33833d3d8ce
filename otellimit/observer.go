package otellimit

import (
	"context"
	"sync"
	"sync/atomic"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/errs"
	"github.com/rlkit/ratelimit/internal/typednil"
)

// ScopeName is the name of the meter the instruments come from.
const ScopeName = "github.com/rlkit/ratelimit/otellimit"

// otherLimit is the limit name reported for the decisions of limiters
// whose names exceed the cap of [WithMaxLimits].
const otherLimit = "other"

// The attribute keys, as the package documentation lists them.
const (
	limitKey     = attribute.Key("ratelimit.limit")
	algorithmKey = attribute.Key("ratelimit.algorithm")
	homeKey      = attribute.Key("ratelimit.home")
	outcomeKey   = attribute.Key("ratelimit.outcome")
	allowedKey   = attribute.Key("ratelimit.allowed") // on ratelimit.fallbacks only
)

// The bucket boundaries, in seconds: decision.duration from 1µs to 100ms,
// wait.duration from 1ms to a minute.
var (
	durationBounds = []float64{
		1e-6, 2.5e-6, 5e-6,
		1e-5, 2.5e-5, 5e-5,
		1e-4, 2.5e-4, 5e-4,
		1e-3, 2.5e-3, 5e-3,
		0.01, 0.025, 0.05, 0.1,
	}
	waitBounds = []float64{
		0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
		1, 2.5, 5, 10, 30, 60,
	}
)

// Observer records the decisions of rate limiters as OpenTelemetry
// metrics (the instruments are listed in the package documentation). Give
// it to the servers that serve limits (httplimit.WithObserver,
// grpclimit.WithObserver), which report every decision of their limits
// under the limit's name, and to the limiters you call yourself
// ([ratelimit.WithObserver], each named with [ratelimit.WithName]); never
// to both for one limit, which the servers refuse. One Observer serves any
// number of them. Create one with
// [NewObserver]; the zero Observer is not usable. It is safe for concurrent
// use.
type Observer struct {
	decisions    metric.Int64Counter
	fallbacks    metric.Int64Counter
	duration     metric.Float64Histogram
	waitDuration metric.Float64Histogram
	inFlight     metric.Int64UpDownCounter
	allHomes     bool // decision.duration for every home, not only Redis
	maxLimits    int

	// tables maps a limit name to its entries; it is copied on write, so
	// that Observe reads it without a lock. It holds maxLimits names at
	// most; other is the table of the names beyond.
	tables atomic.Pointer[map[string]*limitTable]
	other  *limitTable
	mu     sync.Mutex // serializes the writers of tables and of the entries
}

var _ ratelimit.Observer = (*Observer)(nil)

// NewObserver returns an Observer whose instruments come from mp's meter
// named [ScopeName]. A nil mp selects the global MeterProvider
// (otel.GetMeterProvider), which forwards to the provider set later with
// otel.SetMeterProvider. It returns an error wrapping
// [ratelimit.ErrInvalidConfig] when mp is a typed nil or an option is
// invalid, and the meter's error when an instrument cannot be created.
func NewObserver(mp metric.MeterProvider, opts ...Option) (*Observer, error) {
	if mp == nil {
		mp = otel.GetMeterProvider()
	} else if typednil.Is(mp) {
		return nil, errs.Config(ratelimit.ErrInvalidConfig, "otellimit.NewObserver: meter provider is a nil %T", mp)
	}
	cfg := config{maxLimits: defaultMaxLimits}
	for _, opt := range opts {
		if !typednil.Is(opt) {
			opt.apply(&cfg)
		}
	}
	if cfg.err != nil {
		return nil, cfg.err
	}

	meter := mp.Meter(ScopeName)
	o := &Observer{allHomes: cfg.allHomes, maxLimits: cfg.maxLimits}
	var err error
	if o.decisions, err = meter.Int64Counter("ratelimit.decisions",
		metric.WithUnit("{decision}"),
		metric.WithDescription("Rate-limit decisions, by outcome.")); err != nil {
		return nil, err
	}
	if o.fallbacks, err = meter.Int64Counter("ratelimit.fallbacks",
		metric.WithUnit("{decision}"),
		metric.WithDescription("Decisions taken by a failure policy because the limiter's store failed, by whether the request was admitted.")); err != nil {
		return nil, err
	}
	if o.duration, err = meter.Float64Histogram("ratelimit.decision.duration",
		metric.WithUnit("s"),
		metric.WithDescription("How long a rate-limit decision took, waiting excluded."),
		metric.WithExplicitBucketBoundaries(durationBounds...)); err != nil {
		return nil, err
	}
	if o.waitDuration, err = meter.Float64Histogram("ratelimit.wait.duration",
		metric.WithUnit("s"),
		metric.WithDescription("How long a rate-limit Wait call took, waiting included."),
		metric.WithExplicitBucketBoundaries(waitBounds...)); err != nil {
		return nil, err
	}
	if o.inFlight, err = meter.Int64UpDownCounter("ratelimit.concurrency.in_flight",
		metric.WithUnit("{permit}"),
		metric.WithDescription("Permits of concurrency limits held now.")); err != nil {
		return nil, err
	}
	o.tables.Store(&map[string]*limitTable{})
	o.other = newLimitTable(otherLimit)
	return o, nil
}

// Observe records e: one decision in ratelimit.decisions, a fallback in
// ratelimit.fallbacks, its latency in ratelimit.wait.duration when it ends
// a WaitN call, else in ratelimit.decision.duration for a Redis limiter (or
// any, with [WithDurationForAllHomes]). The permits a concurrency limit
// admitted (Algorithm [ratelimit.ConcurrencyAlgorithm], Outcome
// [ratelimit.OutcomeAllowed], an Acquire that waited too, or a failure
// policy's admission, [ratelimit.OutcomeFallback]) are added to
// ratelimit.concurrency.in_flight; an Event with Outcome
// [ratelimit.OutcomeReleased] is not a decision: its permits are taken off
// ratelimit.concurrency.in_flight and nothing else is recorded. It does not
// allocate once the combination of e's limit, algorithm, home and outcome
// has been seen.
func (o *Observer) Observe(ctx context.Context, e ratelimit.Event) {
	en := o.lookup(&e)
	if e.Outcome == ratelimit.OutcomeReleased {
		if en.inFlight != nil && e.N > 0 {
			o.inFlight.Add(ctx, -int64(e.N), en.inFlight...)
		}
		return
	}
	o.decisions.Add(ctx, 1, en.add...)
	if en.inFlight != nil && e.N > 0 {
		o.inFlight.Add(ctx, int64(e.N), en.inFlight...)
	}
	if e.Outcome == ratelimit.OutcomeFallback {
		o.fallbacks.Add(ctx, 1, en.fallback...)
	}
	switch {
	case e.Wait:
		o.waitDuration.Record(ctx, e.Latency.Seconds(), en.record...)
	case e.Home == ratelimit.HomeRedis || o.allHomes:
		o.duration.Record(ctx, e.Latency.Seconds(), en.record...)
	}
}
