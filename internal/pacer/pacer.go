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
//   - Two budgets at once: a quota of unit Tokens (the LLM APIs') counts
//     each send's token estimate (AcquireTokens) where a quota of
//     requests counts one, and a send waits until every quota has room
//     for it: tokens in flight, and those answered since the answered
//     send, are subtracted as requests are, by their estimates; the
//     server's own count replaces them when its answer says what is left.
//     An estimate above a quota's limit needs the quota full, no more; a
//     send without an estimate needs one token left.
//   - A quota that refills continuously (hints.Item.Refills: the LLM
//     APIs' token buckets, whose reset is the time until full) gains its
//     limit less what was left over its reset, pro rata, so that a send
//     waits only until what it needs has come in, not for the whole reset.
//
// Every duration read from an answer is capped by Config.MaxPause.
//
// The keys held are bounded (Config.MaxKeys): a key is forgotten only once
// it holds nothing live (no pause or probe pending, no call in flight, its
// quotas full again), which leaves it as a key never seen; when every key
// held is live, a send of a new key is refused (Config.Full) rather than
// a live key forgotten, which would let its calls hammer a server that
// asked them to wait.
package pacer

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rlkit/ratelimit/internal/errs"
	"github.com/rlkit/ratelimit/internal/hints"
	"github.com/rlkit/ratelimit/internal/timesrc"
)

// SweepAbove is the number of keys above which adding a key first drops
// the keys that hold nothing live (no pause, no quota in use, no call in
// flight), so that a pacer holds at most its live keys plus about
// SweepAbove.
const SweepAbove = 64

// Config is what a Pacer is built with. Callers validate it: MaxPause,
// First and Cap positive, First <= Cap, MaxKeys not negative.
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
	// MaxKeys bounds the keys held; 0 is no bound.
	MaxKeys int
	// Full is the sentinel the error of a send refused for want of room
	// matches (ratelimit.ErrTooManyKeys); nil is a plain error.
	Full error
}

// Pacer holds, per key, what the server's answers allow. Create one with
// New; it is safe for concurrent use.
type Pacer struct {
	cfg  Config
	held atomic.Int64 // len(keys), readable without mu

	mu      sync.Mutex
	keys    map[string]*state // guarded by mu
	sweepAt int               // guarded by mu: the size at which a new key sweeps
	epoch   time.Time         // guarded by mu: what instants count from; the first time seen
	// At the cap, a full sweep that freed nothing is not repeated until
	// time reaches freeAt (the earliest a held key may stop being live)
	// or a call has been answered (settled moved): guarded by mu.
	freeAt    instant
	settled   uint64 // answers and losses so far
	settledAt uint64 // settled at the last fruitless sweep
	fruitless bool   // the last sweep at the cap freed nothing
	// spare are keys the last sweep found free to go (see free), to be
	// forgotten one by one when a new key finds the table full.
	spare []string
}

// New returns a Pacer built with cfg.
func New(cfg Config) *Pacer {
	if cfg.Rand == nil {
		cfg.Rand = rand.Int64N
	}
	return &Pacer{cfg: cfg, sweepAt: SweepAbove}
}

// instant is a time as nanoseconds since the Pacer's epoch: 8 bytes where
// a time.Time takes 24, so that a key costs less. Differences of times
// that carry a monotonic reading are monotonic.
type instant int64

// none is the instant of no constraint, before every instant in use.
const none instant = math.MinInt64 / 4

// at returns now as an instant; requires p.mu held.
func (p *Pacer) at(now time.Time) instant {
	if p.epoch.IsZero() {
		p.epoch = now
	}
	return instant(now.Sub(p.epoch))
}

func (i instant) add(d time.Duration) instant { return i + instant(d) }

// left returns how long from now until is: 0 if it has passed.
func left(until, now instant) time.Duration { return max(time.Duration(until-now), 0) }

