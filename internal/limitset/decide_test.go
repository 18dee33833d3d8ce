package limitset

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rlkit/ratelimit"
	"github.com/rlkit/ratelimit/internal/report"
	"github.com/rlkit/ratelimit/internal/testkit/eventrec"
	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
)

// epoch is 2026-01-01 00:00:00.3 UTC: not on a whole second, so that
// rounding shows.
var epoch = time.Date(2026, 1, 1, 0, 0, 0, 300_000_000, time.UTC)

var errDenied = errors.New("ratelimit: test denylist")

// call is the request type of these tests: what a transport would tell
// the key functions.
type call struct {
	key  string // "" : the limits keyed by it do not apply
	user string
}

func byKey(c *call) (string, bool)  { return c.key, c.key != "" }
func byUser(c *call) (string, bool) { return c.user, c.user != "" }

// newKeyed returns a fixed window limiter of limit events a minute on c.
func newKeyed(t testing.TB, limit int, c ratelimit.Clock) *ratelimit.Keyed {
	t.Helper()
	k, err := ratelimit.NewKeyed(ratelimit.FixedWindowPolicy(limit, time.Minute), ratelimit.WithClock(c))
	require.NoError(t, err)
	return k
}

// events records what an observer sees.
type events struct{ eventrec.Recorder }

// logRecorder is a slog.Handler keeping each record's attributes.
type logRecorder struct {
	mu   sync.Mutex
	recs []map[string]any
	msgs []string
}

func (l *logRecorder) Enabled(context.Context, slog.Level) bool { return true }
func (l *logRecorder) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *logRecorder) WithGroup(string) slog.Handler            { return l }
func (l *logRecorder) Handle(_ context.Context, r slog.Record) error {
	m := map[string]any{}
	r.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.Any()
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.recs = append(l.recs, m)
	l.msgs = append(l.msgs, r.Message)
	return nil
}

func (l *logRecorder) records() []map[string]any {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]map[string]any(nil), l.recs...)
}

// failing is a limiter whose backend is down, failing open or closed.
type failing struct{ open bool }

var errBackend = errors.New("redis: connection refused (secret detail)")

func (f failing) AllowN(context.Context, string, int) (ratelimit.Decision, error) {
	return ratelimit.Decision{Allowed: f.open, Limit: 10}, errBackend
}
func (f failing) WaitN(context.Context, string, int) error   { return errBackend }
func (f failing) RefundN(context.Context, string, int) error { return errBackend }
func (f failing) Peek(ctx context.Context, key string, n int) (ratelimit.Decision, error) {
	return f.AllowN(ctx, key, n)
}

// spy wraps a limiter, recording the keys it is asked for.
type spy struct {
	ratelimit.KeyedLimiter
	mu   sync.Mutex
	keys []string
}

func (s *spy) AllowN(ctx context.Context, key string, n int) (ratelimit.Decision, error) {
	s.mu.Lock()
	s.keys = append(s.keys, key)
	s.mu.Unlock()
	return s.KeyedLimiter.AllowN(ctx, key, n)
}

// outcomes returns the limit and outcome of each of evs, as "name:outcome".
func outcomes(evs []ratelimit.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Name+":"+e.Outcome.String())
	}
	return out
}

// setup builds a Set on a mock clock, with an observer and a log
// recorder, no report pacing.
func setup(t testing.TB, limits ...Limit[*call]) (*Set[*call], *events, *logRecorder, *fakeclock.Mock) {
	t.Helper()
	mock := fakeclock.New(epoch)
	ev, rec := &events{}, &logRecorder{}
	s, err := New(Config{Pkg: "testlimit", Observer: ev, Clock: mock, Logger: report.To(slog.New(rec)), DeniedErr: errDenied}, limits)
	require.NoError(t, err)
	return s, ev, rec, mock
}

func decide(s *Set[*call], c *call, mut ...func(*Request[*call])) (Outcome, *Verdict[*call]) {
	req := &Request[*call]{R: c, Ctx: context.Background(), N: 1}
	for _, f := range mut {
		f(req)
	}
	v := new(Verdict[*call])
	return s.Decide(req, v, false, nil), v
}

