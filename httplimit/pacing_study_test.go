package httplimit

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rlkit/ratelimit/internal/testkit/fakeclock"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pacingMaxTimers bounds the timers one run may start: a client that
// keeps waiting without finishing fails the test instead of running on.
const pacingMaxTimers = 1000

// pacingProbe is the base transport under the Transport being studied: it
// records, for every attempt the Transport makes, whether it went out
// before the Transport had returned any answer to a caller ("blind": it
// could not have known the server's quota yet; the driver sets responded)
// and the status answered.
type pacingProbe struct {
	base      http.RoundTripper
	responded atomic.Bool

	mu       sync.Mutex
	attempts []probeAttempt
}

type probeAttempt struct {
	blind  bool
	status int // 0 if the base transport failed
	log    string
}

func (p *pacingProbe) RoundTrip(req *http.Request) (*http.Response, error) {
	blind := !p.responded.Load()
	resp, err := p.base.RoundTrip(req)
	a := probeAttempt{blind: blind}
	if err == nil {
		a.status = resp.StatusCode
		a.log = fmt.Sprint(resp.StatusCode, " ", resp.Header.Get("Ratelimit"), " ", resp.Header.Get("Date"))
	}
	p.mu.Lock()
	p.attempts = append(p.attempts, a)
	p.mu.Unlock()
	return resp, err
}

// refusals returns the 429s answered to blind attempts and to the others,
// and how many attempts were blind.
func (p *pacingProbe) refusals() (blind, informed, blindSent int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, a := range p.attempts {
		if a.blind {
			blindSent++
		}
		if a.status != http.StatusTooManyRequests {
			continue
		}
		if a.blind {
			blind++
		} else {
			informed++
		}
	}
	return blind, informed, blindSent
}

// pacingRun is what the clients of one run saw.
type pacingRun struct {
	mu       sync.Mutex
	statuses []int           // per request handed back, in completion order
	errs     []error         // RoundTrip errors and panics
	paused   []time.Duration // tr.PausedFor() right after each answer (if a *Transport)
	timers   []time.Duration // every timer started on the clock, in order
	done     int             // requests finished, whatever the outcome
}

func (r *pacingRun) ok() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, s := range r.statuses {
		if s == http.StatusOK {
			n++
		}
	}
	return n
}

// pacingDone is sent on the clock's Timers channel, in place of a
// duration, once every client has finished: the driver then needs only
// fakeclock's Next, and its patience, to wait for either event.
const pacingDone = time.Duration(-1)

