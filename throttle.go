package ratelimit

import (
	"context"
	"math"
	"sync"
	"time"

	"github.com/rlkit/ratelimit/internal/timesrc"
)

// ThrottleConfig configures [NewThrottle]. Its zero value is valid: each
// zero field takes the default it names.
type ThrottleConfig struct {
	// Window is the sliding window the counts are kept over: default one
	// minute.
	Window time.Duration
	// K is how many attempts each accepted one allows: a request is sent
	// only while the attempts in the window are fewer than K·accepts + 1.
	// Default 2 (the server may fail half the attempts before any request
	// is refused locally); at least 1.
	K float64
	// RetryShare is the retry budget: a retry is sent only while the
	// retries in the window are fewer than RetryShare·requests + 1.
	// Default 0.1 (retries add at most 10% to the requests); in (0, 1].
	RetryShare float64
	// Probe is how often a throttled key lets one request go anyway, to
	// learn that its server is back: when Probe has passed since its last
	// answer and its last probe. Default Window/60 (one second for a
	// minute); at most Window.
	Probe time.Duration
}

// Throttle is client-side adaptive throttling with a retry budget, per
// key (such as a host or a gRPC target): a client that asks it before
// each send stops sending into an outage, and comes back when the server
// answers again.
//
// Over a sliding window ([ThrottleConfig].Window, counted as
// [SlidingCounter] counts: two windows aligned to the Unix epoch, the
// previous one weighted by the share of it still in the sliding window),
// a key's attempts are the sends whose answers came back, and its accepts
// the answers that served the request. [Throttle.Attempt] lets a request
// go while attempts < K·accepts + 1 (Google SRE's client-side throttling,
// made deterministic): a cold start is not throttled, since nothing has
// been answered yet, and a healthy server never is; a server that fails
// more than 1 - 1/K of the attempts gets requests refused locally. Those
// are not attempts, so that they never keep a key throttled.
//
// A throttled key lets one request go every [ThrottleConfig].Probe, a
// probe; the first accept while the key is throttled forgives the
// failures before it (its attempts are its accepts again), so that
// traffic returns as soon as the server does, instead of when its
// failures have left the window. In an outage the attempts in a window are so at most
// K·accepts + 1, plus the probes (Window/Probe), plus the attempts in
// flight when the key was throttled.
//
// [Throttle.Retry] lets a retry go only while the request rule holds (no
// probe) and retries < RetryShare·requests + 1, where requests are those
// Attempt let go. Tell every answer to [Throttle.Record].
//
// Its decisions report to an [Observer] (Algorithm [ThrottleAlgorithm],
// Home [HomeKeyed]): a request or retry refused locally as [OutcomeShed].
//
// It holds up to [WithMaxKeys] keys (65,536 by default, about 150 bytes
// each besides the key); a key whose counts have all left the window is
// forgotten when room is needed. When every key held is live, the new
// keys share one state: they are throttled together, never let go
// unthrottled.
//
// Create one with [NewThrottle]; the zero value is not usable. A Throttle
// is safe for concurrent use. Package httplimit's transport and grpclimit's
// client run one with their WithThrottle options.
type Throttle struct {
	ts      timesrc.Source
	obs     Observer
	name    string
	window  int64 // nanoseconds
	probe   int64 // nanoseconds
	k       float64
	share   float64
	maxKeys int

	// mu guards the fields below.
	mu       sync.Mutex
	keys     map[string]*throttleKey
	overflow throttleKey // the new keys' state when keys is full of live ones
	swept    int64       // the window index of the last sweep for room
}

// throttleKey is one key's counts: those of the current window (index
// win) and of the previous one; and when it was last answered and last
// probed (Unix nanoseconds; math.MinInt64 for never).
type throttleKey struct {
	win              int64
	cur, prev        throttleCounts
	answered, probed int64
}

func newThrottleKey(win int64) throttleKey {
	return throttleKey{win: win, answered: math.MinInt64, probed: math.MinInt64}
}

// throttleCounts are the counts of one window, as float64 for the
// weighted arithmetic.
type throttleCounts struct {
	attempts, accepts, requests, retries float64
}

