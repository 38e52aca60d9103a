// Package benchrec records the figures of `make bench`: each benchmark
// calls Record with a Figure (a value, its unit, the baseline measured in
// the same run, the goal) and the figure is printed and, when
// ORDERFLOW_BENCH_OUT names a file, appended to it as one JSON line.
// cmd/benchreport turns that file into bench/latest.json, the HTML report
// and the printed table.
//
// A figure whose benchmark ran its client and server on separate cores
// says so with Pinned; Pinning tells a benchmark whether this run asks
// for that and which cores to use.
package benchrec

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Environment variables set by `make bench`.
const (
	// EnvOut names the JSON-lines file figures are appended to.
	EnvOut = "ORDERFLOW_BENCH_OUT"
	// EnvPin asks for the pinned pass: "CLIENT:SERVER" CPU lists for
	// taskset, for example "0:1".
	EnvPin = "ORDERFLOW_BENCH_PIN"
	// EnvRounds sets how often a benchmark that honours it repeats each
	// cell (`make bench` 5, `make bench-quick` 1).
	EnvRounds = "ORDERFLOW_BENCH_ROUNDS"
)

// Rounds returns the rounds EnvRounds asks for, or def when it is unset
// or not a positive number.
func Rounds(def int) int {
	if n, err := strconv.Atoi(os.Getenv(EnvRounds)); err == nil && n > 0 {
		return n
	}
	return def
}

// Better says which direction of a figure is an improvement.
type Better string

const (
	// Higher is better (throughput, utilisation).
	Higher Better = "higher"
	// Lower is better (latency, bytes).
	Lower Better = "lower"
)

// Figure is one measured number of a benchmark.
type Figure struct {
	// Group is the table section ("submit", "status", "pickup", ...).
	Group string `json:"group"`
	// Name is the row within the group ("REST POST /v1/order-splits").
	Name string `json:"name"`
	// Params are the conditions that tell rows of one name apart
	// ("clients=16"); figures are keyed by group, name, params and Pinned.
	Params string `json:"params,omitempty"`
	// Value is the figure in Unit.
	Value float64 `json:"value"`
	// Unit of Value and of the baseline's value ("ops/s", "ms", "%", "B").
	Unit string `json:"unit"`
	// Better is the direction of improvement; Higher when empty.
	Better Better `json:"better,omitempty"`
	// Samples are repeated measurements of Value (for example the rate of
	// each slice of a timed run); bench-compare states the noise from them.
	Samples []float64 `json:"samples,omitempty"`
	// Baseline is the reference measured in the same run.
	Baseline *Baseline `json:"baseline,omitempty"`
	// Ratio is Value / Baseline.Value, or, when RatioPairs is set, their
	// median; Record computes it.
	Ratio float64 `json:"ratio,omitempty"`
	// RatioPairs are the ratios of interleaved repeats of the figure and
	// its baseline, one per pair measured side by side (see Interleave).
	RatioPairs []float64 `json:"ratioPairs,omitempty"`
	// RatioSpread summarises RatioPairs; Record computes it.
	RatioSpread *Spread `json:"ratioSpread,omitempty"`
	// Goals the figure should meet; Met is their conjunction.
	Goals []Goal `json:"goals,omitempty"`
	// Met is set by Record when Goals is not empty.
	Met *bool `json:"met,omitempty"`
	// Pinned is true when client and server ran on separate cores.
	Pinned bool `json:"pinned"`
	// Curve places the figure on a curve (a cost curve): figures with the
	// same Group and Curve.Series are drawn as one line over Curve.X.
	Curve *Point `json:"curve,omitempty"`
	// Dist is the distribution behind Value (latencies of a throughput
	// run, for example), in DistUnit.
	Dist []Quantile `json:"dist,omitempty"`
	// DistUnit is the unit of Dist; Unit when empty.
	DistUnit string `json:"distUnit,omitempty"`
	// Note is a short remark printed beside the figure.
	Note string `json:"note,omitempty"`
	// Bench is the benchmark's name; Record sets it.
	Bench string `json:"bench,omitempty"`
	// Time is when the figure was recorded; Record sets it.
	Time time.Time `json:"time"`
}

