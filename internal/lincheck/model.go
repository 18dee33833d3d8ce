package lincheck

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/rlkit/ratelimit"
)

// Option configures [NewModel].
type Option func(*model)

// WithPrecision compares RetryAfter and ResetAfter after rounding the
// reference's up to a whole multiple of d (RetryNever and zero kept), as
// Redis does with d = time.Microsecond.
func WithPrecision(d time.Duration) Option {
	return func(m *model) { m.precision = d }
}

// model is the sequential specification: the in-memory limiter of policy,
// created at start, replayed.
type model struct {
	policy    ratelimit.Policy
	start     time.Time
	precision time.Duration
}

// NewModel returns the porcupine model of p, partitioned by key: each
// key's operations replayed on a limiter p.NewLimiter created at start on
// a manual clock (start is the time of the limiters under test when they
// were created, which the window algorithms align to). It returns the
// policy's error if p is invalid.
func NewModel(p ratelimit.Policy, start time.Time, opts ...Option) (porcupine.Model, error) {
	if _, err := p.NewLimiter(ratelimit.WithClock(NewClock(start))); err != nil {
		return porcupine.Model{}, err
	}
	m := &model{policy: p, start: start}
	for _, o := range opts {
		o(m)
	}
	return porcupine.Model{
		Partition:         partition,
		Init:              func() any { return &node{} },
		Step:              m.step,
		Equal:             equal,
		Hash:              func(s any) uint64 { return s.(*node).hash },
		DescribeOperation: m.describeOp,
		DescribeState:     m.describeState,
	}, nil
}

// node is a state: the operations applied so far, as a persistent list
// (newest first). Everything but mu and the fields it guards is immutable.
type node struct {
	parent *node
	in     Input
	out    Output
	depth  int

	// The canonical hash: prev covers the instants before groupT, sum the
	// operations at groupT (a commutative sum, order within an instant
	// does not count).
	prev, sum, hash uint64
	groupT          int64

	mu    sync.Mutex
	lim   *replayer            // a limiter in this state, nil once taken or never built
	tried map[attempt]*outcome // reference Decisions of the inputs tried here
}

// replayer is a reference limiter and its clock.
type replayer struct {
	lim ratelimit.Limiter
	clk *Clock
}

// attempt is an input tried on a node (the key is the partition's).
type attempt struct {
	n, t int64
	kind Kind
}

// outcome is the reference Decision for an attempt, and the limiter that
// made it (in the child's state) until a child takes it.
type outcome struct {
	d ratelimit.Decision
	r *replayer
}

func (m *model) step(state, input, output any) (bool, any) {
	s, in, out := state.(*node), input.(Input), output.(Output)
	if out.Err != "" {
		return false, s
	}
	if s.depth > 0 && in.T < s.in.T {
		return false, s // time does not run backwards
	}
	key := attempt{n: int64(in.N), t: in.T, kind: in.Kind}
	s.mu.Lock()
	o, ok := s.tried[key]
	if !ok {
		r := s.lim
		s.lim = nil
		if r == nil {
			r = m.replay(s)
		}
		o = &outcome{d: r.apply(in), r: r}
		if s.tried == nil {
			s.tried = make(map[attempt]*outcome)
		}
		s.tried[key] = o
	}
	if !m.same(o.d, out.Decision) {
		s.mu.Unlock()
		return false, s
	}
	r := o.r
	o.r = nil
	s.mu.Unlock()
	return true, s.child(in, out, r)
}

// replay returns a fresh reference limiter brought to s's state.
func (m *model) replay(s *node) *replayer {
	clk := NewClock(m.start)
	lim, err := m.policy.NewLimiter(ratelimit.WithClock(clk))
	if err != nil {
		panic("lincheck: policy validated by NewModel fails: " + err.Error())
	}
	r := &replayer{lim: lim, clk: clk}
	path := make([]Input, s.depth)
	for n := s; n.depth > 0; n = n.parent {
		path[n.depth-1] = n.in
	}
	for _, in := range path {
		r.apply(in)
	}
	return r
}

// apply runs in on the reference at in.T.
func (r *replayer) apply(in Input) ratelimit.Decision {
	r.clk.Set(time.Unix(0, in.T))
	if in.Kind == Peek {
		return r.lim.Peek(in.N)
	}
	return r.lim.AllowN(in.N)
}