func TestNewErrors(t *testing.T) {
	t.Parallel()
	lim := newKeyed(t, 1, nil)
	var nilKeyed *ratelimit.Keyed
	for _, c := range []struct {
		name   string
		limits []Limit[*call]
		want   string
	}{
		{"empty", nil, "testlimit.New: limits must not be empty, got 0"},
		{"no key", []Limit[*call]{{Name: "a", Limiter: lim}}, `testlimit.Limit.Key of limit "a" must not be nil`},
		{"no limiter", []Limit[*call]{{Name: "a", Key: byKey}}, `testlimit.Limit.Limiter of limit "a" must not be nil, got <nil>`},
		{"typed nil limiter", []Limit[*call]{{Name: "a", Key: byKey, Limiter: nilKeyed}}, `testlimit.Limit.Limiter of limit "a" must not be nil, got *ratelimit.Keyed`},
		{"negative window", []Limit[*call]{{Name: "a", Key: byKey, Limiter: lim, Window: -time.Second}}, `testlimit.Limit.Window of limit "a" must not be negative, got -1s`},
		{"bad name", []Limit[*call]{{Name: "a\n", Key: byKey, Limiter: lim}}, `testlimit.Limit.Name must be printable ASCII, got "a\n"`},
		{"duplicate", []Limit[*call]{{Name: "a", Key: byKey, Limiter: lim}, {Name: "a", Key: byKey, Limiter: lim}}, `testlimit.Limit.Name must be unique, got "a" twice`},
		{"default twice", []Limit[*call]{{Key: byKey, Limiter: lim}, {Name: "default", Key: byKey, Limiter: lim}}, `got "default" twice`},
		{"exempt and denied", []Limit[*call]{{Name: "a", Key: byKey, Limiter: lim, ExemptKeys: []string{"x", "secret-key"}, DeniedKeys: []string{"secret-key"}}},
			`testlimit.Limit.ExemptKeys of limit "a" must not repeat a key of its DeniedKeys, got one at index 1`},
	} {
		_, err := New(Config{Pkg: "testlimit"}, c.limits)
		if assert.Error(t, err, c.name) {
			assert.ErrorIs(t, err, ratelimit.ErrInvalidConfig, c.name)
			assert.Contains(t, err.Error(), c.want, c.name)
			assert.True(t, strings.HasPrefix(err.Error(), "ratelimit: "), c.name)
			assert.NotContains(t, err.Error(), "secret-key", "%s: the message names a key", c.name)
		}
	}
}

func TestNewCopiesTheLimits(t *testing.T) {
	t.Parallel()
	lim := newKeyed(t, 1, nil)
	exempt := []string{"e"}
	limits := []Limit[*call]{{Key: byKey, Limiter: lim, ExemptKeys: exempt}}
	s, err := New(Config{Pkg: "testlimit"}, limits)
	require.NoError(t, err)
	exempt[0] = "changed"
	limits[0].Name = "changed"
	require.Len(t, s.Limits(), 1)
	assert.Equal(t, "default", s.Limits()[0].Name)
	assert.Equal(t, []string{"e"}, s.Limits()[0].ExemptKeys)
	o, _ := decide(s, &call{key: "e"})
	assert.Equal(t, Pass, o, "the exempt key as given to New")
}

