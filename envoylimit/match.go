package envoylimit

import (
	"strings"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	"github.com/rlkit/ratelimit/internal/limitset"
)

// maxDepth is the depth of descriptor whose path match keeps without
// allocating.
const maxDepth = 16

// match finds the node a request descriptor's entries end on, as
// envoyproxy/ratelimit does: at each level the entry's key and value
// first, then the wildcard values of its key in file order, then its key
// alone; a descriptor has a limit only when its last entry ends on a node
// with one (a limit higher up does not apply to a longer descriptor). It
// returns the node (nil when nothing matches), and path with the node of
// every level appended.
func match(root *node, entries []*rlcommon.RateLimitDescriptor_Entry, path []*node) (*node, []*node) {
	if root == nil || len(entries) == 0 {
		return nil, path
	}
	cur := root
	for _, e := range entries {
		kn := cur.children[e.GetKey()]
		if kn == nil {
			return nil, path
		}
		next := kn.byValue[e.GetValue()]
		if next == nil {
			for _, w := range kn.wild {
				if wildMatch(w.parts, e.GetValue()) {
					next = w.n
					break
				}
			}
		}
		if next == nil {
			next = kn.any
		}
		if next == nil {
			return nil, path
		}
		path = append(path, next)
		cur = next
	}
	return cur, path
}

// wildMatch reports whether value matches the pattern split on '*' into
// parts: each '*' matches any run of bytes, the parts in between match in
// order.
func wildMatch(parts []string, value string) bool {
	if len(parts) == 1 {
		return parts[0] == value
	}
	first, last := parts[0], parts[len(parts)-1]
	if len(value) < len(first)+len(last) || !strings.HasPrefix(value, first) || !strings.HasSuffix(value, last) {
		return false
	}
	rest := value[len(first) : len(value)-len(last)]
	for _, p := range parts[1 : len(parts)-1] {
		i := strings.Index(rest, p)
		if i < 0 {
			return false
		}
		rest = rest[i+len(p):]
	}
	return true
}

// limiterKey is the key a node's limiter counts a descriptor under: its
// values, each level's in order, where a level that shares its wildcard's
// counter (share_threshold) puts its pattern in place of the value.
func limiterKey(entries []*rlcommon.RateLimitDescriptor_Entry, path []*node) string {
	if len(entries) == 1 {
		if path[0].share != "" {
			return path[0].share
		}
		return entries[0].GetValue()
	}
	var b strings.Builder
	for i, e := range entries {
		v := e.GetValue()
		if path[i].share != "" {
			v = path[i].share
		}
		limitset.AppendKeyPart(&b, i, v)
	}
	return b.String()
}

// overrideKey is the key of a descriptor whose request carries its own
// limit: the limiter of that limit is shared by every domain and
// descriptor, so the key holds them all.
func overrideKey(domain string, entries []*rlcommon.RateLimitDescriptor_Entry) string {
	var b strings.Builder
	limitset.AppendKeyPart(&b, 0, domain)
	for i, e := range entries {
		limitset.AppendKeyPart(&b, 2*i+1, e.GetKey())
		limitset.AppendKeyPart(&b, 2*i+2, e.GetValue())
	}
	return b.String()
}

// metricName is the name a decision on leaf is reported under: the
// configuration's path of the descriptor, or with detailed_metric (on the
// leaf) every entry's key and value, or with value_to_metric (on a level)
// that level's value from the request, as envoyproxy/ratelimit names its
// stats. id is the limit's id, whose "#n" suffix (one of several limits)
// is kept.
func metricName(domain string, leaf *node, id string, entries []*rlcommon.RateLimitDescriptor_Entry, path []*node) string {
	if !leaf.dynamicName {
		return id
	}
	var b strings.Builder
	b.WriteString(domain)
	for i, e := range entries {
		n := path[i]
		b.WriteByte('.')
		b.WriteString(e.GetKey())
		switch {
		case leaf.detailed, n.valueToMetric && n.share == "":
			b.WriteByte('_')
			b.WriteString(e.GetValue())
		case n.value != "":
			b.WriteByte('_')
			b.WriteString(n.value)
		}
	}
	b.WriteString(strings.TrimPrefix(id, leaf.path))
	return b.String()
}