// Baseline is the reference a figure is compared with.
type Baseline struct {
	Name    string    `json:"name"`
	Value   float64   `json:"value"`
	Samples []float64 `json:"samples,omitempty"`
}

// Point is a figure's place on a curve.
type Point struct {
	Series string  `json:"series"`
	X      float64 `json:"x"`
	XLabel string  `json:"xLabel,omitempty"`
}

// Quantile is one point of a distribution: Q in [0, 1], V in the figure's
// unit.
type Quantile struct {
	Q float64 `json:"q"`
	V float64 `json:"v"`
}

// Goal is a bound on the figure's value or on its ratio to the baseline.
type Goal struct {
	// Of is "value" or "ratio".
	Of string `json:"of"`
	// Op is ">=", ">", "<=" or "<".
	Op     string  `json:"op"`
	Target float64 `json:"target"`
}

// AtLeast is the goal Of >= target.
func AtLeast(of string, target float64) Goal { return Goal{Of: of, Op: ">=", Target: target} }

// AtMost is the goal Of <= target.
func AtMost(of string, target float64) Goal { return Goal{Of: of, Op: "<=", Target: target} }

// Below is the goal Of < target.
func Below(of string, target float64) Goal { return Goal{Of: of, Op: "<", Target: target} }

// String renders the goal as in the table: "ratio ≥ 0.8", "< 5 ms".
func (g Goal) String(unit string) string {
	op := map[string]string{">=": "≥", ">": ">", "<=": "≤", "<": "<"}[g.Op]
	target := strconv.FormatFloat(g.Target, 'g', 3, 64)
	if g.Of == "ratio" {
		return fmt.Sprintf("ratio %s %s", op, target)
	}
	return fmt.Sprintf("%s %s %s", op, target, unit)
}

// Holds reports whether the goal holds for f.
func (g Goal) Holds(f Figure) bool {
	v := f.Value
	if g.Of == "ratio" {
		if f.Baseline == nil {
			return false
		}
		v = f.Ratio
	}
	switch g.Op {
	case ">=":
		return v >= g.Target
	case ">":
		return v > g.Target
	case "<=":
		return v <= g.Target
	case "<":
		return v < g.Target
	}
	return false
}

// Key identifies a figure across runs.
func (f Figure) Key() string {
	k := f.Group + " / " + f.Name
	if f.Params != "" {
		k += " [" + f.Params + "]"
	}
	if f.Pinned {
		k += " (pinned)"
	}
	return k
}

// Complete fills Ratio and Met from the baseline and goals.
func (f *Figure) Complete() {
	if f.Better == "" {
		f.Better = Higher
	}
	if len(f.Dist) > 0 && f.DistUnit == "" {
		f.DistUnit = f.Unit
	}
	switch {
	case f.Baseline != nil && len(f.RatioPairs) > 0:
		f.Ratio = Median(f.RatioPairs)
		f.RatioSpread = SpreadOf(f.RatioPairs)
	case f.Baseline != nil && f.Baseline.Value != 0:
		f.Ratio = f.Value / f.Baseline.Value
	}
	if len(f.Goals) > 0 {
		met := true
		for _, g := range f.Goals {
			met = met && g.Holds(*f)
		}
		f.Met = &met
	}
}

