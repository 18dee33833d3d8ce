package benchmarks

// Client-side throttling in an outage (issue 28), in a testing/synctest
// bubble: one client key sends a steady 50 requests/s to a server that
// answers at once, accepting every request except during a 30 s outage
// (from 60 s to 90 s) where it fails every one; the run goes on to 270 s.
// A failed request is retried once if the client's policy lets it. The
// policies:
//
//   - failsafe-adaptivethrottler: failsafe-go's adaptivethrottler with its
//     defaults (failure rate threshold 0.1 over 1 minute, max rejection rate
//     0.9), TryAcquirePermit before each first try and each retry (as a
//     retry policy wrapping it would), RecordSuccess / RecordFailure after.
//     It has no retry budget of its own (failsafe-go's budget package counts
//     retries against executions in flight, which a server answering at once
//     never has): retries pass its throttling only.
//   - ratelimit-throttle: ratelimit.Throttle with its defaults (Window 1
//     minute, K 2, RetryShare 0.1, Probe 1 s): Attempt, Retry, Record
//     (throttle_ours_test.go).

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/failsafe-go/failsafe-go/adaptivethrottler"
	"github.com/stretchr/testify/assert"
)

// clientThrottle is a client's policy: may a first try (Attempt) or a
// retry (Retry) go now, and the answer of each one sent (Record).
type clientThrottle interface {
	Attempt() bool
	Retry() bool
	Record(accepted bool)
}

type clientPolicy struct {
	name string
	ours bool
	make func() clientThrottle
}

// clientPolicies are the policies compared; throttle_ours_test.go appends
// ratelimit.Throttle.
var clientPolicies = []clientPolicy{
	{name: "failsafe-adaptivethrottler", make: func() clientThrottle {
		return failsafeThrottle{adaptivethrottler.NewWithDefaults[any]()}
	}},
}

type failsafeThrottle struct {
	t adaptivethrottler.AdaptiveThrottler[any]
}

func (f failsafeThrottle) Attempt() bool { return f.t.TryAcquirePermit() }
func (f failsafeThrottle) Retry() bool   { return f.t.TryAcquirePermit() }
func (f failsafeThrottle) Record(accepted bool) {
	if accepted {
		f.t.RecordSuccess()
	} else {
		f.t.RecordFailure()
	}
}

const (
	outageRate   = 50 // requests per second
	outageFrom   = 60 * time.Second
	outageTo     = 90 * time.Second
	outageEnd    = 270 * time.Second
	outageWindow = time.Minute
	outageK      = 2
)

// outageSecond counts one second of a run.
type outageSecond struct {
	requests, firstSent, retries, accepts, served int
}

// outageFigures are the figures of one run.
type outageFigures struct {
	sentInOutage     int           // attempts (first tries + retries) sent from 60 s to 90 s
	requestsOutage   int           // requests from 60 s to 90 s
	retriesInOutage  int           // retries sent then
	worstExcess      float64       // max, at each send from 60 s to 90 s (the outage), of the last W's attempts / (K·accepts + 1)
	throttledRate    int           // max sends in a second of the outage after the first second with a local refusal
	worstRetryShare  float64       // max at the same sends of the last W's retries / first tries sent
	served1, served2 float64       // share of requests served in the first and second window after recovery
	recovered        time.Duration // from 90 s until every later second serves >= 95%; -1: never
}

func runOutage(t *testing.T, p clientPolicy) outageFigures {
	t.Helper()
	secs := make([]outageSecond, outageEnd/time.Second)
	f := outageFigures{recovered: -1}
	var w sendWindow
	synctest.Test(t, func(t *testing.T) {
		c := p.make()
		start := time.Now()
		for i := 0; i < int(outageEnd/time.Second)*outageRate; i++ {
			time.Sleep(time.Until(start.Add(time.Duration(i) * time.Second / outageRate)))
			now := time.Since(start)
			s := &secs[now/time.Second]
			up := now < outageFrom || now >= outageTo
			s.requests++
			if !c.Attempt() {
				continue
			}
			s.firstSent++
			f.checkSend(&w, now, false, up)
			c.Record(up)
			if up {
				s.accepts++
				s.served++
				continue
			}
			if !c.Retry() {
				continue
			}
			s.retries++
			f.checkSend(&w, now, true, up)
			c.Record(up) // down: the retry fails too
		}
	})
	refused := false
	for i := int(outageFrom / time.Second); i < int(outageTo/time.Second); i++ {
		if refused {
			f.throttledRate = max(f.throttledRate, secs[i].firstSent+secs[i].retries)
		}
		refused = refused || secs[i].firstSent < secs[i].requests
		f.sentInOutage += secs[i].firstSent + secs[i].retries
		f.requestsOutage += secs[i].requests
		f.retriesInOutage += secs[i].retries
	}
	share := func(from, to time.Duration) float64 {
		var req, ok int
		for _, s := range secs[from/time.Second : to/time.Second] {
			req += s.requests
			ok += s.served
		}
		return float64(ok) / float64(req)
	}
	f.served1 = share(outageTo, outageTo+outageWindow)
	f.served2 = share(outageTo+outageWindow, outageTo+2*outageWindow)
	for i := len(secs) - 1; i >= int(outageTo/time.Second); i-- {
		if float64(secs[i].served) < 0.95*float64(secs[i].requests) {
			if i+1 < len(secs) {
				f.recovered = time.Duration(i+1)*time.Second - outageTo
			}
			break
		}
		f.recovered = time.Duration(i)*time.Second - outageTo
	}
	return f
}

