package main

// The charts are drawn by this small SVG writer rather than by a plotting
// library: two panels of step lines, axes, ticks, a legend and a dashed
// limit line are about 150 lines of fmt.Fprintf, while a plotting
// dependency would enter the root go.mod (which the library keeps to
// benbjohnson/clock and go-redis) for one documentation command. The output
// is plain text, deterministic, and diffs cleanly when regenerated.

import (
	"fmt"
	"html"
	"io"
	"math"
	"strings"
	"time"

	"github.com/rlkit/ratelimit/internal/svgplot"
)

// Line is one series of a chart.
type Line struct {
	Label string
	Color string
	Width float64 // stroke width; wider lines are drawn first so that overlapping lines stay visible
	Ys    []int
}

// Panel is one plot of per-bucket values over [From, From+len(Ys)*Bucket),
// times being offsets from the simulation's start.
type Panel struct {
	Title   string
	YLabel  string
	From    time.Duration // start of bucket 0
	Bucket  time.Duration // bucket length
	Offered []int         // drawn as a grey area behind the lines, if not nil
	Lines   []Line        // drawn in order
	Limit   float64       // dashed horizontal line
	Step    bool          // draw as steps (per-bucket counts) rather than points at bucket ends
	YMax    float64       // top of the y axis; values above are cut off. 0: fit the data
}

// Chart is a figure of stacked panels.
type Chart struct {
	Title    string
	Subtitle string
	Window   time.Duration // window boundaries are marked with dotted lines
	Panels   []Panel
}

const (
	svgW       = 1000.0
	panelH     = 260.0
	marginL    = 70.0
	marginR    = 35.0
	legendY    = 86.0
	headerH    = 150.0
	panelGap   = 95.0
	footerH    = 50.0
	plotW      = svgW - marginL - marginR
	offeredCol = "#d9d9d9"
)

// WriteSVG draws c.
func WriteSVG(w io.Writer, c Chart) error {
	h := headerH + float64(len(c.Panels))*(panelH+panelGap) - panelGap + footerH
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%.0f" height="%.0f" viewBox="0 0 %.0f %.0f" font-family="Helvetica, Arial, sans-serif" font-size="13">`+"\n", svgW, h, svgW, h)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%.0f" y="26" font-size="18" font-weight="bold">%s</text>`+"\n", marginL, esc(c.Title))
	for i, line := range svgplot.Wrap(c.Subtitle, 125) {
		fmt.Fprintf(&b, `<text x="%.0f" y="%d" fill="#444">%s</text>`+"\n", marginL, 46+16*i, esc(line))
	}
	legend(&b, c)
	for i, p := range c.Panels {
		top := headerH + float64(i)*(panelH+panelGap)
		panel(&b, c, p, top)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func esc(s string) string { return html.EscapeString(s) }

// legend draws one swatch per line of the first panel, plus offered traffic
// and the limit, in a row under the title.
func legend(b *strings.Builder, c Chart) {
	x, y := marginL, legendY
	item := func(draw func(x, y float64), label string) {
		wd := 34 + 7.0*float64(len(label))
		if x+wd > svgW-marginR {
			x, y = marginL, y+20
		}
		draw(x, y)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f">%s</text>`+"\n", x+26, y+4, esc(label))
		x += wd
	}
	for _, l := range c.Panels[0].Lines {
		item(func(x, y float64) {
			fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="3"/>`+"\n", x, y, x+20, y, l.Color)
		}, l.Label)
	}
	item(func(x, y float64) {
		fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="20" height="10" fill="%s"/>`+"\n", x, y-5, offeredCol)
	}, "offered")
	item(func(x, y float64) {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black" stroke-width="1.5" stroke-dasharray="6,4"/>`+"\n", x, y, x+20, y)
	}, "limit")
}