// TestDecideOutcomes walks one Set through every Outcome, checking the
// Verdict and what the observer and the logger saw.
func TestDecideOutcomes(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	lim := newKeyed(t, 2, mock)
	s, ev, rec, _ := setup(t, Limit[*call]{Name: "api", Key: byKey, Limiter: lim, DeniedKeys: []string{"bad"}, ExemptKeys: []string{"vip"}})

	o, v := decide(s, &call{})
	assert.Equal(t, Pass, o, "no key: the limit does not apply")
	assert.Equal(t, -1, v.From)
	assert.Empty(t, v.Charges())
	assert.Empty(t, ev.Take())

	for i, want := range []int{1, 0} {
		o, v = decide(s, &call{key: "k"})
		require.Equal(t, Admitted, o, "request %d", i+1)
		assert.Equal(t, 0, v.From)
		assert.Equal(t, 1, v.Enforced)
		assert.Equal(t, "api", v.Limit())
		assert.False(t, v.Shadow())
		assert.Equal(t, ratelimit.Decision{Allowed: true, Limit: 2, Remaining: want, ResetAfter: 59700 * time.Millisecond}, v.Dec)
		require.Len(t, v.Charges(), 1)
		assert.Equal(t, "k", v.Charges()[0].Key)
		assert.Same(t, lim, v.Charges()[0].Limiter)
	}

	o, v = decide(s, &call{key: "k"})
	assert.Equal(t, Denied, o, "third request in the window")
	assert.False(t, v.Dec.Allowed)
	assert.Equal(t, 59700*time.Millisecond, v.Dec.RetryAfter)
	assert.False(t, v.Failed)
	assert.NoError(t, v.Err)
	// Every decision, once, under the limit's name, with the limiter's
	// home and algorithm, and its Decision.
	evs := ev.Take()
	require.Len(t, evs, 3)
	for i, e := range evs {
		assert.Equal(t, "api", e.Name)
		assert.Equal(t, ratelimit.HomeKeyed, e.Home)
		assert.Equal(t, ratelimit.FixedWindowAlgorithm, e.Algorithm)
		assert.Equal(t, []ratelimit.Outcome{ratelimit.OutcomeAllowed, ratelimit.OutcomeAllowed, ratelimit.OutcomeDenied}[i], e.Outcome, "event %d", i)
		assert.Equal(t, 2, e.Decision.Limit)
	}

	o, _ = decide(s, &call{key: "vip"})
	assert.Equal(t, Pass, o, "exempt key")
	assert.Equal(t, []ratelimit.Event{{Name: "api", Home: ratelimit.HomeNone, Outcome: ratelimit.OutcomeExempt, N: 1,
		Algorithm: ratelimit.FixedWindowAlgorithm, Decision: ratelimit.Decision{Allowed: true}}}, ev.Take())
	assert.Equal(t, 2, peekRemaining(t, lim, "vip"), "the exempt key was charged")

	o, v = decide(s, &call{key: "bad"})
	assert.Equal(t, Listed, o, "denied key")
	require.NotNil(t, v.Listed)
	assert.Equal(t, "api", v.Listed.Name)
	assert.Equal(t, -1, v.From)
	assert.Equal(t, []ratelimit.Event{deniedEvent("api", ratelimit.OutcomeDenied, 1)}, ev.Take())
	assert.Equal(t, 2, peekRemaining(t, lim, "bad"), "the denied key was charged")

	for _, mut := range []func(*Request[*call]){
		func(r *Request[*call]) { r.Exempt = true },
		func(r *Request[*call]) { r.N = 0 },
	} {
		o, v = decide(s, &call{key: "bad"}, mut)
		assert.Equal(t, Listed, o, "an exempt request with a denied key: denial beats exemption")
		assert.Equal(t, "api", v.Listed.Name)
		assert.Len(t, ev.Take(), 1)

		o, _ = decide(s, &call{key: "other"}, mut)
		assert.Equal(t, Pass, o, "an exempt request")
		assert.Equal(t, ratelimit.OutcomeExempt, ev.Take()[0].Outcome)
		assert.Equal(t, 2, peekRemaining(t, lim, "other"))
	}

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	sf, _, frec, _ := setup(t, Limit[*call]{Name: "redis", Key: byKey, Limiter: failing{open: true}})
	v = new(Verdict[*call])
	o = sf.Decide(&Request[*call]{R: &call{key: "k"}, Ctx: ctx, N: 1}, v, false, nil)
	assert.Equal(t, Canceled, o, "a done context and a limiter error")
	assert.Empty(t, frec.records(), "the caller's cancellation was reported")
	assert.Empty(t, rec.records())
}