// sendWindow holds the sends of the last W, exactly.
type sendWindow struct {
	sends                              []send
	head                               int
	attempts, accepts, firsts, retries int
}

type send struct {
	at              time.Duration
	retry, accepted bool
}

// checkSend counts a send at now (a retry or a first try, accepted or not)
// and, in the outage, updates the worst figures over the sends in
// (now - W, now], this one included: attempts / (K·accepts + 1), attempts
// beyond 1.01·(K·accepts + 1), retries / first tries. (A send's answer is
// counted with it: the server answers at once.)
func (f *outageFigures) checkSend(w *sendWindow, now time.Duration, retry, accepted bool) {
	w.sends = append(w.sends, send{now, retry, accepted})
	w.count(w.sends[len(w.sends)-1], 1)
	for w.sends[w.head].at <= now-outageWindow {
		w.count(w.sends[w.head], -1)
		w.head++
	}
	if now < outageFrom || now >= outageTo {
		return
	}
	f.worstExcess = max(f.worstExcess, float64(w.attempts)/float64(outageK*w.accepts+1))
	f.worstRetryShare = max(f.worstRetryShare, float64(w.retries)/float64(w.firsts))
}

func (w *sendWindow) count(s send, d int) {
	w.attempts += d
	if s.accepted {
		w.accepts += d
	}
	if s.retry {
		w.retries += d
	} else {
		w.firsts += d
	}
}

const outageRuns = 5

// TestOutage runs the outage with every client policy outageRuns times,
// prints the figures side by side, and asserts the figures of ours.
func TestOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("the outage runs take a few seconds")
	}
	var out strings.Builder
	fmt.Fprintf(&out, "%d requests/s, outage from %v to %v (every answer fails), one retry per failure, K=%d, W=%v; %d runs: median [min, max]\n",
		outageRate, outageFrom, outageTo, outageK, outageWindow, outageRuns)
	fmt.Fprintf(&out, "| policy | sent in outage / requests | retries in outage / requests | max at a send of attempts / (K·accepts+1) in the last W | max sends per second once throttled | max at a send of retries / first tries in the last W | served, 1st window after | served, 2nd window after | recovered (>= 95%% per second) |\n")
	fmt.Fprintf(&out, "|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, p := range clientPolicies {
		var fs []outageFigures
		for run := 0; run < outageRuns; run++ {
			f := runOutage(t, p)
			fs = append(fs, f)
			if p.ours {
				// Once the rule refuses, a throttled key sends one probe per
				// Probe (a second by default) and nothing else. (The rule
				// attempts < K·accepts + 1 holds on the Throttle's own counts,
				// at the time of each send it lets go by the rule; a window
				// ending later may hold more, as the accepts that let the
				// failed attempts go leave it first: worstExcess, printed.)
				assert.LessOrEqual(t, f.throttledRate, 1, "%s: sends per second once throttled", p.name)
				assert.LessOrEqual(t, f.worstRetryShare, 0.1+1.0/float64(outageRate), "%s: retries per window within the budget", p.name)
				assert.True(t, f.recovered >= 0 && f.recovered <= 2*outageWindow, "%s: >= 95%% served within two windows of recovery, took %v", p.name, f.recovered)
			}
		}
		fmt.Fprintf(&out, "| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n", p.name,
			spreadOf(fs, "%.3f", func(f outageFigures) float64 { return float64(f.sentInOutage) / float64(f.requestsOutage) }),
			spreadOf(fs, "%.3f", func(f outageFigures) float64 { return float64(f.retriesInOutage) / float64(f.requestsOutage) }),
			spreadOf(fs, "%.2f", func(f outageFigures) float64 { return f.worstExcess }),
			spreadOf(fs, "%.0f", func(f outageFigures) float64 { return float64(f.throttledRate) }),
			spreadOf(fs, "%.3f", func(f outageFigures) float64 { return f.worstRetryShare }),
			spreadOf(fs, "%.3f", func(f outageFigures) float64 { return f.served1 }),
			spreadOf(fs, "%.3f", func(f outageFigures) float64 { return f.served2 }),
			spreadOf(fs, "%.0f s", func(f outageFigures) float64 {
				if f.recovered < 0 {
					return -1
				}
				return f.recovered.Seconds()
			}))
	}
	t.Log("\n" + out.String())
}

// spreadOf formats the median and range of get over fs.
func spreadOf[F any](fs []F, format string, get func(F) float64) string {
	vs := make([]float64, 0, len(fs))
	for _, f := range fs {
		vs = append(vs, get(f))
	}
	slices.Sort(vs)
	med := vs[len(vs)/2]
	if vs[0] == vs[len(vs)-1] {
		return fmt.Sprintf(format, med)
	}
	return fmt.Sprintf(format+" ["+format+", "+format+"]", med, vs[0], vs[len(vs)-1])
}