// panel draws one plot whose top edge is at top.
func panel(b *strings.Builder, c Chart, p Panel, top float64) {
	n := len(p.Lines[0].Ys)
	ymax := p.Limit
	for _, l := range p.Lines {
		for _, v := range l.Ys {
			ymax = max(ymax, float64(v))
		}
	}
	for _, v := range p.Offered {
		ymax = max(ymax, float64(v))
	}
	title := p.Title
	if p.YMax > 0 && p.YMax < ymax {
		ymax = p.YMax / 1.05
		title += fmt.Sprintf(" (y axis cut at %s: taller bars are cut off)", svgplot.Num(p.YMax))
	}
	step := svgplot.NiceStep(ymax*1.05, 5)
	ytop := math.Ceil(ymax*1.05/step) * step
	bottom := top + panelH
	X := func(i float64) float64 { return marginL + plotW*i/float64(n) }
	Y := func(v float64) float64 { return bottom - panelH*min(v, ytop)/ytop }

	fmt.Fprintf(b, `<text x="%.0f" y="%.1f" font-weight="bold">%s</text>`+"\n", marginL, top-8, esc(title))
	// Grid and y ticks.
	for v := 0.0; v <= ytop+step/2; v += step {
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#eee"/>`+"\n", marginL, Y(v), marginL+plotW, Y(v))
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end">%s</text>`+"\n", marginL-6, Y(v)+4, svgplot.Num(v))
	}
	// Window boundaries (where the fixed windows start), dotted.
	span := time.Duration(n) * p.Bucket
	xAt := func(t time.Duration) float64 { return X(float64(t-p.From) / float64(p.Bucket)) }
	for k := (p.From + c.Window - 1) / c.Window; k*c.Window <= p.From+span; k++ {
		x := xAt(k * c.Window)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#aaa" stroke-dasharray="2,3"/>`+"\n", x, top, x, bottom)
	}
	// x ticks, labelled with the time since the start.
	tick := tickEvery(span, c.Window)
	for t := (p.From + tick - 1) / tick * tick; t <= p.From+span; t += tick {
		x := xAt(t)
		fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black"/>`+"\n", x, bottom, x, bottom+5)
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle">%v</text>`+"\n", x, bottom+19, t)
	}
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="#444">time since start (W = %v; dotted lines: window boundaries)</text>`+"\n", marginL+plotW/2, bottom+38, c.Window)
	// Offered traffic as a grey area.
	if p.Offered != nil {
		fmt.Fprintf(b, `<path d="%s" fill="%s" stroke="none"/>`+"\n", path(p.Offered, p.Step, X, Y, true), offeredCol)
	}
	for _, l := range p.Lines {
		fmt.Fprintf(b, `<path d="%s" fill="none" stroke="%s" stroke-width="%.1f" stroke-linejoin="round"/>`+"\n", path(l.Ys, p.Step, X, Y, false), l.Color, l.Width)
	}
	fmt.Fprintf(b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="black" stroke-width="1.5" stroke-dasharray="6,4"/>`+"\n", marginL, Y(p.Limit), marginL+plotW, Y(p.Limit))
	fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="end" font-size="12">limit %s</text>`+"\n", marginL+plotW-4, Y(p.Limit)-5, svgplot.Num(p.Limit))
	// Axes.
	fmt.Fprintf(b, `<path d="M%.1f %.1f V%.1f H%.1f" fill="none" stroke="black"/>`+"\n", marginL, top, bottom, marginL+plotW)
	fmt.Fprintf(b, `<text transform="translate(%.1f %.1f) rotate(-90)" text-anchor="middle">%s</text>`+"\n", marginL-48, top+panelH/2, esc(p.YLabel))
}

// path returns the SVG path of ys: as steps over each bucket, or as points
// at each bucket's end; closed down to zero when area is set.
func path(ys []int, step bool, X, Y func(float64) float64, area bool) string {
	var b strings.Builder
	fmt.Fprintf(&b, "M%.1f %.1f", X(0), Y(0))
	for i, v := range ys {
		y := Y(float64(v))
		if step {
			fmt.Fprintf(&b, "V%.1f H%.1f", y, X(float64(i+1)))
		} else {
			fmt.Fprintf(&b, "L%.1f %.1f", X(float64(i+1)), y)
		}
	}
	if area {
		fmt.Fprintf(&b, "V%.1f Z", Y(0))
	}
	return b.String()
}

// tickEvery returns the spacing of x ticks for a span: a round fraction or
// multiple of the window that gives at most 10 ticks.
func tickEvery(span, window time.Duration) time.Duration {
	for _, f := range []struct{ num, den time.Duration }{
		{1, 60}, {1, 30}, {1, 12}, {1, 6}, {1, 4}, {1, 2}, {1, 1}, {2, 1}, {5, 1}, {10, 1},
	} {
		if t := window * f.num / f.den; t > 0 && span/t <= 10 {
			return t
		}
	}
	return max(span/10, 1)
}
