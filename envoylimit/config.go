package envoylimit

import (
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/rlkit/ratelimit"
	"go.yaml.in/yaml/v3"
)

// Config is a loaded set of domains, each a tree of descriptors, in
// envoyproxy/ratelimit's format. It is immutable: a reload builds a new
// Config and hands it to [Service.SetConfig].
type Config struct {
	domains map[string]*node
	files   map[string]string // domain -> the file that defined it
	limits  []*limitSpec      // every limit of every domain; limitSpec.idx indexes it
}

// Domains returns the names of c's domains, sorted.
func (c *Config) Domains() []string {
	out := make([]string, 0, len(c.domains))
	for d := range c.domains {
		out = append(out, d)
	}
	sort.Strings(out)
	return out
}

// node is one descriptor of the tree: its children by key and value, and
// the limits that apply when a request's descriptor ends on it.
type node struct {
	// path names the node in metrics: the domain and each level's key,
	// with the value when the configuration gives one, joined by '.', as
	// envoyproxy/ratelimit's stats keys are ("messaging.message_type_marketing.to_number").
	path     string
	children map[string]*keyNodes // by key

	limits    []*limitSpec // nil for a placeholder
	unlimited bool
	shadow    bool
	// quota (quota_mode): the descriptor's limits deny a request only when
	// every quota_mode descriptor of the request is over its limit.
	quota bool
	// value is the configuration's value (a pattern for a wildcard), or "".
	value string
	// exact names the node without ambiguity (path may not: key "a_b" and
	// key "a" with value "b" are both "a_b"): every level's key and value,
	// quoted.
	exact string
	// detailed and valueToMetric put the request's values in metric
	// names (detailed_metric, value_to_metric); dynamicName is set when
	// this node's names need the request's values: it is detailed, or it
	// or a node above it has valueToMetric (anyVTM).
	detailed, valueToMetric, anyVTM, dynamicName bool
	// share is the value pattern (with its '*') whose matches share one
	// counter (share_threshold), or "".
	share string
}

// keyNodes are the children of a node for one key: by exact value, by
// wildcard pattern (in file order), and the key-only default.
type keyNodes struct {
	byValue map[string]*node
	wild    []wildNode
	any     *node
}

type wildNode struct {
	parts []string // the pattern split on '*'
	n     *node
}

// limitSpec is one rate limit of a descriptor.
type limitSpec struct {
	idx    int // position in Config.limits
	id     string
	exact  string // the node's exact name, with the id's "#n"
	policy ratelimit.Policy
	never  bool // requests_per_unit 0: every hit is over the limit
	// current is what the statuses report as current_limit.
	current  *rlspb.RateLimitResponse_RateLimit
	name     string
	replaces []string
	// window, when not 0, is the fixed window a status's
	// duration_until_reset counts down to.
	window time.Duration
}

// ConfigError is the error of a configuration that cannot be loaded. Its
// message names the file and line: "ratelimit: envoylimit: rl.yaml:12:
// unknown key \"rate_limt\"".
type ConfigError struct {
	File string
	Line int // 0 when the error is not on one line
	Msg  string
}

func (e *ConfigError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("ratelimit: envoylimit: %s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("ratelimit: envoylimit: %s: %s", e.File, e.Msg)
}

// Unwrap makes a ConfigError match [ratelimit.ErrInvalidConfig].
func (e *ConfigError) Unwrap() error { return ratelimit.ErrInvalidConfig }

// LoadConfig reads the configuration from paths: YAML files, and
// directories whose .yaml and .yml files are read (not their
// subdirectories, nor files whose names start with '.'), in name order.
// Every file holds one domain (or several, as YAML documents separated by
// "---"); a domain defined twice is an error. The error of a bad file is a
// [*ConfigError] naming its line.
func LoadConfig(paths ...string) (*Config, error) {
	files, err := configFiles(paths)
	if err != nil {
		return nil, err
	}
	c := newConfig()
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			return nil, &ConfigError{File: f, Msg: err.Error()}
		}
		if err := c.parse(f, data); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// configFiles lists the configuration files of paths, as LoadConfig
// reads them.
func configFiles(paths []string) ([]string, error) {
	if len(paths) == 0 {
		return nil, &ConfigError{File: "(none)", Msg: "no configuration path given"}
	}
	var files []string
	for _, p := range paths {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, &ConfigError{File: p, Msg: err.Error()}
		}
		if !fi.IsDir() {
			files = append(files, p)
			continue
		}
		ents, err := os.ReadDir(p) // sorted by name
		if err != nil {
			return nil, &ConfigError{File: p, Msg: err.Error()}
		}
		for _, e := range ents {
			name := e.Name()
			if e.IsDir() || strings.HasPrefix(name, ".") {
				continue
			}
			if ext := filepath.Ext(name); ext == ".yaml" || ext == ".yml" {
				files = append(files, filepath.Join(p, name))
			}
		}
	}
	return files, nil
}