// TestDecideExempt: DecideExempt settles an exempt request as Decide
// does, without a Verdict: an enforced limit's DeniedKeys refuse it, a
// shadow limit's do not, nor any with AllShadow; otherwise every limit
// reports it exempt.
func TestDecideExempt(t *testing.T) {
	t.Parallel()
	lim := newKeyed(t, 1, nil)
	s, ev, _, _ := setup(t,
		Limit[*call]{Name: "api", Key: byKey, Limiter: lim, DeniedKeys: []string{"bad"}},
		Limit[*call]{Name: "trial", Key: byUser, Limiter: lim, Shadow: true, DeniedKeys: []string{"bad"}})
	req := &Request[*call]{R: &call{key: "bad"}, Ctx: context.Background(), N: 2, Exempt: true}
	l := s.DecideExempt(req)
	require.NotNil(t, l)
	assert.Equal(t, "api", l.Name)
	assert.Equal(t, []ratelimit.Event{deniedEvent("api", ratelimit.OutcomeDenied, 2)}, ev.Take())

	req.AllShadow = true
	assert.Nil(t, s.DecideExempt(req), "every limit in shadow mode")
	assert.Len(t, ev.Take(), 2, "exempt from both limits")
	req.AllShadow = false
	req.R = &call{key: "ok", user: "bad"}
	assert.Nil(t, s.DecideExempt(req), "a shadow limit's denied key")
	got := ev.Take()
	require.Len(t, got, 2, "one exemption per limit")
	assert.Equal(t, ratelimit.OutcomeExempt, got[0].Outcome)
	assert.Equal(t, "trial", got[1].Name)
	assert.Equal(t, 1, peekRemaining(t, lim, "ok"), "an exempt request was charged")
}

func deniedEvent(name string, o ratelimit.Outcome, n int) ratelimit.Event {
	return ratelimit.Event{Name: name, Home: ratelimit.HomeNone, Outcome: o, N: n, Algorithm: ratelimit.FixedWindowAlgorithm,
		Decision: ratelimit.Decision{RetryAfter: ratelimit.RetryNever}, Err: errDenied}
}

