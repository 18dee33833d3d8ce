package benchmarks

// The overload charts (docs/overload-*.svg): limit and p99 latency over
// time, ours beside failsafe-go, drawn in the accuracy study's style
// (cmd/accuracy/svg.go: the same page size, fonts, legend row, grid and
// dashed reference lines) by a small writer of its own. That one draws
// integer counts per bucket with an offered-traffic area and window
// marks; these charts draw float series against a reference that steps
// (the capacity halves), so sharing it would have meant bending both.
//
//	go test -run TestOverloadCharts -update   # rewrites ../docs/overload-*.svg

import (
	"encoding/xml"
	"flag"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rlkit/ratelimit/internal/svgplot"
	"github.com/rlkit/ratelimit/internal/testkit/overloadsim"
)

var update = flag.Bool("update", false, "rewrite ../docs/overload-*.svg")

// svgLine is one series of a panel: a value per sample.
type svgLine struct {
	label  string
	color  string
	width  float64
	dashed bool // a reference (capacity, unloaded latency)
	ys     []float64
}

type svgPanel struct {
	title, ylabel string
	band          [2][]float64 // a grey area between two series, if set
	bandLabel     string
	lines         []svgLine
}

type svgChart struct {
	title, subtitle string
	sample          time.Duration // the time of one value
	panels          []svgPanel
}

const (
	ovW       = 1000.0
	ovPanelH  = 260.0
	ovMarginL = 70.0
	ovMarginR = 35.0
	ovHeaderH = 150.0
	ovGap     = 95.0
	ovFooterH = 50.0
	ovPlotW   = ovW - ovMarginL - ovMarginR
	ovBandCol = "#e3e3e3"
)