// ParseConfig parses one file's contents, named name in errors.
func ParseConfig(name string, data []byte) (*Config, error) {
	c := newConfig()
	if err := c.parse(name, data); err != nil {
		return nil, err
	}
	return c, nil
}

func newConfig() *Config {
	return &Config{domains: map[string]*node{}, files: map[string]string{}}
}

// parser holds what a file's parse needs.
type parser struct {
	c    *Config
	file string
}

func (p *parser) errf(n *yaml.Node, format string, args ...any) error {
	line := 0
	if n != nil {
		line = n.Line
	}
	return &ConfigError{File: p.file, Line: line, Msg: fmt.Sprintf(format, args...)}
}

func (c *Config) parse(file string, data []byte) error {
	p := &parser{c: c, file: file}
	dec := yaml.NewDecoder(strings.NewReader(string(data)))
	docs := 0
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return &ConfigError{File: file, Line: yamlErrLine(err), Msg: yamlErrMsg(err)}
		}
		if len(doc.Content) == 0 {
			continue // an empty document
		}
		docs++
		if err := p.domain(doc.Content[0]); err != nil {
			return err
		}
	}
	if docs == 0 {
		return &ConfigError{File: file, Msg: "no domain: the file is empty"}
	}
	return nil
}

// yamlErrLine and yamlErrMsg take the line out of a YAML syntax error
// ("yaml: line 3: mapping values are not allowed in this context").
func yamlErrLine(err error) int {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return 0
	}
	msg := err.Error()
	if rest, ok := strings.CutPrefix(msg, "yaml: line "); ok {
		if i := strings.IndexByte(rest, ':'); i > 0 {
			if n, err := strconv.Atoi(rest[:i]); err == nil {
				return n
			}
		}
	}
	return 0
}

func yamlErrMsg(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if i := strings.Index(rest, ": "); i > 0 {
			return "invalid YAML: " + rest[i+2:]
		}
	}
	return "invalid YAML: " + msg
}

// fields checks that n is a mapping whose keys are all in known, and
// returns its values by key. Aliases are followed, merge keys ("<<") merged
// (the mapping's own keys first), and a null value is no value.
func (p *parser) fields(n *yaml.Node, what string, known ...string) (map[string]*yaml.Node, error) {
	n = deref(n)
	if n.Kind != yaml.MappingNode {
		return nil, p.errf(n, "%s must be a mapping, got %s", what, kindName(n))
	}
	out := make(map[string]*yaml.Node, len(n.Content)/2)
	var merged []*yaml.Node // the mappings of "<<", in order
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := deref(n.Content[i]), deref(n.Content[i+1])
		if k.Kind != yaml.ScalarNode {
			return nil, p.errf(k, "%s has a key that is not a string", what)
		}
		if k.Tag == "!!merge" || (k.Value == "<<" && k.Style == 0) {
			if v.Kind == yaml.SequenceNode {
				for _, m := range v.Content {
					merged = append(merged, deref(m))
				}
			} else {
				merged = append(merged, v)
			}
			continue
		}
		if !slices.Contains(known, k.Value) {
			return nil, p.errf(k, "unknown key %q in %s (known: %s)", k.Value, what, strings.Join(known, ", "))
		}
		if _, dup := out[k.Value]; dup {
			return nil, p.errf(k, "key %q given twice in %s", k.Value, what)
		}
		out[k.Value] = v
	}
	for _, m := range merged {
		from, err := p.fields(m, what, known...)
		if err != nil {
			return nil, err
		}
		for k, v := range from {
			if _, ok := out[k]; !ok {
				out[k] = v
			}
		}
	}
	for k, v := range out {
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			delete(out, k) // "key:" with nothing, or "~": absent
		}
	}
	return out, nil
}

// deref follows n's aliases to the node they name.
func deref(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	return n
}

