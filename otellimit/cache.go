package otellimit

import (
	"maps"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"

	"github.com/rlkit/ratelimit"
)

// combo is what an Event's attributes depend on. Values outside the known
// algorithms, homes and outcomes are folded into 0 ("unknown"), so that
// the number of combinations stays bounded whatever the Events hold.
type combo struct {
	limit     string
	algorithm ratelimit.Algorithm
	home      ratelimit.Home
	outcome   ratelimit.Outcome
	allowed   bool // Decision.Allowed, for OutcomeFallback only
}

// comboOf returns e's combination.
func comboOf(e ratelimit.Event) combo {
	c := combo{limit: e.Limit, algorithm: e.Algorithm, home: e.Home, outcome: e.Outcome}
	if c.algorithm < ratelimit.TokenBucketAlgorithm || c.algorithm > ratelimit.SlidingCounterAlgorithm {
		c.algorithm = 0
	}
	if c.home < ratelimit.HomeMemory || c.home > ratelimit.HomeRedis {
		c.home = 0
	}
	if c.outcome < ratelimit.OutcomeAllowed || c.outcome > ratelimit.OutcomeFallback {
		c.outcome = 0
	}
	if c.outcome == ratelimit.OutcomeFallback {
		c.allowed = e.Decision.Allowed
	}
	return c
}

// entry holds a combination's measurement options, built once, so that
// Observe passes them on without allocating.
type entry struct {
	add      []metric.AddOption    // for ratelimit.decisions
	record   []metric.RecordOption // for the histograms
	fallback []metric.AddOption    // for ratelimit.fallbacks; nil unless outcome is fallback
}

// cache is an immutable snapshot: writers copy it.
type cache struct {
	entries map[combo]*entry
	names   map[string]struct{} // the limit names given their own entries
}

// lookup returns c's entry, creating it on first use.
func (o *Observer) lookup(c combo) *entry {
	snap := o.cache.Load()
	if en, ok := snap.entries[c]; ok {
		return en
	}
	if _, known := snap.names[c.limit]; !known && len(snap.names) >= o.maxLimits {
		// A name beyond the cap: the "other" entry, once it exists.
		c.limit = OtherLimit
		if en, ok := snap.entries[c]; ok {
			return en
		}
	}
	return o.insert(c)
}

// insert creates c's entry (or that of "other" when c's name is one too
// many) in a new snapshot.
func (o *Observer) insert(c combo) *entry {
	o.mu.Lock()
	defer o.mu.Unlock()
	snap := o.cache.Load()
	if en, ok := snap.entries[c]; ok {
		return en
	}
	_, known := snap.names[c.limit]
	if !known && c.limit != OtherLimit && len(snap.names) >= o.maxLimits {
		c.limit = OtherLimit
		if en, ok := snap.entries[c]; ok {
			return en
		}
	}
	next := &cache{entries: maps.Clone(snap.entries), names: snap.names}
	if !known && c.limit != OtherLimit {
		next.names = maps.Clone(snap.names)
		next.names[c.limit] = struct{}{}
	}
	en := newEntry(c)
	next.entries[c] = en
	o.cache.Store(next)
	return en
}

// newEntry builds c's attribute sets.
func newEntry(c combo) *entry {
	common := []attribute.KeyValue{
		LimitKey.String(c.limit),
		AlgorithmKey.String(algorithmName(c.algorithm)),
		HomeKey.String(c.home.String()),
	}
	withOutcome := attribute.NewSet(append(common[:3:3], OutcomeKey.String(c.outcome.String()))...)
	en := &entry{
		add:    []metric.AddOption{metric.WithAttributeSet(withOutcome)},
		record: []metric.RecordOption{metric.WithAttributeSet(withOutcome)},
	}
	if c.outcome == ratelimit.OutcomeFallback {
		withAllowed := attribute.NewSet(append(common[:3:3], AllowedKey.Bool(c.allowed))...)
		en.fallback = []metric.AddOption{metric.WithAttributeSet(withAllowed)}
	}
	return en
}

// algorithmName returns a's attribute value; 0 is "unknown".
func algorithmName(a ratelimit.Algorithm) string {
	if a == 0 {
		return "unknown"
	}
	return a.String()
}
