package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/orderflow/orderflow/pkg/testkit/benchrec"
)

// recorded writes figures as Record does and returns the file.
func recorded(t *testing.T, dir string, scale float64) string {
	t.Helper()
	path := filepath.Join(dir, "figures.jsonl")
	t.Setenv(benchrec.EnvOut, path)
	var samples []float64
	for i := range 8 {
		samples = append(samples, scale*(1000+float64(i%3)))
	}
	benchrec.Record(t, benchrec.Figure{Group: "status", Name: "REST GET", Params: "clients=1", Value: scale * 1001, Unit: "ops/s",
		Samples: samples, Baseline: &benchrec.Baseline{Name: "floor", Value: 1100}, Goals: []benchrec.Goal{benchrec.AtLeast("ratio", 0.8)},
		Dist: []benchrec.Quantile{{Q: 0, V: 0.1}, {Q: 0.5, V: 0.5}, {Q: 0.99, V: 9}, {Q: 1, V: 20}}})
	for _, n := range []float64{1e3, 1e4, 1e5, 1e6} {
		benchrec.Record(t, benchrec.Figure{Group: "cost curves", Name: "delay queue bytes per job", Params: "n=" + benchrec.FormatNumber(n),
			Value: 128 + n/1e5, Unit: "B", Better: benchrec.Lower, Curve: &benchrec.Point{Series: "delayq", X: n, XLabel: "pending jobs"}})
	}
	return path
}

func TestBuildWritesJSONHTMLAndTable(t *testing.T) {
	dir := t.TempDir()
	in := recorded(t, dir, 1)
	var out bytes.Buffer
	if err := run([]string{"build", "-in", in, "-dir", dir, "-pin", "0:1"}, &out); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"status: REST GET", "1,001 ops/s", "floor 1,100 ops/s", "0.91", "ratio ≥ 0.8", "client on CPU 0, server on CPU 1"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("printed table lacks %q:\n%s", want, out.String())
		}
	}
	rep, err := benchrec.LoadReport(filepath.Join(dir, "latest.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Figures) != 5 || rep.Meta.Pin != "0:1" || rep.Meta.CPUs == 0 || rep.Meta.GoVersion == "" {
		t.Fatalf("latest.json = %+v", rep)
	}
	if f := rep.Figures[0]; f.Met == nil || !*f.Met || f.Unit != "ops/s" || f.Baseline.Name != "floor" {
		t.Errorf("first figure = %+v", f)
	}
	html, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	// Three charts: ratios, the status distribution, the cost curve; all inline.
	if n := strings.Count(string(html), "<svg"); n != 3 {
		t.Errorf("report has %d inline SVG charts, want 3", n)
	}
	for _, want := range []string{"status, clients=1: distributions (ops/s)", "cost curves: cost curves (B)", "pending jobs", "client:server = 0:1"} {
		if !strings.Contains(string(html), want) {
			t.Errorf("report lacks %q", want)
		}
	}
	if strings.Contains(string(html), "<script") || strings.Contains(string(html), "src=\"http") {
		t.Error("report is not self-contained")
	}
}

func TestBuildWithoutFiguresFails(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "figures.jsonl")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"build", "-in", empty, "-dir", dir}, &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "no figures") {
		t.Errorf("build of an empty file = %v, want 'no figures'", err)
	}
}

