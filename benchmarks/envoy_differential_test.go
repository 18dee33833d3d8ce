package benchmarks

// TestEnvoyDifferential sends the same request sequences to
// envoyproxy/ratelimit (theirs) and to envoylimit-server (ours, on Redis and
// in memory), all on one redis-server, and compares every response with a
// reference model of each server's semantics:
//
//   - the envoy model: every descriptor's counter is incremented by its hits
//     whatever the outcome (INCRBY), and a descriptor is over its limit when
//     the counter after the increment exceeds the limit;
//   - the our model: a request is charged only when every enforced (not
//     shadow_mode, hits > 0) descriptor admits it, all or nothing, and a
//     denied hit is never counted.
//
// It asserts theirs == envoy model and ours == our model on every request,
// then classifies every request where the two models disagree by the first
// semantic difference that changes its response (the models are run again
// with the differences switched on one at a time), and writes the counts
// and one example of each cause to envoy-differential.md when
// ENVOY_DIFFERENTIAL_OUT names a file (run by hand:
// ENVOY_DIFFERENTIAL_OUT=envoy-differential.md go test -run TestEnvoyDifferential -v .).
//
// Only fixed windows (envoyproxy/ratelimit has no other), in minute and
// hour units: the sequences start at least 5 s after a minute boundary and
// end long before the next one, so neither server sees a window change.

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/rlkit/ratelimit/internal/testkit/redistest"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// --- the configuration, as Go values (rendered to YAML for both servers
// and walked by the models)

type dCfgLimit struct {
	rpu       uint32
	unit      string // "minute" or "hour"
	unlimited bool
	name      string
	replaces  []string
}

type dCfgDesc struct {
	key, value string // value "" matches any value; "p*" any value starting with "p"
	limit      *dCfgLimit
	shadow     bool
	children   []dCfgDesc
}

type dCfgDomain struct {
	domain string
	descs  []dCfgDesc
}

// differentialConfig covers: key/value and key-only matches, a wildcard
// value, nested descriptors (with a limit on an inner level only), unlimited,
// shadow_mode, a named limit replaced by another, a limit of 0, two domains.
var differentialConfig = []dCfgDomain{
	{domain: "web", descs: []dCfgDesc{
		{key: "remote_address", limit: &dCfgLimit{rpu: 5, unit: "hour"}},
		{key: "path", value: "/login", limit: &dCfgLimit{rpu: 3, unit: "minute", name: "login"}},
		{key: "path", value: "/health", limit: &dCfgLimit{unlimited: true}},
		{key: "path", value: "/api/*", limit: &dCfgLimit{rpu: 4, unit: "hour"}},
		{key: "path", limit: &dCfgLimit{rpu: 6, unit: "hour"}},
		{key: "user", children: []dCfgDesc{
			{key: "plan", value: "free", limit: &dCfgLimit{rpu: 2, unit: "hour"}},
			{key: "plan", limit: &dCfgLimit{rpu: 5, unit: "minute"}},
		}},
		{key: "tenant", value: "beta", shadow: true, limit: &dCfgLimit{rpu: 2, unit: "minute"}},
		{key: "tenant", limit: &dCfgLimit{rpu: 3, unit: "hour", name: "tenant"}},
		{key: "vip", limit: &dCfgLimit{rpu: 8, unit: "hour", replaces: []string{"tenant"}}},
		{key: "blocked", limit: &dCfgLimit{rpu: 0, unit: "hour"}},
	}},
	{domain: "api", descs: []dCfgDesc{
		{key: "client", limit: &dCfgLimit{rpu: 4, unit: "minute"}, children: []dCfgDesc{
			{key: "method", value: "POST", limit: &dCfgLimit{rpu: 2, unit: "minute"}},
		}},
	}},
}

// differentialYAML renders the configuration, one file per domain as
// envoyproxy/ratelimit loads it.
func differentialYAML() map[string]string {
	files := map[string]string{}
	for _, d := range differentialConfig {
		var b strings.Builder
		fmt.Fprintf(&b, "domain: %s\ndescriptors:\n", d.domain)
		writeDescsYAML(&b, d.descs, "  ")
		files[d.domain+".yaml"] = b.String()
	}
	return files
}

