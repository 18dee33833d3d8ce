package main

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Cloudflare's published accuracy of the sliding window counter: in an
// analysis of 400 million requests from 270,000 sources, 0.003% of requests
// were wrongly allowed or rate limited.
const (
	cloudflarePct = 0.003
	cloudflareURL = "https://blog.cloudflare.com/counting-things-a-lot-of-different-things/"
)

// style is how one algorithm is drawn. Wider lines are drawn first, so
// that a line hidden under another still shows as a coloured edge.
var style = map[string]struct {
	Color string
	Width float64
	Order int
}{
	"tokenbucket":    {"#1f77b4", 7, 0},
	"leakybucket":    {"#ff7f0e", 4.5, 1},
	"fixedwindow":    {"#d62728", 3.2, 2},
	"slidingcounter": {"#9467bd", 2.2, 3},
	"slidinglog":     {"#2ca02c", 1.4, 4},
}

// pct formats a percentage with enough digits to compare with 0.003%.
func pct(v float64) string { return fmt.Sprintf("%.3f%%", v) }

// WriteResults writes the results tables and the comparison with
// Cloudflare's figure as markdown.
func WriteResults(w io.Writer, cfg Config, res []TraceResult) {
	fmt.Fprintf(w, "L = %d events per W = %v, seed %d. Percentages of wrong decisions are of all events offered.\n\n", cfg.Limit, cfg.Window, cfg.Seed)
	for _, r := range res {
		fmt.Fprintf(w, "### %s\n\n%s: %d events offered.\n\n", r.Trace.Name, r.Trace.Desc, len(r.Trace.Times))
		fmt.Fprintln(w, "| algorithm | admitted | max in any W | x L | wrongly admitted | wrongly denied | most free slots at a wrong denial | gap (% of L) | estimate error (% of L) |")
		fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
		for i, run := range r.Runs {
			m := r.Metrics[i]
			est := "—"
			if m.HasEstimate {
				est = fmt.Sprintf("%.2f", m.EstErrPct)
			}
			fmt.Fprintf(w, "| %s | %d | %d | %.2f | %s | %s | %d | %.2f | %s |\n",
				run.Algo.Title, m.Admitted, m.MaxInWindow, m.MaxRatio,
				pct(m.WrongAdmitPct), pct(m.WrongDenyPct), m.DenySlack, m.GapPct, est)
		}
		fmt.Fprintln(w)
		var notes []string
		if !r.BucketsIdentical {
			notes = append(notes, "the token bucket and the leaky bucket meter disagreed on some events")
		}
		for i, m := range r.Metrics {
			if m.ModelMismatch > 0 {
				notes = append(notes, fmt.Sprintf("%s: %d decisions differ from its documented formula", r.Runs[i].Algo.Title, m.ModelMismatch))
			}
		}
		if len(notes) > 0 {
			fmt.Fprintf(w, "**Check failed:** %s.\n\n", strings.Join(notes, "; "))
		}
	}
	writeCloudflare(w, res)
	writeObservations(w, cfg, res)
}