// drivePacing runs workers goroutines that each send each GETs to url
// through rt, one after another, while the test goroutine moves clk: each
// time a client starts a timer (the Transport waiting), it advances the
// mock by exactly that timer's duration. With one worker that is exact:
// time stands still except while the client waits, so every request
// arrives at the earliest time the Transport allows. With several, a
// timer may already have fired with an earlier one's advance, and its own
// then moves time on further than needed; that only ever gives the
// clients more time, never less, and cannot hang.
//
// Time stands still while a request is out (the Transport has reserved
// it and not read its answer): the driver moves the clock only when none
// is, as if the network took no time. Otherwise a client waiting for a
// probe's answer would have the probe run out of time while it is out.
//
// It fails t if a client neither finishes nor starts a timer within
// fakeclock's patience, or starts more than pacingMaxTimers timers; the
// clients' context is then cancelled and they are waited for, so that no
// goroutine outlives the test. It sleeps only to let requests out come
// back.
func drivePacing(t *testing.T, clk *fakeclock.Mock, rt http.RoundTripper, url string, workers, each int) *pacingRun {
	t.Helper()
	run := &pacingRun{}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	finished := false
	t.Cleanup(func() {
		if finished {
			cancel()
			return
		}
		run.mu.Lock()
		t.Errorf("driver stopped: %d of %d requests done, %d timers started (last %v); the clients are cancelled",
			run.done, workers*each, len(run.timers), lastOf(run.timers))
		run.mu.Unlock()
		cancel()
		// The clients leave their waits on cancellation; drain the timers
		// they may still announce until they have all gone.
		for {
			select {
			case d := <-clk.Timers:
				if d == pacingDone {
					return
				}
			case <-time.After(5 * time.Second):
				t.Error("the clients did not stop after cancellation")
				return
			}
		}
	})
	tr, _ := rt.(*Transport)
	var probe *pacingProbe
	if tr != nil {
		probe, _ = tr.base.(*pacingProbe)
	}
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each && ctx.Err() == nil; i++ {
				status, err := pacingGet(ctx, rt, url)
				if probe != nil {
					// The transport has read an answer: sends from now on
					// are informed. (The probe cannot tell: it sees an
					// answer before the transport has read it.)
					probe.responded.Store(true)
				}
				var paused time.Duration
				if tr != nil {
					paused = tr.PausedFor()
				}
				run.mu.Lock()
				run.done++
				if err != nil {
					run.errs = append(run.errs, err)
				} else {
					run.statuses = append(run.statuses, status)
					run.paused = append(run.paused, paused)
				}
				run.mu.Unlock()
			}
		}()
	}
	go func() {
		wg.Wait()
		clk.Timers <- pacingDone
	}()
	for {
		d := clk.Next(t)
		if d == pacingDone {
			finished = true
			return run
		}
		run.mu.Lock()
		run.timers = append(run.timers, d)
		n := len(run.timers)
		run.mu.Unlock()
		if n > pacingMaxTimers {
			t.Fatalf("driver: more than %d timers; the client does not converge", pacingMaxTimers)
		}
		if tr != nil {
			waitAnswered(t, tr)
		}
		clk.Add(d)
	}
}

