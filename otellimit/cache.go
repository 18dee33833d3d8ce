package otellimit

import (
	"maps"
	"strings"
	"sync/atomic"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/rlkit/ratelimit"
)

// The dimensions of a limit's table of entries, derived from the String
// methods of package ratelimit's enums, so that a value added there gets
// an attribute of its own here without an edit: a dimension holds the
// values 0 .. n-1, where n is the first value above 0 whose String is not
// a name, and one more slot, "unknown", for every value from n on. Value 0
// of Algorithm and Outcome is invalid and also reported as "unknown";
// value 0 of Home is HomeNone. Whatever an Event holds, the number of
// entries stays bounded.
var (
	algorithmNames = enumNames(func(v uint8) string {
		s := ratelimit.Algorithm(v).String()
		if strings.HasPrefix(s, "Algorithm(") {
			return ""
		}
		return s
	})
	homeNames    = enumNames(func(v uint8) string { return known(ratelimit.Home(v).String()) })
	outcomeNames = enumNames(func(v uint8) string { return known(ratelimit.Outcome(v).String()) })

	numAlgorithms = len(algorithmNames)
	numHomes      = len(homeNames)
	// The outcomes, with fallback split in two by Decision.Allowed: the
	// slot past the outcomes' own holds the fallbacks that admitted.
	numOutcomes     = len(outcomeNames) + 1
	fallbackAllowed = len(outcomeNames)
)

// unknownName is the attribute value of an enum value with no name.
const unknownName = "unknown"

// known returns s, or "" when it is the String of an unnamed value.
func known(s string) string {
	if s == unknownName {
		return ""
	}
	return s
}

// enumNames returns the attribute values of an enum dimension: the names
// of 0 .. n-1, where n is the first value above 0 that name does not know
// ("" for it), then "unknown", the slot of n and every value above. An
// unnamed 0 is "unknown" too.
func enumNames(name func(v uint8) string) []string {
	names := []string{name(0)}
	for v := 1; v < 255 && name(uint8(v)) != ""; v++ {
		names = append(names, name(uint8(v)))
	}
	if names[0] == "" {
		names[0] = unknownName
	}
	return append(names, unknownName)
}

// entry holds the measurement options of one combination of limit name,
// algorithm, home and outcome, built on first use, so that Observe passes
// them on without allocating.
type entry struct {
	add      []metric.AddOption    // for ratelimit.decisions
	record   []metric.RecordOption // for the histograms
	fallback []metric.AddOption    // for ratelimit.fallbacks; nil unless the outcome is fallback
	// inFlight is for ratelimit.concurrency.in_flight, by limit and home;
	// nil unless the algorithm is concurrency and the outcome allowed or
	// released.
	inFlight []metric.AddOption
}

// limitTable holds the entries of one limit name, indexed by algorithm,
// home and outcome (see slot). An entry, once stored, never changes.
type limitTable struct {
	name    string
	entries []atomic.Pointer[entry] // numAlgorithms * numHomes * numOutcomes
}

func newLimitTable(name string) *limitTable {
	return &limitTable{name: name, entries: make([]atomic.Pointer[entry], numAlgorithms*numHomes*numOutcomes)}
}

// slot returns the entry of algorithm a, home h and outcome oc (indexes of
// their dimensions).
func (t *limitTable) slot(a, h, oc int) *atomic.Pointer[entry] {
	return &t.entries[(a*numHomes+h)*numOutcomes+oc]
}

// lookup returns the entry for e, creating it on first use.
func (o *Observer) lookup(e *ratelimit.Event) *entry {
	t, ok := (*o.tables.Load())[e.Name]
	if !ok {
		t = o.table(e.Name)
	}
	a, h, oc := index(e)
	if en := t.slot(a, h, oc).Load(); en != nil {
		return en
	}
	return o.fill(t, a, h, oc)
}

// index returns e's indexes in a limitTable.
func index(e *ratelimit.Event) (a, h, oc int) {
	a = min(int(e.Algorithm), numAlgorithms-1)
	h = min(int(e.Home), numHomes-1)
	oc = min(int(e.Outcome), fallbackAllowed-1)
	if e.Outcome == ratelimit.OutcomeFallback && e.Decision.Allowed {
		oc = fallbackAllowed
	}
	return a, h, oc
}

// table returns the table of a name that is not in o.tables yet: a new one
// while there is room for it, else the table of [otherLimit].
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
	t := newLimitTable(name)
	next := maps.Clone(tables)
	next[name] = t
	o.tables.Store(&next)
	return t
}

// fill creates the entry at t.slot(a, h, oc).
func (o *Observer) fill(t *limitTable, a, h, oc int) *entry {
	o.mu.Lock()
	defer o.mu.Unlock()
	slot := t.slot(a, h, oc)
	if en := slot.Load(); en != nil {
		return en
	}
	fallback := oc == int(ratelimit.OutcomeFallback) || oc == fallbackAllowed
	outcome := ratelimit.OutcomeFallback.String()
	if oc != fallbackAllowed {
		outcome = outcomeNames[oc]
	}
	common := []attribute.KeyValue{
		limitKey.String(t.name),
		algorithmKey.String(algorithmNames[a]),
		homeKey.String(homeNames[h]),
	}
	en := &entry{}
	if a == int(ratelimit.ConcurrencyAlgorithm) &&
		(oc == int(ratelimit.OutcomeAllowed) || oc == int(ratelimit.OutcomeReleased) || oc == fallbackAllowed) {
		en.inFlight = []metric.AddOption{metric.WithAttributeSet(attribute.NewSet(common[0], common[2]))}
	}
	if oc == int(ratelimit.OutcomeReleased) { // not a decision: in flight only
		slot.Store(en)
		return en
	}
	withOutcome := attribute.NewSet(append(common[:3:3], outcomeKey.String(outcome))...)
	en.add = []metric.AddOption{metric.WithAttributeSet(withOutcome)}
	en.record = []metric.RecordOption{metric.WithAttributeSet(withOutcome)}
	if fallback {
		withAllowed := attribute.NewSet(append(common[:3:3], allowedKey.Bool(oc == fallbackAllowed))...)
		en.fallback = []metric.AddOption{metric.WithAttributeSet(withAllowed)}
	}
	slot.Store(en)
	return en
}