// writeObservations states, from the numbers, what the study shows, and
// flags any algorithm that broke a bound it promises.
func writeObservations(w io.Writer, cfg Config, res []TraceResult) {
	L := cfg.Limit
	fmt.Fprintf(w, "### Observations\n\n")
	type worst struct {
		ratio float64
		trace string
		at    time.Duration
	}
	worstOf := map[string]worst{}
	var logWrong, logOver, scMismatch, events int
	buckets := true
	var steadyWrong, steadyOne int
	var slack struct {
		n     int
		trace string
		at    time.Duration
	}
	for _, r := range res {
		events += len(r.Trace.Times)
		buckets = buckets && r.BucketsIdentical
		for i, run := range r.Runs {
			m := r.Metrics[i]
			if m.MaxRatio > worstOf[run.Algo.Name].ratio {
				worstOf[run.Algo.Name] = worst{m.MaxRatio, r.Trace.Name, m.MaxAt}
			}
			switch run.Algo.Name {
			case "slidinglog":
				logWrong += m.WrongAdmit + m.WrongDeny
				if m.MaxInWindow > L {
					logOver++
				}
			case "slidingcounter":
				scMismatch += m.ModelMismatch
				if strings.HasPrefix(r.Trace.Name, "poisson") {
					steadyWrong += m.WrongAdmit + m.WrongDeny
					steadyOne += m.OffByOne
				}
				if m.DenySlack > slack.n {
					slack.n, slack.trace, slack.at = m.DenySlack, r.Trace.Name, m.DenySlackAt
				}
			}
		}
	}
	if logWrong == 0 && logOver == 0 {
		fmt.Fprintf(w, "- The sliding log agreed with the exact answer on every one of the %d events and never admitted more than L in any window: it is exact, as documented.\n", events)
	} else {
		fmt.Fprintf(w, "- **The sliding log broke its bound**: %d decisions differ from the exact answer, and it exceeded L on %d traces. This is a library bug.\n", logWrong, logOver)
	}
	if buckets {
		fmt.Fprintf(w, "- The token bucket and the leaky bucket meter made the same decision on every event: with capacity L, refilling (leaking) one event every W/L, the meter's level is exactly L minus the bucket's tokens.\n")
	} else {
		fmt.Fprintf(w, "- **The token bucket and the leaky bucket meter disagreed** on some events, although with these parameters they should be mirror images.\n")
	}
	if scMismatch == 0 {
		fmt.Fprintf(w, "- Every sliding counter decision matched its documented rule, admit iff prev x (W-elapsed)/W + cur + 1 <= L, evaluated exactly.\n")
	} else {
		fmt.Fprintf(w, "- **%d sliding counter decisions differ from its documented rule** (admit iff prev x (W-elapsed)/W + cur + 1 <= L).\n", scMismatch)
	}
	fmt.Fprintf(w, "- Worst window, as a multiple of L:")
	for i, a := range Algos {
		sep := ","
		if i == len(Algos)-1 {
			sep = "."
		}
		wo := worstOf[a.Name]
		fmt.Fprintf(w, " %s %.2f (first on %s, in the window ending at %v)%s", a.Title, wo.ratio, wo.trace, wo.at.Round(100*time.Millisecond), sep)
	}
	fmt.Fprintf(w, " The buckets' bound is capacity + refill per W = 2L by design: they promise a long-run rate with bursts, not L per sliding window, so against this exact answer they are wrong whenever they spend their burst on top of a full window; the fixed window's 2L is its documented boundary burst.\n")
	if steadyWrong > 0 {
		fmt.Fprintf(w, "- On the steady traces, %.0f%% of the sliding counter's wrong decisions were off by one (admitting event L+1 or denying event L): under saturation the true count hovers at the limit and an estimate that is off by a fraction of an event flips the decision.", 100*float64(steadyOne)/float64(steadyWrong))
		fmt.Fprintf(w, " Its errors go both ways: it also under-admits, denying an event when an exact window had up to %d free slots (%s, at %v): events that came early in the previous window still weigh in the estimate after they have left the true window.\n", slack.n, slack.trace, slack.at.Round(100*time.Millisecond))
	}
	for _, r := range res {
		if r.Trace.Name != "poisson-2x" {
			continue
		}
		tb, sc := r.Metrics[0], r.Metrics[len(r.Metrics)-1]
		W := cfg.Window
		if tb.MaxAt <= 2*W && sc.DenySlackAt <= 2*W {
			fmt.Fprintf(w, "- Start-up matters on steady overload (poisson-2x): the token bucket's worst window there (%.2f L) ends at %v, because it starts full and the first window gets its capacity plus a window's refill; the sliding counter's worst under-admission there (%d free slots) is at %v, in the second window, because at 2x the first window's events all came early in it while the estimate assumes they were spread evenly.\n",
				tb.MaxRatio, tb.MaxAt.Round(100*time.Millisecond), sc.DenySlack, sc.DenySlackAt.Round(100*time.Millisecond))
		}
	}
	fmt.Fprintln(w)
}

// writeCloudflare puts the sliding counter's wrong decisions next to
// Cloudflare's published figure.
func writeCloudflare(w io.Writer, res []TraceResult) {
	fmt.Fprintf(w, "### Sliding counter next to Cloudflare's figure\n\n")
	fmt.Fprintf(w, "Cloudflare measured %s of requests wrongly allowed or rate limited by its sliding window counter, on 400 million real requests from 270,000 sources ([blog, 2017](%s)). ", pct(cloudflarePct), cloudflareURL)
	fmt.Fprintf(w, "Our traces are synthetic, not real traffic: each is one client, and all but poisson-0.5x keep it at or above the limit for much of the time, where decisions sit on a knife edge. Real traffic typically has most requests from clients well below their limit, where every algorithm is right (poisson-0.5x: nothing wrong), and Cloudflare's reference, as we read the post, was each source's real request rate rather than a shadow of the counter's own admitted events. The figures are not directly comparable; the per-trace rates below say where the sliding counter's errors come from, not what a production mix would see.\n\n")
	fmt.Fprintln(w, "| trace | wrongly admitted | wrongly denied | wrong, total | of which off by one | total / Cloudflare's 0.003% |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|")
	for _, r := range res {
		for i, run := range r.Runs {
			if run.Algo.Name != "slidingcounter" {
				continue
			}
			m := r.Metrics[i]
			tot := m.WrongAdmitPct + m.WrongDenyPct
			vs := "0 (none wrong)"
			if tot > 0 {
				vs = fmt.Sprintf("%.0f x", tot/cloudflarePct)
			}
			fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", r.Trace.Name, pct(m.WrongAdmitPct), pct(m.WrongDenyPct), pct(tot),
				pct(100*float64(m.OffByOne)/float64(max(m.Offered, 1))), vs)
		}
	}
	fmt.Fprintln(w)
}

