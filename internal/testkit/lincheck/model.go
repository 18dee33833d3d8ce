package lincheck

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
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
	if _, err := p.NewLimiter(ratelimit.WithClock(fakeclock.NewManual(start))); err != nil {
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
	placed bitset // the partition's operations applied so far, by index

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
	clk *fakeclock.Manual
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

// order ranks operations by call time, then client.
type order struct {
	call   int64
	client int
}

func (a order) less(b order) bool {
	return a.call < b.call || a.call == b.call && a.client < b.client
}

// call is the Input porcupine carries: the operation's input, its index
// in its partition and the partition (see partition).
type call struct {
	in   Input
	idx  int
	part *part
}

// part is one partition's operations, for the canonical-order rule of
// step.
type part struct {
	ops   []pop
	byRet []int           // indices by return time
	keeps map[int64][]int // per instant, the operations that consume nothing, by call order
}

// pop is an operation of a partition.
type pop struct {
	in        Input
	out       Output
	at        order
	ret       int64
	consuming bool // an admission: AllowN that was allowed
}

func (m *model) step(state, input, output any) (bool, any) {
	s, c, out := state.(*node), input.(call), output.(Output)
	in := c.in
	if out.Err != "" {
		return false, s
	}
	if s.depth > 0 && in.T < s.in.T {
		return false, s // time does not run backwards
	}
	d, r := s.decide(m, in, true)
	if !m.same(d, out.Decision) {
		return false, s
	}
	if m.refuse(s, c) {
		if r != nil {
			s.giveBack(in, r)
		}
		return false, s
	}
	return true, s.child(c, out, r)
}

// refuse reports whether step must not apply c at s although the
// reference agrees, because a canonical linearization applies another
// operation here first. Operations that consume nothing (denials and
// Peeks) see the same state whatever else that consumes nothing runs at
// the same instant. So a linearization that applies x at s while such an
// operation q is pending, could run now (every operation that returned
// before q was called is applied) and would return its recorded Decision
// at s, can be changed into one that applies q first: q sees s, x and
// every later operation see what they saw (q consumed nothing), and no
// real-time constraint breaks (q's predecessors are applied, and q only
// moves earlier). Doing this whenever x consumes, or x consumes nothing
// but was called after q, yields a valid linearization that is smaller
// in the order "consuming nothing first, then by call time", position by
// position; the smallest one is never refused. So the rule loses no
// linearizable history, and it spares the search the subsets of the
// denials that pile up at the end of a phase (2^k for k of them) that it
// would otherwise try before backtracking past a wrong admission.
func (m *model) refuse(s *node, c call) bool {
	p := c.part
	x := p.ops[c.idx]
	cands := p.keeps[c.in.T]
	if len(cands) == 0 {
		return false
	}
	// The earliest return among pending operations: q can run now if it
	// was called before it.
	horizon := int64(1<<63 - 1)
	for _, i := range p.byRet {
		if !s.placed.has(i) {
			horizon = p.ops[i].ret
			break
		}
	}
	for _, i := range cands {
		q := p.ops[i]
		if !x.consuming && !q.at.less(x.at) {
			break
		}
		if i == c.idx || s.placed.has(i) || q.at.call > horizon {
			continue
		}
		if d, _ := s.decide(m, q.in, false); m.same(d, q.out.Decision) {
			return true
		}
	}
	return false
}

// decide returns the reference Decision for in at s, and, when take is
// set, the limiter that made it (now in the state of s's child by in) if
// no child has taken it yet.
func (s *node) decide(m *model, in Input, take bool) (ratelimit.Decision, *replayer) {
	key := attempt{n: int64(in.N), t: in.T, kind: in.Kind}
	s.mu.Lock()
	defer s.mu.Unlock()
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
	if !take {
		return o.d, nil
	}
	r := o.r
	o.r = nil
	return o.d, r
}

// giveBack returns a limiter decide handed out for in and that no child
// took.
func (s *node) giveBack(in Input, r *replayer) {
	key := attempt{n: int64(in.N), t: in.T, kind: in.Kind}
	s.mu.Lock()
	s.tried[key].r = r
	s.mu.Unlock()
}

// replay returns a fresh reference limiter brought to s's state.
func (m *model) replay(s *node) *replayer {
	clk := fakeclock.NewManual(m.start)
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

// child returns the state after s and c (which returned out), owning r
// (nil: replay when needed).
func (s *node) child(c call, out Output, r *replayer) *node {
	in := c.in
	n := &node{parent: s, in: in, out: out, depth: s.depth + 1, lim: r, groupT: in.T}
	n.placed = s.placed.with(c.idx, len(c.part.ops))
	h := opHash(in, out)
	if s.depth > 0 && in.T == s.groupT {
		n.prev, n.sum = s.prev, s.sum+h
	} else {
		n.prev, n.sum = s.hash, h
	}
	n.hash = mix(n.prev ^ mix(uint64(n.groupT)) ^ mix(n.sum+0x9e3779b97f4a7c15))
	return n
}

// bitset is an immutable set of small integers.
type bitset []uint64

func (b bitset) has(i int) bool { return i/64 < len(b) && b[i/64]&(1<<(i%64)) != 0 }

// with returns b plus i, in a new bitset for n elements.
func (b bitset) with(i, n int) bitset {
	c := make(bitset, (n+63)/64)
	copy(c, b)
	c[i/64] |= 1 << (i % 64)
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

func opHash(in Input, out Output) uint64 {
	v := uint64(uint32(in.N))<<8 | uint64(in.Kind)<<1
	if out.Decision.Allowed {
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

// equal reports whether two states are the same for what follows: the
// same operations (kind, n, allowed) at each instant, in any order within
// an instant (see the package doc). It compares hashes of that, 64 bits: a collision could only prune the search, never
// accept a history.
func equal(a, b any) bool {
	x, y := a.(*node), b.(*node)
	return x == y || x.hash == y.hash && x.depth == y.depth
}

// partition splits a history by key, keeping each key's operations in
// order, and gives each operation its partition for step's rule.
func partition(history []porcupine.Operation) [][]porcupine.Operation {
	index := map[string]int{}
	var parts [][]porcupine.Operation
	for _, op := range history {
		k := op.Input.(call).in.Key
		i, ok := index[k]
		if !ok {
			i = len(parts)
			index[k] = i
			parts = append(parts, nil)
		}
		parts[i] = append(parts[i], op)
	}
	for _, ops := range parts {
		p := &part{ops: make([]pop, len(ops)), keeps: map[int64][]int{}}
		for i := range ops {
			c, out := ops[i].Input.(call), ops[i].Output.(Output)
			p.ops[i] = pop{in: c.in, out: out, at: order{call: ops[i].Call, client: ops[i].ClientId}, ret: ops[i].Return,
				consuming: c.in.Kind == AllowN && out.Decision.Allowed && out.Err == ""}
			p.byRet = append(p.byRet, i)
			if !p.ops[i].consuming && out.Err == "" {
				p.keeps[c.in.T] = append(p.keeps[c.in.T], i)
			}
			ops[i].Input = call{in: c.in, idx: i, part: p}
		}
		slices.SortFunc(p.byRet, func(a, b int) int { return cmp.Compare(p.ops[a].ret, p.ops[b].ret) })
		for _, is := range p.keeps {
			slices.SortFunc(is, func(a, b int) int {
				if p.ops[a].at.less(p.ops[b].at) {
					return -1
				}
				if p.ops[b].at.less(p.ops[a].at) {
					return 1
				}
				return 0
			})
		}
	}
	return parts
}

func (m *model) describeOp(input, output any) string {
	in, out := input.(call).in, output.(Output)
	return m.describe(in, out)
}

func (m *model) describe(in Input, out Output) string {
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
	return fmt.Sprintf("%d ops, %d events admitted; last: %s", s.depth, admitted, m.describe(s.in, s.out))
}
