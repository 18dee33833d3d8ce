// Package outage is the client-side overload scenario of the tests of
// httplimit's Transport and grpclimit's Client with a ratelimit.Throttle:
// a server that fails everything during an outage, a population of
// clients sending at a steady rate, and the checks of the figures the
// throttle promises (attempts per window at most K·accepts + 1, retries
// within the budget, recovery after the outage). Time is the caller's
// clock (a testing/synctest bubble's): windows are aligned to the Unix
// epoch, as the throttle's are.
package outage

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Scenario is the timeline, relative to Start.
type Scenario struct {
	Start      time.Time
	Down, Up   time.Duration // the outage: [Down, Up)
	End        time.Duration // the clients stop sending
	Clients    int           // each sends one request every Every
	Every      time.Duration
	Window     time.Duration // the throttle's
	K, Share   float64       // the throttle's
	RecoverFor time.Duration // how long after Up the success share is measured (two windows)
	// Lead is the longest a throttle's decision may come before its send
	// (the client's wait for a pause its server asked for): the rule is
	// checked at the send and at the Lead before, and broken only if at
	// both, since the weighted counts drift as the previous window leaves.
	Lead time.Duration
	// Probe is the throttle's: an attempt that breaks the rule is a probe,
	// not a violation, when it comes at least Probe after the client's
	// previous attempt (the answers are immediate).
	Probe time.Duration
}

// Log is what the server saw and what the callers got. Safe for
// concurrent use.
type Log struct {
	sc      Scenario
	mu      sync.Mutex
	seen    []attempt // in the order the server answered them
	results []result  // the callers' requests
}

type attempt struct {
	at     time.Time
	client int
	retry  bool
	ok     bool
}

type result struct {
	at     time.Time
	client int
	ok     bool
}

// New returns the log of sc.
func New(sc Scenario) *Log { return &Log{sc: sc} }

// Down reports whether the server is down at now.
func (l *Log) Down(now time.Time) bool {
	d := now.Sub(l.sc.Start)
	return d >= l.sc.Down && d < l.sc.Up
}

// Serve records an attempt of client answered at now (a retry when it is
// not the request's first) and reports whether the server accepts it.
func (l *Log) Serve(now time.Time, client int, retry bool) bool {
	ok := !l.Down(now)
	l.mu.Lock()
	l.seen = append(l.seen, attempt{at: now, client: client, retry: retry, ok: ok})
	l.mu.Unlock()
	return ok
}

// Result records what a caller's request, made at at, got.
func (l *Log) Result(at time.Time, client int, ok bool) {
	l.mu.Lock()
	l.results = append(l.results, result{at: at, client: client, ok: ok})
	l.mu.Unlock()
}

// Figures are the scenario's outcome.
type Figures struct {
	// Violations of the throttle's rule seen by the server during the
	// outage: an attempt that is not a probe sent while the client's answered attempts in the window were at
	// least K·accepts + 1, or a retry while its retries were at least
	// Share·requests + 1 (requests: first tries sent).
	AttemptViolations, RetryViolations []string
	// MaxAttemptsOverBound is the largest attempts - (K·accepts + 1) at an
	// attempt during the outage that is not a probe, over every client
	// (the weighted counts; below 0 when the rule held with room).
	MaxAttemptsOverBound float64
	// Probes are the attempts during the outage that broke the rule, a
	// Probe or more after the client's previous one.
	Probes int
	// During the outage: the callers' requests, the attempts the server
	// saw (retries included), its retries.
	OutageRequests, OutageAttempts, OutageRetries int
	// Retries over the whole run, and the first tries sent.
	Retries, FirstTries int
	// After Up, for RecoverFor: the callers' requests and how many
	// succeeded.
	RecoverRequests, RecoverOK int
	// FirstOK is how long after Up the first accepted attempt came.
	FirstOK time.Duration
}

// RecoveredShare is RecoverOK / RecoverRequests.
func (f Figures) RecoveredShare() float64 {
	if f.RecoverRequests == 0 {
		return 0
	}
	return float64(f.RecoverOK) / float64(f.RecoverRequests)
}

func (f Figures) String() string {
	return fmt.Sprintf("outage: %d requests, %d attempts reached the server (%d retries); run: %d first tries, %d retries; "+
		"recovery: %d of %d requests succeeded (%.1f%%) in the two windows after, first accept %v after; "+
		"outage attempts over K·accepts+1: at most %.2f, probes beyond it: %d",
		f.OutageRequests, f.OutageAttempts, f.OutageRetries, f.FirstTries, f.Retries,
		f.RecoverOK, f.RecoverRequests, 100*f.RecoveredShare(), f.FirstOK, f.MaxAttemptsOverBound, f.Probes)
}

// counts are one client's counts in one aligned window.
type counts struct{ attempts, accepts, requests, retries float64 }

