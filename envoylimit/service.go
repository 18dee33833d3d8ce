package envoylimit

import (
	"context"
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	rlcommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlspb "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/observe"
	"github.com/rlkit/ratelimit/internal/timesrc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Service is an Envoy rate limit service: it implements
// envoy.service.ratelimit.v3.RateLimitService over a [Config] and one
// [ratelimit.KeyedLimiter] per limit. Register it on any gRPC server with
// rlspb.RegisterRateLimitServiceServer. It is safe for concurrent use.
type Service struct {
	rlspb.UnimplementedRateLimitServiceServer

	opts options
	ts   timesrc.Source
	cur  atomic.Pointer[state]

	mu   sync.Mutex // serializes SetConfig; guards held
	held map[string]*heldLimiter

	overrides overrideSet
}

// state is a configuration with its limiters, by limitSpec.idx.
type state struct {
	cfg  *Config
	lims []ratelimit.KeyedLimiter
}

// heldLimiter is the limiter of a limit id, kept across reloads.
type heldLimiter struct {
	lim    ratelimit.KeyedLimiter
	policy ratelimit.Policy
}

// policySetter is the method through which a reload changes a kept
// limiter's policy: [ratelimit.Keyed] and redislimit's Limiter have it.
type policySetter interface {
	SetPolicy(p ratelimit.Policy, mode ratelimit.Inheritance) error
}

// policyChange is a kept limiter's change of policy on a reload.
type policyChange struct {
	lim      policySetter
	from, to ratelimit.Policy
}

// NewService returns a Service serving cfg. It returns an error wrapping
// [ratelimit.ErrInvalidConfig] when cfg is nil or an option is invalid,
// and the error of a limiter WithLimiters' function could not make.
func NewService(cfg *Config, opts ...Option) (*Service, error) {
	s := &Service{opts: defaultOptions(), held: map[string]*heldLimiter{}}
	for _, o := range opts {
		if o == nil {
			continue
		}
		if err := o(&s.opts); err != nil {
			return nil, err
		}
	}
	s.ts = timesrc.New(s.opts.clock)
	if !s.opts.custom {
		clk := s.opts.clock
		s.opts.limiters = func(name string, p ratelimit.Policy) (ratelimit.KeyedLimiter, error) {
			return ratelimit.NewKeyed(p, ratelimit.WithName(name), ratelimit.WithClock(clk))
		}
	}
	s.overrides.m = map[overrideID]*override{}
	if err := s.SetConfig(cfg); err != nil {
		return nil, err
	}
	return s, nil
}

// Config returns the configuration in force.
func (s *Service) Config() *Config { return s.cur.Load().cfg }

// SetConfig puts cfg in force, atomically: calls that started before use
// the old configuration, later ones the new. A limit that keeps its name
// (its descriptor's path, see [WithLimiters]) keeps its limiter and the
// keys' state: a changed policy is applied with SetPolicy and
// [ratelimit.KeepUsed], so a key keeps what it used, up to the new limit.
// Limits no longer in cfg are dropped. On an error (a nil cfg, a limiter
// that cannot be made or refuses its new policy) the old configuration
// stays in force, with its policies.
func (s *Service) SetConfig(cfg *Config) error {
	if cfg == nil {
		return configError("envoylimit: the configuration is nil")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	lims := make([]ratelimit.KeyedLimiter, len(cfg.limits))
	held := make(map[string]*heldLimiter, len(cfg.limits))
	var changes []policyChange
	for i, spec := range cfg.limits {
		if spec.never {
			lims[i] = neverLimiter{}
			continue
		}
		if h := s.held[spec.id]; h != nil {
			if h.policy == spec.policy {
				lims[i], held[spec.id] = h.lim, h
				continue
			}
			if ps, ok := h.lim.(policySetter); ok {
				changes = append(changes, policyChange{ps, h.policy, spec.policy})
				lims[i], held[spec.id] = h.lim, &heldLimiter{lim: h.lim, policy: spec.policy}
				continue
			}
		}
		lim, err := s.newLimiter(spec.id, spec.policy)
		if err != nil {
			return err
		}
		lims[i], held[spec.id] = lim, &heldLimiter{lim: lim, policy: spec.policy}
	}
	for i, c := range changes {
		if err := c.lim.SetPolicy(c.to, ratelimit.KeepUsed); err != nil {
			// Put back the policies changed before this one.
			for _, done := range changes[:i] {
				_ = done.lim.SetPolicy(done.from, ratelimit.KeepUsed)
			}
			return fmt.Errorf("ratelimit: envoylimit: changing a limit's policy: %w", err)
		}
	}
	s.held = held
	s.cur.Store(&state{cfg: cfg, lims: lims})
	return nil
}

// newLimiter makes the limiter of limit name with WithLimiters' function;
// one that reports to an observer of its own is refused when the Service
// has one, since every decision would count twice.
func (s *Service) newLimiter(name string, p ratelimit.Policy) (ratelimit.KeyedLimiter, error) {
	lim, err := s.opts.limiters(name, p)
	if err == nil && lim == nil {
		err = fmt.Errorf("ratelimit: envoylimit: WithLimiters' function returned no limiter")
	}
	if err == nil && s.opts.observer != nil && observe.Describe(lim).Observed {
		err = configError("envoylimit.WithObserver: the limiter has an observer of its own: each decision would be reported twice (drop one)")
	}
	if err != nil {
		return nil, fmt.Errorf("ratelimit: envoylimit: limit %s: %w", name, err)
	}
	return lim, nil
}

// charge is one limit a request's descriptor is charged to.
type charge struct {
	desc   int
	lim    ratelimit.KeyedLimiter
	spec   *limitSpec // the configuration's, or the request's own limit's
	key    string
	name   string
	hits   int
	shadow bool
	quota  bool

	d       ratelimit.Decision
	err     error
	latency time.Duration
	done    bool // decided: d and err are its limit's answer
	charged bool // AllowN admitted it; a rollback refunds it
}

// maxHits bounds a descriptor's hits: beyond it no limit could admit
// them, and it keeps them exact in every home.
const maxHits = 1 << 52

// ShouldRateLimit decides a request: every descriptor's limits, all or
// nothing (a request one limit denies is charged to none), shadow_mode
// limits apart. See the package documentation for the exact rules.
func (s *Service) ShouldRateLimit(ctx context.Context, req *rlspb.RateLimitRequest) (*rlspb.RateLimitResponse, error) {
	if req.GetDomain() == "" {
		return nil, status.Error(codes.InvalidArgument, "ratelimit: envoylimit: the request's domain is empty")
	}
	if len(req.GetDescriptors()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "ratelimit: envoylimit: the request has no descriptors")
	}
	st := s.cur.Load()
	root := st.cfg.domains[req.GetDomain()]

	var buf [8]charge
	charges := buf[:0]
	var unlimited []bool // unlimited[i]: descriptor i is unlimited (nil: none is)
	var replaced []string
	var pathBuf [maxDepth]*node
	for i, desc := range req.GetDescriptors() {
		entries := desc.GetEntries()
		if root == nil || len(entries) == 0 {
			// A domain the configuration lacks limits nothing, not even a
			// descriptor's own limit; nor does a descriptor without entries
			// (both as in envoyproxy/ratelimit).
			continue
		}
		hits := hitsOf(req, desc)
		if ov := desc.GetLimit(); ov != nil {
			c, err := s.overrideCharge(req.GetDomain(), i, desc, ov, hits)
			if err != nil {
				return nil, err
			}
			charges = append(charges, c)
			continue
		}
		n, path := match(root, entries, pathBuf[:0])
		if n == nil || len(n.limits) == 0 {
			continue
		}
		for _, spec := range n.limits {
			replaced = append(replaced, spec.replaces...)
		}
		if n.unlimited {
			if unlimited == nil {
				unlimited = make([]bool, len(req.GetDescriptors()))
			}
			unlimited[i] = true
			continue
		}
		key := limiterKey(entries, path)
		for _, spec := range n.limits {
			c := charge{
				desc: i, lim: st.lims[spec.idx], spec: spec, key: key, name: spec.id, hits: hits,
				shadow: n.shadow, quota: n.quota,
			}
			if s.opts.observer != nil {
				c.name = metricName(req.GetDomain(), n, spec.id, entries, path)
			}
			charges = append(charges, c)
		}
	}
	if len(replaced) > 0 {
		charges = dropReplaced(charges, replaced)
	}

	s.decide(ctx, charges)
	if s.opts.failure == FailToEnvoy {
		for i := range charges {
			if c := &charges[i]; c.err != nil && !c.shadow {
				s.rollback(ctx, charges)
				s.observe(ctx, charges)
				return nil, status.Errorf(codes.Unavailable, "ratelimit: envoylimit: limit %s: %v", c.name, c.err)
			}
		}
	}
	denied := overLimit(charges, len(req.GetDescriptors()))
	if denied {
		s.rollback(ctx, charges) // what quota_mode limits, or the enforced ones, admitted
	}
	s.observe(ctx, charges)
	return s.respond(req, charges, unlimited, denied), nil
}

// overLimit reports whether a call is denied: a limit of a descriptor
// denied its hits, or every quota_mode descriptor of the call is over its
// limit (a shadow_mode one never is); shadow_mode limits deny nothing.
func overLimit(charges []charge, descs int) bool {
	var quota, quotaOver []bool // by descriptor, when the call has quota_mode ones
	for i := range charges {
		c := &charges[i]
		switch {
		case c.quota:
			if quota == nil {
				quota, quotaOver = make([]bool, descs), make([]bool, descs)
			}
			quota[c.desc] = true
			quotaOver[c.desc] = quotaOver[c.desc] || (c.denied() && !c.shadow)
		case c.denied() && !c.shadow:
			return true
		}
	}
	if quota == nil {
		return false
	}
	for i, q := range quota {
		if q && !quotaOver[i] {
			return false
		}
	}
	return true
}

// hitsOf is the hits a descriptor is charged: its own hits_addend when
// set (0 checks without charging), or else the request's, 0 meaning 1.
func hitsOf(req *rlspb.RateLimitRequest, desc *rlcommon.RateLimitDescriptor) int {
	h := uint64(max(1, req.GetHitsAddend()))
	if a := desc.GetHitsAddend(); a != nil {
		h = a.GetValue()
	}
	return int(min(h, maxHits))
}

// dropReplaced drops the charges of limits named in replaced (by a
// matching descriptor's replaces).
func dropReplaced(charges []charge, replaced []string) []charge {
	out := charges[:0]
	for _, c := range charges {
		if c.spec.name == "" || !slices.Contains(replaced, c.spec.name) {
			out = append(out, c)
		}
	}
	return out
}

// decide decides every charge: the enforced ones all or nothing, the
// shadow ones each on its own; a charge of 0 hits only looks.
func (s *Service) decide(ctx context.Context, charges []charge) {
	enforced, atomicOK := 0, true
	for i := range charges {
		c := &charges[i]
		if c.apart() {
			s.decideOne(ctx, c)
			// A quota_mode limit's admission is undone if the call is denied.
			c.charged = c.quota && !c.shadow && c.hits > 0 && c.d.Allowed && !c.spec.never
			continue
		}
		enforced++
		if _, ok := c.lim.(*ratelimit.Keyed); !ok {
			atomicOK = false
		}
	}
	switch {
	case enforced == 0:
	case enforced == 1:
		for i := range charges {
			if c := &charges[i]; !c.apart() {
				s.decideOne(ctx, c)
				c.charged = c.d.Allowed && !c.spec.never // as AllowAll: a failure policy's admission is refunded too
			}
		}
	case atomicOK:
		s.decideAtomic(ctx, charges)
	default:
		s.decideInOrder(ctx, charges)
	}
}

// decideOne decides c alone: AllowN, or Peek for 0 hits.
func (s *Service) decideOne(ctx context.Context, c *charge) {
	start := s.start()
	switch {
	case c.spec.never:
		c.d = neverDecision(c.hits)
	case c.hits == 0:
		c.d, c.err = c.lim.Peek(ctx, c.key, 0)
	default:
		c.d, c.err = c.lim.AllowN(ctx, c.key, c.hits)
	}
	c.latency, c.done = s.since(start), true
}

// decideAtomic decides the enforced charges, all in-memory limiters, with
// ratelimit.AllowAll (exact and atomic), and then learns each one's
// decision with Peek.
func (s *Service) decideAtomic(ctx context.Context, charges []charge) {
	start := s.start()
	var dimBuf [8]ratelimit.Dimension
	var atBuf [8]int
	dims, at := dimBuf[:0], atBuf[:0] // at[j]: the charge of dims[j]
	never := false
	for i := range charges {
		c := &charges[i]
		if c.apart() {
			continue
		}
		never = never || c.spec.never
		dims = append(dims, ratelimit.Dimension{Name: c.name, Limiter: c.lim, Key: c.key, N: c.hits})
		at = append(at, i)
	}
	admitted := false
	if !never {
		md, err := ratelimit.AllowAll(ctx, 1, dims...)
		admitted = md.Allowed && err == nil
		if !admitted && md.Index >= 0 && md.Index < len(dims) {
			// The limit that denied (or failed) says so with its
			// Decision: asked alone it might have room (two descriptors
			// on one counter, each fitting alone).
			c := &charges[at[md.Index]]
			c.d, c.err, c.done = md.Decision, err, true
			c.d.Allowed = false
		}
	}
	latency := s.since(start)
	for i := range charges {
		c := &charges[i]
		if c.apart() || c.done {
			if c.done {
				c.latency = latency
			}
			continue
		}
		c.latency, c.done = latency, true
		switch {
		case c.spec.never:
			c.d = neverDecision(c.hits)
		case admitted:
			c.d, c.err = c.lim.Peek(ctx, c.key, 0)
			c.d.Allowed = true
			c.charged = true
		default:
			c.look(ctx)
		}
	}
}

// decideInOrder decides the enforced charges in order with AllowN until
// one denies or fails; it then asks each later one with Peek.
// ShouldRateLimit refunds the charged ones of a call denied, as on every
// path.
func (s *Service) decideInOrder(ctx context.Context, charges []charge) {
	stopped := false
	for i := range charges {
		c := &charges[i]
		if c.apart() {
			continue
		}
		if stopped {
			start := s.start()
			c.look(ctx)
			c.latency, c.done = s.since(start), true
			continue
		}
		s.decideOne(ctx, c)
		c.charged = c.d.Allowed && !c.spec.never // as AllowAll: a failure policy's admission is refunded too
		if c.err != nil && s.opts.failure == FailToEnvoy {
			break // the call fails: no need to ask the others
		}
		if !c.d.Allowed {
			stopped = true
		}
	}
}

// look decides c without charging it, for a request another limit
// denied: whether c's limit has room for the hits, and what it has left.
func (c *charge) look(ctx context.Context) {
	if c.spec.never {
		c.d = neverDecision(c.hits)
		return
	}
	c.d, c.err = c.lim.Peek(ctx, c.key, c.hits)
	if c.d.Allowed {
		// Peek reports what would remain after the hits.
		c.d.Remaining = min(c.d.Limit, c.d.Remaining+c.hits)
	}
}

// rollback refunds every charged enforced charge: the request is denied.
// A refunded charge reports what it would have admitted.
func (s *Service) rollback(ctx context.Context, charges []charge) {
	ctx = context.WithoutCancel(ctx)
	for i := range charges {
		c := &charges[i]
		if !c.charged {
			continue
		}
		c.charged = false
		if err := c.lim.RefundN(ctx, c.key, c.hits); err == nil {
			c.d.Remaining = min(c.d.Limit, c.d.Remaining+c.hits)
		}
	}
}

func (s *Service) start() time.Time {
	if s.opts.observer == nil {
		return time.Time{}
	}
	return time.Now()
}

func (s *Service) since(t time.Time) time.Duration {
	if t.IsZero() {
		return 0
	}
	return time.Since(t)
}

// neverDecision is the decision of a limit of 0 requests per unit: every
// hit is over it, a check of 0 hits is not.
func neverDecision(hits int) ratelimit.Decision {
	if hits == 0 {
		return ratelimit.Decision{Allowed: true}
	}
	return ratelimit.Decision{RetryAfter: ratelimit.RetryNever}
}

// apart reports whether c is decided on its own, not all or nothing with
// the request's other limits: a shadow_mode or quota_mode limit, or a
// check of 0 hits.
func (c *charge) apart() bool { return c.shadow || c.quota || c.hits == 0 }

// denied reports whether c's limit refused its hits.
func (c *charge) denied() bool { return !c.d.Allowed && c.hits > 0 }

// respond builds the response from the decided charges.
func (s *Service) respond(req *rlspb.RateLimitRequest, charges []charge, unlimited []bool, denied bool) *rlspb.RateLimitResponse {
	descs := req.GetDescriptors()
	resp := &rlspb.RateLimitResponse{
		OverallCode: rlspb.RateLimitResponse_OK,
		Statuses:    make([]*rlspb.RateLimitResponse_DescriptorStatus, len(descs)),
	}
	statuses := make([]rlspb.RateLimitResponse_DescriptorStatus, len(descs))
	// best[i] is the charge that speaks for descriptor i: the one that
	// denied (the longest RetryAfter), or the one with the fewest remaining.
	var bestBuf [8]int
	best := bestBuf[:0]
	for range descs {
		best = append(best, -1)
	}
	headerFrom := -1
	for i := range charges {
		c := &charges[i]
		if b := best[c.desc]; b < 0 || moreRestrictive(c, &charges[b]) {
			best[c.desc] = i
		}
		if !c.shadow && (headerFrom < 0 || moreRestrictive(c, &charges[headerFrom])) {
			headerFrom = i
		}
	}
	now := s.ts.Now()
	for i := range descs {
		st := &statuses[i]
		resp.Statuses[i] = st
		st.Code = rlspb.RateLimitResponse_OK
		if unlimited != nil && unlimited[i] {
			st.LimitRemaining = math.MaxUint32
			continue
		}
		b := best[i]
		if b < 0 {
			continue // no limit: OK
		}
		c := &charges[b]
		st.CurrentLimit = c.spec.current
		st.LimitRemaining = uint32(min(max(c.d.Remaining, 0), math.MaxUint32))
		if reset := c.untilReset(now); reset > 0 {
			st.DurationUntilReset = durationpb.New(reset)
		}
		if c.denied() && !c.shadow {
			st.Code = rlspb.RateLimitResponse_OVER_LIMIT
		}
	}
	if denied && !s.opts.shadow {
		resp.OverallCode = rlspb.RateLimitResponse_OVER_LIMIT
	}
	if s.opts.headers != NoHeaders && headerFrom >= 0 {
		resp.ResponseHeadersToAdd = s.headers(&charges[headerFrom], now)
	}
	return resp
}

// moreRestrictive reports whether a speaks for its descriptor before b: a
// denial before an admission, a longer wait between denials, fewer
// remaining between admissions.
func moreRestrictive(a, b *charge) bool {
	if a.denied() != b.denied() {
		return a.denied()
	}
	if a.denied() {
		return a.d.RetryAfter > b.d.RetryAfter
	}
	return a.d.Remaining < b.d.Remaining
}

// untilReset is a status's duration_until_reset: the time until the
// limit is back to its full quota (the end of a fixed window), or until a
// denied request could pass when that is later.
func (c *charge) untilReset(now int64) time.Duration {
	d := c.d.ResetAfter
	if c.denied() && c.d.RetryAfter != ratelimit.RetryNever && c.d.RetryAfter > d {
		d = c.d.RetryAfter
	}
	if w := int64(c.spec.window); w > 0 && d <= 0 {
		d = time.Duration(w - now%w)
	}
	return d
}

// observe reports every decided charge to the observer.
func (s *Service) observe(ctx context.Context, charges []charge) {
	obs := s.opts.observer
	if obs == nil {
		return
	}
	for i := range charges {
		c := &charges[i]
		if !c.done {
			continue
		}
		info := describe(c.lim)
		ev := ratelimit.Event{
			Name: c.name, Algorithm: c.spec.algorithm(), Home: ratelimit.Home(info.Home), N: c.hits,
			Decision: c.d, Err: c.err, Latency: c.latency,
		}
		switch {
		case c.err != nil && s.opts.failure == FailAsLimiter && info.Fallback != nil && info.Fallback(c.err):
			ev.Outcome = ratelimit.OutcomeFallback
		case c.err != nil:
			ev.Outcome = ratelimit.OutcomeError
		case c.d.Allowed || c.hits == 0:
			ev.Outcome = ratelimit.OutcomeAllowed
		case c.shadow || s.opts.shadow:
			ev.Outcome = ratelimit.OutcomeShadow
		default:
			ev.Outcome = ratelimit.OutcomeDenied
		}
		obs.Observe(ctx, ev)
	}
}

// describe says what the limiter's home tells of it (internal/observe):
// its home, and which of its errors come with its failure policy's
// Decision.
func describe(l ratelimit.KeyedLimiter) observe.Info {
	if _, ok := l.(neverLimiter); ok {
		return observe.Info{Home: uint8(ratelimit.HomeMemory)}
	}
	return observe.Describe(l)
}

// neverLimiter is the limiter of a limit of 0 requests per unit; the
// service decides it without calling it (neverDecision).
type neverLimiter struct{}

func (neverLimiter) AllowN(_ context.Context, _ string, n int) (ratelimit.Decision, error) {
	return neverDecision(n), nil
}
func (neverLimiter) WaitN(context.Context, string, int) error { return ratelimit.ErrExceedsLimit }
func (neverLimiter) RefundN(context.Context, string, int) error {
	return nil
}
func (neverLimiter) Peek(_ context.Context, _ string, n int) (ratelimit.Decision, error) {
	return neverDecision(n), nil
}

// maxOverrides bounds the distinct limits requests may carry (a
// descriptor's limit field) that are in use at once: each has a limiter of
// its own. One unused for a whole window (every key of it back to a fresh
// window) is dropped to make room, which loses nothing.
const maxOverrides = 1024

// overrideSet holds the limiters of the limits requests carry.
type overrideSet struct {
	mu sync.RWMutex
	m  map[overrideID]*override
}

type overrideID struct {
	rpu  uint32
	unit rlspb.RateLimitResponse_RateLimit_Unit
}

type override struct {
	lim  ratelimit.KeyedLimiter
	spec *limitSpec
	last atomic.Int64 // when a call last used it, Unix nanoseconds
}

// overrideCharge is the charge of a descriptor that carries its own limit
// (envoy's per-descriptor limit override): a fixed window of its
// requests_per_unit per unit, with no shadow mode (as envoyproxy/ratelimit
// has it).
func (s *Service) overrideCharge(domain string, i int, desc *rlcommon.RateLimitDescriptor, ov *rlcommon.RateLimitDescriptor_RateLimitOverride, hits int) (charge, error) {
	unit := rlspb.RateLimitResponse_RateLimit_Unit(ov.GetUnit())
	unitName, period := unitOf(unit)
	if period == 0 {
		return charge{}, status.Errorf(codes.InvalidArgument, "ratelimit: envoylimit: descriptor %d's limit has unit %v: want SECOND, MINUTE, HOUR, DAY, WEEK, MONTH or YEAR", i, ov.GetUnit())
	}
	c := charge{desc: i, key: overrideKey(domain, desc.GetEntries()), name: domain + ".override", hits: hits}
	rpu := ov.GetRequestsPerUnit()
	if rpu == 0 {
		c.lim = neverLimiter{}
		c.spec = &limitSpec{never: true, window: period, current: &rlspb.RateLimitResponse_RateLimit{Unit: unit}}
		return c, nil
	}
	id := overrideID{rpu: rpu, unit: unit}
	now := s.ts.Now()
	// Marked used under the lock newOverride evicts under: an override
	// found here is not dropped before this call has charged it.
	s.overrides.mu.RLock()
	o := s.overrides.m[id]
	if o != nil {
		o.last.Store(now)
	}
	s.overrides.mu.RUnlock()
	if o == nil {
		var err error
		if o, err = s.newOverride(id, unitName, period, i, now); err != nil {
			return charge{}, err
		}
	}
	c.lim, c.spec = o.lim, o.spec
	return c, nil
}

// newOverride makes (or finds) the limiter of a limit requests carry.
func (s *Service) newOverride(id overrideID, unitName string, period time.Duration, i int, now int64) (*override, error) {
	s.overrides.mu.Lock()
	defer s.overrides.mu.Unlock()
	if o := s.overrides.m[id]; o != nil {
		return o, nil
	}
	if len(s.overrides.m) >= maxOverrides {
		for oid, o := range s.overrides.m {
			if now-o.last.Load() >= int64(o.spec.window) {
				delete(s.overrides.m, oid)
			}
		}
		if len(s.overrides.m) >= maxOverrides {
			return nil, status.Errorf(codes.ResourceExhausted, "ratelimit: envoylimit: more than %d distinct limits carried by requests in use at once", maxOverrides)
		}
	}
	spec := &limitSpec{
		id:      fmt.Sprintf("#override.%d_per_%s", id.rpu, unitName),
		policy:  ratelimit.FixedWindowPolicy(int(min(id.rpu, math.MaxInt32)), period),
		current: &rlspb.RateLimitResponse_RateLimit{RequestsPerUnit: id.rpu, Unit: id.unit},
		window:  period,
	}
	lim, err := s.newLimiter(spec.id, spec.policy)
	if err != nil {
		return nil, status.Errorf(codes.Internal, "ratelimit: envoylimit: descriptor %d's own limit: %v", i, err)
	}
	o := &override{lim: lim, spec: spec}
	o.last.Store(now)
	s.overrides.m[id] = o
	return o, nil
}

// unitOf returns the name and length of unit; 0 for UNKNOWN.
func unitOf(unit rlspb.RateLimitResponse_RateLimit_Unit) (string, time.Duration) {
	for name, u := range units {
		if u.unit == unit {
			return name, u.d
		}
	}
	return "", 0
}
