package otellimit_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/otellimit"
)

// clockStart is where the tests' clocks start. They are instant clocks
// (fakeclock.NewInstant): a WaitN returns at once, having moved the time by
// its wait.
var clockStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// newObserver returns an Observer on a fresh SDK MeterProvider and the
// ManualReader that reads it.
func newObserver(t *testing.T, opts ...otellimit.Option) (*otellimit.Observer, *sdkmetric.ManualReader) {
	t.Helper()
	reader := sdkmetric.NewManualReader()
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(reader))
	t.Cleanup(func() { _ = mp.Shutdown(context.Background()) })
	obs, err := otellimit.NewObserver(mp, opts...)
	require.NoError(t, err)
	return obs, reader
}

// collected is one collection, indexed by instrument name.
type collected map[string]metricdata.Metrics

func collect(t *testing.T, r *sdkmetric.ManualReader) collected {
	t.Helper()
	var rm metricdata.ResourceMetrics
	require.NoError(t, r.Collect(context.Background(), &rm))
	out := collected{}
	for _, sm := range rm.ScopeMetrics {
		require.Equal(t, otellimit.ScopeName, sm.Scope.Name, "instrumentation scope")
		for _, m := range sm.Metrics {
			out[m.Name] = m
		}
	}
	return out
}

// attrs renders a set as "k=v,k=v", sorted by key.
func attrs(s attribute.Set) string { return s.Encoded(attribute.DefaultEncoder()) }

// sums returns a counter's values by attribute set.
func (c collected) sums(t *testing.T, name string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	m, ok := c[name]
	if !ok {
		return out
	}
	sum, ok := m.Data.(metricdata.Sum[int64])
	require.Truef(t, ok, "%s is a %T, want an int64 sum", name, m.Data)
	require.True(t, sum.IsMonotonic, "%s is monotonic", name)
	for _, dp := range sum.DataPoints {
		out[attrs(dp.Attributes)] = dp.Value
	}
	return out
}

// upDownSums returns an up-down counter's values by attribute set.
func (c collected) upDownSums(t *testing.T, name string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	m, ok := c[name]
	if !ok {
		return out
	}
	sum, ok := m.Data.(metricdata.Sum[int64])
	require.Truef(t, ok, "%s is a %T, want an int64 sum", name, m.Data)
	require.False(t, sum.IsMonotonic, "%s is not monotonic", name)
	for _, dp := range sum.DataPoints {
		out[attrs(dp.Attributes)] = dp.Value
	}
	return out
}

// histograms returns a histogram's data points by attribute set.
func (c collected) histograms(t *testing.T, name string) map[string]metricdata.HistogramDataPoint[float64] {
	t.Helper()
	out := map[string]metricdata.HistogramDataPoint[float64]{}
	m, ok := c[name]
	if !ok {
		return out
	}
	h, ok := m.Data.(metricdata.Histogram[float64])
	require.Truef(t, ok, "%s is a %T, want a float64 histogram", name, m.Data)
	for _, dp := range h.DataPoints {
		out[attrs(dp.Attributes)] = dp
	}
	return out
}

// values returns every attribute value of every data point, sorted.
func (c collected) values() []string {
	var out []string
	add := func(s attribute.Set) {
		for _, kv := range s.ToSlice() {
			out = append(out, kv.Value.Emit())
		}
	}
	for _, m := range c {
		switch d := m.Data.(type) {
		case metricdata.Sum[int64]:
			for _, dp := range d.DataPoints {
				add(dp.Attributes)
			}
		case metricdata.Histogram[float64]:
			for _, dp := range d.DataPoints {
				add(dp.Attributes)
			}
		}
	}
	sort.Strings(out)
	return out
}

// series names a data point the way attrs renders it.
func series(limit string, alg ratelimit.Algorithm, home ratelimit.Home, outcome ratelimit.Outcome) string {
	return attrs(attribute.NewSet(
		attribute.Key("ratelimit.limit").String(limit),
		attribute.Key("ratelimit.algorithm").String(alg.String()),
		attribute.Key("ratelimit.home").String(home.String()),
		attribute.Key("ratelimit.outcome").String(outcome.String()),
	))
}

// inFlightSeries names a data point of ratelimit.concurrency.in_flight.
func inFlightSeries(limit string, home ratelimit.Home) string {
	return attrs(attribute.NewSet(
		attribute.Key("ratelimit.limit").String(limit),
		attribute.Key("ratelimit.home").String(home.String()),
	))
}

// fallbackSeries names a data point of ratelimit.fallbacks.
func fallbackSeries(limit string, alg ratelimit.Algorithm, home ratelimit.Home, allowed bool) string {
	return attrs(attribute.NewSet(
		attribute.Key("ratelimit.limit").String(limit),
		attribute.Key("ratelimit.algorithm").String(alg.String()),
		attribute.Key("ratelimit.home").String(home.String()),
		attribute.Key("ratelimit.allowed").Bool(allowed),
	))
}