// defaultThrottleKeys is the key cap of a Throttle without WithMaxKeys.
const defaultThrottleKeys = 1 << 16

// NewThrottle returns a client-side throttle configured by cfg. The
// options [WithClock], [WithMaxKeys], [WithObserver] and [WithName] apply.
// A field of cfg out of range, or an invalid option, is an error wrapping
// [ErrInvalidConfig].
func NewThrottle(cfg ThrottleConfig, opts ...Option) (*Throttle, error) {
	o, err := buildOptions("NewThrottle", optClock|optMaxKeys|optObserver|optName, opts)
	if err != nil {
		return nil, err
	}
	if cfg.Window == 0 {
		cfg.Window = time.Minute
	}
	if cfg.K == 0 {
		cfg.K = 2
	}
	if cfg.RetryShare == 0 {
		cfg.RetryShare = 0.1
	}
	if cfg.Probe == 0 {
		cfg.Probe = cfg.Window / 60
	}
	switch {
	case cfg.Window < time.Millisecond || cfg.Window > 100*365*24*time.Hour:
		return nil, configError("ratelimit.ThrottleConfig.Window must be between 1ms and 100 years, got %v", cfg.Window)
	case !(cfg.K >= 1 && cfg.K <= 1e6):
		return nil, configError("ratelimit.ThrottleConfig.K must be in [1, 1e6], got %v", cfg.K)
	case !(cfg.RetryShare > 0 && cfg.RetryShare <= 1):
		return nil, configError("ratelimit.ThrottleConfig.RetryShare must be in (0, 1], got %v", cfg.RetryShare)
	case cfg.Probe <= 0 || cfg.Probe > cfg.Window:
		return nil, configError("ratelimit.ThrottleConfig.Probe must be positive and at most Window (%v), got %v", cfg.Window, cfg.Probe)
	}
	if o.given&optMaxKeys == 0 {
		o.maxKeys = defaultThrottleKeys
	}
	return &Throttle{ts: timesrc.New(o.clock), obs: o.observer, name: o.name,
		window: int64(cfg.Window), probe: int64(cfg.Probe), k: cfg.K, share: cfg.RetryShare, maxKeys: o.maxKeys,
		keys: make(map[string]*throttleKey), swept: math.MinInt64, overflow: newThrottleKey(0)}, nil
}

// Attempt asks whether a request (a first try) of key may be sent now,
// and counts it as a request if so. When the Decision is not allowed, do
// not send the request: the server has been failing. The Decision says
// Limit (K·accepts + 1, rounded down), Remaining (how many more failed
// answers the key can take with its requests still going; 0 for a probe)
// and, when refused, RetryAfter: when a request would go (a probe, or the
// counts decayed) if nothing else happened. Send the request, then tell
// its answer to [Throttle.Record].
func (t *Throttle) Attempt(ctx context.Context, key string) Decision {
	return t.ask(ctx, key, false)
}

// Retry asks whether a retry of key may be sent now, and counts it as a
// retry if so: it must pass the rule of [Throttle.Attempt] (a retry is
// never a probe) and the retry budget. Its Decision is that of Attempt
// when the request rule refuses it; when the budget does, Limit and
// Remaining are the budget's (RetryShare·requests + 1, the retries left).
// Tell the retry's answer to [Throttle.Record] too.
func (t *Throttle) Retry(ctx context.Context, key string) Decision {
	return t.ask(ctx, key, true)
}

// Record tells the throttle that an attempt of key was answered, and
// whether the answer accepted it (served the request, even with a client
// error such as 404). Record only answers: not the requests refused
// locally, nor those the caller cancelled, which say nothing of the
// server.
func (t *Throttle) Record(key string, accepted bool) {
	now := t.ts.Now()
	t.mu.Lock()
	st := t.state(key, now)
	st.answered = now
	st.cur.attempts++
	if accepted {
		st.cur.accepts++
		// An accept while the key is throttled: the server is back.
		// Forgive the failures before it: the attempts are the accepts
		// again, so that traffic returns at once, and K-1 more failures
		// per accept throttle the key anew if the server fails again.
		f := t.elapsed(st, now)
		att := st.prev.attempts*(1-f) + st.cur.attempts
		if att >= t.k*(st.prev.accepts*(1-f)+st.cur.accepts)+1 {
			st.prev.attempts, st.cur.attempts = st.prev.accepts, st.cur.accepts
		}
	}
	t.mu.Unlock()
}

