package replay

import (
	"fmt"
	"html"
	"math"
	"os"
	"path/filepath"
	"strings"
)

// The replay draws its own plots as SVG with the standard library: a few
// line charts need no plotting package, and the files are small, diffable
// and render on GitHub as they are.

// chart is a line chart: one line per series, over numeric axes.
type chart struct {
	title, xLabel, yLabel string
	// yLog draws the y axis in log scale; values at or below yMin are
	// drawn at yMin.
	yLog       bool
	xMin, xMax float64
	yMin, yMax float64
	xTicks     []float64
	yTicks     []float64
	xFormat    func(float64) string
	yFormat    func(float64) string
	series     []series
	// note is a line of small print under the plot.
	note string
}

type series struct {
	name string
	pts  [][2]float64
	// marks are points drawn as a dot without a line (a first failure).
	marks [][2]float64
	// dashed draws a reference (the fluid pool, the bound).
	dashed bool
	// color, when set, overrides the policy's colour.
	color string
}

func (s series) stroke() string {
	if s.color != "" {
		return s.color
	}
	return policyColor(s.name)
}

// colors are Okabe and Ito's palette, readable by the colour-blind, one per
// policy in every plot; migflex's line is also drawn thicker.
var colors = map[string]string{
	PolicyFirstFit: "#E69F00", PolicyHAMi: "#56B4E9", PolicyNos: "#009E73", PolicyMigflex: "#D55E00",
	PolicyMigflexDynamic: "#F0E442", PolicyFluid: "#777777", "bound": "#000000",
	PolicyStatic1g: "#999999", PolicyStaticBalanced: "#666666", PolicyFallback1g: "#CC79A7", PolicyFallbackBalanced: "#0072B2",
}

func policyColor(name string) string {
	if c, ok := colors[name]; ok {
		return c
	}
	return "#333333"
}

// plotted are the policies the plots show: the dynamic ones and the fluid
// reference. The static layouts serve 15 to 40 points less and would
// flatten the rest; replay.md has them.
var plotted = []string{PolicyFirstFit, PolicyHAMi, PolicyMigflexDynamic, PolicyNos, PolicyMigflex, PolicyFluid}

const (
	plotW, plotH                      = 720, 420
	padL, padR, padT, padB, legendW   = 64, 16, 36, 52, 170
	innerW, innerH                    = plotW - padL - padR - legendW, plotH - padT - padB
	fontSmall, fontNormal, fontLegend = 11, 13, 11
)

func (c *chart) x(v float64) float64 {
	return padL + (v-c.xMin)/(c.xMax-c.xMin)*innerW
}

func (c *chart) y(v float64) float64 {
	lo, hi, v := c.yMin, c.yMax, min(max(v, c.yMin), c.yMax)
	if c.yLog {
		lo, hi, v = math.Log10(lo), math.Log10(hi), math.Log10(v)
	}
	return padT + (1-(v-lo)/(hi-lo))*innerH
}

