package main

import (
	"bytes"
	"fmt"
	"html/template"
	"math"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"

	"github.com/orderflow/orderflow/pkg/testkit/benchrec"
)

// chart is one drawn figure of the report.
type chart struct {
	Title string
	SVG   template.HTML
}

// renderHTML renders the self-contained report: the table and the charts
// (ratios to the baselines, latency distributions, cost curves) as inline
// SVG drawn by gonum/plot.
func renderHTML(rep *benchrec.Report) ([]byte, error) {
	var charts []chart
	add := func(title string, p *plot.Plot, w, h vg.Length, err error) error {
		if err != nil {
			return fmt.Errorf("chart %q: %w", title, err)
		}
		if p == nil {
			return nil
		}
		svg, err := toSVG(p, w, h)
		if err != nil {
			return fmt.Errorf("chart %q: %w", title, err)
		}
		charts = append(charts, chart{Title: title, SVG: template.HTML(svg)})
		return nil
	}
	p, h, err := ratioChart(rep.Figures)
	if err := add("Ratio to the baseline measured in the same run", p, 20*vg.Centimeter, h, err); err != nil {
		return nil, err
	}
	for _, g := range rep.Groups() {
		for _, d := range distSets(g.Figures) {
			p, err := distChart(d)
			if err := add(fmt.Sprintf("%s%s: distributions (%s)", g.Name, d.conditions, d.unit), p, 20*vg.Centimeter, 11*vg.Centimeter, err); err != nil {
				return nil, err
			}
		}
		for _, unit := range curveUnits(g.Figures) {
			p, err := curveChart(g, unit)
			if err := add(fmt.Sprintf("%s: cost curves (%s)", g.Name, unit), p, 20*vg.Centimeter, 11*vg.Centimeter, err); err != nil {
				return nil, err
			}
		}
	}
	type row struct {
		benchrec.Row
		Missed bool
	}
	var rows []row
	for _, f := range rep.Figures {
		c := f.Cells()
		c.Met = strings.Trim(c.Met, "*")
		rows = append(rows, row{Row: c, Missed: f.Met != nil && !*f.Met})
	}
	var buf bytes.Buffer
	err = reportTemplate.Execute(&buf, map[string]any{"Meta": rep.Meta, "Rows": rows, "Charts": charts})
	return buf.Bytes(), err
}

func toSVG(p *plot.Plot, w, h vg.Length) (string, error) {
	c := vgsvg.New(w, h)
	p.Draw(draw.New(c))
	var buf bytes.Buffer
	if _, err := c.WriteTo(&buf); err != nil {
		return "", err
	}
	svg := buf.String()
	// Drop the XML prolog: the SVG is inlined into HTML.
	if i := strings.Index(svg, "<svg"); i > 0 {
		svg = svg[i:]
	}
	return svg, nil
}

// ratioChart draws every figure that has a baseline as a horizontal bar
// of its ratio, with a line at 1; a ratio from interleaved pairs carries
// a whisker from its lowest to its highest pair.
func ratioChart(figs []benchrec.Figure) (*plot.Plot, vg.Length, error) {
	var vals plotter.Values
	var names []string
	var spreads pairSpreads
	for _, f := range figs {
		if f.Baseline == nil || f.Baseline.Value == 0 {
			continue
		}
		if s := f.RatioSpread; s != nil {
			spreads = append(spreads, pairSpread{y: float64(len(vals)), ratio: f.Ratio, low: f.Ratio - s.Min, high: s.Max - f.Ratio})
		}
		vals = append(vals, f.Ratio)
		name := f.Group + ": " + f.Name
		if f.Params != "" {
			name += " " + f.Params
		}
		if f.Pinned {
			name += " (pinned)"
		}
		names = append(names, name)
	}
	if len(vals) == 0 {
		return nil, 0, nil
	}
	// Top to bottom in recorded order.
	for i := range spreads {
		spreads[i].y = float64(len(vals)-1) - spreads[i].y
	}
	slices.Reverse(vals)
	slices.Reverse(names)
	p := plot.New()
	p.X.Label.Text = "ratio (orderflow / baseline; above 1 is more of the unit)"
	bars, err := plotter.NewBarChart(vals, 8)
	if err != nil {
		return nil, 0, err
	}
	bars.Horizontal = true
	bars.Color = plotutil.Color(0)
	bars.LineStyle.Width = 0
	p.Add(bars, plotter.NewGrid())
	if len(spreads) > 0 {
		whiskers, err := plotter.NewXErrorBars(spreads)
		if err != nil {
			return nil, 0, err
		}
		p.Add(whiskers)
	}
	p.NominalY(names...)
	p.X.Min = 0
	h := vg.Length(len(vals))*14 + 60
	return p, h, nil
}