// Command returns the command line that regenerates the outputs of cfg.
func Command(cfg Config, out string) string {
	s := fmt.Sprintf("go run ./cmd/accuracy -seed %d -limit %d -window %v -out %s", cfg.Seed, cfg.Limit, cfg.Window, out)
	if cfg.MockClock {
		s += " -mockclock"
	}
	return s
}

// WriteDoc writes docs/accuracy.md: how to regenerate it, the method with
// its definitions, the results, and the charts.
func WriteDoc(w io.Writer, cfg Config, out string, res []TraceResult, charts []string) {
	L, W := cfg.Limit, cfg.Window
	fmt.Fprintf(w, `# Accuracy study

How closely does each algorithm hold "at most L events in any window W"? This file and its charts are
generated; regenerate them from the repository root with:

    %s

The same seed gives the same numbers, byte for byte.

## Method

Every algorithm is configured for the same limit, L = %d events per W = %v:

- token bucket: capacity L, refilling L per W (NewTokenBucket(Per(L, W), L));
- leaky bucket, as a meter through AllowN: capacity L, leaking one event every W/L = %v;
- fixed window, sliding log and sliding counter: limit L per window W.

Each trace is a list of single-event requests (AllowN(1)). A trace is played through a fresh limiter of
each algorithm on a simulated clock that starts at %s (a multiple of W since the Unix epoch, so the
fixed windows start at offset 0) and is set to each event's time before its decisions. (The limiters
read a minimal clock we set directly; -mockclock runs the same study on github.com/benbjohnson/clock's
*clock.Mock, which sleeps 1 ms per step and is too slow for the default run. A test checks both give
identical decisions.)

Traces, all deterministic from -seed (math/rand/v2, PCG seeded with the seed and the trace's number):

`, Command(cfg, out), L, W, W/time.Duration(L), Start(W).Format(time.RFC3339))
	for _, r := range res {
		fmt.Fprintf(w, "- **%s**: %s.\n", r.Trace.Name, r.Trace.Desc)
	}
	fmt.Fprintf(w, `
All windows below are half-open, (t-W, t]: the interval the sliding log enforces (an entry is kept while
its time is > now - W).

- **Exact answer.** For each algorithm separately, a shadow exact sliding window runs over the same trace,
  fed with the events *that algorithm* admitted. For event i at time t, let c be the number of events the
  algorithm admitted before i with times in (t-W, t]. The exact answer is "admit" iff c + 1 <= L. The
  shadow follows the algorithm's own history, so one early mistake is counted once, not again for every
  later event it shifts.
- **Wrongly admitted / wrongly denied**: events the algorithm admitted where the exact answer was deny /
  denied where it was admit, in per cent of all events of the trace. The sliding log must score 0 on both.
  A wrong decision is **off by one** when it is on the knife edge: admitting with c = L (event L+1) or
  denying with c = L-1 (event L).
- **Most free slots at a wrong denial**: the largest L - c over the wrongly denied events: how far below
  the limit the algorithm was when it refused (0 if it never wrongly denied).
- **Max in any W**: the most events the algorithm admitted in any interval (t-W, t], over every t (exact:
  the maximum is reached at an admitted event's time, and every one is checked), and that count / L.
- **Gap (%% of L)**: the mean over all events, measured just after each decision, of
  |A - min(L, O)|, where A is the events admitted and O the events offered in the trailing window
  (t-W, t]; in per cent of L. min(L, O) is what an ideal limiter would let through: everything offered,
  up to the limit. Even the sliding log has a gap under overload: a slot that frees up stays empty until
  the next arrival, and events it denied because of older events still count as offered once those
  older events have left the window.
- **Estimate error (%% of L)**, sliding counter only: the mean over all events of |estimate - c|, where
  estimate = prev x (W - elapsed)/W + cur is the counter's weighted estimate of c, computed from the
  events it admitted in the previous and current aligned windows, and c is the true count above. Every
  sliding counter decision is also checked against "admit iff estimate + 1 <= L", evaluated exactly; a
  mismatch would be reported under its table as a failed check.

## Results

`)
	WriteResults(w, cfg, res)
	fmt.Fprintf(w, "## Charts\n\n")
	fmt.Fprintf(w, "Top panel: events admitted per W/60 (%v) bucket, with the offered events as a grey area and the limit's average rate, L/60 per bucket, dashed. Bottom panel: events admitted in the trailing window (t-W, t] at the end of each bucket, with the limit L dashed. Lines are drawn widest first, so where lines coincide the thinner one is seen inside the wider ones' edges; where the token bucket and leaky bucket decide identically, only the orange line with a blue edge shows.\n\n", W/boundaryFraction)
	for _, c := range charts {
		fmt.Fprintf(w, "![%s](%s)\n\n", c, c)
	}
}