func (t *Throttle) ask(ctx context.Context, key string, retry bool) Decision {
	now := t.ts.Now()
	t.mu.Lock()
	st := t.state(key, now)
	f := t.elapsed(st, now)
	d := t.rule(f, t.k, st.prev.attempts, st.cur.attempts, st.prev.accepts, st.cur.accepts)
	switch {
	case retry && d.Allowed:
		d = t.rule(f, t.share, st.prev.retries, st.cur.retries, st.prev.requests, st.cur.requests)
	case retry:
	case !d.Allowed:
		due := max(st.answered, st.probed) + t.probe
		if now >= due {
			d.Allowed, d.RetryAfter = true, 0 // a probe
			st.probed = now
		} else {
			d.RetryAfter = min(d.RetryAfter, time.Duration(due-now))
		}
	}
	switch {
	case !d.Allowed:
	case retry:
		st.cur.retries++
	default:
		st.cur.requests++
	}
	t.mu.Unlock()
	if t.obs != nil {
		observeGuard(ctx, t.obs, Event{Name: t.name, Algorithm: ThrottleAlgorithm, Home: HomeKeyed, Decision: d})
	}
	return d
}

// elapsed returns the share of st's current window elapsed at now.
func (t *Throttle) elapsed(st *throttleKey, now int64) float64 {
	return float64(now-st.win*t.window) / float64(t.window)
}

// rule decides used < k·base + 1 on the counts weighted at the elapsed
// share f of the current window, from the previous window's (up, bp) and
// the current one's (uc, bc).
func (t *Throttle) rule(f, k, up, uc, bp, bc float64) Decision {
	u := up*(1-f) + uc
	lim := k*(bp*(1-f)+bc) + 1
	d := Decision{Limit: int(min(lim, math.MaxInt32))}
	if u < lim {
		d.Allowed = true
		d.Remaining = int(min(math.Ceil(lim-u)-1, math.MaxInt32))
		return d
	}
	// Refused: with nothing else happening, the weighted counts decay as
	// the previous window leaves. Solve (up - k·bp)(1-g) < k·bc + 1 - uc
	// for the share g of this window; else, in the next window, where
	// this one's counts are the previous ones, (uc - k·bc)(1-g) < 1.
	var wait float64 // in windows
	if dd, r := up-k*bp, k*bc+1-uc; r > 0 && dd > 0 {
		wait = 1 - r/dd - f
	} else {
		wait = 1 - f
		if dd := uc - k*bc; dd > 1 {
			wait += 1 - 1/dd
		}
	}
	d.RetryAfter = max(time.Duration(wait*float64(t.window))+1, 1)
	return d
}

// state returns key's counts rolled to now's window. Requires t.mu held.
func (t *Throttle) state(key string, now int64) *throttleKey {
	win := now / t.window
	st, ok := t.keys[key]
	if !ok {
		if len(t.keys) >= t.maxKeys && !t.sweep(win) {
			st = &t.overflow
		} else {
			st = new(throttleKey)
			*st = newThrottleKey(win)
			t.keys[key] = st
		}
	}
	switch {
	case st.win == win:
	case st.win == win-1:
		st.prev, st.cur, st.win = st.cur, throttleCounts{}, win
	case st.win < win:
		st.prev, st.cur, st.win = throttleCounts{}, throttleCounts{}, win
	}
	return st
}

// sweep forgets the keys whose counts have all left the window, at most
// once per window, and reports whether there is room for a key. Requires
// t.mu held.
func (t *Throttle) sweep(win int64) bool {
	if t.swept < win {
		t.swept = win
		for k, st := range t.keys {
			if st.win < win-1 {
				delete(t.keys, k)
			}
		}
	}
	return len(t.keys) < t.maxKeys
}