// Check computes the figures.
func (l *Log) Check() Figures {
	l.mu.Lock()
	defer l.mu.Unlock()
	sc := l.sc
	w := int64(sc.Window)
	f := Figures{MaxAttemptsOverBound: -1e18, FirstOK: -1}
	type state struct {
		win       int64
		cur, prev counts
		last      time.Time // the previous attempt
	}
	clients := map[int]*state{}
	seen := append([]attempt(nil), l.seen...)
	sort.SliceStable(seen, func(i, j int) bool { return seen[i].at.Before(seen[j].at) })
	for _, a := range seen {
		st := clients[a.client]
		now := a.at.UnixNano()
		win := now / w
		if st == nil {
			st = &state{win: win}
			clients[a.client] = st
		}
		switch {
		case st.win == win-1:
			st.prev, st.cur, st.win = st.cur, counts{}, win
		case st.win < win:
			st.prev, st.cur, st.win = counts{}, counts{}, win
		}
		// over is used - (k·base + 1) at the elapsed share fr of the
		// window, the least of it at the send and Lead before (it is
		// linear in fr within the window).
		fr := float64(now-win*w) / float64(w)
		early := max(fr-float64(sc.Lead)/float64(w), 0)
		over := func(k float64, up, uc, bp, bc float64) (float64, float64, float64) {
			at := func(fr float64) float64 { return up*(1-fr) + uc - (k*(bp*(1-fr)+bc) + 1) }
			return min(at(fr), at(early)), up*(1-fr) + uc, bp*(1-fr) + bc
		}
		o, att, acc := over(sc.K, st.prev.attempts, st.cur.attempts, st.prev.accepts, st.cur.accepts)
		rel := a.at.Sub(sc.Start)
		down := rel >= sc.Down && rel < sc.Up
		probe := !a.retry && a.at.Sub(st.last) >= sc.Probe
		if down && o >= 1e-9 && probe {
			f.Probes++
		}
		if down && !probe {
			f.MaxAttemptsOverBound = max(f.MaxAttemptsOverBound, o)
		}
		if down && o >= 1e-9 && !probe {
			f.AttemptViolations = append(f.AttemptViolations, fmt.Sprintf("client %d at %v: %.2f attempts, %.2f accepts", a.client, a.at.Sub(sc.Start), att, acc))
		}
		if a.retry {
			o, ret, req := over(sc.Share, st.prev.retries, st.cur.retries, st.prev.requests, st.cur.requests)
			if o >= 1e-9 {
				f.RetryViolations = append(f.RetryViolations, fmt.Sprintf("client %d at %v: %.2f retries, %.2f requests", a.client, a.at.Sub(sc.Start), ret, req))
			}
			st.cur.retries++
			f.Retries++
		} else {
			st.cur.requests++
			f.FirstTries++
		}
		st.cur.attempts++
		st.last = a.at
		if a.ok {
			st.cur.accepts++
		}
		if down {
			f.OutageAttempts++
			if a.retry {
				f.OutageRetries++
			}
		}
		if a.ok && rel >= sc.Up && f.FirstOK < 0 {
			f.FirstOK = rel - sc.Up
		}
	}
	for _, r := range l.results {
		rel := r.at.Sub(sc.Start)
		switch {
		case rel >= sc.Down && rel < sc.Up:
			f.OutageRequests++
		case rel >= sc.Up && rel < sc.Up+sc.RecoverFor:
			f.RecoverRequests++
			if r.ok {
				f.RecoverOK++
			}
		}
	}
	return f
}

// Violations returns the first few violations, for a failure message.
func (f Figures) Violations() string {
	v := append(append([]string(nil), f.AttemptViolations...), f.RetryViolations...)
	if len(v) > 5 {
		v = v[:5]
	}
	return strings.Join(v, "; ")
}

// Run drives the population: each client, in its own goroutine, makes a
// request every Every from Start until End with send (which reports
// whether the request succeeded), and records its result. It returns
// when every client is done. Run it inside a testing/synctest bubble.
func (l *Log) Run(send func(client int) bool) {
	sc := l.sc
	var wg sync.WaitGroup
	for c := range sc.Clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				at := sc.Start.Add(time.Duration(i) * sc.Every)
				if at.Sub(sc.Start) >= sc.End {
					return
				}
				time.Sleep(time.Until(at))
				l.Result(at, c, send(c))
			}
		}()
	}
	wg.Wait()
}

// Scenarios are the client side's proofs (Start is the caller's): ten
// clients, each with its Throttle at the defaults (a one-minute window,
// K 2, retries 10% of requests, a probe a second), send 10 requests a
// second each, retrying refusals up to 3 times; the server fails
// everything from a minute in. The outage lasts 30 s; the long
// one 5 minutes, where the throttle has time to bite.
func Scenarios() map[string]Scenario {
	base := Scenario{Down: time.Minute, Clients: 10, Every: 100 * time.Millisecond, Window: time.Minute,
		K: 2, Share: 0.1, RecoverFor: 2 * time.Minute, Lead: 20 * time.Millisecond, Probe: time.Second}
	short, long := base, base
	short.Up, short.End = 90*time.Second, 210*time.Second
	long.Up, long.End = 6*time.Minute, 8*time.Minute
	return map[string]Scenario{"30s": short, "5min": long}
}