// waitAnswered waits until no request of tr is out, failing t after a
// few seconds.
func waitAnswered(t *testing.T, tr *Transport) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for tr.pacer.InFlight() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("driver: %d requests out for 5 s", tr.pacer.InFlight())
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// pacingGet sends one GET through rt and reads the answer; a panic in rt
// is returned as an error.
func pacingGet(ctx context.Context, rt http.RoundTripper, url string) (status int, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("RoundTrip panicked: %v", p)
		}
	}()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := rt.RoundTrip(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

func lastOf(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	return ds[len(ds)-1]
}

// minimumSpan returns the least time from the first to the n-th request of
// one client against a dialectServer with these policies, and how many
// times that client must wait: the client that sends every request at the
// earliest instant the server admits it (no later request can gain from an
// earlier one going out later, since a window starts with its first
// request). For one policy that is ((n-1)/q)*w with (n-1)/q waits.
func minimumSpan(n int, policies []dialectPolicy) (span time.Duration, waits int) {
	ends := make([]time.Duration, len(policies))
	counts := make([]int, len(policies))
	started := make([]bool, len(policies))
	var now time.Duration
	for range n {
		for {
			next := now
			for j, p := range policies {
				if started[j] && now < ends[j] && counts[j] >= p.q {
					next = max(next, ends[j])
				}
			}
			if next == now {
				break
			}
			now = next
			waits++
		}
		for j, p := range policies {
			if !started[j] || now >= ends[j] {
				ends[j], counts[j], started[j] = now+p.w, 0, true
			}
			counts[j]++
		}
	}
	return now, waits
}

func TestMinimumSpan(t *testing.T) {
	t.Parallel()
	one := []dialectPolicy{{5, 3 * time.Second}}
	for _, n := range []int{1, 5, 6, 12, 30} {
		span, waits := minimumSpan(n, one)
		assert.Equal(t, time.Duration((n-1)/5)*3*time.Second, span, "n=%d", n)
		assert.Equal(t, (n-1)/5, waits, "n=%d", n)
	}
	// 5 per 3 s and 8 per 30 s: eight requests by 3 s, then nothing until 30.
	two := defaultPolicies(modeSeveral)
	for _, c := range []struct {
		n     int
		span  time.Duration
		waits int
	}{{8, 3 * time.Second, 1}, {9, 30 * time.Second, 2}, {12, 30 * time.Second, 2}, {30, 93 * time.Second, 7}} {
		span, waits := minimumSpan(c.n, two)
		assert.Equal(t, c.span, span, "n=%d", c.n)
		assert.Equal(t, c.waits, waits, "n=%d", c.n)
	}
}

// pacingRow is one line of the study's table.
type pacingRow struct {
	mode           string
	retryAfter     bool
	start          string // "aligned" or "+0.4s"
	n, ok          int
	blind, late    int // 429s answered before the first response came back, and after
	total, minimum time.Duration
}

func (r pacingRow) String() string {
	ra := "yes"
	if !r.retryAfter {
		ra = "no"
	}
	if r.mode == modeBare {
		ra = "-"
	}
	total, ratio := fmt.Sprintf("%.1fs", r.total.Seconds()), "-"
	if r.ok < r.n {
		total = fmt.Sprintf("%s (%d/%d ok)", total, r.ok, r.n)
	} else if r.minimum > 0 {
		ratio = fmt.Sprintf("%.2f", r.total.Seconds()/r.minimum.Seconds())
	}
	return fmt.Sprintf("| %s | %s | %s | %d | %d (%d blind) | %s | %.1fs | %s |",
		r.mode, ra, r.start, r.n, r.blind+r.late, r.blind, total, r.minimum.Seconds(), ratio)
}

// pacingOutcome is what one run of the study measured.
type pacingOutcome struct {
	row      pacingRow
	arrivals []serverArrival
	run      *pacingRun
	waits    int // the waits the minimum needs
}

// studyPacing sends n sequential GETs through a Transport built with opts
// (after WithClock and WithRetries(5)) to a dialectServer of mode, the
// mock starting at start, and measures the run.
func studyPacing(t *testing.T, mode string, noRetryAfter bool, start time.Time, n int, opts ...ClientOption) pacingOutcome {
	t.Helper()
	clk := fakeclock.NewAnnouncing(start)
	s, srv := startDialectServer(t, mode, clk, noRetryAfter)
	probe := &pacingProbe{base: srv.Client().Transport}
	tr, err := NewTransport(probe, nil, append([]ClientOption{WithClock(clk), WithRetries(5)}, opts...)...)
	require.NoError(t, err)
	run := drivePacing(t, clk, tr, srv.URL, 1, n)
	assert.Empty(t, run.errs, "RoundTrip errors")

	arrivals := s.Arrivals()
	blind, late, _ := probe.refusals()
	minimum, waits := minimumSpan(n, s.Policies())
	row := pacingRow{mode: mode, retryAfter: !noRetryAfter, start: "aligned", n: n, ok: run.ok(),
		blind: blind, late: late, minimum: minimum}
	if !start.Equal(pacingAligned) {
		row.start = fmt.Sprintf("+%.1fs", start.Sub(pacingAligned).Seconds())
	}
	if len(arrivals) > 0 {
		for i := len(arrivals) - 1; i >= 0; i-- {
			if arrivals[i].status == http.StatusOK {
				row.total = arrivals[i].at.Sub(arrivals[0].at)
				break
			}
		}
	}
	return pacingOutcome{row: row, arrivals: arrivals, run: run, waits: waits}
}

// checkFielded asserts what every mode with rate-limit fields must give: no
// 429 at all, every request served, and the run no longer than the quota
// requires: within 5 % on an aligned clock; on the offset clock, at most a
// second late per wait (a reset in whole seconds is rounded up).
func checkFielded(t *testing.T, o pacingOutcome) {
	t.Helper()
	r := o.row
	assert.Zero(t, r.blind+r.late, "%s: the server answered %d requests 429 (%d blind)", r.mode, r.blind+r.late, r.blind)
	assert.Equal(t, r.n, r.ok, "%s: requests served", r.mode)
	if r.start == "aligned" {
		assert.LessOrEqual(t, r.total.Seconds(), 1.05*r.minimum.Seconds(), "%s: total %v, minimum %v", r.mode, r.total, r.minimum)
	} else {
		bound := r.minimum + time.Duration(o.waits)*time.Second
		assert.LessOrEqual(t, r.total, bound, "%s: total %v, minimum %v + %d waits x 1s", r.mode, r.total, r.minimum, o.waits)
	}
}

// checkBackoffGaps asserts the pacing after bare refusals: after the k-th
// consecutive 429 (k from 0, counted since the last 200), the next request
// arrives after a pause in [first/2, min(ceiling, first<<k)], and never at
// once. It returns the gaps by k.
func checkBackoffGaps(t *testing.T, arrivals []serverArrival, first, ceiling time.Duration) map[int][]time.Duration {
	t.Helper()
	gaps := map[int][]time.Duration{}
	k := 0
	for i := 0; i+1 < len(arrivals); i++ {
		if arrivals[i].status != http.StatusTooManyRequests {
			k = 0
			continue
		}
		gap := arrivals[i+1].at.Sub(arrivals[i].at)
		hi := backoffCeiling(first, ceiling, k)
		if !assert.Greater(t, gap, time.Duration(0), "request %d went out at once after the 429 of request %d", i+1, i) {
			k++
			continue
		}
		assert.True(t, gap >= first/2 && gap <= hi, "after consecutive 429 #%d (request %d): gap %v, want within [%v, %v]", k, i, gap, first/2, hi)
		gaps[k] = append(gaps[k], gap)
		k++
	}
	return gaps
}

// backoffCeiling is min(ceiling, first*2^k), without overflow.
func backoffCeiling(first, ceiling time.Duration, k int) time.Duration {
	hi := first
	for j := 0; j < k && hi < ceiling; j++ {
		hi *= 2
	}
	return min(hi, ceiling)
}

// TestPacingStudy measures, per dialect, how well the Transport paces a
// client against express-rate-limit's fixed window (5 per 3 s): 429s
// answered, and the time from the first request to the last served one
// against the least the quota allows. Run with -v for the table.
func TestPacingStudy(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		rows = map[string]pacingRow{}
		keys []string
	)
	t.Run("runs", func(t *testing.T) {
		for _, mode := range pacingModes {
			for _, noRA := range []bool{false, true} {
				if mode == modeBare && noRA {
					continue // bare never sends Retry-After
				}
				for _, start := range []time.Time{pacingAligned, pacingOffset} {
					for _, n := range []int{12, 30} {
						align := "aligned"
						if !start.Equal(pacingAligned) {
							align = "offset"
						}
						name := fmt.Sprintf("%s/retry-after=%v/%s/N=%d", mode, !noRA, align, n)
						keys = append(keys, name)
						t.Run(name, func(t *testing.T) {
							t.Parallel()
							o := studyPacing(t, mode, noRA, start, n)
							mu.Lock()
							rows[name] = o.row
							mu.Unlock()
							if mode == modeBare {
								// The defaults of WithBackoff: 1 s, capped at a minute.
								checkBackoffGaps(t, o.arrivals, time.Second, time.Minute)
								return
							}
							checkFielded(t, o)
						})
					}
				}
			}
		}
	})
	lines := []string{
		"q=5 per w=3s fixed window (express-rate-limit), sequential client, WithRetries(5); total = first arrival to last 200 on the mock clock",
		"| dialect | Retry-After | start | N | 429s | total | minimum | ratio |",
		"|---|---|---|---|---|---|---|---|",
	}
	for _, k := range keys {
		if r, ok := rows[k]; ok {
			lines = append(lines, r.String())
		}
	}
	t.Log("\n" + strings.Join(lines, "\n"))
}