func kindName(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		return fmt.Sprintf("%q", n.Value)
	case yaml.AliasNode:
		return "an alias"
	}
	return "nothing"
}

func (p *parser) str(n *yaml.Node, key string) (string, error) {
	if n == nil {
		return "", nil
	}
	if n.Kind != yaml.ScalarNode || n.Tag == "!!null" {
		if n.Tag == "!!null" {
			return "", nil
		}
		return "", p.errf(n, "%s must be a string, got %s", key, kindName(n))
	}
	return n.Value, nil
}

func (p *parser) boolean(n *yaml.Node, key string) (bool, error) {
	if n == nil {
		return false, nil
	}
	var b bool
	if n.Kind != yaml.ScalarNode || n.Decode(&b) != nil {
		return false, p.errf(n, "%s must be true or false, got %s", key, kindName(n))
	}
	return b, nil
}

// count decodes a non-negative integer that fits max.
func (p *parser) count(n *yaml.Node, key string, max uint64) (uint64, error) {
	var v uint64
	if n.Kind != yaml.ScalarNode || n.Decode(&v) != nil || v > max {
		return 0, p.errf(n, "%s must be a whole number from 0 to %d, got %s", key, max, kindName(n))
	}
	return v, nil
}

func (p *parser) list(n *yaml.Node, key string) ([]*yaml.Node, error) {
	n = deref(n)
	if n == nil || n.Tag == "!!null" {
		return nil, nil
	}
	if n.Kind != yaml.SequenceNode {
		return nil, p.errf(n, "%s must be a list, got %s", key, kindName(n))
	}
	return n.Content, nil
}

var domainKeys = []string{"domain", "descriptors"}

func (p *parser) domain(n *yaml.Node) error {
	f, err := p.fields(n, "the file's top level", domainKeys...)
	if err != nil {
		return err
	}
	name, err := p.str(f["domain"], "domain")
	if err != nil {
		return err
	}
	if name == "" {
		return p.errf(n, "the domain must be given and not empty")
	}
	if prev, dup := p.c.files[name]; dup {
		return p.errf(f["domain"], "domain %q is already defined in %s", name, prev)
	}
	if strings.HasPrefix(name, "#") {
		return p.errf(f["domain"], "a domain must not start with '#' (the names of the limits requests carry do), got %q", name)
	}
	root := &node{path: name, exact: strconv.Quote(name)}
	first := len(p.c.limits)
	if err := p.descriptors(root, f["descriptors"]); err != nil {
		return err
	}
	uniqueIDs(p.c.limits[first:])
	p.c.domains[name] = root
	p.c.files[name] = p.file
	return nil
}

var descriptorKeys = []string{
	"key", "value", "rate_limit", "rate_limits", "descriptors", "shadow_mode", "detailed_metric",
	"value_to_metric", "share_threshold", "metadata", "quota_mode",
}

func (p *parser) descriptors(parent *node, n *yaml.Node) error {
	items, err := p.list(n, "descriptors")
	if err != nil {
		return err
	}
	for _, item := range items {
		if err := p.descriptor(parent, item); err != nil {
			return err
		}
	}
	return nil
}