func writeDescsYAML(b *strings.Builder, descs []dCfgDesc, ind string) {
	for _, d := range descs {
		fmt.Fprintf(b, "%s- key: %s\n", ind, d.key)
		if d.value != "" {
			fmt.Fprintf(b, "%s  value: %q\n", ind, d.value)
		}
		if d.shadow {
			fmt.Fprintf(b, "%s  shadow_mode: true\n", ind)
		}
		if l := d.limit; l != nil {
			fmt.Fprintf(b, "%s  rate_limit:\n", ind)
			if l.unlimited {
				fmt.Fprintf(b, "%s    unlimited: true\n", ind)
			} else {
				fmt.Fprintf(b, "%s    unit: %s\n%s    requests_per_unit: %d\n", ind, l.unit, ind, l.rpu)
			}
			if l.name != "" {
				fmt.Fprintf(b, "%s    name: %s\n", ind, l.name)
			}
			if len(l.replaces) > 0 {
				fmt.Fprintf(b, "%s    replaces:\n", ind)
				for _, r := range l.replaces {
					fmt.Fprintf(b, "%s      - name: %s\n", ind, r)
				}
			}
		}
		if len(d.children) > 0 {
			fmt.Fprintf(b, "%s  descriptors:\n", ind)
			writeDescsYAML(b, d.children, ind+"    ")
		}
	}
}

// matchDesc finds the configured descriptor a request's entries end on, as
// envoyproxy/ratelimit does: at each level an exact key/value first, then
// a wildcard value (prefix*), then the key alone; a limit applies only on
// the level of the last entry.
func matchDesc(domain string, entries []*rlcommon.RateLimitDescriptor_Entry) *dCfgDesc {
	var level []dCfgDesc
	found := false
	for _, d := range differentialConfig {
		if d.domain == domain {
			level, found = d.descs, true
		}
	}
	if !found {
		return nil
	}
	for i, e := range entries {
		var next *dCfgDesc
		for j := range level {
			if d := &level[j]; d.key == e.Key && d.value != "" && !strings.HasSuffix(d.value, "*") && d.value == e.Value {
				next = d
				break
			}
		}
		for j := range level {
			if d := &level[j]; next == nil && d.key == e.Key && strings.HasSuffix(d.value, "*") &&
				strings.HasPrefix(e.Value, strings.TrimSuffix(d.value, "*")) {
				next = d
			}
		}
		for j := range level {
			if d := &level[j]; next == nil && d.key == e.Key && d.value == "" {
				next = d
			}
		}
		if next == nil {
			return nil
		}
		if i == len(entries)-1 {
			if next.limit == nil {
				return nil
			}
			return next
		}
		if len(next.children) == 0 {
			return nil
		}
		level = next.children
	}
	return nil
}

// --- the models

// semantics are the switches between the envoy model (all false) and the
// our model (every cause on). The causes of a difference are named after
// them; inOrder is not a cause but how ours on Redis decides.
type semantics struct {
	notCountDenied  bool // (a) a denied descriptor's hits are not counted
	allOrNothing    bool // (b) a request denied by one descriptor charges none
	ownOverride     bool // (c) a request's own limit has a counter of its own, per (requests_per_unit, unit)
	overrideDomain  bool // (c) a request's own limit applies in a domain the configuration lacks
	deniedRemaining bool // (c) a denied status reports what is left (limit - used), not 0
	// inOrder: the enforced descriptors are decided one after the other,
	// each seeing the ones before (ours on Redis); otherwise the request is
	// decided at once (ours in memory). They differ only when one request
	// has two descriptors on one counter.
	inOrder bool
}