// ChartSpec says what to draw of one trace. The ranges are placed around
// Anchor's first worst window: the first time t at which the algorithm
// named Anchor admitted its maximum in (t-W, t].
type ChartSpec struct {
	File, Trace, Title string
	Anchor             string
	// The bottom panel (trailing-window counts) covers whole windows, from
	// Before windows before the anchor's window to After windows after it.
	Before, After int
	// The top panel (per-bucket counts) starts Lead buckets before the
	// first event of the anchor's worst window and lasts Buckets buckets.
	Lead, Buckets int
	// TopYMax cuts the top panel's y axis (0: fit the data).
	TopYMax float64
}

// BuildChart draws the decisions of every algorithm on one trace.
func BuildChart(cfg Config, r TraceResult, cs ChartSpec) Chart {
	W := cfg.Window
	bucket := W / boundaryFraction
	times := r.Trace.Times
	var at time.Duration
	for i, run := range r.Runs {
		if run.Algo.Name == cs.Anchor {
			at = r.Metrics[i].MaxAt
		}
	}
	// Bottom panel: whole windows around the anchor, within the trace.
	from := max(at/W-time.Duration(cs.Before), 0) * W
	to := min(from+time.Duration(cs.Before+cs.After+1)*W, (r.Trace.Span+W-1)/W*W)
	// Top panel: the first event of the worst window, minus a lead.
	first := at
	for _, t := range times {
		if t > at-W {
			first = t
			break
		}
	}
	tfrom := max(first/bucket-time.Duration(cs.Lead), 0) * bucket
	tto := tfrom + time.Duration(cs.Buckets)*bucket

	top := Panel{
		Title:   fmt.Sprintf("Admitted per bucket of W/%d = %v (zoomed in)", boundaryFraction, bucket),
		YLabel:  "events per bucket",
		From:    tfrom,
		Bucket:  bucket,
		Offered: Series(times, nil, bucket, tfrom, tto),
		Limit:   float64(cfg.Limit) / boundaryFraction,
		Step:    true,
		YMax:    cs.TopYMax,
	}
	bottom := Panel{
		Title:   "Admitted in the trailing window (t-W, t], at the end of each bucket",
		YLabel:  "events in trailing W",
		From:    from,
		Bucket:  bucket,
		Offered: Trailing(times, nil, W, bucket, from, to),
		Limit:   float64(cfg.Limit),
	}
	order := make([]int, len(r.Runs))
	for i := range r.Runs {
		order[style[r.Runs[i].Algo.Name].Order] = i
	}
	for _, i := range order {
		run := r.Runs[i]
		st := style[run.Algo.Name]
		label := fmt.Sprintf("%s (max %.2f L)", run.Algo.Title, r.Metrics[i].MaxRatio)
		top.Lines = append(top.Lines, Line{label, st.Color, st.Width, Series(times, run.Admitted, bucket, tfrom, tto)})
		bottom.Lines = append(bottom.Lines, Line{label, st.Color, st.Width, Trailing(times, run.Admitted, W, bucket, from, to)})
	}
	return Chart{
		Title:    cs.Title,
		Subtitle: fmt.Sprintf("%s. L = %d per W = %v, seed %d. The maxima in the legend are over the whole trace.", r.Trace.Desc, cfg.Limit, W, cfg.Seed),
		Window:   W,
		Panels:   []Panel{top, bottom},
	}
}
