// Package pacer decides when an outbound client may send its next call to
// a rate-limited server, from what the server's answers said. It is the one
// copy of that logic, shared by httplimit's Transport and grpclimit's
// Client, so that both follow the same rules:
//
//   - A refusal (HTTP 429 or 503, gRPC ResourceExhausted) that names a
//     pause (Retry-After, RetryInfo, an exhausted quota's reset) holds the
//     key back for that long, capped by Config.MaxPause.
//   - A refusal that names no usable pause holds the key back for a
//     jittered exponential backoff: the k-th refusal in a row waits a time
//     drawn uniformly from [First/2, min(Cap, First·2^k)]. Never at once.
//   - Every answer, refused or not, that reports quotas (remaining r until
//     a reset t) bounds the key's sends: at most r more before the reset,
//     less every call the server may have counted after the answered one
//     (those in flight, and those answered since it was sent). A key whose
//     quota is spent waits for its reset; at each reset the quota gains
//     what the server has restored by then whether it is a fixed window or
//     a token bucket (the stated limit less the r reported, up to the
//     limit less the calls in flight), until an answer reports anew; a
//     reset whose gain is not known (no limit stated) ends with a probe.
//   - With Config.Shape, an answer that advertises policies (q per w)
//     spaces the key's sends at least w/q apart (the slowest policy).
//   - A pause whose end the answers cannot vouch for ends with a probe:
//     a refusal's (a Retry-After says when to come back, not how many
//     may), and a reset that was capped. The first send after it goes
//     alone; the others wait for its answer, then go by what it says. A
//     probe that gets none (Lost) hands the probe on to the next send at
//     once, and one that takes longer than the pause it ended (at least
//     Config.First) does so too, so that no send waits on a hung one.
//
// Every duration read from an answer is capped by Config.MaxPause.
package pacer

import (
	"context"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlkit/ratelimit/internal/errs"
	"github.com/rlkit/ratelimit/internal/hints"
	"github.com/rlkit/ratelimit/internal/timesrc"
)

// SweepAbove is the number of keys above which adding a key first drops
// the keys that hold nothing live (no pause, no quota, no call in flight),
// so that a pacer holds at most its live keys plus about SweepAbove.
const SweepAbove = 64

// Config is what a Pacer is built with. Callers validate it: MaxPause,
// First and Cap positive, First <= Cap.
type Config struct {
	// MaxPause caps every pause, reset and spacing read from an answer.
	MaxPause time.Duration
	// First and Cap bound the backoff after a refusal without a usable
	// pause: the k-th such refusal in a row (k from 0) pauses the key for
	// a time drawn uniformly from [First/2, min(Cap, First·2^k)].
	First, Cap time.Duration
	// Shape spaces a key's sends by the policies its answers advertise.
	Shape bool
	// Rand returns a uniform int64 in [0, n); nil is math/rand/v2.
	Rand func(n int64) int64
}

// Pacer holds, per key, what the server's answers allow. Create one with
// New; it is safe for concurrent use.
type Pacer struct {
	cfg     Config
	held    atomic.Int64 // len(keys), readable without mu
	mu      sync.Mutex
	keys    map[string]*state // guarded by mu
	sweepAt int               // guarded by mu: the size at which a new key sweeps
}

// New returns a Pacer built with cfg.
func New(cfg Config) *Pacer {
	if cfg.Rand == nil {
		cfg.Rand = rand.Int64N
	}
	return &Pacer{cfg: cfg, sweepAt: SweepAbove}
}

// state is one key's pacing; guarded by the Pacer's mu.
type state struct {
	until    time.Time     // no send before: a refusal's pause
	next     time.Time     // no send before: the policies' spacing
	spacing  time.Duration // from the newest answer that advertised policies
	refusals int           // refusals in a row without a usable pause
	inflight int           // sends reserved and not yet answered
	finished uint64        // sends answered or lost so far
	sent     uint64        // sends reserved so far: the id of the newest
	limit    int64         // the quota a reset restores, from the newest answer stating one; 0: unknown
	// A probe: after a pause whose end the answers cannot vouch for (a
	// refusal's, a capped reset), the next send goes alone, and the others
	// wait for its answer, until probeEnd at most.
	probe     bool          // the next send is a probe
	probeID   uint64        // the probe in flight; 0 if none
	probeEnd  time.Time     // when the others stop waiting for it
	probeDone chan struct{} // closed when the probe in flight ends
	patience  time.Duration // how long the next probe is waited for
	n         int
	quotas    [hints.MaxItems]quota
}