// state is one key's pacing; guarded by the Pacer's mu.
type state struct {
	until    instant       // no send before: a refusal's pause (or when a probe became due)
	next     instant       // no send before: the policies' spacing
	spacing  time.Duration // from the newest answer that advertised policies
	refusals int           // refusals in a row without a usable pause
	inflight int           // sends reserved and not yet answered
	finished uint64        // sends answered or lost so far
	// The token estimates of the sends in flight, and of those answered or
	// lost so far (a running sum, compared by difference).
	inflightTok int64
	finishedTok uint64
	sent        uint64 // sends reserved so far: the id of the newest
	limit       int64  // the stated limit, from the newest answer stating one; 0: unknown
	// A probe: after a pause whose end the answers cannot vouch for (a
	// refusal's, a capped reset), the next send goes alone, and the others
	// wait for its answer, until probeEnd at most.
	probe     bool          // the next send is a probe
	probeID   uint64        // the probe in flight; 0 if none
	probeEnd  instant       // when the others stop waiting for it
	probeDone chan struct{} // closed when the probe in flight ends
	patience  time.Duration // how long the next probe is waited for
	quotas    []quota       // from the newest answer reporting any
}

func newState() *state { return &state{until: none, next: none, probeEnd: none} }

// quota is one reported quota: left sends until its reset, which was span
// away when reported; each reset adds gain, up to the stated limit less
// the sends in flight, and the resets after the first come every period:
// span, or the longest window the answer's policies state when that is
// longer (a fixed window's next reset is a whole window after the first,
// however close to its end the answer was; a bucket refills no faster than
// its policy says). gain is 0 when what a reset restores is not known (no
// limit stated, or the reset was capped by MaxPause or a refusal's
// Retry-After): the reset then ends with a probe.
//
// A quota counts requests (one a send) or tokens (a send's estimate), by
// unit; limit is its own stated limit, 0 for one that states none (a
// quota of requests then takes the key's limit).
type quota struct {
	left   int64
	reset  instant
	span   time.Duration
	period time.Duration
	gain   int64
	limit  int64
	unit   hints.Unit
	// A quota that refills (hints.Item.Refills, a token bucket) gains
	// gain over span continuously, from from on, besides at its reset.
	refills bool
	from    instant
}

// available returns what q has left at now: left, plus what a quota that
// refills has gained since from (at most its limit less what is in
// flight). Requires now rolled.
func (st *state) available(q *quota, now instant) int64 {
	if !q.refills || q.gain <= 0 || q.span <= 0 || now <= q.from {
		return q.left
	}
	v := q.left
	if acc := mulDiv(q.gain, int64(now-q.from), int64(q.span), false); acc > math.MaxInt64-max(v, 0) {
		v = math.MaxInt64
	} else {
		v += acc
	}
	if lim := st.capOf(q); lim > 0 {
		v = max(min(v, lim-st.busy(q.unit)), q.left)
	}
	return v
}

// due returns when q has need available, at the latest its reset (which
// roll handles). Requires now rolled, and available(q, now) < need.
func (st *state) due(q *quota, now instant, need int64) instant {
	if !q.refills || q.gain <= 0 || q.span <= 0 {
		return q.reset
	}
	if lim := st.capOf(q); lim > 0 && lim-st.busy(q.unit) < need {
		return q.reset // the sends in flight hold too much: their answers tell
	}
	tau := mulDiv(sub(need, q.left), int64(q.span), q.gain, true)
	if tau >= int64(q.reset-q.from) {
		return q.reset
	}
	if at := q.from + instant(tau); at > now {
		return at
	}
	return q.reset
}

// mulDiv returns a·b/c, rounded up if ceil, else down, for a, b >= 0 and
// c > 0, saturating at math.MaxInt64.
func mulDiv(a, b, c int64, ceil bool) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	if hi >= uint64(c) {
		return math.MaxInt64
	}
	q, r := bits.Div64(hi, lo, uint64(c))
	if ceil && r != 0 {
		q++
	}
	return int64(min(q, math.MaxInt64))
}

// capOf returns the limit of q: its own, else for requests the key's; 0
// when not known.
func (st *state) capOf(q *quota) int64 {
	if q.limit > 0 {
		return q.limit
	}
	if q.unit == hints.Requests {
		return st.limit
	}
	return 0
}

// busy returns what the sends in flight hold of a quota of unit u.
func (st *state) busy(u hints.Unit) int64 {
	if u == hints.Tokens {
		return st.inflightTok
	}
	return int64(st.inflight)
}

