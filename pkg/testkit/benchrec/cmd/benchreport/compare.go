package main

import (
	"flag"
	"fmt"
	"io"
	"slices"
	"text/tabwriter"

	"golang.org/x/perf/benchmath"

	"github.com/orderflow/orderflow/pkg/testkit/benchrec"
)

// confidence of the intervals compare prints.
const confidence = 0.95

// compare prints, benchstat-style, the change of every figure between two
// bench/latest.json files.
func compare(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("compare", flag.ContinueOnError)
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return fmt.Errorf("usage: benchreport compare OLD.json NEW.json")
	}
	oldRep, err := benchrec.LoadReport(fs.Arg(0))
	if err != nil {
		return err
	}
	newRep, err := benchrec.LoadReport(fs.Arg(1))
	if err != nil {
		return err
	}
	writeComparison(stdout, fs.Arg(0), fs.Arg(1), oldRep, newRep)
	return nil
}

// comparison is one row of the comparison.
type comparison struct {
	key, unit, old, new, delta, test, ratio, ratioTest string
}

func writeComparison(w io.Writer, oldName, newName string, oldRep, newRep *benchrec.Report) {
	fmt.Fprintf(w, "old: %s (%s, commit %s, load %s)\nnew: %s (%s, commit %s, load %s)\n",
		oldName, oldRep.Meta.Time.Format("2006-01-02 15:04"), oldRep.Meta.Commit, oldRep.Meta.LoadAvg,
		newName, newRep.Meta.Time.Format("2006-01-02 15:04"), newRep.Meta.Commit, newRep.Meta.LoadAvg)
	fmt.Fprintf(w, "Each value is the median of the figure's samples ± the half-width of its %.0f %% confidence interval\n"+
		"(the noise); delta is the change of the medians, or ~ when a Mann-Whitney U test cannot tell the two runs\n"+
		"apart (p ≥ %.2f). A figure with one measurement has no stated noise: its delta is shown with \"noise unknown\".\n"+
		"A ratio to the baseline with a bracket is the median of the per-pair ratios of interleaved repeats, the bracket\n"+
		"their lowest–highest (the noise of the ratio); ratio test is the Mann-Whitney U test of the two runs' pair ratios.\n\n",
		confidence*100, benchmath.DefaultThresholds.CompareAlpha)
	oldBy := map[string]benchrec.Figure{}
	for _, f := range oldRep.Figures {
		oldBy[f.Key()] = f
	}
	var rows []comparison
	seen := map[string]bool{}
	for _, nf := range newRep.Figures {
		seen[nf.Key()] = true
		of, ok := oldBy[nf.Key()]
		if !ok {
			rows = append(rows, comparison{key: nf.Key(), unit: nf.Unit, old: "-", new: summary(nf), delta: "new"})
			continue
		}
		rows = append(rows, compareFigures(of, nf))
	}
	for _, of := range oldRep.Figures {
		if !seen[of.Key()] {
			rows = append(rows, comparison{key: of.Key(), unit: of.Unit, old: summary(of), new: "-", delta: "gone"})
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\tunit\told\tnew\tdelta\ttest\tratio to baseline old → new\tratio test")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.key, r.unit, r.old, r.new, r.delta, r.test, r.ratio, r.ratioTest)
	}
	tw.Flush()
}

// sample is the figure's samples, or its value alone.
func sample(f benchrec.Figure) *benchmath.Sample {
	vs := slices.Clone(f.Samples)
	if len(vs) == 0 {
		vs = []float64{f.Value}
	}
	return benchmath.NewSample(vs, &benchmath.DefaultThresholds)
}

// summary renders a figure's median and noise.
func summary(f benchrec.Figure) string {
	s := sample(f)
	if len(s.Values) < 2 {
		return benchrec.FormatNumber(f.Value)
	}
	sum := benchmath.AssumeNothing.Summary(s, confidence)
	return fmt.Sprintf("%s ± %s", benchrec.FormatNumber(sum.Center), sum.PctRangeString())
}

func compareFigures(of, nf benchrec.Figure) comparison {
	r := comparison{key: nf.Key(), unit: nf.Unit, old: summary(of), new: summary(nf)}
	if of.Baseline != nil && nf.Baseline != nil {
		r.ratio = of.RatioText() + " → " + nf.RatioText()
		r.ratioTest = compareRatios(of, nf)
	}
	os, ns := sample(of), sample(nf)
	if len(os.Values) < 2 || len(ns.Values) < 2 {
		r.delta = pct(of.Value, nf.Value)
		r.test = "noise unknown"
		return r
	}
	c := benchmath.AssumeNothing.Compare(os, ns)
	oc := benchmath.AssumeNothing.Summary(os, confidence).Center
	nc := benchmath.AssumeNothing.Summary(ns, confidence).Center
	r.delta = c.FormatDelta(oc, nc)
	r.test = c.String()
	return r
}

func pct(old, new float64) string {
	if old == 0 {
		return "?"
	}
	return fmt.Sprintf("%+.2f%%", (new/old-1)*100)
}

// compareRatios tests whether the pair ratios of two runs differ; empty
// when either run has fewer than two pairs.
func compareRatios(of, nf benchrec.Figure) string {
	if len(of.RatioPairs) < 2 || len(nf.RatioPairs) < 2 {
		return ""
	}
	os := benchmath.NewSample(slices.Clone(of.RatioPairs), &benchmath.DefaultThresholds)
	ns := benchmath.NewSample(slices.Clone(nf.RatioPairs), &benchmath.DefaultThresholds)
	c := benchmath.AssumeNothing.Compare(os, ns)
	return c.FormatDelta(benchmath.AssumeNothing.Summary(os, confidence).Center, benchmath.AssumeNothing.Summary(ns, confidence).Center) + " " + c.String()
}