// distSet is the figures of one group drawn on one distribution chart:
// same conditions, same unit.
type distSet struct {
	conditions, unit string
	figures          []benchrec.Figure
}

// distSets splits a group's figures with distributions by conditions
// (params and pinning) and unit.
func distSets(figs []benchrec.Figure) []distSet {
	var out []distSet
	for _, f := range figs {
		if len(f.Dist) == 0 {
			continue
		}
		cond := ""
		if f.Params != "" {
			cond = ", " + f.Params
		}
		if f.Pinned {
			cond += " (pinned)"
		}
		unit := f.DistUnit
		if unit == "" {
			unit = f.Unit
		}
		i := slices.IndexFunc(out, func(d distSet) bool { return d.conditions == cond && d.unit == unit })
		if i < 0 {
			out = append(out, distSet{conditions: cond, unit: unit})
			i = len(out) - 1
		}
		out[i].figures = append(out[i].figures, f)
	}
	return out
}

func curveUnits(figs []benchrec.Figure) []string {
	var units []string
	for _, f := range figs {
		if f.Curve != nil && !slices.Contains(units, f.Unit) {
			units = append(units, f.Unit)
		}
	}
	return units
}

// distChart draws a set of distributions: the value at each quantile,
// one line per figure.
func distChart(d distSet) (*plot.Plot, error) {
	p := plot.New()
	p.X.Label.Text = "quantile"
	p.Y.Label.Text = d.unit
	var ticks []plot.Tick
	for i, q := range benchrec.DistQuantiles {
		ticks = append(ticks, plot.Tick{Value: float64(i), Label: quantileLabel(q)})
	}
	p.X.Tick.Marker = plot.ConstantTicks(ticks)
	lo, hi := math.Inf(1), 0.0
	all := make([]plotter.XYs, len(d.figures))
	for n, f := range d.figures {
		for _, q := range f.Dist {
			i := slices.Index(benchrec.DistQuantiles, q.Q)
			if i < 0 {
				continue
			}
			all[n] = append(all[n], plotter.XY{X: float64(i), Y: q.V})
			if q.V > 0 {
				lo = min(lo, q.V)
			}
			hi = max(hi, q.V)
		}
	}
	// A long tail reads better on a log axis, which cannot show a
	// quantile of 0 (below the clock's resolution): such points are left
	// out of the lines.
	logY := lo > 0 && hi/lo > 50
	var lines []any
	for n, f := range d.figures {
		xys := all[n]
		if logY {
			xys = slices.DeleteFunc(slices.Clone(xys), func(xy plotter.XY) bool { return xy.Y <= 0 })
		}
		lines = append(lines, f.Name, xys)
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return nil, err
	}
	if logY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = logTicks{}
		p.Y.Min = lo
	}
	roomForLegend(p, logY)
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	return p, nil
}

func quantileLabel(q float64) string {
	switch q {
	case 0:
		return "min"
	case 1:
		return "max"
	}
	return "p" + strings.TrimSuffix(strings.TrimRight(fmt.Sprintf("%.1f", q*100), "0"), ".")
}