// need returns how much of q a send of tokens needs left to go: one
// request, or its token estimate (at least one token, at most q's limit).
func (st *state) need(q *quota, tokens int64) int64 {
	if q.unit != hints.Tokens {
		return 1
	}
	n := max(tokens, 1)
	if lim := st.capOf(q); lim > 0 && n > lim {
		n = lim
	}
	return n
}

// cost returns what a send of tokens takes from a quota of unit u.
func cost(u hints.Unit, tokens int64) int64 {
	if u == hints.Tokens {
		return tokens
	}
	return 1
}

// Ticket is one reserved send; pass it to exactly one of Done or Lost.
type Ticket struct {
	st       *state
	id       uint64 // the send's number in st; 0 for a Note
	finished uint64 // st.finished when the send was reserved (or the Note made)
	note     bool   // not a send (Note): its answer can only add spent quotas
	at       instant
	tokens   int64 // the send's token estimate
	// st.finishedTok when the send was reserved (or the Note made)
	finishedTok uint64
}

// roll renews the quotas whose reset has passed. An answer reporting r
// left of a limit L, restored t from now, is read as the server's state
// after counting the answered send: a fixed window restores all of L at
// its end, a token bucket (whose t is the time until it is full) gains
// L-r over t, continuously, and has gained it all at t whatever was sent
// meanwhile. So each reset a quota has passed adds L-r, and it never holds
// more than L less the sends in flight (which the new period may count);
// that is never more than either kind of server admits. A quota whose gain
// is not known is dropped at its reset, and the next send probes. The
// next answer replaces the renewed quotas with what the server counted.
func (st *state) roll(now instant) {
	n := 0
	for _, q := range st.quotas {
		if q.reset <= now {
			if q.gain <= 0 || q.span <= 0 {
				st.awaitProbe(q.reset, q.span)
				continue
			}
			room := st.capOf(&q) - st.busy(q.unit)
			k := 1 + int64(now-q.reset)/int64(q.period) // the resets passed
			if need := sub(room, q.left); need <= 0 || k > need/q.gain {
				q.left = room
			} else {
				q.left += k * q.gain // at most need: no overflow
			}
			q.reset = q.reset.add(time.Duration(k) * q.period) // k periods fit: now - reset did
			q.from = q.reset - instant(q.period)
		}
		st.quotas[n] = q
		n++
	}
	st.quotas = st.quotas[:n]
}

// wait returns how long from now the key's next send, of tokens, must
// wait, and, when it waits for a probe's answer, the channel closed when
// the probe ends.
func (st *state) wait(now instant, tokens int64) (time.Duration, <-chan struct{}) {
	st.roll(now)
	at := max(st.until, st.next)
	for i := range st.quotas {
		q := &st.quotas[i]
		if need := st.need(q, tokens); st.available(q, now) < need {
			at = max(at, st.due(q, now, need))
		}
	}
	if d := left(at, now); d > 0 {
		return d, nil
	}
	if st.probeID != 0 {
		if d := left(st.probeEnd, now); d > 0 {
			return d, st.probeDone
		}
		// The probe has had its time: the next send probes anew.
		st.endProbe()
		st.probe = true
	}
	return 0, nil
}