// causes, in the order the classification switches them on.
var causes = []struct {
	name, text string
	set        func(*semantics)
}{
	{"a-denied-not-counted", "(a) denied hits are not counted by ours (envoy's INCRBY counts them, so its later requests see a counter above the limit)",
		func(s *semantics) { s.notCountDenied = true }},
	{"b-all-or-nothing", "(b) several descriptors in one request are all-or-nothing in ours (a request denied by one descriptor charges none, and its other descriptors report their quota untouched)",
		func(s *semantics) { s.allOrNothing = true }},
	{"c-override-own-counter", "(c) a descriptor's own limit (the request's `limit` field) counts on a counter of its own in ours, one per (requests_per_unit, unit); envoy's shares the descriptor's key (`domain_entries_window`) with the configured limit and with every other override of the same unit",
		func(s *semantics) { s.ownOverride = true }},
	// Fixed in envoylimit (6a5c205) after this test found it; kept so that
	// the models can tell it should it come back.
	{"c-override-unknown-domain", "(c) a descriptor's own limit applies in ours in a domain the configuration does not have; envoy's ignores the descriptor (OK, no limit)",
		func(s *semantics) { s.overrideDomain = true }},
	{"c-denied-remaining", "(c) a denied status reports limit_remaining = what is left in the window in ours, 0 in envoy's (differs when hits > 1 are denied with some quota left)",
		func(s *semantics) { s.deniedRemaining = true }},
}

var (
	envoySemantics = semantics{}
	// ourRedisSemantics is ours on Redis (decisions in order with refunds).
	ourRedisSemantics = semantics{notCountDenied: true, allOrNothing: true, ownOverride: true, deniedRemaining: true, inOrder: true}
	// ourMemorySemantics is ours in memory (one atomic AllowAll).
	ourMemorySemantics = semantics{notCountDenied: true, allOrNothing: true, ownOverride: true, deniedRemaining: true}
)

// mStatus is one descriptor's status as the test compares it.
type mStatus struct {
	code      rlspb.RateLimitResponse_Code
	limit     string // "rpu/UNIT/name", "" for none
	remaining uint32
}

type mResponse struct {
	overall  rlspb.RateLimitResponse_Code
	statuses []mStatus
}

func (r mResponse) String() string {
	var b strings.Builder
	b.WriteString(r.overall.String())
	for _, s := range r.statuses {
		fmt.Fprintf(&b, " [%s %s rem=%d]", s.code, s.limit, s.remaining)
	}
	return b.String()
}

func fromProto(resp *rlspb.RateLimitResponse) mResponse {
	r := mResponse{overall: resp.GetOverallCode()}
	for _, s := range resp.GetStatuses() {
		st := mStatus{code: s.GetCode(), remaining: s.GetLimitRemaining()}
		if l := s.GetCurrentLimit(); l != nil {
			st.limit = fmt.Sprintf("%d/%s/%s", l.GetRequestsPerUnit(), l.GetUnit(), l.GetName())
		}
		r.statuses = append(r.statuses, st)
	}
	return r
}

func (r mResponse) equal(o mResponse) bool {
	return r.overall == o.overall && slices.Equal(r.statuses, o.statuses)
}

// model is one server's state: counters by key.
type model struct {
	sem      semantics
	counters map[string]uint64
}

func newModel(sem semantics) *model { return &model{sem: sem, counters: map[string]uint64{}} }

// mCharge is one descriptor's limit in a request.
type mCharge struct {
	desc   int
	key    string
	rpu    uint64
	limit  string
	hits   uint64
	shadow bool
	// decided
	over      bool
	remaining uint64
}

func unitName(u string) string { return strings.ToUpper(u) }