// TestPacingConcurrent: four goroutines send six requests each through
// one Transport to a draft-8 server (5 per 3 s). Only requests sent
// before any answer came back may be refused; with 5 per window and 4
// senders none should be.
func TestPacingConcurrent(t *testing.T) {
	t.Parallel()
	for _, mode := range pacingModes {
		if mode == modeBare {
			continue
		}
		for _, workers := range []int{4, 12} {
			t.Run(fmt.Sprintf("%s/workers=%d", mode, workers), func(t *testing.T) {
				t.Parallel()
				const each = 5
				clk := fakeclock.NewAnnouncing(pacingAligned)
				s, srv := startDialectServer(t, mode, clk, false)
				probe := &pacingProbe{base: srv.Client().Transport}
				tr, err := NewTransport(probe, nil, WithClock(clk), WithRetries(5))
				require.NoError(t, err)
				run := drivePacing(t, clk, tr, srv.URL, workers, each)
				assert.Empty(t, run.errs, "RoundTrip errors")
				blind, late, blindSent := probe.refusals()
				ok, refused := s.Counts()
				t.Logf("%d requests, %d served: the server answered %d attempts 200 and %d 429 (%d of %d blind attempts refused, %d after the first answer), %d timers",
					workers*each, run.ok(), ok, refused, blind, blindSent, late, len(run.timers))
				if !assert.Zero(t, late, "429s after the first answer came back") {
					for _, a := range probe.attempts {
						t.Log(a.blind, a.log)
					}
				}
				assert.LessOrEqual(t, blind, max(0, blindSent-5), "429s among blind attempts beyond what the quota forces")
				assert.Equal(t, workers*each, run.ok(), "requests served")
			})
		}
	}
}