func (p *parser) descriptor(parent *node, n *yaml.Node) error {
	f, err := p.fields(n, "a descriptor", descriptorKeys...)
	if err != nil {
		return err
	}
	key, err := p.str(f["key"], "key")
	if err != nil {
		return err
	}
	if key == "" {
		return p.errf(n, "a descriptor must have a key")
	}
	value, err := p.str(f["value"], "value")
	if err != nil {
		return err
	}
	d := &node{path: parent.path + "." + key, exact: parent.exact + "/" + strconv.Quote(key) + "=" + strconv.Quote(value)}
	if value != "" {
		d.path += "_" + value
	}
	for _, b := range []struct {
		key string
		dst *bool
	}{{"shadow_mode", &d.shadow}, {"quota_mode", &d.quota}, {"detailed_metric", &d.detailed}, {"value_to_metric", &d.valueToMetric}} {
		if *b.dst, err = p.boolean(f[b.key], b.key); err != nil {
			return err
		}
	}
	d.value = value
	d.anyVTM = parent.anyVTM || d.valueToMetric
	d.dynamicName = d.anyVTM || d.detailed
	share, err := p.boolean(f["share_threshold"], "share_threshold")
	if err != nil {
		return err
	}
	if share {
		if !strings.Contains(value, "*") {
			return p.errf(f["share_threshold"], "share_threshold needs a wildcard value (with '*'), got %q", value)
		}
		d.share = value
	}
	if f["rate_limit"] != nil && f["rate_limits"] != nil {
		return p.errf(f["rate_limits"], "a descriptor has rate_limit or rate_limits, not both")
	}
	if rl := f["rate_limit"]; rl != nil {
		if err := p.rateLimit(d, rl, d.path); err != nil {
			return err
		}
	}
	if rls := f["rate_limits"]; rls != nil {
		items, err := p.list(rls, "rate_limits")
		if err != nil {
			return err
		}
		if len(items) == 0 {
			return p.errf(rls, "rate_limits must list at least one limit")
		}
		for i, item := range items {
			if err := p.rateLimit(d, item, d.path+"#"+strconv.Itoa(i+1)); err != nil {
				return err
			}
			if d.unlimited {
				return p.errf(item, "unlimited cannot be one of several rate_limits")
			}
		}
	}
	if err := p.descriptors(d, f["descriptors"]); err != nil {
		return err
	}

	if parent.children == nil {
		parent.children = map[string]*keyNodes{}
	}
	kn := parent.children[key]
	if kn == nil {
		kn = &keyNodes{byValue: map[string]*node{}}
		parent.children[key] = kn
	}
	dup := false
	switch {
	case value == "":
		dup, kn.any = kn.any != nil, d
	case strings.Contains(value, "*"):
		for _, w := range kn.wild {
			dup = dup || w.n.path == d.path
		}
		kn.wild = append(kn.wild, wildNode{parts: strings.Split(value, "*"), n: d})
	default:
		_, dup = kn.byValue[value]
		kn.byValue[value] = d
	}
	if dup {
		return p.errf(n, "duplicate descriptor %q", d.path)
	}
	return nil
}

var rateLimitKeys = []string{
	"unit", "requests_per_unit", "unlimited", "name", "replaces",
	// This package's extensions.
	"algorithm", "window", "burst", "calendar",
}

// units are the proto's units and their lengths, as envoyproxy/ratelimit
// counts them: a month is 30 days and a year 365, from the Unix epoch.
var units = map[string]struct {
	unit rlspb.RateLimitResponse_RateLimit_Unit
	d    time.Duration
	cal  ratelimit.CalendarUnit
}{
	"second": {rlspb.RateLimitResponse_RateLimit_SECOND, time.Second, 0},
	"minute": {rlspb.RateLimitResponse_RateLimit_MINUTE, time.Minute, 0},
	"hour":   {rlspb.RateLimitResponse_RateLimit_HOUR, time.Hour, 0},
	"day":    {rlspb.RateLimitResponse_RateLimit_DAY, 24 * time.Hour, ratelimit.Daily},
	"week":   {rlspb.RateLimitResponse_RateLimit_WEEK, 7 * 24 * time.Hour, ratelimit.Weekly},
	"month":  {rlspb.RateLimitResponse_RateLimit_MONTH, 30 * 24 * time.Hour, ratelimit.Monthly},
	"year":   {rlspb.RateLimitResponse_RateLimit_YEAR, 365 * 24 * time.Hour, ratelimit.Yearly},
}

// algorithm is the algorithm a decision on the limit is reported under:
// its policy's, a fixed window for a limit of 0 requests per unit (which
// has no policy).
func (s *limitSpec) algorithm() ratelimit.Algorithm {
	if s.never {
		return ratelimit.FixedWindowAlgorithm
	}
	return s.policy.Algorithm
}

// unitFor returns the unit lasting d, or UNKNOWN.
func unitFor(d time.Duration) rlspb.RateLimitResponse_RateLimit_Unit {
	for _, u := range units {
		if u.d == d {
			return u.unit
		}
	}
	return rlspb.RateLimitResponse_RateLimit_UNKNOWN
}

var algorithms = map[string]ratelimit.Algorithm{
	"fixedwindow":    ratelimit.FixedWindowAlgorithm,
	"slidinglog":     ratelimit.SlidingLogAlgorithm,
	"slidingcounter": ratelimit.SlidingCounterAlgorithm,
	"tokenbucket":    ratelimit.TokenBucketAlgorithm,
	"leakybucket":    ratelimit.LeakyBucketAlgorithm,
	"quota":          ratelimit.QuotaAlgorithm,
}