func (m *model) decide(req *rlspb.RateLimitRequest) mResponse {
	resp := mResponse{overall: rlspb.RateLimitResponse_OK, statuses: make([]mStatus, len(req.Descriptors))}
	var charges []*mCharge
	var replaced []string
	type named struct {
		c    *mCharge
		name string
	}
	var names []named
	known := matchKnownDomain(req.Domain)
	for i, d := range req.Descriptors {
		resp.statuses[i] = mStatus{code: rlspb.RateLimitResponse_OK}
		hits := uint64(max(1, req.HitsAddend))
		if d.HitsAddend != nil {
			hits = d.HitsAddend.Value
		}
		var ents strings.Builder
		for _, e := range d.Entries {
			fmt.Fprintf(&ents, "%s_%s_", e.Key, e.Value)
		}
		if ov := d.Limit; ov != nil && (known || m.sem.overrideDomain) {
			unit := strings.ToLower(typev3.RateLimitUnit(ov.Unit).String())
			key := req.Domain + "_" + ents.String() + unit
			if m.sem.ownOverride {
				key = fmt.Sprintf("override/%d/%s", ov.RequestsPerUnit, key)
			}
			charges = append(charges, &mCharge{desc: i, key: key, rpu: uint64(ov.RequestsPerUnit), hits: hits,
				limit: fmt.Sprintf("%d/%s/", ov.RequestsPerUnit, unitName(unit))})
			continue
		}
		n := matchDesc(req.Domain, d.Entries)
		if n == nil {
			continue
		}
		replaced = append(replaced, n.limit.replaces...)
		if n.limit.unlimited {
			resp.statuses[i].remaining = math.MaxUint32
			continue
		}
		c := &mCharge{desc: i, key: req.Domain + "_" + ents.String() + n.limit.unit, rpu: uint64(n.limit.rpu), hits: hits,
			shadow: n.shadow, limit: fmt.Sprintf("%d/%s/%s", n.limit.rpu, unitName(n.limit.unit), n.limit.name)}
		charges = append(charges, c)
		names = append(names, named{c, n.limit.name})
	}
	if len(replaced) > 0 {
		for _, nm := range names {
			if nm.name != "" && slices.Contains(replaced, nm.name) {
				charges = slices.DeleteFunc(charges, func(c *mCharge) bool { return c == nm.c })
			}
		}
	}

	if !m.sem.allOrNothing {
		for _, c := range charges {
			used := m.counters[c.key]
			after := used + c.hits
			c.over = after > c.rpu
			if !c.over || !m.sem.notCountDenied {
				m.counters[c.key] = after
			}
			switch {
			case !c.over:
				c.remaining = c.rpu - after
			case m.sem.deniedRemaining && used <= c.rpu:
				c.remaining = c.rpu - used
			}
		}
	} else {
		m.decideAllOrNothing(charges)
	}
	for _, c := range charges {
		if c.over && !m.sem.deniedRemaining {
			c.remaining = 0
		}
		st := &resp.statuses[c.desc]
		st.limit = c.limit
		st.remaining = uint32(min(c.remaining, math.MaxUint32))
		if c.over && !c.shadow {
			st.code = rlspb.RateLimitResponse_OVER_LIMIT
			resp.overall = rlspb.RateLimitResponse_OVER_LIMIT
		}
	}
	return resp
}

// decideAllOrNothing is ours: shadow and 0-hit descriptors each on their
// own; the enforced ones all or nothing.
func (m *model) decideAllOrNothing(charges []*mCharge) {
	alone := func(c *mCharge) {
		used := m.counters[c.key]
		c.over = used+c.hits > c.rpu
		if c.over {
			c.remaining = c.rpu - min(used, c.rpu)
			return
		}
		m.counters[c.key] = used + c.hits
		c.remaining = c.rpu - used - c.hits
	}
	var enforced []*mCharge
	for _, c := range charges {
		if c.shadow || c.hits == 0 {
			alone(c)
			continue
		}
		enforced = append(enforced, c)
	}
	if len(enforced) == 0 {
		return
	}
	if len(enforced) == 1 {
		alone(enforced[0])
		return
	}
	if m.sem.inOrder {
		m.decideInOrder(enforced)
		return
	}
	// At once: admitted when the whole request fits every counter; each
	// descriptor's status is what it alone would get.
	need := map[string]uint64{}
	admitted := true
	for _, c := range enforced {
		c.over = m.counters[c.key]+c.hits > c.rpu
		need[c.key] += c.hits
	}
	for _, c := range enforced {
		if m.counters[c.key]+need[c.key] > c.rpu {
			admitted = false
		}
	}
	if admitted {
		for k, v := range need {
			m.counters[k] += v
		}
	}
	for _, c := range enforced {
		// Admitted: what is left after the request; denied: nothing was
		// charged, what is left now.
		c.remaining = c.rpu - min(m.counters[c.key], c.rpu)
	}
}