// TestPacingHostileHints: a server lying in its fields (quota spent, with
// resets that are negative, huge, malformed, in the past or a century
// ahead) or asking for an absurd Retry-After never pauses the Transport
// longer than WithMaxPause, never makes it panic, and does not stop it.
func TestPacingHostileHints(t *testing.T) {
	t.Parallel()
	const maxPause = 10 * time.Second
	now := pacingAligned
	century := now.AddDate(100, 0, 0)
	type hint struct {
		name string
		h    hostileHint
		full bool // only the cap is a sane pause: PausedFor must be exactly maxPause
	}
	resets := []hint{
		{"reset=-5", hostileHint{reset: "-5"}, false},
		{"reset=1e18", hostileHint{reset: "1000000000000000000"}, true},
		{"reset=1e18-literal", hostileHint{reset: "1e18"}, false},
		{"reset=abc", hostileHint{reset: "abc"}, false},
		{"reset=unix-past", hostileHint{reset: fmt.Sprint(now.Unix() - 100)}, false},
		{"reset=unix-century", hostileHint{reset: fmt.Sprint(century.Unix())}, true},
		{"reset=date-century", hostileHint{reset: century.Format(http.TimeFormat)}, false},
	}
	retryAfters := []hint{
		{"retry-after=1e12", hostileHint{retryAfter: "1000000000000"}, true},
		{"retry-after=date-century", hostileHint{retryAfter: century.Format(http.TimeFormat)}, true},
		{"retry-after=-5", hostileHint{retryAfter: "-5"}, false},
		{"retry-after=abc", hostileHint{retryAfter: "abc"}, false},
	}
	for _, mode := range pacingModes {
		if mode == modeBare {
			continue
		}
		cases := resets
		if mode == modeDraft8 {
			cases = append(append([]hint(nil), resets...), retryAfters...)
		}
		for _, c := range cases {
			t.Run(mode+"/"+c.name, func(t *testing.T) {
				t.Parallel()
				clk := fakeclock.NewAnnouncing(now)
				s, srv := startDialectServer(t, mode, clk, false)
				s.lie(c.h)
				// No retries: the first answer, and the pause it asked
				// for, come back to the client as they are.
				tr, err := NewTransport(srv.Client().Transport, nil, WithClock(clk), WithMaxPause(maxPause))
				require.NoError(t, err)
				run := drivePacing(t, clk, tr, srv.URL, 1, 3)
				assert.Empty(t, run.errs, "RoundTrip errors or panics")
				assert.Len(t, run.statuses, 3, "requests handed back")
				for i, d := range run.timers {
					assert.LessOrEqual(t, d, maxPause, "timer %d", i)
				}
				for i, p := range run.paused {
					assert.LessOrEqual(t, p, maxPause, "PausedFor after answer %d", i)
				}
				if c.full && assert.NotEmpty(t, run.paused) {
					assert.Equal(t, maxPause, run.paused[0], "PausedFor after the first answer")
				}
			})
		}
	}
}