func (p *parser) rateLimit(d *node, n *yaml.Node, id string) error {
	f, err := p.fields(n, "a rate_limit", rateLimitKeys...)
	if err != nil {
		return err
	}
	spec := &limitSpec{id: id, exact: d.exact + id[len(d.path):]}
	if spec.name, err = p.str(f["name"], "name"); err != nil {
		return err
	}
	reps, err := p.list(f["replaces"], "replaces")
	if err != nil {
		return err
	}
	for _, r := range reps {
		rf, err := p.fields(r, "a replaces entry", "name")
		if err != nil {
			return err
		}
		name, err := p.str(rf["name"], "name")
		if err != nil {
			return err
		}
		if name == "" {
			return p.errf(r, "a replaces entry must have a name")
		}
		if name == spec.name {
			return p.errf(r, "a limit cannot replace itself (%q)", name)
		}
		spec.replaces = append(spec.replaces, name)
	}
	unlimited, err := p.boolean(f["unlimited"], "unlimited")
	if err != nil {
		return err
	}
	unitName, err := p.str(f["unit"], "unit")
	if err != nil {
		return err
	}
	if unlimited {
		for _, k := range []string{"unit", "requests_per_unit", "algorithm", "window", "burst", "calendar"} {
			if f[k] != nil {
				return p.errf(f[k], "an unlimited rate_limit takes no %s", k)
			}
		}
		d.unlimited = true
		d.limits = append(d.limits, spec) // for its name and replaces; never charged
		spec.idx = -1
		return nil
	}
	algName, err := p.str(f["algorithm"], "algorithm")
	if err != nil {
		return err
	}
	alg := ratelimit.FixedWindowAlgorithm
	if algName != "" {
		var ok bool
		if alg, ok = algorithms[algName]; !ok {
			return p.errf(f["algorithm"], "unknown algorithm %q (known: fixedwindow, slidinglog, slidingcounter, tokenbucket, leakybucket, quota)", algName)
		}
	}
	rpuNode := f["requests_per_unit"]
	if rpuNode == nil {
		return p.errf(n, "a rate_limit needs requests_per_unit (or unlimited: true)")
	}
	rpu, err := p.count(rpuNode, "requests_per_unit", 1<<32-1)
	if err != nil {
		return err
	}
	// The period: unit, or the window extension.
	var period time.Duration
	var unit rlspb.RateLimitResponse_RateLimit_Unit
	u, unitOK := units[strings.ToLower(unitName)]
	switch {
	case f["window"] != nil && unitName != "":
		return p.errf(f["window"], "a rate_limit has unit or window, not both")
	case f["window"] != nil:
		s, err := p.str(f["window"], "window")
		if err != nil {
			return err
		}
		if period, err = time.ParseDuration(s); err != nil || period <= 0 {
			return p.errf(f["window"], "window must be a positive duration such as 30s or 5m, got %q", s)
		}
		unit = unitFor(period)
	case unitName == "":
		return p.errf(n, "a rate_limit needs a unit (second, minute, hour, day, week, month, year) or a window")
	case !unitOK:
		return p.errf(f["unit"], "unknown unit %q (known: second, minute, hour, day, week, month, year)", unitName)
	default:
		period, unit = u.d, u.unit
	}
	spec.current = &rlspb.RateLimitResponse_RateLimit{Name: spec.name, RequestsPerUnit: uint32(rpu), Unit: unit}
	if f["burst"] != nil && alg != ratelimit.TokenBucketAlgorithm && alg != ratelimit.LeakyBucketAlgorithm {
		return p.errf(f["burst"], "burst applies to algorithm tokenbucket or leakybucket, not %s", alg)
	}
	if f["calendar"] != nil && alg != ratelimit.QuotaAlgorithm {
		return p.errf(f["calendar"], "calendar applies to algorithm quota, not %s", alg)
	}
	burst := rpu
	if f["burst"] != nil {
		if burst, err = p.count(f["burst"], "burst", 1<<31-1); err != nil {
			return err
		}
		if burst == 0 {
			return p.errf(f["burst"], "burst must be positive")
		}
	}
	if rpu == 0 {
		// Envoy's deny-list idiom: every hit is over the limit.
		spec.never = true
		if alg == ratelimit.FixedWindowAlgorithm {
			spec.window = period
		}
		p.add(d, spec)
		return nil
	}
	limit := int(min(rpu, 1<<31-1))
	switch alg {
	case ratelimit.FixedWindowAlgorithm:
		spec.policy = ratelimit.FixedWindowPolicy(limit, period)
		spec.window = period
	case ratelimit.SlidingLogAlgorithm:
		spec.policy = ratelimit.SlidingLogPolicy(limit, period)
	case ratelimit.SlidingCounterAlgorithm:
		spec.policy = ratelimit.SlidingCounterPolicy(limit, period)
	case ratelimit.TokenBucketAlgorithm:
		spec.policy = ratelimit.TokenBucketPolicy(ratelimit.Per(limit, period), int(burst))
	case ratelimit.LeakyBucketAlgorithm:
		if period%time.Duration(rpu) != 0 {
			return p.errf(rpuNode, "a leaky bucket leaks one request every unit/requests_per_unit, which must be a whole number of nanoseconds: %v/%d is not", period, rpu)
		}
		spec.policy = ratelimit.LeakyBucketPolicy(int(burst), period/time.Duration(rpu))
	case ratelimit.QuotaAlgorithm:
		if !unitOK || u.cal == 0 {
			return p.errf(n, "a quota needs unit day, week, month or year (a calendar period), got %q", unitName)
		}
		cal, err := p.calendar(f["calendar"], u.cal)
		if err != nil {
			return err
		}
		spec.policy = ratelimit.QuotaPolicy(limit, cal)
	}
	if err := spec.policy.Validate(); err != nil {
		return p.errf(n, "%s", strings.TrimPrefix(err.Error(), "ratelimit: "))
	}
	p.add(d, spec)
	return nil
}