// decideInOrder is ours on Redis: the enforced descriptors are charged one
// after the other until one denies; the later ones are only looked at
// (seeing the earlier charges), and then every charge is refunded.
func (m *model) decideInOrder(enforced []*mCharge) {
	tentative := map[string]uint64{}
	var charged []*mCharge
	before := map[*mCharge]uint64{}
	denied := false
	for _, c := range enforced {
		used := m.counters[c.key] + tentative[c.key]
		fits := used+c.hits <= c.rpu
		if !denied && fits {
			before[c] = used
			tentative[c.key] += c.hits
			c.remaining = c.rpu - used - c.hits
			charged = append(charged, c)
			continue
		}
		// Denied, or looked at after a denial: what is left now.
		c.over = !fits
		c.remaining = c.rpu - min(used, c.rpu)
		denied = denied || !fits
	}
	if denied {
		for _, c := range charged {
			c.remaining = c.rpu - before[c] // refunded
		}
		return
	}
	for k, v := range tentative {
		m.counters[k] += v
	}
}

func matchKnownDomain(domain string) bool {
	for _, d := range differentialConfig {
		if d.domain == domain {
			return true
		}
	}
	return false
}

// --- the request sequences

// descriptor templates: entries "k=v,k=v"; {n} is replaced by a small
// random number.
var webTemplates = []string{
	"remote_address=10.0.0.{n}",
	"path=/login",
	"path=/health",
	"path=/api/v{n}",
	"path=/static/{n}",
	"user=u{n},plan=free",
	"user=u{n},plan=pro",
	"user=u{n}", // a placeholder level: no limit
	"tenant=beta",
	"tenant=t{n}",
	"vip=yes",
	"blocked=x",
	"unknown=z", // no match
}

var apiTemplates = []string{
	"client=c{n}",
	"client=c{n},method=POST",
	"client=c{n},method=GET", // no limit on this level
}