// awaitProbe makes the next send after due a probe, waited for at most
// patience (and at least the backoff's first delay): as long again as the
// pause it ends. A probe that gets no answer (lost, or out of time) keeps
// the patience for the next.
func (st *state) awaitProbe(due instant, patience time.Duration) {
	st.probe = true
	st.until = max(st.until, due)
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

// liveUntil returns until when, at the latest, the key holds something a
// later send depends on (a pause, a probe pending, a quota in use, a call
// in flight), if nothing else happens; a time at or before now if it holds
// nothing live. A call in flight, or a quota in use, holds it for an
// unknown time: the far future. backoffCap is how long after a pause a
// refusal in a row, or a probe pending, still counts.
func (st *state) liveUntil(now instant, backoffCap time.Duration) instant {
	st.roll(now)
	if st.inflight > 0 || st.probeID != 0 {
		return math.MaxInt64
	}
	end := max(st.until, st.next)
	if st.refusals > 0 || st.probe {
		// The next bare refusal backs off further; the next send probes.
		end = max(end, st.until.add(backoffCap))
	}
	for _, q := range st.quotas {
		switch limit := st.capOf(&q); {
		case q.gain <= 0:
			// Until its reset, then a probe pending.
			end = max(end, later(q.reset, 1, backoffCap))
		case q.left < limit:
			// In use: full again at the reset that adds what it lacks.
			need := sub(limit, q.left)
			k := need/q.gain + min(need%q.gain, 1) // rounded up
			end = max(end, later(q.reset, k-1, q.period))
		}
	}
	return end
}

// sub returns a-b, saturating at math.MaxInt64, for b <= a or b < 0.
func sub(a, b int64) int64 {
	if b < 0 && a > math.MaxInt64+b {
		return math.MaxInt64
	}
	return a - b
}

// later returns at + k·d, saturating.
func later(at instant, k int64, d time.Duration) instant {
	if d > 0 && k > (math.MaxInt64-int64(at))/int64(d) {
		return math.MaxInt64
	}
	return at + instant(k)*instant(d)
}

// reserve counts one send of tokens at now; first is the shortest
// patience of a probe.
func (st *state) reserve(now instant, first time.Duration, tokens int64) Ticket {
	st.inflight++
	st.sent++
	st.inflightTok += tokens
	for i := range st.quotas {
		q := &st.quotas[i]
		q.left -= cost(q.unit, tokens) // wait rolled them at now
	}
	if st.spacing > 0 {
		st.next = now.add(st.spacing)
	}
	if st.probe {
		st.probe = false
		st.probeID, st.probeDone = st.sent, make(chan struct{})
		st.probeEnd = now.add(max(st.patience, first))
	}
	return Ticket{st: st, id: st.sent, finished: st.finished, at: now, tokens: tokens, finishedTok: st.finishedTok}
}

// Idle reports whether the pacer holds no key, without taking the lock.
func (p *Pacer) Idle() bool { return p.held.Load() == 0 }

// Wait blocks until a send of key would be allowed, reading and sleeping
// on src, without reserving it, and then returns ctx.Err(). When the wait
// outlasts ctx's deadline it returns at once an error matching both
// deadline (the caller's sentinel) and context.DeadlineExceeded.
func (p *Pacer) Wait(ctx context.Context, src *timesrc.Source, key string, deadline error) error {
	return p.WaitTokens(ctx, src, key, 0, deadline)
}

// WaitTokens is Wait for a send whose token estimate is tokens (see
// AcquireTokens).
func (p *Pacer) WaitTokens(ctx context.Context, src *timesrc.Source, key string, tokens int64, deadline error) error {
	tokens = estimate(tokens)
	for {
		if p.Idle() {
			return ctx.Err()
		}
		now := src.Time()
		p.mu.Lock()
		var d time.Duration
		var probe <-chan struct{}
		if st := p.keys[key]; st != nil {
			d, probe = st.wait(p.at(now), tokens)
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
// caller has gone is not sent. See Wait for the deadline. A new key that
// the pacer has no room for (MaxKeys keys held, each live) is refused at
// once with an error matching Config.Full.
func (p *Pacer) Acquire(ctx context.Context, src *timesrc.Source, key string, deadline error) (Ticket, error) {
	return p.AcquireTokens(ctx, src, key, 0, deadline)
}

// MaxTokens is the largest token estimate counted: a larger one counts as
// MaxTokens, so that the sums of estimates in flight cannot overflow.
const MaxTokens = 1 << 40

// estimate bounds a token estimate to [0, MaxTokens].
func estimate(tokens int64) int64 { return min(max(tokens, 0), MaxTokens) }

// AcquireTokens is Acquire for a send whose token estimate is tokens (0
// if not known; negative is 0, above MaxTokens is MaxTokens): it waits until every quota of tokens the
// key's answers reported has room for the estimate, as well as every
// quota of requests room for one, and reserves both.
func (p *Pacer) AcquireTokens(ctx context.Context, src *timesrc.Source, key string, tokens int64, deadline error) (Ticket, error) {
	tokens = estimate(tokens)
	for {
		if err := ctx.Err(); err != nil {
			return Ticket{}, err
		}
		now := src.Time()
		p.mu.Lock()
		at := p.at(now)
		st, err := p.state(key, at)
		if err != nil {
			p.mu.Unlock()
			return Ticket{}, err
		}
		d, probe := st.wait(at, tokens)
		if d <= 0 {
			t := st.reserve(at, p.cfg.First, tokens)
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

// state returns key's state, creating it. Before a key is added to many,
// the keys that hold nothing live are dropped (all of them, amortized by
// letting the table double between sweeps); at MaxKeys, when none can be
// dropped, a key free to go (see free) is forgotten, and when there is
// none either, the key is refused. Requires p.mu held.
func (p *Pacer) state(key string, now instant) (*state, error) {
	if st := p.keys[key]; st != nil {
		return st, nil
	}
	if p.keys == nil {
		p.keys = make(map[string]*state)
	}
	full := p.cfg.MaxKeys > 0 && len(p.keys) >= p.cfg.MaxKeys
	if full || len(p.keys) >= p.sweepAt {
		if !full || !p.fruitless || now >= p.freeAt || p.settled != p.settledAt {
			p.sweep(now)
		}
		p.sweepAt = max(SweepAbove, 2*len(p.keys))
		if p.cfg.MaxKeys > 0 && len(p.keys) >= p.cfg.MaxKeys && !p.evict(now) {
			return nil, p.fullError()
		}
	}
	st := newState()
	p.keys[key] = st
	p.held.Store(int64(len(p.keys)))
	return st, nil
}

// sweep drops every key that holds nothing live at now, and notes when
// the first of the others may stop being live. Requires p.mu held.
func (p *Pacer) sweep(now instant) {
	first := instant(math.MaxInt64)
	p.spare = p.spare[:0]
	spares := max(16, p.cfg.MaxKeys/16) // amortizes the sweep over as many new keys
	for k, st := range p.keys {
		if end := st.liveUntil(now, p.cfg.Cap); end <= now {
			delete(p.keys, k)
		} else {
			first = min(first, end)
			if p.cfg.MaxKeys > 0 && len(p.spare) < spares && st.free(now) {
				p.spare = append(p.spare, k)
			}
		}
	}
	p.held.Store(int64(len(p.keys)))
	p.fruitless = p.cfg.MaxKeys > 0 && len(p.keys) >= p.cfg.MaxKeys && len(p.spare) == 0
	p.freeAt, p.settledAt = first, p.settled
}

// evict forgets one key of spare that is still free to go, and reports
// whether it found one. Requires p.mu held.
func (p *Pacer) evict(now instant) bool {
	for len(p.spare) > 0 {
		k := p.spare[len(p.spare)-1]
		p.spare = p.spare[:len(p.spare)-1]
		if st := p.keys[k]; st != nil {
			st.roll(now)
			if st.free(now) {
				delete(p.keys, k)
				p.held.Store(int64(len(p.keys)))
				return true
			}
		}
	}
	return false
}

// free reports whether forgetting st costs little, its state rolled to
// now: nothing in flight, no pause, spacing, backoff or probe pending, and
// every quota its server reported at least half full (at least one send
// left when no limit was stated). A key forgotten then is one never seen:
// its next send goes out (as it would have), and its answer paces it
// again. A key paused or nearly spent is never forgotten: its sends would
// go out as if its server had not asked them to wait.
func (st *state) free(now instant) bool {
	if st.inflight > 0 || st.probeID != 0 || st.probe || st.refusals > 0 || st.until > now || st.next > now {
		return false
	}
	for _, q := range st.quotas {
		if limit := st.capOf(&q); q.left < 1 || limit > 0 && 2*q.left < limit {
			return false
		}
	}
	return true
}

// fullError is the error of a send refused for want of room.
func (p *Pacer) fullError() error {
	msg := fmt.Sprintf("ratelimit: too many keys: %d held, each still paced by its server's answers", p.cfg.MaxKeys)
	if p.cfg.Full == nil {
		return errs.New(msg)
	}
	return errs.New(msg, p.cfg.Full)
}

// Keys returns how many keys the pacer holds.
func (p *Pacer) Keys() int { return int(p.held.Load()) }

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
	at := p.at(now)
	st := t.st
	st.inflight--
	st.inflightTok -= t.tokens
	p.settled++
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
		out.Pause = p.quotas(st, t, at, h, limit)
		if p.cfg.Shape && h.NPolicies > 0 && !t.note {
			p.shape(st, t, h)
		}
	}
	if !t.note {
		st.finished++
		st.finishedTok += uint64(t.tokens)
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
	// What the server admits when the pause ends is not known (a
	// Retry-After says when to come back, not how many may): one send
	// goes and the others wait for its answer.
	st.awaitProbe(at.add(d), d)
	out.Pause = max(out.Pause, d)
	return out
}

// quotas takes the quotas and policies of h, the answer to t's send, and
// returns how long the longest quota it reports spent holds the key (its
// reset, or for a quota that refills the time one unit takes to come in);
// every reset is capped at limit, but those of quotas that refill, capped
// at MaxPause only.
//
// The server may have counted, after t's send, any other send that was in
// flight at some time during t's: those still in flight, and those
// answered (or lost) since t's send was made. What the answer reports left
// less those is a floor of what is left now, whatever order the server
// took them in, and whatever order their answers come back in; so the
// newest answer replaces the key's quotas, when it reports any. An answer
// that is not a send's (Note) can only add quotas it finds spent.
func (p *Pacer) quotas(st *state, t Ticket, now instant, h *hints.Hints, limit time.Duration) time.Duration {
	overlap := [...]int64{
		hints.Requests: int64(st.inflight) + int64(st.finished-t.finished),
		hints.Tokens:   st.inflightTok + int64(st.finishedTok-t.finishedTok),
	}
	if h.Limit > 0 {
		st.limit = h.Limit
	}
	var window time.Duration // the longest window a policy states
	for _, pol := range h.Policies[:h.NPolicies] {
		window = max(window, pol.Window)
	}
	var spent time.Duration
	replaced := t.note // a Note replaces nothing
	for _, it := range h.Items[:h.NItems] {
		if it.Remaining < 0 || it.Reset <= 0 {
			continue // remaining unknown, or restored already
		}
		// A quota that refills says how fast it does, whatever the refused
		// send's Retry-After (which pauses the key all the same): only
		// MaxPause caps its reset.
		reset := min(it.Reset, limit)
		period := max(reset, window)
		if it.Refills {
			reset = min(it.Reset, p.cfg.MaxPause)
			period = reset
		}
		u := min(it.Unit, hints.Tokens)
		q := quota{left: it.Remaining - overlap[u], reset: now.add(reset), span: reset, period: period,
			limit: it.Limit, unit: u, refills: it.Refills, from: now}
		if limit := st.capOf(&q); reset == it.Reset && limit > it.Remaining {
			q.gain = limit - it.Remaining
		}
		if it.Remaining == 0 {
			if q.refills && q.gain > 0 {
				// Spent until one unit has come in.
				spent = max(spent, time.Duration(mulDiv(1, int64(q.span), q.gain, true)))
			} else {
				spent = max(spent, reset)
			}
		}
		if t.note && q.left > 0 {
			continue
		}
		if !replaced {
			st.quotas, replaced = st.quotas[:0], true
		}
		if len(st.quotas) < hints.MaxItems {
			st.quotas = append(st.quotas, q)
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
	st.next = max(st.next, t.at.add(st.spacing))
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
// (the answer may be older than others). A key the pacer has no room for
// is not noted: no send of it can be reserved either.
func (p *Pacer) Note(key string, now time.Time, a Answer) Outcome {
	p.mu.Lock()
	st, err := p.state(key, p.at(now))
	if err != nil {
		p.mu.Unlock()
		return Outcome{}
	}
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
	st.inflightTok -= t.tokens
	st.finishedTok += uint64(t.tokens)
	p.settled++
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
	return p.PausedForTokens(key, now, 0)
}

// PausedForTokens is PausedFor for a send estimated at tokens.
func (p *Pacer) PausedForTokens(key string, now time.Time, tokens int64) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st := p.keys[key]; st != nil {
		d, _ := st.wait(p.at(now), estimate(tokens))
		return d
	}
	return 0
}

// Longest returns the longest wait of any key from now.
func (p *Pacer) Longest(now time.Time) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	at := p.at(now)
	var d time.Duration
	for _, st := range p.keys {
		w, _ := st.wait(at, 0)
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