// svg renders the chart.
func (c *chart) svg() string {
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif">`+"\n", plotW, plotH, plotW, plotH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", plotW, plotH)
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="%d" font-weight="bold">%s</text>`+"\n", padL, fontNormal+1, html.EscapeString(c.title))
	// Grid and ticks.
	for _, t := range c.yTicks {
		y := c.y(t)
		fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#e0e0e0"/>`+"\n", padL, y, padL+innerW, y)
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" font-size="%d" text-anchor="end">%s</text>`+"\n", padL-6, y+4, fontSmall, html.EscapeString(c.yFormat(t)))
	}
	for _, t := range c.xTicks {
		x := c.x(t)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#e0e0e0"/>`+"\n", x, padT, x, padT+innerH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" font-size="%d" text-anchor="middle">%s</text>`+"\n", x, padT+innerH+16, fontSmall, html.EscapeString(c.xFormat(t)))
	}
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%d" height="%d" fill="none" stroke="#444"/>`+"\n", padL, padT, innerW, innerH)
	fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="%d" text-anchor="middle">%s</text>`+"\n", padL+innerW/2, padT+innerH+36, fontNormal, html.EscapeString(c.xLabel))
	fmt.Fprintf(&b, `<text x="16" y="%d" font-size="%d" text-anchor="middle" transform="rotate(-90 16 %d)">%s</text>`+"\n",
		padT+innerH/2, fontNormal, padT+innerH/2, html.EscapeString(c.yLabel))
	// Lines, then dots, so that no line hides a dot.
	for _, s := range c.series {
		if len(s.pts) == 0 {
			continue
		}
		var pts []string
		for _, p := range s.pts {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", c.x(p[0]), c.y(p[1])))
		}
		dash := ""
		if s.dashed {
			dash = ` stroke-dasharray="5 4"`
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="%s"%s points="%s"><title>%s</title></polyline>`+"\n",
			s.stroke(), width(s.name), dash, strings.Join(pts, " "), html.EscapeString(s.name))
	}
	for _, s := range c.series {
		for _, p := range append(s.pts[:len(s.pts):len(s.pts)], s.marks...) {
			if len(s.pts) > 12 && !containsPoint(s.marks, p) {
				continue // a dense curve: dots only at its marks
			}
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3.2" fill="%s"><title>%s: %s, %s</title></circle>`+"\n",
				c.x(p[0]), c.y(p[1]), s.stroke(), html.EscapeString(s.name), c.xFormat(p[0]), c.yFormat(p[1]))
		}
	}
	// Legend.
	lx := padL + innerW + 16
	for i, s := range c.series {
		y := padT + 8 + i*18
		dash := ""
		if s.dashed {
			dash = ` stroke-dasharray="5 4"`
		}
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="%s" stroke-width="%s"%s/>`+"\n", lx, y, lx+22, y, s.stroke(), width(s.name), dash)
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="%d">%s</text>`+"\n", lx+28, y+4, fontLegend, html.EscapeString(s.name))
	}
	if c.note != "" {
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="%d" fill="#555">%s</text>`+"\n", padL, plotH-4, fontSmall-1, html.EscapeString(c.note))
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func width(name string) string {
	if name == PolicyMigflex {
		return "3"
	}
	return "2"
}

func containsPoint(list [][2]float64, p [2]float64) bool {
	for _, q := range list {
		if q == p {
			return true
		}
	}
	return false
}

// Plots are the report's charts, by file name.
func Plots(r *Report) map[string]string {
	out := map[string]string{}
	if len(r.Loads) > 0 {
		out["served.svg"] = servedChart(r).svg()
		out["wait.svg"] = waitChart(r).svg()
	}
	if r.FGD != nil && len(r.FGD.Results) > 0 && len(r.FGD.Results[0].Curve) > 0 {
		out["fill.svg"] = fillChart(r).svg()
	}
	return out
}

// WritePlots writes the report's charts into dir.
func WritePlots(dir string, r *Report) error {
	for name, s := range Plots(r) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(s), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// byPolicy gathers one number per load for every policy, in report order.
func byPolicy(r *Report, v func(Result) float64) []series {
	var out []series
	for _, name := range plotted {
		s := series{name: name, dashed: notReal[name]}
		for _, l := range r.Loads {
			for _, res := range l.Results {
				if res.Policy == name {
					s.pts = append(s.pts, [2]float64{l.Load, v(res)})
				}
			}
		}
		if len(s.pts) > 0 {
			out = append(out, s)
		}
	}
	return out
}

func loadAxis(c *chart, r *Report) {
	c.xMin, c.xMax = math.Inf(1), math.Inf(-1)
	for _, l := range r.Loads {
		c.xMin, c.xMax = min(c.xMin, l.Load), max(c.xMax, l.Load)
		c.xTicks = append(c.xTicks, l.Load)
	}
	if c.xMax == c.xMin {
		c.xMin, c.xMax = c.xMin-0.5, c.xMax+0.5
	}
	pad := (c.xMax - c.xMin) * 0.04
	c.xMin, c.xMax = c.xMin-pad, c.xMax+pad
	c.xLabel = "load (peak demand / fleet GPUs)"
	c.xFormat = func(v float64) string { return fmt.Sprintf("%g", v) }
}

func servedChart(r *Report) *chart {
	c := &chart{title: "Served share: " + r.Trace.File, yLabel: "requested GPU-time served (%)"}
	loadAxis(c, r)
	c.series = byPolicy(r, func(res Result) float64 { return 100 * res.ServedShare })
	bound := series{name: "bound", dashed: true}
	for _, l := range r.Loads {
		bound.pts = append(bound.pts, [2]float64{l.Load, 100 * l.Bound})
	}
	c.series = append(c.series, bound)
	lo := 100.0
	for _, s := range c.series {
		for _, p := range s.pts {
			lo = min(lo, p[1])
		}
	}
	c.yMin, c.yMax = math.Floor(lo/5)*5, 100.5
	step := 5.0
	if c.yMax-c.yMin > 40 {
		step = 10
	}
	for t := c.yMin; t <= 100; t += step {
		c.yTicks = append(c.yTicks, t)
	}
	c.yFormat = func(v float64) string { return fmt.Sprintf("%g", v) }
	c.note = fmt.Sprintf("seed %d, change latency %gs; the static layouts and the webhook (15 to 40 points less) are in replay.md", r.Settings.Seed, r.Settings.LatencySeconds)
	return c
}

func waitChart(r *Report) *chart {
	c := &chart{title: "p99 wait: " + r.Trace.File, yLabel: "p99 wait (log scale)", yLog: true}
	loadAxis(c, r)
	c.series = byPolicy(r, func(res Result) float64 { return res.WaitP99 })
	c.yMin, c.yMax = 1, 1
	for _, s := range c.series {
		for _, p := range s.pts {
			c.yMax = max(c.yMax, p[1])
		}
	}
	top := c.yMax
	for _, t := range []float64{1, 10, 60, 600, 3600, 36000, 360000} {
		c.yTicks = append(c.yTicks, t)
		if c.yMax = t; t >= top && t >= 60 {
			break
		}
	}
	c.yFormat = seconds
	c.note = "a pod never served counts with its wait to the end; 1s or less is drawn at 1s; the static layouts are in replay.md"
	return c
}

func fillChart(r *Report) *chart {
	f := r.FGD
	c := &chart{title: fmt.Sprintf("Fill (FGD): %s, %d GPUs", r.Trace.File, f.GPUs), xLabel: "demand offered (x fleet GPUs)",
		yLabel: "GPU capacity allocated (%)", xMin: 0, xMax: f.Offered, yMin: 0, yMax: 101}
	for t := 0.0; t <= f.Offered+1e-9; t += 0.1 {
		c.xTicks = append(c.xTicks, math.Round(t*10)/10)
	}
	for t := 0.0; t <= 100; t += 10 {
		c.yTicks = append(c.yTicks, t)
	}
	c.xFormat = func(v float64) string { return fmt.Sprintf("%g", v) }
	c.yFormat = func(v float64) string { return fmt.Sprintf("%g", v) }
	for _, name := range plotted {
		for _, res := range f.Results {
			if res.Policy != name || len(res.Curve) == 0 {
				continue
			}
			s := series{name: name, dashed: notReal[name]}
			for _, p := range res.Curve {
				s.pts = append(s.pts, [2]float64{p.Offered, 100 * p.Allocated})
			}
			if res.FirstFailure != nil {
				s.marks = append(s.marks, [2]float64{res.FirstFailure.Offered, 100 * res.FirstFailure.Allocated})
			}
			c.series = append(c.series, s)
		}
	}
	c.note = "tasks in trace order, none leaving; a dot marks each policy's first failure"
	return c
}