func TestDocsRewriteAndCheck(t *testing.T) {
	dir := t.TempDir()
	in := recorded(t, dir, 1)
	if err := run([]string{"build", "-in", in, "-dir", dir}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	pagePath := filepath.Join(dir, "benchmarks.md")
	if err := os.WriteFile(pagePath, []byte("# x\nstale\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args := []string{"docs", "-json", filepath.Join(dir, "latest.json"), "-out", pagePath}
	if err := run(append(args, "-check"), &bytes.Buffer{}); err == nil || !strings.Contains(err.Error(), "run make docs") {
		t.Fatalf("check of a stale page = %v, want a failure saying run make docs", err)
	}
	if err := run(args, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if err := run(append(args, "-check"), &bytes.Buffer{}); err != nil {
		t.Fatalf("check after rewrite: %v", err)
	}
	got, _ := os.ReadFile(pagePath)
	if !strings.Contains(string(got), "| status: REST GET | clients=1 | 1,001 ops/s |") || strings.Contains(string(got), "stale") {
		t.Errorf("page after rewrite:\n%s", got)
	}
}

func TestCompareStatesNoise(t *testing.T) {
	oldDir, newDir := t.TempDir(), t.TempDir()
	if err := run([]string{"build", "-in", recorded(t, oldDir, 1), "-dir", oldDir}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"build", "-in", recorded(t, newDir, 1.5), "-dir", newDir}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	// A figure only in the old run.
	oldJSON := filepath.Join(oldDir, "latest.json")
	rep, _ := benchrec.LoadReport(oldJSON)
	rep.Figures = append(rep.Figures, benchrec.Figure{Group: "gone", Name: "x", Value: 1, Unit: "ms"})
	data, _ := json.Marshal(rep)
	if err := os.WriteFile(oldJSON, data, 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run([]string{"compare", oldJSON, filepath.Join(newDir, "latest.json")}, &out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{
		"1,001 ± 0%", "1,502 ± 0%", "+50.00%", "p=0.000 n=8", "0.91 → 1.36", // the sampled figure: noise and a test
		"noise unknown", // single measurements
		"gone",
		"confidence interval", "Mann-Whitney",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("comparison lacks %q:\n%s", want, s)
		}
	}
	if err := run([]string{"compare", oldJSON}, &bytes.Buffer{}); err == nil {
		t.Error("compare with one file succeeded")
	}
}

// TestPageMatchesTheJSON: docs/benchmarks.md is the page `make docs`
// generates from the committed bench/latest.json and bench/levers.json.
func TestPageMatchesTheJSON(t *testing.T) {
	root := filepath.Join("..", "..", "..", "..", "..")
	var out bytes.Buffer
	err := run([]string{"docs", "-check", "-json", filepath.Join(root, "bench", "latest.json"), "-levers", filepath.Join(root, "bench", "levers.json"),
		"-out", filepath.Join(root, "docs", "benchmarks.md")}, &out)
	if err != nil {
		t.Fatal(err)
	}
}

// TestPairedRatiosInTableAndComparison: a ratio from interleaved pairs is
// printed with its spread in the table and in the comparison, which also
// tests the two runs' pair ratios against each other.
func TestPairedRatiosInTableAndComparison(t *testing.T) {
	build := func(pairs []float64) (string, string) {
		dir := t.TempDir()
		t.Setenv(benchrec.EnvOut, filepath.Join(dir, "figures.jsonl"))
		benchrec.Record(t, benchrec.Figure{Group: "status", Name: "REST GET", Params: "clients=16", Value: 700, Unit: "ops/s",
			Samples: []float64{690, 700, 710, 705, 695, 702, 698}, Baseline: &benchrec.Baseline{Name: "floor", Value: 1000},
			RatioPairs: pairs, Goals: []benchrec.Goal{benchrec.AtLeast("ratio", 0.8)}})
		var out bytes.Buffer
		if err := run([]string{"build", "-in", filepath.Join(dir, "figures.jsonl"), "-dir", dir}, &out); err != nil {
			t.Fatal(err)
		}
		return filepath.Join(dir, "latest.json"), out.String()
	}
	oldJSON, table := build([]float64{0.70, 0.72, 0.69, 0.75, 0.71, 0.73, 0.70})
	newJSON, _ := build([]float64{0.84, 0.86, 0.83, 0.88, 0.85, 0.82, 0.87})
	for _, want := range []string{"0.71 (0.69–0.75, 7 pairs)", benchrec.PairsNote} {
		if !strings.Contains(table, want) {
			t.Errorf("printed table lacks %q:\n%s", want, table)
		}
	}
	html, err := os.ReadFile(filepath.Join(filepath.Dir(oldJSON), "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(html), "0.71 (0.69–0.75, 7 pairs)") {
		t.Error("report.html lacks the ratio with its spread")
	}
	rep, err := benchrec.LoadReport(oldJSON)
	if err != nil {
		t.Fatal(err)
	}
	if f := rep.Figures[0]; f.Ratio != 0.71 || f.RatioSpread == nil || f.RatioSpread.Pairs != 7 || len(f.RatioPairs) != 7 {
		t.Errorf("latest.json figure = %+v, want ratio 0.71 with the spread of 7 pairs", f)
	}
	var out bytes.Buffer
	if err := run([]string{"compare", oldJSON, newJSON}, &out); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"0.71 (0.69–0.75, 7 pairs) → 0.85 (0.82–0.88, 7 pairs)", "p=0.001 n=7", "pair ratios"} {
		if !strings.Contains(s, want) {
			t.Errorf("comparison lacks %q:\n%s", want, s)
		}
	}
}

// TestDistributionWithAZeroQuantileOnALongTail: a distribution whose
// lowest quantile is 0 (a latency below the clock's resolution) and whose
// tail is long is still drawn; a log axis cannot show the 0.
func TestDistributionWithAZeroQuantileOnALongTail(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "figures.jsonl")
	t.Setenv(benchrec.EnvOut, path)
	benchrec.Record(t, benchrec.Figure{Group: "slot pool", Name: "hand-off", Value: 0.8, Unit: "ms", Better: benchrec.Lower,
		Dist: []benchrec.Quantile{{Q: 0, V: 0}, {Q: 0.5, V: 0.8}, {Q: 0.99, V: 40}, {Q: 1, V: 300}}})
	if err := run([]string{"build", "-in", path, "-dir", dir}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	html, err := os.ReadFile(filepath.Join(dir, "report.html"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(html), "slot pool: distributions (ms)") {
		t.Error("report lacks the distribution chart")
	}
}

func TestGoalsNotMetListTheirLevers(t *testing.T) {
	dir := t.TempDir()
	in := recorded(t, dir, 0.5) // ratio 0.46: the status goal (≥ 0.8) is missed
	// More cells of the same figure missing their goals share its row,
	// each goal named once.
	benchrec.Record(t, benchrec.Figure{Group: "status", Name: "REST GET", Params: "clients=16", Value: 400, Unit: "ops/s",
		Baseline: &benchrec.Baseline{Name: "floor", Value: 1000}, Goals: []benchrec.Goal{benchrec.AtLeast("ratio", 0.8)}})
	benchrec.Record(t, benchrec.Figure{Group: "status", Name: "REST GET", Params: "clients=64", Value: 850, Unit: "ops/s",
		Baseline: &benchrec.Baseline{Name: "floor", Value: 1000}, Goals: []benchrec.Goal{benchrec.AtLeast("ratio", 0.9)}})
	levers := filepath.Join(dir, "levers.json")
	if err := os.WriteFile(levers, []byte(`{"status: REST GET": {"reason": "JSON encoding", "next": "cache the encoder"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"build", "-in", in, "-dir", dir, "-levers", levers}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(dir, "benchmarks.md")
	if err := run([]string{"docs", "-json", filepath.Join(dir, "latest.json"), "-out", page}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(page)
	_, missed, ok := strings.Cut(string(got), "## Goals not met")
	missed, _, _ = strings.Cut(missed, "## Baselines")
	row := "| status: REST GET | ratio ≥ 0.8; ratio ≥ 0.9 | clients=1: 500 ops/s, ratio 0.46; clients=16: 400 ops/s, ratio 0.40; clients=64: 850 ops/s, ratio 0.85 | JSON encoding | cache the encoder |"
	if !ok || !strings.Contains(missed, row) || strings.Count(missed, "| status: REST GET |") != 1 {
		t.Errorf("page's goals not met lack the row\n%s\n%s", row, got)
	}

	// docs -levers puts the file's levers in place of the run's.
	if err := os.WriteFile(levers, []byte(`{"status: REST GET": {"reason": "protojson", "next": "a pooled buffer"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"docs", "-json", filepath.Join(dir, "latest.json"), "-levers", levers, "-out", page}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(page); !strings.Contains(string(got), "| protojson | a pooled buffer |") {
		t.Errorf("docs -levers did not use the file's levers:\n%s", got)
	}

	// A lever written as one string (older reports) is its reason.
	var old benchrec.Report
	if err := json.Unmarshal([]byte(`{"levers": {"status: REST GET": "measured: JSON; next: cache"}}`), &old); err != nil {
		t.Fatal(err)
	}
	if l := old.Levers["status: REST GET"]; l.Reason != "measured: JSON; next: cache" || l.Next != "" {
		t.Errorf("a lever of one string reads as %+v", l)
	}

	// A met goal is not listed; a missed one without a lever says so.
	in = recorded(t, t.TempDir(), 1)
	if err := run([]string{"build", "-in", in, "-dir", dir}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if err := run([]string{"docs", "-json", filepath.Join(dir, "latest.json"), "-out", page}, &bytes.Buffer{}); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(page); strings.Contains(string(got), "## Goals not met") {
		t.Errorf("page lists goals not met when every goal was met:\n%s", got)
	}
	rep := &benchrec.Report{Figures: []benchrec.Figure{{Group: "g", Name: "n", Value: 1, Unit: "x", Goals: []benchrec.Goal{benchrec.AtLeast("value", 2)}}}}
	rep.Figures[0].Complete()
	if p := rep.Page(); !strings.Contains(p, "| not analysed |") {
		t.Errorf("a missed goal without a lever:\n%s", p)
	}
}

// TestLeversAreShortAndCurrent: bench/levers.json gives every goal the
// committed run misses a measured reason and a next lever, each short
// enough for one row of a table, and names no figure that run does not
// miss a goal of.
func TestLeversAreShortAndCurrent(t *testing.T) {
	root := filepath.Join("..", "..", "..", "..", "..")
	rep, err := benchrec.LoadReport(filepath.Join(root, "bench", "latest.json"))
	if err != nil {
		t.Fatal(err)
	}
	levers, err := readLevers(filepath.Join(root, "bench", "levers.json"))
	if err != nil {
		t.Fatal(err)
	}
	missed := map[string]bool{}
	for _, f := range rep.Figures {
		if f.Met != nil && !*f.Met {
			missed[f.Group+": "+f.Name] = true
		}
	}
	for key := range missed {
		if _, ok := levers[key]; !ok {
			t.Errorf("bench/levers.json has no lever for %q, whose goal the run misses", key)
		}
	}
	for key, l := range levers {
		if !missed[key] {
			t.Errorf("bench/levers.json has a lever for %q, which misses no goal in the run", key)
		}
		if l.Reason == "" || len(l.Reason) > 320 || l.Next == "" || len(l.Next) > 200 {
			t.Errorf("lever of %q: want a reason of 1-320 bytes and a next lever of 1-200, have %d and %d", key, len(l.Reason), len(l.Next))
		}
	}
}