// child returns the state after s and in (which returned out), owning r
// (nil: replay when needed).
func (s *node) child(in Input, out Output, r *replayer) *node {
	c := &node{parent: s, in: in, out: out, depth: s.depth + 1, lim: r, groupT: in.T}
	h := opHash(in, out)
	if s.depth > 0 && in.T == s.groupT {
		c.prev, c.sum = s.prev, s.sum+h
	} else {
		c.prev, c.sum = s.hash, h
	}
	c.hash = mix(c.prev ^ mix(uint64(c.groupT)) ^ mix(c.sum+0x9e3779b97f4a7c15))
	return c
}

// same reports whether got is the reference decision ref at the model's
// precision.
func (m *model) same(ref, got ratelimit.Decision) bool {
	if m.precision > 0 {
		ref.RetryAfter = roundUp(ref.RetryAfter, m.precision)
		ref.ResetAfter = roundUp(ref.ResetAfter, m.precision)
	}
	return ref == got
}

// roundUp rounds d up to a multiple of p, keeping RetryNever and d <= 0.
func roundUp(d, p time.Duration) time.Duration {
	if d <= 0 || d == ratelimit.RetryNever || d%p == 0 {
		return d
	}
	return (d/p + 1) * p
}

// canonEntry is what an operation contributes to a state's identity.
type canonEntry struct {
	t       int64
	n       int
	kind    Kind
	allowed bool
}

func canonOf(in Input, out Output) canonEntry {
	return canonEntry{t: in.T, n: in.N, kind: in.Kind, allowed: out.Decision.Allowed}
}

func opHash(in Input, out Output) uint64 {
	e := canonOf(in, out)
	v := uint64(uint32(e.n))<<8 | uint64(e.kind)<<1
	if e.allowed {
		v |= 1
	}
	return mix(v)
}

// mix is splitmix64's finalizer.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// canon returns s's operations in time order, sorted within an instant.
func canon(s *node) []canonEntry {
	es := make([]canonEntry, s.depth)
	for n := s; n.depth > 0; n = n.parent {
		es[n.depth-1] = canonOf(n.in, n.out)
	}
	slices.SortStableFunc(es, func(a, b canonEntry) int {
		if c := cmp.Compare(a.t, b.t); c != 0 {
			return c
		}
		if c := cmp.Compare(a.n, b.n); c != 0 {
			return c
		}
		if c := cmp.Compare(a.kind, b.kind); c != 0 {
			return c
		}
		if a.allowed == b.allowed {
			return 0
		}
		if a.allowed {
			return 1
		}
		return -1
	})
	return es
}

// equal reports whether two states hold the same operations at each
// instant (see the package doc for why the order within an instant does
// not count).
func equal(a, b any) bool {
	x, y := a.(*node), b.(*node)
	if x == y {
		return true
	}
	if x.hash != y.hash || x.depth != y.depth {
		return false
	}
	return slices.Equal(canon(x), canon(y))
}

// partition splits a history by key, keeping each key's operations in
// order.
func partition(history []porcupine.Operation) [][]porcupine.Operation {
	index := map[string]int{}
	var parts [][]porcupine.Operation
	for _, op := range history {
		k := op.Input.(Input).Key
		i, ok := index[k]
		if !ok {
			i = len(parts)
			index[k] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], op)
	}
	return parts
}

func (m *model) describeOp(input, output any) string {
	in, out := input.(Input), output.(Output)
	at := time.Unix(0, in.T).Sub(m.start)
	if out.Err != "" {
		return fmt.Sprintf("%s(%q, %d) at +%v: error %s", in.Kind, in.Key, in.N, at, out.Err)
	}
	return fmt.Sprintf("%s(%q, %d) at +%v = %s", in.Kind, in.Key, in.N, at, describeDecision(out.Decision))
}

func describeDecision(d ratelimit.Decision) string {
	verdict := "denied"
	if d.Allowed {
		verdict = "allowed"
	}
	retry := d.RetryAfter.String()
	if d.RetryAfter == ratelimit.RetryNever {
		retry = "never"
	}
	return fmt.Sprintf("%s remaining=%d/%d retry=%s reset=%v", verdict, d.Remaining, d.Limit, retry, d.ResetAfter)
}

func (m *model) describeState(state any) string {
	s := state.(*node)
	if s.depth == 0 {
		return "fresh " + m.policy.String()
	}
	var admitted int
	for n := s; n.depth > 0; n = n.parent {
		if n.in.Kind == AllowN && n.out.Decision.Allowed {
			admitted += n.in.N
		}
	}
	return fmt.Sprintf("%d ops, %d events admitted; last: %s", s.depth, admitted, m.describeOp(s.in, s.out))
}
