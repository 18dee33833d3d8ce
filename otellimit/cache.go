package otellimit

import (
	"maps"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/rlkit/ratelimit"
)

// The dimensions of a limit's table of entries. Index 0 of each holds the
// values outside the known ones ("unknown"), so that whatever an Event
// holds, the number of entries stays bounded.
const (
	numAlgorithms = int(ratelimit.SlidingCounterAlgorithm) + 1
	numHomes      = int(ratelimit.HomeRedis) + 1
	// The outcomes, with fallback split in two by Decision.Allowed.
	numOutcomes     = int(ratelimit.OutcomeFallback) + 2
	fallbackAllowed = int(ratelimit.OutcomeFallback) + 1
)

// entry holds the measurement options of one combination of limit name,
// algorithm, home and outcome, built on first use, so that Observe passes
// them on without allocating.
type entry struct {
	add      []metric.AddOption    // for ratelimit.decisions
	record   []metric.RecordOption // for the histograms
	fallback []metric.AddOption    // for ratelimit.fallbacks; nil unless the outcome is fallback
}

// limitTable holds the entries of one limit name, indexed by algorithm,
// home and outcome. An entry, once stored, never changes.
type limitTable struct {
	name    string
	entries [numAlgorithms][numHomes][numOutcomes]atomic.Pointer[entry]
}

// lookup returns the entry for e, creating it on first use.
func (o *Observer) lookup(e *ratelimit.Event) *entry {
	t, ok := (*o.tables.Load())[e.Limit]
	if !ok {
		t = o.table(e.Limit)
	}
	a, h, oc := index(e)
	if en := t.entries[a][h][oc].Load(); en != nil {
		return en
	}
	return o.fill(t, a, h, oc)
}

// index returns e's indexes in a limitTable.
func index(e *ratelimit.Event) (a, h, oc int) {
	if a = int(e.Algorithm); a >= numAlgorithms {
		a = 0
	}
	if h = int(e.Home); h >= numHomes {
		h = 0
	}
	if oc = int(e.Outcome); oc > int(ratelimit.OutcomeFallback) {
		oc = 0
	}
	if e.Outcome == ratelimit.OutcomeFallback && e.Decision.Allowed {
		oc = fallbackAllowed
	}
	return a, h, oc
}

// table returns the table of a name that is not in o.tables yet: a new one
// while there is room for it, else the table of [OtherLimit].
func (o *Observer) table(name string) *limitTable {
	if len(*o.tables.Load()) >= o.maxLimits {
		return o.other
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	tables := *o.tables.Load()
	if t, ok := tables[name]; ok {
		return t
	}
	if len(tables) >= o.maxLimits {
		return o.other
	}
	t := &limitTable{name: name}
	next := maps.Clone(tables)
	next[name] = t
	o.tables.Store(&next)
	return t
}

// fill creates the entry at t.entries[a][h][oc].
func (o *Observer) fill(t *limitTable, a, h, oc int) *entry {
	o.mu.Lock()
	defer o.mu.Unlock()
	slot := &t.entries[a][h][oc]
	if en := slot.Load(); en != nil {
		return en
	}
	outcome := ratelimit.Outcome(oc)
	if oc == fallbackAllowed {
		outcome = ratelimit.OutcomeFallback
	}
	common := []attribute.KeyValue{
		LimitKey.String(t.name),
		AlgorithmKey.String(algorithmName(ratelimit.Algorithm(a))),
		HomeKey.String(ratelimit.Home(h).String()),
	}
	withOutcome := attribute.NewSet(append(common[:3:3], OutcomeKey.String(outcome.String()))...)
	en := &entry{
		add:    []metric.AddOption{metric.WithAttributeSet(withOutcome)},
		record: []metric.RecordOption{metric.WithAttributeSet(withOutcome)},
	}
	if outcome == ratelimit.OutcomeFallback {
		withAllowed := attribute.NewSet(append(common[:3:3], AllowedKey.Bool(oc == fallbackAllowed))...)
		en.fallback = []metric.AddOption{metric.WithAttributeSet(withAllowed)}
	}
	slot.Store(en)
	return en
}

// algorithmName returns a's attribute value; 0 is "unknown".
func algorithmName(a ratelimit.Algorithm) string {
	if a == 0 {
		return "unknown"
	}
	return a.String()
}