// genRequest is one random request of the sequence seeded by r.
func genRequest(r *rand.Rand) *rlspb.RateLimitRequest {
	req := &rlspb.RateLimitRequest{}
	templates := webTemplates
	switch x := r.IntN(20); {
	case x < 13:
		req.Domain = "web"
	case x < 19:
		req.Domain, templates = "api", apiTemplates
	default:
		req.Domain = "nodomain" // a domain the configuration lacks
	}
	switch x := r.IntN(10); {
	case x < 6:
	case x < 7:
		req.HitsAddend = 0
	case x < 8:
		req.HitsAddend = 1
	default:
		req.HitsAddend = uint32(2 + r.IntN(3))
	}
	nd := 1 + r.IntN(3)
	for range nd {
		t := templates[r.IntN(len(templates))]
		t = strings.ReplaceAll(t, "{n}", fmt.Sprint(r.IntN(3)))
		d := rlsRequest(req.Domain, t).Descriptors[0]
		switch x := r.IntN(12); {
		case x == 0:
			d.HitsAddend = wrapperspb.UInt64(0)
		case x == 1:
			d.HitsAddend = wrapperspb.UInt64(1)
		case x == 2:
			d.HitsAddend = wrapperspb.UInt64(uint64(2 + r.IntN(4)))
		}
		if r.IntN(10) == 0 || req.Domain == "nodomain" && r.IntN(2) == 0 {
			units := []typev3.RateLimitUnit{typev3.RateLimitUnit_MINUTE, typev3.RateLimitUnit_HOUR}
			d.Limit = &rlcommon.RateLimitDescriptor_RateLimitOverride{
				RequestsPerUnit: uint32(2 + r.IntN(3)), Unit: units[r.IntN(2)],
			}
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	return req
}

// describeRequest is a request in one line, for the report.
func describeRequest(req *rlspb.RateLimitRequest) string {
	var b strings.Builder
	fmt.Fprintf(&b, "domain=%s", req.Domain)
	if req.HitsAddend != 0 {
		fmt.Fprintf(&b, " hits_addend=%d", req.HitsAddend)
	}
	for _, d := range req.Descriptors {
		b.WriteString(" {")
		for i, e := range d.Entries {
			if i > 0 {
				b.WriteString(",")
			}
			fmt.Fprintf(&b, "%s=%s", e.Key, e.Value)
		}
		if d.HitsAddend != nil {
			fmt.Fprintf(&b, " hits=%d", d.HitsAddend.Value)
		}
		if d.Limit != nil {
			fmt.Fprintf(&b, " limit=%d/%s", d.Limit.RequestsPerUnit, typev3.RateLimitUnit(d.Limit.Unit))
		}
		b.WriteString("}")
	}
	return b.String()
}

// envoyRatelimitVersion is the version of envoyproxy/ratelimit envoyrls/go.mod
// pins, for the report.
const envoyRatelimitVersion = "v1.4.1-0.20260122083618-3fb702589d36"

const (
	differentialSeeds   = 8
	differentialPerSeed = 150
)

// waitForWindowStart waits until the current minute has at least 5 s gone
// and 40 s left and the hour does not end within it, so that a sequence of
// under 15 s sees one minute window and one hour window in both servers.
func waitForWindowStart(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		now := time.Now().UTC()
		if s := now.Second(); s >= 5 && s < 20 && now.Minute() != 59 {
			return
		}
		if now.After(deadline) {
			t.Fatal("no window start found within 3 minutes")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestEnvoyDifferential(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs two servers for about 30 s; not with -short")
	}
	mod, err := os.ReadFile("envoyrls/go.mod")
	require.NoError(t, err)
	require.Contains(t, string(mod), "github.com/envoyproxy/ratelimit "+envoyRatelimitVersion, "envoyRatelimitVersion must name the version envoyrls/go.mod pins")
	redis := redistest.Start(t)
	cfgDir := writeRLSConfig(t, differentialYAML())
	probe := rlsRequest("probe", "k=v") // a domain neither knows: charges nothing
	theirs := startTheirs(t, "envoyproxy-redis", cfgDir, redis.Addr(), probe, nil)
	oursRedis := startOurs(t, "ours-redis", cfgDir, redis.Addr(), probe)
	oursMemory := startOurs(t, "ours-memory", cfgDir, "", probe)

	type target struct {
		srv    *rlsServer
		client rlspb.RateLimitServiceClient
		model  *model
	}
	var targets []*target
	for _, x := range []struct {
		srv *rlsServer
		sem semantics
	}{{theirs, envoySemantics}, {oursRedis, ourRedisSemantics}, {oursMemory, ourMemorySemantics}} {
		conn := dialRLS(t, x.srv.addr)
		t.Cleanup(func() { conn.Close() })
		targets = append(targets, &target{srv: x.srv, client: rlspb.NewRateLimitServiceClient(conn), model: newModel(x.sem)})
	}
	// The classification's chain: envoy, then each cause switched on in turn.
	// (inOrder changes nothing until allOrNothing is on.)
	chainSems := []semantics{{inOrder: true}}
	alone := []*model{}
	var chainCauses []int // the causes ours has, in order
	for i, c := range causes {
		has := ourRedisSemantics
		if c.set(&has); has != ourRedisSemantics {
			continue // ours does not differ from envoy's in this (any more)
		}
		chainCauses = append(chainCauses, i)
		s := chainSems[len(chainSems)-1]
		c.set(&s)
		chainSems = append(chainSems, s)
		one := semantics{inOrder: true}
		c.set(&one)
		alone = append(alone, newModel(one))
	}
	aloneCount := map[string]int{}
	chain := make([]*model, len(chainSems))
	for i, s := range chainSems {
		chain[i] = newModel(s)
	}
	require.Equal(t, ourRedisSemantics, chainSems[len(chainSems)-1], "the chain must end at ours on Redis")

	type example struct {
		req          string
		envoy, ours  mResponse
		seed, number int
	}
	byCause := map[string][]example{}
	mismatches := map[string][]string{} // server -> what differed from its model
	var requests, differing int
	memoryVsRedis := 0
	var memoryVsRedisExample string

	coverage := map[string]int{}
	waitForWindowStart(t)
	start := time.Now()
	ctx := context.Background()
	for seed := range differentialSeeds {
		r := rand.New(rand.NewPCG(uint64(seed), 0x5eed))
		for i := range differentialPerSeed {
			req := genRequest(r)
			requests++
			tallyCoverage(coverage, req)
			got := make([]mResponse, len(targets))
			want := make([]mResponse, len(targets))
			for j, tg := range targets {
				resp, err := tg.client.ShouldRateLimit(ctx, req)
				if err != nil {
					mismatches[tg.srv.name] = append(mismatches[tg.srv.name], fmt.Sprintf("seed %d #%d %s: error %v", seed, i, describeRequest(req), err))
					got[j] = mResponse{}
				} else {
					got[j] = fromProto(resp)
				}
				want[j] = tg.model.decide(req)
				if !got[j].equal(want[j]) && len(mismatches[tg.srv.name]) < 1000 {
					mismatches[tg.srv.name] = append(mismatches[tg.srv.name],
						fmt.Sprintf("seed %d #%d %s:\n    got  %s\n    want %s", seed, i, describeRequest(req), got[j], want[j]))
				}
			}
			if !want[1].equal(want[2]) {
				memoryVsRedis++
				if memoryVsRedisExample == "" {
					memoryVsRedisExample = fmt.Sprintf("`%s`: redis %s, memory %s", describeRequest(req), want[1], want[2])
				}
			}
			chainResp := make([]mResponse, len(chain))
			for k, m := range chain {
				chainResp[k] = m.decide(req)
			}
			for k, m := range alone {
				if !m.decide(req).equal(chainResp[0]) {
					aloneCount[causes[chainCauses[k]].name]++
				}
			}
			if chainResp[0].equal(chainResp[len(chain)-1]) {
				continue
			}
			differing++
			for k := 1; k < len(chain); k++ {
				if !chainResp[k].equal(chainResp[k-1]) {
					name := causeOf(chainSems[k-1], chainSems[k])
					byCause[name] = append(byCause[name], example{req: describeRequest(req), envoy: chainResp[0],
						ours: chainResp[len(chain)-1], seed: seed, number: i})
					break
				}
			}
		}
	}
	elapsed := time.Since(start)
	require.Less(t, elapsed, 35*time.Second, "the sequence must fit in one minute window")

	var b strings.Builder
	b.WriteString("# TestEnvoyDifferential: envoyproxy/ratelimit and envoylimit-server, request by request\n\n")
	fmt.Fprintf(&b, "Written by `ENVOY_DIFFERENTIAL_OUT=envoy-differential.md go test -run TestEnvoyDifferential -v .` "+
		"(benchmarks/envoy_differential_test.go) on %s: envoyproxy/ratelimit %s (envoyrls/go.mod) on Redis, "+
		"envoylimit-server on the same redis-server and in memory, the configuration and request generator of the test.\n\n",
		start.UTC().Format("2006-01-02 15:04 UTC"), envoyRatelimitVersion)
	b.WriteString("Every response of each server equals its reference model's (counts at the end), so the differences " +
		"between the servers are exactly the differences between the models, classified below.\n\n")
	fmt.Fprintf(&b, "%d requests (%d seeds x %d), %d where the envoy model and the our model disagree, in %v.\n\n",
		requests, differentialSeeds, differentialPerSeed, differing, elapsed.Round(time.Millisecond))
	b.WriteString("Each differing request is counted under the first cause that changes its response when the causes are\n" +
		"switched on one after the other from the envoy model, in the order of the table (so the counts add up);\n" +
		"\"alone\" is the number of responses that switching on only that cause changes.\n\n")
	b.WriteString("| cause | requests | alone | first example (seed #n: request; envoy model → our model) |\n|---|---|---|---|\n")
	for _, i := range chainCauses {
		c := causes[i]
		ex := byCause[c.name]
		if len(ex) == 0 {
			fmt.Fprintf(&b, "| %s | 0 | %d | |\n", c.text, aloneCount[c.name])
			continue
		}
		e := ex[0]
		fmt.Fprintf(&b, "| %s | %d | %d | %d #%d: `%s`; `%s` → `%s` |\n", c.text, len(ex), aloneCount[c.name], e.seed, e.number, e.req, e.envoy, e.ours)
	}
	for i, c := range causes {
		if !slices.Contains(chainCauses, i) {
			fmt.Fprintf(&b, "\nNo longer a difference (ours now does as envoy's; the models keep it, to tell should it come back): %s\n", c.text)
		}
	}
	b.WriteString("\nWhat the requests exercised (requests with at least one such descriptor, or such a request):\n\n")
	keys := make([]string, 0, len(coverage))
	for k := range coverage {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "- %s: %d\n", k, coverage[k])
	}
	fmt.Fprintf(&b, "\nOurs in memory and ours on Redis (their models) differ on %d requests", memoryVsRedis)
	if memoryVsRedisExample != "" {
		fmt.Fprintf(&b, "; first: %s", memoryVsRedisExample)
	}
	b.WriteString(".\n")
	names := make([]string, 0, len(mismatches))
	for n := range mismatches {
		names = append(names, n)
	}
	sort.Strings(names)
	b.WriteString("\nServers against their models:\n\n")
	for _, tg := range targets {
		fmt.Fprintf(&b, "- %s: %d of %d responses differ from its model\n", tg.srv.name, len(mismatches[tg.srv.name]), requests)
	}
	report := b.String()
	t.Log("\n" + report)
	if out := os.Getenv("ENVOY_DIFFERENTIAL_OUT"); out != "" {
		require.NoError(t, os.WriteFile(out, []byte(report), 0o644))
	}
	for _, n := range names {
		ms := mismatches[n]
		show := ms[:min(len(ms), 15)]
		t.Errorf("%s: %d responses differ from its model; the first:\n  %s", n, len(ms), strings.Join(show, "\n  "))
	}
}

// tallyCoverage counts what req exercises, once per kind.
func tallyCoverage(coverage map[string]int, req *rlspb.RateLimitRequest) {
	seen := map[string]bool{}
	mark := func(k string) {
		if !seen[k] {
			seen[k] = true
			coverage[k]++
		}
	}
	switch {
	case !matchKnownDomain(req.Domain):
		mark("a domain the configuration lacks")
	case req.Domain == "web":
		mark("domain web")
	default:
		mark("domain api")
	}
	if len(req.Descriptors) > 1 {
		mark("several descriptors")
	}
	switch {
	case req.HitsAddend == 0:
		mark("request hits_addend unset or 0 (1)")
	case req.HitsAddend == 1:
		mark("request hits_addend 1")
	default:
		mark("request hits_addend > 1")
	}
	keys := map[string]bool{}
	for _, d := range req.Descriptors {
		if d.HitsAddend != nil {
			mark(fmt.Sprintf("descriptor hits_addend %s", map[bool]string{true: "0", false: "> 0"}[d.HitsAddend.Value == 0]))
		}
		if d.Limit != nil {
			mark("descriptor limit override")
			continue
		}
		if len(d.Entries) > 1 {
			mark("nested descriptor (2 entries)")
		}
		n := matchDesc(req.Domain, d.Entries)
		switch {
		case n == nil:
			mark("no matching limit")
			continue
		case n.limit.unlimited:
			mark("unlimited")
		case n.shadow:
			mark("shadow_mode")
		case n.limit.rpu == 0:
			mark("limit of 0")
		case strings.HasSuffix(n.value, "*"):
			mark("wildcard value")
		case n.value == "":
			mark("key-only match")
		default:
			mark("key/value match")
		}
		if len(n.limit.replaces) > 0 {
			mark("a limit with replaces")
		}
		var k strings.Builder
		for _, e := range d.Entries {
			k.WriteString(e.Key + "=" + e.Value + ",")
		}
		if keys[k.String()] {
			mark("two descriptors on one counter")
		}
		keys[k.String()] = true
	}
}

// causeOf names the cause switched on between two semantics of the chain.
func causeOf(before, after semantics) string {
	for _, c := range causes {
		s := before
		c.set(&s)
		if s == after {
			return c.name
		}
	}
	return "unknown"
}