// quota is one reported quota: left sends until its reset, which was span
// away when reported; each reset adds gain, up to full less the sends in
// flight. gain is 0 when what a reset restores is not known (no limit
// stated, or the reset was capped by MaxPause or a refusal's Retry-After):
// the reset then ends with a probe.
type quota struct {
	left  int64
	reset time.Time
	span  time.Duration
	gain  int64
	full  int64
}

// Ticket is one reserved send; pass it to exactly one of Done or Lost.
type Ticket struct {
	st       *state
	id       uint64 // the send's number in st; 0 for a Note
	finished uint64 // st.finished when the send was reserved (or the Note made)
	note     bool   // not a send (Note): its answer can only add spent quotas
	at       time.Time
}

// roll renews the quotas whose reset has passed. An answer reporting r
// left of a limit L, restored t from now, is read as the server's state
// after counting the answered send: a fixed window restores all of L at
// its end, a token bucket (whose t is the time until it is full) gains
// L-r over t, continuously, and has gained it all at t whatever was sent
// meanwhile. So at each reset a quota gains L-r, and never holds more
// than L less the sends in flight (which the new period may count), for
// one more span; that is never more than either kind of server admits.
// A quota whose gain is not known is dropped at its reset, and the next
// send probes. The next answer replaces the renewed quotas with what the
// server counted.
func (st *state) roll(now time.Time) {
	n := 0
	for _, q := range st.quotas[:st.n] {
		if !q.reset.After(now) {
			if q.gain <= 0 || q.span <= 0 {
				st.awaitProbe(q.span)
				continue
			}
			q.left = min(q.left+q.gain, q.full-int64(st.inflight))
			q.reset = now.Add(q.span)
		}
		st.quotas[n] = q
		n++
	}
	st.n = n
}

// wait returns how long from now the key's next send must wait, and,
// when it waits for a probe's answer, the channel closed when the probe
// ends.
func (st *state) wait(now time.Time) (time.Duration, <-chan struct{}) {
	st.roll(now)
	at := st.until
	if st.next.After(at) {
		at = st.next
	}
	for _, q := range st.quotas[:st.n] {
		if q.left <= 0 && q.reset.After(at) {
			at = q.reset
		}
	}
	if d := Left(at, now); d > 0 {
		return d, nil
	}
	if st.probeID != 0 {
		if d := Left(st.probeEnd, now); d > 0 {
			return d, st.probeDone
		}
		// The probe has had its time: the next send probes anew.
		st.endProbe()
		st.probe = true
	}
	return 0, nil
}

// awaitProbe makes the next send a probe, waited for at most patience
// (and at least the backoff's first delay): as long again as the pause
// it ends. A probe that gets no answer (lost, or out of time) keeps the
// patience for the next.
func (st *state) awaitProbe(patience time.Duration) {
	st.probe = true
	st.patience = max(st.patience, patience)
}

// endProbe ends the probe in flight, if any: the sends waiting for it
// look again.
func (st *state) endProbe() {
	if st.probeID != 0 {
		close(st.probeDone)
		st.probeID, st.probeDone = 0, nil
	}
}

// live reports whether the key holds anything that a later send depends
// on at now.
func (st *state) live(now time.Time, backoffCap time.Duration) bool {
	if st.inflight > 0 || st.until.After(now) || st.next.After(now) {
		return true
	}
	if (st.refusals > 0 || st.probe) && now.Sub(st.until) <= backoffCap {
		return true // the next bare refusal backs off further; the next send probes
	}
	for _, q := range st.quotas[:st.n] {
		if q.reset.After(now) {
			return true
		}
	}
	return false
}