func peekRemaining(t *testing.T, lim ratelimit.KeyedLimiter, key string) int {
	t.Helper()
	d, err := lim.Peek(context.Background(), key, 1)
	require.NoError(t, err)
	return d.Remaining + btoi(d.Allowed)
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestDecideAllOrNothing: two enforced limits charge together or not at
// all; the Decision reported is the denying one, else the one with the
// fewest Remaining.
func TestDecideAllOrNothing(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	perKey, perUser := newKeyed(t, 5, mock), newKeyed(t, 2, mock)
	s, _, _, _ := setup(t,
		Limit[*call]{Name: "key", Key: byKey, Limiter: perKey},
		Limit[*call]{Name: "user", Key: byUser, Limiter: perUser})
	o, v := decide(s, &call{key: "k", user: "u"})
	require.Equal(t, Admitted, o)
	assert.Equal(t, "user", v.Limit(), "the fewest Remaining")
	assert.Equal(t, 2, v.Enforced)
	decide(s, &call{key: "k", user: "u"})
	o, v = decide(s, &call{key: "k", user: "u"})
	require.Equal(t, Denied, o)
	assert.Equal(t, "user", v.Limit())
	assert.Equal(t, 3, peekRemaining(t, perKey, "k"), "the denied request was charged in the other limit")

	o, v = decide(s, &call{key: "k"})
	require.Equal(t, Admitted, o, "only the key limit applies")
	assert.Equal(t, "key", v.Limit())
	assert.Len(t, v.Charges(), 1)
}

// TestDecideTiers: a Tiered limiter is resolved once per request to the
// request's tier, whose limiter is charged; an unknown tier is the
// server's misconfiguration (Misconfigured), with the error reported and
// the verdict Failed.
func TestDecideTiers(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	free, pro := newKeyed(t, 1, mock), newKeyed(t, 100, mock)
	calls := 0
	tiered, err := ratelimit.NewTiered(func(_ context.Context, key string) string {
		calls++
		return strings.SplitN(key, "-", 2)[0]
	}, map[string]ratelimit.KeyedLimiter{"free": free, "pro": pro})
	require.NoError(t, err)
	s, _, rec, _ := setup(t, Limit[*call]{Name: "plan", Key: byKey, Limiter: tiered})

	o, v := decide(s, &call{key: "pro-1"})
	require.Equal(t, Admitted, o)
	assert.Same(t, pro, v.Charges()[0].Limiter)
	assert.Equal(t, 100, v.Dec.Limit)
	assert.Equal(t, 1, calls, "tier function calls per request")
	h := map[string][]string{}
	s.WriteFields(h, &HTTPNames, AllFields, v)
	assert.Equal(t, []string{`"plan";q=100;w=60`}, h["Ratelimit-Policy"], "the tier's window and quota")

	decide(s, &call{key: "free-1"})
	o, v = decide(s, &call{key: "free-1"})
	require.Equal(t, Denied, o)
	assert.Equal(t, 1, v.Dec.Limit)

	o, v = decide(s, &call{key: "gold-1"})
	require.Equal(t, Misconfigured, o, "unknown tier")
	assert.True(t, v.Failed)
	assert.ErrorIs(t, v.Err, ratelimit.ErrUnknownTier)
	assert.Equal(t, "plan", v.Limit())
	recs := rec.records()
	require.Len(t, recs, 1)
	assert.Equal(t, "plan", recs[0]["limit"])
}

// TestDecideShadow: shadow limits are consulted only when the enforced
// limits admit; they never deny, and the observer hears their denials as
// OutcomeShadow (their limiters cannot know: no context is marked); with
// shadowFields (or no enforced limit applying) a more restrictive shadow
// Decision is the one reported, and WriteFields reports its denial as an
// admission.
func TestDecideShadow(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	enf := &spy{KeyedLimiter: newKeyed(t, 3, mock)}
	sh := &spy{KeyedLimiter: newKeyed(t, 1, mock)}
	s, ev, _, _ := setup(t,
		Limit[*call]{Name: "trial", Key: byKey, Limiter: sh, Shadow: true, DeniedKeys: []string{"bad"}},
		Limit[*call]{Name: "api", Key: byKey, Limiter: enf})

	run := func(c *call, shadowFields bool) (Outcome, *Verdict[*call]) {
		v := new(Verdict[*call])
		return s.Decide(&Request[*call]{R: c, Ctx: context.Background(), N: 1}, v, shadowFields, nil), v
	}
	o, v := run(&call{key: "k"}, false)
	require.Equal(t, Admitted, o)
	assert.Equal(t, 1, v.Enforced)
	require.Len(t, v.Charges(), 2)
	assert.Equal(t, "api", v.Charges()[0].Entry.Name, "enforced limits first")
	assert.Equal(t, "api", v.Limit())
	assert.Equal(t, []string{"api:allowed", "trial:allowed"}, outcomes(ev.Take()))

	o, v = run(&call{key: "k"}, false)
	require.Equal(t, Admitted, o, "the shadow limit denies: served")
	assert.Equal(t, "api", v.Limit(), "without shadow fields the enforced Decision is reported")
	assert.Equal(t, []string{"api:allowed", "trial:shadow"}, outcomes(ev.Take()))

	o, v = run(&call{key: "k"}, true)
	require.Equal(t, Admitted, o)
	assert.Equal(t, "trial", v.Limit(), "with shadow fields the more restrictive shadow Decision")
	assert.True(t, v.Shadow())
	assert.False(t, v.Dec.Allowed)
	h := map[string][]string{}
	s.WriteFields(h, &HTTPNames, AllFields, v)
	assert.Equal(t, []string{"0"}, h["X-Ratelimit-Remaining"])
	assert.NotContains(t, h, "Retry-After", "a shadow denial is reported as an admission")

	o, _ = run(&call{key: "k"}, false)
	require.Equal(t, Denied, o, "the enforced limit's quota of 3 is spent")
	assert.Len(t, sh.keys, 3, "the shadow limit was consulted for a denied request")

	// Every limit in shadow mode: nothing enforced, the shadow Decision
	// competes, and WriteFields writes it only with shadowFields.
	v = new(Verdict[*call])
	o = s.Decide(&Request[*call]{R: &call{key: "k2"}, Ctx: context.Background(), N: 1, AllShadow: true}, v, false, nil)
	require.Equal(t, Admitted, o)
	assert.Equal(t, 0, v.Enforced)
	assert.True(t, v.From >= 0 && v.Shadow())
	h = map[string][]string{}
	s.WriteFields(h, &HTTPNames, AllFields, v)
	assert.Empty(t, h, "shadow Decision without shadow fields")

	// A denied key of a shadow limit: served, not charged there, reported
	// as OutcomeShadow.
	ev.Take()
	n := len(sh.keys)
	o, _ = run(&call{key: "bad"}, false)
	require.Equal(t, Admitted, o)
	assert.Len(t, sh.keys, n, "the shadow limit charged its denied key")
	evs := ev.Take()
	require.Len(t, evs, 2)
	assert.Equal(t, "api", evs[0].Name)
	assert.Equal(t, ratelimit.Event{Name: "trial", Home: ratelimit.HomeNone, Outcome: ratelimit.OutcomeShadow, N: 1,
		Decision: ratelimit.Decision{RetryAfter: ratelimit.RetryNever}, Err: errDenied}, evs[1])
}

// TestDecideLimiterErrors: the limiter's failure policy decides; the
// error is reported once per interval, with the caller's attributes and
// never the key; a fail-closed denial writes only Retry-After.
func TestDecideLimiterErrors(t *testing.T) {
	t.Parallel()
	for _, open := range []bool{true, false} {
		mock := fakeclock.New(epoch)
		rec := &logRecorder{}
		s, err := New(Config{Pkg: "testlimit", Clock: mock, Logger: report.To(slog.New(rec)), ReportEvery: 10 * time.Second},
			[]Limit[*call]{{Name: "redis", Key: byKey, Limiter: failing{open: open}}})
		require.NoError(t, err)
		attrs := func() []slog.Attr { return []slog.Attr{slog.String("method", "/pkg.Svc/Get")} }
		for range 3 {
			v := new(Verdict[*call])
			o := s.Decide(&Request[*call]{R: &call{key: "secret-key"}, Ctx: context.Background(), N: 1}, v, false, attrs)
			want := Denied
			if open {
				want = Admitted
			}
			require.Equal(t, want, o, "open=%v", open)
			assert.True(t, v.Failed)
			assert.ErrorIs(t, v.Err, errBackend)
			h := map[string][]string{}
			s.WriteFields(h, &GRPCNames, AllFields, v)
			if open {
				assert.Empty(t, h, "fail open: no quota was measured")
			} else {
				assert.Equal(t, map[string][]string{"retry-after": {"1"}}, h, "fail closed")
			}
		}
		recs := rec.records()
		require.Len(t, recs, 1, "reports within one interval")
		assert.Equal(t, map[string]any{"limit": "redis", "error": errBackend, "suppressed": int64(0), "method": "/pkg.Svc/Get"}, recs[0])
		assert.Equal(t, []string{"ratelimit: limiter error"}, rec.msgs)
		mock.Add(10 * time.Second)
		s.Decide(&Request[*call]{R: &call{key: "secret-key"}, Ctx: context.Background(), N: 1}, new(Verdict[*call]), false, attrs)
		recs = rec.records()
		require.Len(t, recs, 2, "after the interval")
		assert.Equal(t, int64(2), recs[1]["suppressed"])
		for _, r := range recs {
			for _, a := range r {
				assert.NotContains(t, fmt.Sprint(a), "secret-key")
			}
		}
	}
}

// TestDecideManyLimits: more limits than MaxInline apply, all charged,
// in order, enforced first.
func TestDecideManyLimits(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	var limits []Limit[*call]
	var lims []*ratelimit.Keyed
	for i := range MaxInline + 3 {
		l := newKeyed(t, 10+i, mock)
		lims = append(lims, l)
		limits = append(limits, Limit[*call]{Name: string(rune('a' + i)), Key: byKey, Limiter: l, Shadow: i == 0})
	}
	s, _, _, _ := setup(t, limits...)
	o, v := decide(s, &call{key: "k"})
	require.Equal(t, Admitted, o)
	cs := v.Charges()
	require.Len(t, cs, MaxInline+3)
	assert.Equal(t, MaxInline+2, v.Enforced)
	assert.Equal(t, "b", cs[0].Entry.Name)
	assert.Equal(t, "a", cs[len(cs)-1].Entry.Name, "the shadow limit last")
	assert.Equal(t, "b", v.Limit(), "the fewest Remaining among the enforced")
	for i, l := range lims {
		assert.Equal(t, 10+i-1, peekRemaining(t, l, "k"), "limit %d", i)
	}
	// The Verdict is reused: back to inline charges.
	o = s.Decide(&Request[*call]{R: &call{}, Ctx: context.Background(), N: 1}, v, false, nil)
	assert.Equal(t, Pass, o)
	assert.Empty(t, v.Charges())
}

// TestLongKeysDigested: a key longer than MaxKeyLen reaches the limiter
// as its digest; the exempt and denied lists compare the raw key.
func TestLongKeysDigested(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", MaxKeyLen+1)
	sp := &spy{KeyedLimiter: newKeyed(t, 10, nil)}
	s, _, _, _ := setup(t, Limit[*call]{Name: "api", Key: byKey, Limiter: sp, DeniedKeys: []string{long + "y"}})
	decide(s, &call{key: long})
	decide(s, &call{key: strings.Repeat("x", MaxKeyLen)})
	o, _ := decide(s, &call{key: long + "y"})
	assert.Equal(t, Listed, o)
	require.Len(t, sp.keys, 2)
	assert.Equal(t, DigestKey(long), sp.keys[0])
	assert.Len(t, sp.keys[0], len("sha256:")+64)
	assert.Equal(t, strings.Repeat("x", MaxKeyLen), sp.keys[1], "a key of MaxKeyLen is kept")
	assert.Equal(t, "sha256:2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881", DigestKey("x"))
}

// TestObserveAll: one event per limit, applying or not; nothing without
// an observer.
func TestObserveAll(t *testing.T) {
	t.Parallel()
	s, ev, _, _ := setup(t,
		Limit[*call]{Name: "a", Key: byKey, Limiter: newKeyed(t, 1, nil)},
		Limit[*call]{Name: "b", Key: byUser, Limiter: newKeyed(t, 1, nil)})
	s.ObserveAll(context.Background(), ratelimit.OutcomeDenied, 3)
	assert.Equal(t, []ratelimit.Event{deniedEvent("a", ratelimit.OutcomeDenied, 3), deniedEvent("b", ratelimit.OutcomeDenied, 3)}, ev.Take())

	quiet, err := New(Config{Pkg: "testlimit"}, []Limit[*call]{{Key: byKey, Limiter: newKeyed(t, 1, nil)}})
	require.NoError(t, err)
	quiet.ObserveAll(context.Background(), ratelimit.OutcomeExempt, 1) // no observer: no panic
}

// TestDecideAllocs: deciding an admitted request allocates nothing of its
// own (the limiter's and the observer's aside), with one or two limits,
// shadow ones (no marked context any more) and an observer hearing each.
func TestDecideAllocs(t *testing.T) {
	lim := fixed{}
	for _, observed := range []bool{false, true} {
		for _, c := range []struct {
			name   string
			limits []Limit[*call]
			want   float64
		}{
			{"one", []Limit[*call]{{Name: "a", Key: byKey, Limiter: lim}}, 0},
			{"lists", []Limit[*call]{{Name: "a", Key: byKey, Limiter: lim, ExemptKeys: []string{"e"}, DeniedKeys: []string{"d"}}}, 0},
			{"two", []Limit[*call]{{Name: "a", Key: byKey, Limiter: lim}, {Name: "b", Key: byKey, Limiter: lim}}, 1}, // AllowAll's own
			{"shadow", []Limit[*call]{{Name: "a", Key: byKey, Limiter: lim}, {Name: "b", Key: byKey, Limiter: lim, Shadow: true}}, 0},
		} {
			cfg := Config{Pkg: "testlimit", Logger: report.To(nil)}
			if observed {
				cfg.Observer = ratelimit.ObserverFunc(func(context.Context, ratelimit.Event) {})
			}
			s, err := New(cfg, c.limits)
			require.NoError(t, err)
			c2 := &call{key: "k"}
			ctx := context.Background()
			method := "m"
			got := testing.AllocsPerRun(200, func() {
				var v Verdict[*call]
				req := Request[*call]{R: c2, Ctx: ctx, N: 1}
				if s.Decide(&req, &v, false, func() []slog.Attr { return []slog.Attr{slog.String("method", method)} }) != Admitted {
					t.Fatal("not admitted")
				}
			})
			assert.LessOrEqual(t, got, c.want, "%s (observed %v): allocations per Decide", c.name, observed)
		}
	}
}

// fixed admits everything with a fixed Decision and allocates nothing.
type fixed struct{}

func (fixed) AllowN(context.Context, string, int) (ratelimit.Decision, error) {
	return ratelimit.Decision{Allowed: true, Limit: 100, Remaining: 99, ResetAfter: 600 * time.Millisecond}, nil
}
func (fixed) WaitN(context.Context, string, int) error   { return nil }
func (fixed) RefundN(context.Context, string, int) error { return nil }
func (fixed) Peek(context.Context, string, int) (ratelimit.Decision, error) {
	return ratelimit.Decision{Allowed: true, Limit: 100, Remaining: 99, ResetAfter: 600 * time.Millisecond}, nil
}

// failOpenWithRoom is a limiter whose backend is down, failing open with a
// Decision that has room left.
type failOpenWithRoom struct{}

func (failOpenWithRoom) AllowN(context.Context, string, int) (ratelimit.Decision, error) {
	return ratelimit.Decision{Allowed: true, Limit: 10, Remaining: 5}, errBackend
}
func (failOpenWithRoom) WaitN(context.Context, string, int) error   { return errBackend }
func (failOpenWithRoom) RefundN(context.Context, string, int) error { return errBackend }
func (f failOpenWithRoom) Peek(ctx context.Context, key string, n int) (ratelimit.Decision, error) {
	return f.AllowN(ctx, key, n)
}

// TestDecideErrorsNameTheirLimit: with several limits, a limiter's error
// is reported (logged and observed) under the limit whose limiter answered
// it. It used to go under the limit whose Decision the fields report (the
// most restrictive, here "a"), so a Redis failure of "b" was logged as
// "a"'s.
func TestDecideErrorsNameTheirLimit(t *testing.T) {
	t.Parallel()
	mock := fakeclock.New(epoch)
	s, ev, rec, _ := setup(t,
		Limit[*call]{Name: "a", Key: byKey, Limiter: newKeyed(t, 1, mock)},
		Limit[*call]{Name: "b", Key: byKey, Limiter: failOpenWithRoom{}})
	o, v := decide(s, &call{key: "k"})
	require.Equal(t, Admitted, o)
	assert.Equal(t, "a", v.Limit(), "the most restrictive Decision")
	recs := rec.records()
	require.Len(t, recs, 1)
	assert.Equal(t, "b", recs[0]["limit"])
	assert.ErrorIs(t, recs[0]["error"].(error), errBackend)
	assert.Equal(t, []string{"a:allowed", "b:fallback"}, outcomes(ev.Take()))
}