func writeOverloadSVG(w io.Writer, c svgChart) error {
	sub := svgplot.Wrap(c.subtitle, 125)
	legendY := 46 + 16*float64(len(sub)) + 12
	header := ovHeaderH + 16*float64(max(len(sub)-2, 0))
	h := header + float64(len(c.panels))*(ovPanelH+ovGap) - ovGap + ovFooterH
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="Helvetica, Arial, sans-serif" font-size="13">`+"\n", ovW, h, ovW, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="26" font-size="18" font-weight="bold">%s</text>`+"\n", ovMarginL, html.EscapeString(c.title))
	for i, line := range sub {
		fmt.Fprintf(&b, `<text x="%.0f" y="%d" fill="#444">%s</text>`+"\n", ovMarginL, 46+16*i, html.EscapeString(line))
	}
	// The legend: the lines of the first panel, then its band.
	x, y := ovMarginL, legendY
	item := func(draw func(x, y float64), label string) {
		wd := 34 + 7.0*float64(len(label))
		if x+wd > ovW-ovMarginR {
			x, y = ovMarginL, y+20
		}
		draw(x, y)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x+26, y+4, html.EscapeString(label))
		x += wd
	}
	for _, l := range c.panels[0].lines {
		item(func(x, y float64) {
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="%s"%s/>`+"\n", x, y, x+20, y, l.color, strokeW(l), dash(l))
		}, l.label)
	}
	if c.panels[0].bandLabel != "" {
		item(func(x, y float64) {
			fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="20" height="10" fill="%s"/>`+"\n", x, y-5, ovBandCol)
		}, c.panels[0].bandLabel)
	}
	for i, p := range c.panels {
		ovPanel(&b, c, p, header+float64(i)*(ovPanelH+ovGap))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func strokeW(l svgLine) string {
	if l.dashed {
		return "1.5"
	}
	return "3"
}

func dash(l svgLine) string {
	if l.dashed {
		return ` stroke-dasharray="6,4"`
	}
	return ""
}

func ovPanel(b *strings.Builder, c svgChart, p svgPanel, top float64) {
	n := 0
	ymax := 0.0
	for _, l := range p.lines {
		n = max(n, len(l.ys))
		for _, v := range l.ys {
			ymax = max(ymax, v)
		}
	}
	for _, v := range p.band[1] {
		ymax = max(ymax, v)
	}
	step := svgplot.NiceStep(ymax*1.05, 5)
	ytop := math.Ceil(ymax*1.05/step) * step
	bottom := top + ovPanelH
	X := func(i float64) float64 { return ovMarginL + ovPlotW*i/float64(n) }
	Y := func(v float64) float64 { return bottom - ovPanelH*min(v, ytop)/ytop }

	fmt.Fprintf(b, `<text x="%.0f" y="%.1f" font-weight="bold">%s</text>`+"\n", ovMarginL, top-8, html.EscapeString(p.title))
	for v := 0.0; v <= ytop+step/2; v += step {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", ovMarginL, Y(v), ovMarginL+ovPlotW, Y(v))
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", ovMarginL-6, Y(v)+4, svgplot.Num(v))
	}
	span := time.Duration(n) * c.sample
	tick := 5 * time.Second
	for span/tick > 10 {
		tick *= 2
	}
	for t := time.Duration(0); t <= span; t += tick {
		x := X(float64(t) / float64(c.sample))
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", x, bottom, x, bottom+5)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%v</text>`+"\n", x, bottom+19, t)
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#444">time since start (one point per %v of simulated time)</text>`+"\n", ovMarginL+ovPlotW/2, bottom+38, c.sample)
	if p.band[0] != nil {
		var d strings.Builder
		fmt.Fprintf(&d, "M%.1f %.1f", X(0), Y(p.band[1][0]))
		for i, v := range p.band[1] {
			fmt.Fprintf(&d, "H%.1f V%.1f", X(float64(i)), Y(v))
			fmt.Fprintf(&d, "H%.1f", X(float64(i+1)))
		}
		for i := len(p.band[0]) - 1; i >= 0; i-- {
			fmt.Fprintf(&d, "V%.1f H%.1f", Y(p.band[0][i]), X(float64(i)))
		}
		d.WriteString("Z")
		fmt.Fprintf(b, `<path d="%s" fill="%s" stroke="none"/>`+"\n", d.String(), ovBandCol)
	}
	for _, l := range p.lines {
		var d strings.Builder
		for i, v := range l.ys {
			cmd := "L"
			if i == 0 {
				cmd = "M"
			}
			if l.dashed { // a reference steps
				if i == 0 {
					fmt.Fprintf(&d, "M%.1f %.1f", X(0), Y(v))
				}
				fmt.Fprintf(&d, "V%.1f H%.1f", Y(v), X(float64(i+1)))
				continue
			}
			fmt.Fprintf(&d, "%s%.1f %.1f", cmd, X(float64(i)+1), Y(v))
		}
		fmt.Fprintf(b, `<path d="%s" fill="none" stroke="%s" stroke-width="%.1f" stroke-linejoin="round"%s/>`+"\n", d.String(), l.color, l.width, dash(l))
	}
	fmt.Fprintf(b, `<path d="M%.1f %.1f V%.1f H%.1f" fill="none" stroke="black"/>`+"\n", ovMarginL, top, bottom, ovMarginL+ovPlotW)
	fmt.Fprintf(b, `<text transform="translate(%.1f %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", ovMarginL-48, top+ovPanelH/2, html.EscapeString(p.ylabel))
}

// The gates' colours and widths: wider lines first, so that overlapping
// ones stay visible.
var overloadStyle = map[string]struct {
	color string
	width float64
}{
	"ratelimit-adaptive":       {"#1f77b4", 3.2},
	"failsafe-adaptivelimiter": {"#ff7f0e", 2.2},
	"failsafe-prioritylimiter": {"#2ca02c", 1.4},
}

// overloadChart runs scenario s (seed 1) with every gate and draws it.
func overloadChart(t *testing.T, s overloadScenario, title string) svgChart {
	var lim, p99 []svgLine
	var res *overloadsim.Result
	for _, g := range overloadGates {
		r, f := runOverload(t, g, s, 1)
		res = r
		sc := r.Scenario
		st := overloadStyle[g.name]
		var ls, ps []float64
		for _, x := range r.Samples {
			if x.At > sc.Duration {
				break
			}
			ls = append(ls, float64(x.Limit))
			ps = append(ps, float64(x.P99)/float64(time.Millisecond))
		}
		label := fmt.Sprintf("%s (settles %s, p99 %.2fx unloaded)", g.name, durText(f.settle), f.p99Ratio)
		lim = append(lim, svgLine{label: label, color: st.color, width: st.width, ys: ls})
		p99 = append(p99, svgLine{label: label, color: st.color, width: st.width, ys: ps})
	}
	sc := res.Scenario
	var c, lo, hi, unl, twice []float64
	for _, x := range res.Samples {
		if x.At > sc.Duration {
			break
		}
		w := float64(sc.WorkersAt(x.At - sc.Sample))
		c, lo, hi = append(c, w), append(lo, 0.8*w), append(hi, 1.2*w)
		u := float64(sc.UnloadedP99()) / float64(time.Millisecond)
		unl, twice = append(unl, u), append(twice, 2*u)
	}
	lim = append(lim, svgLine{label: "C (workers)", color: "black", width: 1.5, dashed: true, ys: c})
	p99 = append(p99,
		svgLine{label: "unloaded p99", color: "black", width: 1.5, dashed: true, ys: unl},
		svgLine{label: "2x unloaded p99", color: "#888", width: 1.5, dashed: true, ys: twice})
	return svgChart{
		title: title,
		subtitle: fmt.Sprintf("Simulated service (internal/testkit/overloadsim, synctest): C = %d workers of %v ±%.0f%%, a FIFO queue, Poisson arrivals at %gx the starting capacity, client timeout %v; seed 1. "+
			"Settles: from when on the limit stays within ±20%% of C (after the start, or the change). p99 from 5 s after the start (or the change) to the end. Regenerate: cd benchmarks && go test -run TestOverloadCharts -update.",
			sc.Workers, sc.Service, 100*sc.Spread, sc.Load, sc.Timeout),
		sample: sc.Sample,
		panels: []svgPanel{
			{title: "Concurrency limit", ylabel: "limit (requests in flight)", band: [2][]float64{lo, hi}, bandLabel: "C ±20%", lines: lim},
			{title: "p99 latency of the admitted requests ending in each 100ms (dashed: the unloaded p99, and twice it)", ylabel: "p99 latency (ms)", lines: p99},
		},
	}
}

func durText(d time.Duration) string {
	if d < 0 {
		return "never"
	}
	return d.String()
}

// TestOverloadCharts draws the charts, checks that they are well-formed
// SVG, and with -update writes them to ../docs.
func TestOverloadCharts(t *testing.T) {
	if testing.Short() {
		t.Skip("the overload scenarios take a few seconds")
	}
	for _, ch := range []struct {
		file, scenario, title string
	}{
		{"overload-3x.svg", "3x-overload", "3x overload: the limit and the latency, ratelimit.Adaptive and failsafe-go"},
		{"overload-halves.svg", "capacity-halves", "Capacity halves at 20 s (50 to 25 workers) under 3x overload"},
	} {
		var s overloadScenario
		for _, x := range overloadScenarios {
			if x.name == ch.scenario {
				s = x
			}
		}
		var b strings.Builder
		if err := writeOverloadSVG(&b, overloadChart(t, s, ch.title)); err != nil {
			t.Fatal(err)
		}
		d := xml.NewDecoder(strings.NewReader(b.String()))
		for {
			_, err := d.Token()
			if err == io.EOF {
				break
			}
			if err != nil {
				t.Fatalf("%s: not well-formed: %v", ch.file, err)
			}
		}
		if *update {
			path := filepath.Join("..", "docs", ch.file)
			if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
				t.Fatal(err)
			}
			t.Logf("wrote %s", path)
		}
	}
}