// reserve counts one send at now; first is the shortest patience of a
// probe.
func (st *state) reserve(now time.Time, first time.Duration) Ticket {
	st.inflight++
	st.sent++
	for i := range st.quotas[:st.n] {
		st.quotas[i].left-- // wait rolled them at now
	}
	if st.spacing > 0 {
		st.next = now.Add(st.spacing)
	}
	if st.probe {
		st.probe = false
		st.probeID, st.probeDone = st.sent, make(chan struct{})
		st.probeEnd = now.Add(max(st.patience, first))
	}
	return Ticket{st: st, id: st.sent, finished: st.finished, at: now}
}

// Left returns how long from now until is: 0 for the zero time or a time
// in the past.
func Left(until, now time.Time) time.Duration {
	if until.IsZero() {
		return 0
	}
	return max(until.Sub(now), 0)
}

// Idle reports whether the pacer holds no key, without taking the lock.
func (p *Pacer) Idle() bool { return p.held.Load() == 0 }

// Wait blocks until a send of key would be allowed, reading and sleeping
// on src, without reserving it, and then returns ctx.Err(). When the wait
// outlasts ctx's deadline it returns at once an error matching both
// deadline (the caller's sentinel) and context.DeadlineExceeded.
func (p *Pacer) Wait(ctx context.Context, src *timesrc.Source, key string, deadline error) error {
	for {
		if p.Idle() {
			return ctx.Err()
		}
		now := src.Time()
		p.mu.Lock()
		var d time.Duration
		var probe <-chan struct{}
		if st := p.keys[key]; st != nil {
			d, probe = st.wait(now)
		}
		p.mu.Unlock()
		if d <= 0 {
			return ctx.Err()
		}
		if err := sleep(ctx, src, d, probe, deadline); err != nil {
			return err
		}
	}
}

// Acquire blocks until a send of key is allowed and reserves it. It
// returns ctx's error, without a Ticket, when ctx is done: a call whose
// caller has gone is not sent. See Wait for the deadline.
func (p *Pacer) Acquire(ctx context.Context, src *timesrc.Source, key string, deadline error) (Ticket, error) {
	for {
		if err := ctx.Err(); err != nil {
			return Ticket{}, err
		}
		now := src.Time()
		p.mu.Lock()
		st := p.state(key, now)
		d, probe := st.wait(now)
		if d <= 0 {
			t := st.reserve(now, p.cfg.First)
			p.mu.Unlock()
			return t, nil
		}
		p.mu.Unlock()
		if err := sleep(ctx, src, d, probe, deadline); err != nil {
			return Ticket{}, err
		}
	}
}

// sleep waits d on src, or until ctx is done. A wait for a probe's answer
// (probe not nil) also ends when the probe does, and is not refused for
// outlasting ctx's deadline: d is only how long the probe may take.
func sleep(ctx context.Context, src *timesrc.Source, d time.Duration, probe <-chan struct{}, deadline error) error {
	if probe == nil {
		if timesrc.Outlasts(ctx, d) {
			return errs.Deadline(deadline, d)
		}
		return src.Sleep(ctx, d)
	}
	select {
	case <-probe:
		return ctx.Err()
	default:
	}
	var timer <-chan time.Time
	if c := src.Clock(); c != nil {
		timer = c.After(d)
	} else {
		tm := time.NewTimer(d)
		defer tm.Stop()
		timer = tm.C
	}
	select {
	case <-probe:
	case <-timer:
	case <-ctx.Done():
	}
	return ctx.Err()
}

// state returns key's state, creating it (and first sweeping the keys
// that hold nothing live, when there are many).
func (p *Pacer) state(key string, now time.Time) *state {
	if st := p.keys[key]; st != nil {
		return st
	}
	if p.keys == nil {
		p.keys = make(map[string]*state)
	}
	if len(p.keys) >= p.sweepAt {
		for k, st := range p.keys {
			if !st.live(now, p.cfg.Cap) {
				delete(p.keys, k)
			}
		}
		p.sweepAt = max(SweepAbove, 2*len(p.keys))
	}
	st := &state{}
	p.keys[key] = st
	p.held.Store(int64(len(p.keys)))
	return st
}