// uniqueIDs gives the limits of a domain whose ids (their paths) are
// taken by several limits a suffix of their own: a hash of their exact
// names, so that each limit has its own limiter, now and after a reload.
func uniqueIDs(specs []*limitSpec) {
	seen := make(map[string]int, len(specs))
	for _, s := range specs {
		seen[s.id]++
	}
	for _, s := range specs {
		if seen[s.id] > 1 {
			h := fnv.New32a()
			h.Write([]byte(s.exact))
			s.id += fmt.Sprintf("~%08x", h.Sum32())
		}
	}
}

func (p *parser) add(d *node, spec *limitSpec) {
	spec.idx = len(p.c.limits)
	p.c.limits = append(p.c.limits, spec)
	d.limits = append(d.limits, spec)
}

var calendarKeys = []string{"timezone", "hour", "minute", "week_start", "month_day"}

var weekdays = map[string]time.Weekday{
	"sunday": time.Sunday, "monday": time.Monday, "tuesday": time.Tuesday, "wednesday": time.Wednesday,
	"thursday": time.Thursday, "friday": time.Friday, "saturday": time.Saturday,
}

func (p *parser) calendar(n *yaml.Node, unit ratelimit.CalendarUnit) (ratelimit.Calendar, error) {
	cal := ratelimit.Calendar{Unit: unit}
	if n == nil {
		return cal, nil
	}
	f, err := p.fields(n, "a calendar", calendarKeys...)
	if err != nil {
		return cal, err
	}
	if tz := f["timezone"]; tz != nil {
		name, err := p.str(tz, "timezone")
		if err != nil {
			return cal, err
		}
		if cal.Location, err = time.LoadLocation(name); err != nil || name == "" || name == "Local" {
			return cal, p.errf(tz, "timezone must be an IANA zone name such as Europe/Paris, got %q", name)
		}
	}
	for _, k := range []struct {
		key string
		max uint64
		dst *int
	}{{"hour", 23, &cal.Hour}, {"minute", 59, &cal.Minute}, {"month_day", 31, &cal.MonthDay}} {
		if f[k.key] == nil {
			continue
		}
		v, err := p.count(f[k.key], k.key, k.max)
		if err != nil {
			return cal, err
		}
		*k.dst = int(v)
	}
	if ws := f["week_start"]; ws != nil {
		name, err := p.str(ws, "week_start")
		if err != nil {
			return cal, err
		}
		day, ok := weekdays[strings.ToLower(name)]
		if !ok {
			return cal, p.errf(ws, "week_start must be a day of the week such as monday, got %q", name)
		}
		cal.WeekStart = day
	}
	return cal, nil
}