// Validate returns an error naming the first missing or bad field.
func (f Figure) Validate() error {
	switch {
	case f.Group == "":
		return fmt.Errorf("figure: group is empty")
	case f.Name == "":
		return fmt.Errorf("figure %q: name is empty", f.Group)
	case f.Unit == "":
		return fmt.Errorf("figure %s: unit is empty", f.Key())
	case math.IsNaN(f.Value) || math.IsInf(f.Value, 0):
		return fmt.Errorf("figure %s: value is %v", f.Key(), f.Value)
	case f.Better != "" && f.Better != Higher && f.Better != Lower:
		return fmt.Errorf("figure %s: better is %q, want higher or lower", f.Key(), f.Better)
	}
	if len(f.RatioPairs) > 0 && f.Baseline == nil {
		return fmt.Errorf("figure %s: ratio pairs need a baseline", f.Key())
	}
	for _, r := range f.RatioPairs {
		if math.IsNaN(r) || math.IsInf(r, 0) || r < 0 {
			return fmt.Errorf("figure %s: ratio pair %v", f.Key(), r)
		}
	}
	for _, g := range f.Goals {
		if g.Of != "value" && g.Of != "ratio" {
			return fmt.Errorf("figure %s: goal of %q, want value or ratio", f.Key(), g.Of)
		}
		if !slices.Contains([]string{">=", ">", "<=", "<"}, g.Op) {
			return fmt.Errorf("figure %s: goal op %q", f.Key(), g.Op)
		}
		if g.Of == "ratio" && f.Baseline == nil {
			return fmt.Errorf("figure %s: a ratio goal needs a baseline", f.Key())
		}
	}
	return nil
}

var writeMu sync.Mutex

// Record completes f, prints it on one line and appends it to the file
// named by ORDERFLOW_BENCH_OUT when that is set. A bad figure or a failed
// write fails tb.
func Record(tb testing.TB, f Figure) {
	tb.Helper()
	if f.Bench == "" {
		f.Bench = tb.Name()
	}
	if f.Time.IsZero() {
		f.Time = time.Now().UTC()
	}
	if err := f.Validate(); err != nil {
		tb.Fatal(err)
	}
	f.Complete()
	fmt.Println("  " + f.Line())
	path := os.Getenv(EnvOut)
	if path == "" {
		return
	}
	if err := appendJSON(path, f); err != nil {
		tb.Fatalf("record figure %s: %v", f.Key(), err)
	}
}

func appendJSON(path string, f Figure) error {
	line, err := json.Marshal(f)
	if err != nil {
		return err
	}
	writeMu.Lock()
	defer writeMu.Unlock()
	file, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	if _, err := file.Write(append(line, '\n')); err != nil {
		file.Close()
		return err
	}
	return file.Close()
}

// Line renders the figure as one line of text.
func (f Figure) Line() string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%-10s %-56s %-12s %10s %-6s", f.Group, f.Name, f.Params, FormatNumber(f.Value), f.Unit)
	if f.Baseline != nil {
		fmt.Fprintf(&sb, "  vs %s %s (ratio %s)", f.Baseline.Name, FormatNumber(f.Baseline.Value), f.RatioText())
	}
	for _, g := range f.Goals {
		fmt.Fprintf(&sb, "  goal %s", g.String(f.Unit))
	}
	if f.Met != nil {
		sb.WriteString(map[bool]string{true: " met", false: " NOT met"}[*f.Met])
	}
	if f.Pinned {
		sb.WriteString("  [pinned]")
	}
	if f.Note != "" {
		sb.WriteString("  " + f.Note)
	}
	return sb.String()
}

// RatioText renders the ratio: "0.91", or for interleaved pairs their
// median, the min–max of the pairs and their count: "0.72 (0.65–0.80, 7
// pairs)".
func (f Figure) RatioText() string {
	if f.RatioSpread != nil {
		return fmt.Sprintf("%.2f (%s, %d pairs)", f.Ratio, f.RatioSpread, f.RatioSpread.Pairs)
	}
	return fmt.Sprintf("%.2f", f.Ratio)
}

// FormatNumber prints a figure with three significant digits and
// thousands separators for large values.
func FormatNumber(v float64) string {
	a := math.Abs(v)
	switch {
	case a == 0:
		return "0"
	case a >= 1000:
		s := fmt.Sprintf("%.0f", v)
		neg := strings.HasPrefix(s, "-")
		s = strings.TrimPrefix(s, "-")
		var out []byte
		for i := range len(s) {
			if i > 0 && (len(s)-i)%3 == 0 {
				out = append(out, ',')
			}
			out = append(out, s[i])
		}
		if neg {
			return "-" + string(out)
		}
		return string(out)
	case a >= 100:
		return fmt.Sprintf("%.0f", v)
	case a >= 10:
		return fmt.Sprintf("%.1f", v)
	case a >= 1:
		return fmt.Sprintf("%.2f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}