// Answer is what the server said to one send.
type Answer struct {
	// Refused is true for a refusal that asks the client to come back
	// later: HTTP 429 or 503, gRPC ResourceExhausted.
	Refused bool
	// Hints are the answer's fields; nil when it had none.
	Hints *hints.Hints
}

// Outcome is what an answer did to its key.
type Outcome struct {
	// Pause is how long from now the answer holds the key back: the
	// refusal's pause (named or backoff), or the reset of a quota the
	// answer reports spent; 0 if none.
	Pause time.Duration
	// Backoff is true when Pause is a backoff: a refusal that named no
	// usable pause.
	Backoff bool
}

// Done records the answer to t's send, received at now, and returns what
// it did to the key.
func (p *Pacer) Done(t Ticket, now time.Time, a Answer) Outcome {
	if t.st == nil {
		return Outcome{}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	st := t.st
	st.inflight--
	if t.id != 0 && t.id == st.probeID {
		st.endProbe()
		st.patience = 0
	}
	h := a.Hints
	var out Outcome
	if h != nil {
		limit := p.cfg.MaxPause
		if a.Refused && h.HasRetryAfter && h.RetryAfter > 0 {
			// A refusal's Retry-After takes precedence over the resets
			// it reports (as every draft of the RateLimit fields says).
			limit = min(limit, h.RetryAfter)
		}
		out.Pause = p.quotas(st, t, now, h, limit)
		if p.cfg.Shape && h.NPolicies > 0 && !t.note {
			p.shape(st, t, h)
		}
	}
	if !t.note {
		st.finished++
	}
	if !a.Refused {
		st.refusals = 0
		return out
	}
	d, ok := Named(h)
	if !ok {
		d = p.backoff(st.refusals)
		st.refusals++
		out.Backoff = true
	}
	d = min(d, p.cfg.MaxPause)
	if until := now.Add(d); until.After(st.until) {
		st.until = until
	}
	// What the server admits when the pause ends is not known (a
	// Retry-After says when to come back, not how many may): one send
	// goes and the others wait for its answer.
	st.awaitProbe(d)
	out.Pause = max(out.Pause, d)
	return out
}

// quotas takes the quotas and policies of h, the answer to t's send, and
// returns the reset of the longest quota it reports spent; every reset is
// capped at limit.
//
// The server may have counted, after t's send, any other send that was in
// flight at some time during t's: those still in flight, and those
// answered (or lost) since t's send was made. What the answer reports left
// less those is a floor of what is left now, whatever order the server
// took them in, and whatever order their answers come back in; so the
// newest answer replaces the key's quotas, when it reports any. An answer
// that is not a send's (Note) can only add quotas it finds spent.
func (p *Pacer) quotas(st *state, t Ticket, now time.Time, h *hints.Hints, limit time.Duration) time.Duration {
	overlap := int64(st.inflight) + int64(st.finished-t.finished)
	var got [hints.MaxItems]struct {
		quota
		r      int64 // as reported
		capped bool
	}
	n := 0
	var spent time.Duration
	for _, it := range h.Items[:h.NItems] {
		if it.Remaining < 0 || it.Reset <= 0 {
			continue // remaining unknown, or restored already
		}
		reset := min(it.Reset, limit)
		if it.Remaining == 0 {
			spent = max(spent, reset)
		}
		left := it.Remaining - overlap
		if !t.note || left <= 0 {
			got[n].quota = quota{left: left, reset: now.Add(reset), span: reset}
			got[n].r, got[n].capped = it.Remaining, reset < it.Reset
			n++
		}
	}
	if n == 0 {
		return spent
	}
	if h.Limit > 0 {
		st.limit = h.Limit
	}
	for i := range got[:n] {
		if q := &got[i]; !q.capped && st.limit > q.r {
			q.gain, q.full = st.limit-q.r, st.limit
		}
	}
	if !t.note {
		st.n = 0
	}
	for _, q := range got[:n] {
		if st.n < len(st.quotas) {
			st.quotas[st.n] = q.quota
			st.n++
		}
	}
	return spent
}

// shape takes the spacing of the policies h advertises, for t's key.
func (p *Pacer) shape(st *state, t Ticket, h *hints.Hints) {
	var sp time.Duration
	for _, pol := range h.Policies[:h.NPolicies] {
		if pol.Quota > 0 && pol.Window > 0 {
			sp = max(sp, ceilDiv(pol.Window, pol.Quota))
		}
	}
	st.spacing = min(sp, p.cfg.MaxPause)
	if next := t.at.Add(st.spacing); next.After(st.next) {
		st.next = next
	}
}

// ceilDiv returns d/n rounded up, for d >= 0 and n > 0, without
// overflowing.
func ceilDiv(d time.Duration, n int64) time.Duration {
	q := int64(d) / n
	if int64(d)%n != 0 {
		q++
	}
	return time.Duration(q)
}

// Named returns the pause a refusal names: a positive Retry-After, else
// the longest reset among the quotas it reports spent or does not report
// on (Remaining 0 or unknown). A zero pause (Retry-After: 0, a date in the
// past) is not usable: the server has just refused.
func Named(h *hints.Hints) (time.Duration, bool) {
	if h == nil {
		return 0, false
	}
	if h.HasRetryAfter && h.RetryAfter > 0 {
		return h.RetryAfter, true
	}
	var d time.Duration
	for _, it := range h.Items[:h.NItems] {
		if it.Remaining <= 0 && it.Reset > 0 {
			d = max(d, it.Reset)
		}
	}
	return d, d > 0
}

// backoff draws the pause after the (k+1)-th refusal in a row without a
// usable pause: uniform in [First/2, min(Cap, First·2^k)].
func (p *Pacer) backoff(k int) time.Duration {
	lo, hi := p.cfg.First/2, p.cfg.Cap
	if k < 62 && p.cfg.First <= p.cfg.Cap>>k {
		hi = p.cfg.First << k
	}
	n := int64(hi - lo)
	if n < math.MaxInt64 {
		n++ // hi itself may be drawn
	}
	return lo + time.Duration(p.cfg.Rand(n))
}

// Note records an answer that is not the answer to a reserved send (the
// end of a long stream, say): a refusal pauses key as in Done, and
// quotas it reports spent are added; quotas with room left are not taken
// (the answer may be older than others).
func (p *Pacer) Note(key string, now time.Time, a Answer) Outcome {
	p.mu.Lock()
	st := p.state(key, now)
	st.inflight++ // Done takes it back
	t := Ticket{st: st, note: true, finished: st.finished}
	p.mu.Unlock()
	return p.Done(t, now, a)
}

// Lost records that t's send got no answer (a transport error): the
// server may or may not have counted it.
func (p *Pacer) Lost(t Ticket) {
	if t.st == nil {
		return
	}
	p.mu.Lock()
	st := t.st
	st.inflight--
	st.finished++
	if t.id != 0 && t.id == st.probeID {
		// The probe learned nothing: the next send probes anew.
		st.endProbe()
		st.probe = true
	}
	p.mu.Unlock()
}

// PausedFor returns how long from now a send of key must wait; 0 if it
// may go at once.
func (p *Pacer) PausedFor(key string, now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st := p.keys[key]; st != nil {
		d, _ := st.wait(now)
		return d
	}
	return 0
}

// Longest returns the longest wait of any key from now.
func (p *Pacer) Longest(now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	var d time.Duration
	for _, st := range p.keys {
		w, _ := st.wait(now)
		d = max(d, w)
	}
	return d
}

// InFlight returns how many sends are reserved and not yet answered or
// lost, over every key.
func (p *Pacer) InFlight() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, st := range p.keys {
		n += st.inflight
	}
	return n
}