// curveChart draws one group's cost curves in unit on log-log axes.
func curveChart(g benchrec.Group, unit string) (*plot.Plot, error) {
	p := plot.New()
	p.Y.Label.Text = unit
	series := map[string]plotter.XYs{}
	var order []string
	logOK := true
	for _, f := range g.Figures {
		if f.Curve == nil || f.Unit != unit {
			continue
		}
		s := f.Curve.Series
		if f.Pinned {
			s += " (pinned)"
		}
		if _, ok := series[s]; !ok {
			order = append(order, s)
		}
		series[s] = append(series[s], plotter.XY{X: f.Curve.X, Y: f.Value})
		if f.Curve.XLabel != "" {
			p.X.Label.Text = f.Curve.XLabel
		}
		logOK = logOK && f.Curve.X > 0 && f.Value > 0
	}
	if len(order) == 0 {
		return nil, nil
	}
	var lines []any
	for _, s := range order {
		xys := series[s]
		slices.SortFunc(xys, func(a, b plotter.XY) int { return cmpFloat(a.X, b.X) })
		lines = append(lines, s, xys)
	}
	if err := plotutil.AddLinePoints(p, lines...); err != nil {
		return nil, err
	}
	if logOK {
		p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
		p.X.Tick.Marker, p.Y.Tick.Marker = logTicks{}, logTicks{}
	}
	roomForLegend(p, logOK)
	p.Legend.Top = true
	p.Legend.Left = true
	p.Add(plotter.NewGrid())
	return p, nil
}

// roomForLegend raises the top of the y axis so that the legend, drawn
// in the top left corner, does not hide the lines.
func roomForLegend(p *plot.Plot, logY bool) {
	if logY {
		p.Y.Max *= 4
		return
	}
	p.Y.Max += (p.Y.Max - p.Y.Min) * 0.3
}

// logTicks labels 1, 2 and 5 times each power of ten on a log axis (with
// unlabelled minor ticks between), so that a range of less than a decade
// still gets labels.
type logTicks struct{}

func (logTicks) Ticks(lo, hi float64) []plot.Tick {
	var ticks []plot.Tick
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi; e++ {
		for m := 1.0; m < 10; m++ {
			v := m * math.Pow(10, e)
			if v < lo || v > hi {
				continue
			}
			t := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				t.Label = strconv.FormatFloat(v, 'g', -1, 64)
			}
			ticks = append(ticks, t)
		}
	}
	return ticks
}

func cmpFloat(a, b float64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

var reportTemplate = template.Must(template.New("report").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>orderflow benchmarks</title>
<style>
body { font-family: sans-serif; margin: 2em; color: #222; }
table { border-collapse: collapse; font-size: 13px; }
th, td { border: 1px solid #ccc; padding: 3px 8px; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
tr.missed td { background: #fde8e8; }
figure { margin: 2em 0; }
figcaption { font-weight: bold; margin-bottom: .5em; }
</style></head><body>
<h1>orderflow benchmarks</h1>
<p>{{.Meta.Time.Format "2006-01-02 15:04 MST"}}, commit {{.Meta.Commit}}, {{.Meta.GoVersion}}, {{.Meta.CPUs}} CPUs ({{.Meta.CPUModel}}), load average {{.Meta.LoadAvg}}.
{{if .Meta.Pin}}Rows marked pinned ran the load generator and the server (orderflow or its baseline) on separate cores (client:server = {{.Meta.Pin}}, taskset); the others ran unpinned.{{else}}No pinned pass in this run.{{end}}</p>
<table>
<tr><th>figure</th><th>conditions</th><th>value</th><th>baseline in the same run</th><th>ratio</th><th>goal</th><th>met</th></tr>
{{range .Rows}}<tr{{if .Missed}} class="missed"{{end}}><td>{{.Figure}}</td><td>{{.Params}}</td><td class="num">{{.Value}}</td><td>{{.Baseline}}</td><td class="num">{{.Ratio}}</td><td>{{.Goal}}</td><td>{{.Met}}</td></tr>
{{end}}</table>
{{range .Charts}}<figure><figcaption>{{.Title}}</figcaption>
{{.SVG}}
</figure>
{{end}}</body></html>
`))

// pairSpread is the whisker of one bar of the ratio chart: from the lowest
// to the highest per-pair ratio around the median.
type pairSpread struct{ y, ratio, low, high float64 }

type pairSpreads []pairSpread

func (s pairSpreads) Len() int                        { return len(s) }
func (s pairSpreads) XY(i int) (float64, float64)     { return s[i].ratio, s[i].y }
func (s pairSpreads) XError(i int) (float64, float64) { return s[i].low, s[i].high }
