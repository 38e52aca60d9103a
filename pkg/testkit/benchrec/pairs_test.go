package benchrec

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func TestOrderAlternatesTheArmsRoundByRound(t *testing.T) {
	for _, c := range []struct {
		rounds, n int
		want      []int
	}{
		{0, 2, []int{}},
		{1, 2, []int{0, 1}},
		{4, 2, []int{0, 1, 1, 0, 0, 1, 1, 0}},
		{3, 3, []int{0, 1, 2, 2, 1, 0, 0, 1, 2}},
		{2, 1, []int{0, 0}},
	} {
		if diff := cmp.Diff(c.want, Order(c.rounds, c.n)); diff != "" {
			t.Errorf("Order(%d, %d) (-want +got):\n%s", c.rounds, c.n, diff)
		}
	}
}

func TestInterleaveRunsEachArmOncePerRoundInOrder(t *testing.T) {
	var ran []string
	arm := func(name string, ops int64) func() Result {
		return func() Result {
			ran = append(ran, name)
			return Result{Ops: ops + int64(len(ran)), Elapsed: time.Second}
		}
	}
	got := Interleave(3, arm("floor", 100), arm("rest", 50))
	if diff := cmp.Diff([]string{"floor", "rest", "rest", "floor", "floor", "rest"}, ran); diff != "" {
		t.Errorf("run order (-want +got):\n%s", diff)
	}
	// Each arm's results in round order: its ops say when it ran.
	want := [][]float64{{101, 104, 105}, {52, 53, 56}}
	for i, rs := range got {
		if diff := cmp.Diff(want[i], Rates(rs)); diff != "" {
			t.Errorf("arm %d rates (-want +got):\n%s", i, diff)
		}
	}
}

func TestPairRatiosMedianAndSpread(t *testing.T) {
	ratios := PairRatios([]float64{42, 67, 60, 80, 70}, []float64{100, 100, 100, 100, 100})
	if diff := cmp.Diff([]float64{0.42, 0.67, 0.6, 0.8, 0.7}, ratios); diff != "" {
		t.Errorf("PairRatios (-want +got):\n%s", diff)
	}
	if got := PairRatios([]float64{1, 2}, []float64{0, 4}); !cmp.Equal(got, []float64{0.5}) {
		t.Errorf("PairRatios with a zero base = %v, want [0.5]", got)
	}
	for _, c := range []struct {
		vs   []float64
		want float64
	}{
		{nil, 0},
		{[]float64{3}, 3},
		{[]float64{5, 1, 3}, 3},
		{[]float64{4, 1, 3, 2}, 2.5},
	} {
		if got := Median(c.vs); got != c.want {
			t.Errorf("Median(%v) = %v, want %v", c.vs, got, c.want)
		}
	}
	s := SpreadOf(ratios)
	if diff := cmp.Diff(&Spread{Pairs: 5, Min: 0.42, Max: 0.8, Q1: 0.6, Q3: 0.7}, s); diff != "" {
		t.Errorf("SpreadOf (-want +got):\n%s", diff)
	}
	if got := s.String(); got != "0.42–0.80" {
		t.Errorf("Spread.String() = %q, want %q", got, "0.42–0.80")
	}
	if SpreadOf(nil) != nil {
		t.Error("SpreadOf(nil) is not nil")
	}
	defer func() {
		if recover() == nil {
			t.Error("PairRatios of series of different lengths did not panic")
		}
	}()
	PairRatios([]float64{1}, []float64{1, 2})
}

func TestMergeJoinsRepeats(t *testing.T) {
	errA := errors.New("a")
	got := Merge([]Result{
		{Ops: 10, Elapsed: time.Second, Latencies: []time.Duration{3, 5}},
		{Ops: 30, Errors: 2, Elapsed: 2 * time.Second, Latencies: []time.Duration{1, 4}, FirstError: errA},
	})
	if got.Ops != 40 || got.Errors != 2 || got.Elapsed != 3*time.Second || got.FirstError != errA {
		t.Errorf("Merge = %+v, want 40 ops, 2 errors, 3 s and the first error", got)
	}
	if diff := cmp.Diff([]time.Duration{1, 3, 4, 5}, got.Latencies); diff != "" {
		t.Errorf("latencies (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]float64{10, 15}, got.SliceRates); diff != "" {
		t.Errorf("SliceRates are the repeats' rates (-want +got):\n%s", diff)
	}
}

// TestRecordRatioPairs: a figure with pair ratios keeps the fields users
// read (value, baseline, ratio, met) with ratio the median of the pairs,
// and adds the pairs and their spread.
func TestRecordRatioPairs(t *testing.T) {
	path := filepath.Join(t.TempDir(), "figures.jsonl")
	t.Setenv(EnvOut, path)
	f := Figure{Group: "status", Name: "REST GET", Params: "clients=16", Value: 600, Unit: "ops/s",
		Baseline: &Baseline{Name: "floor", Value: 1000}, RatioPairs: []float64{0.9, 0.42, 0.85, 0.67, 0.81},
		Goals: []Goal{AtLeast("ratio", 0.8)}, Pinned: true}
	Record(t, f)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var raw map[string]any
	if err := json.Unmarshal(data, &raw); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"group", "name", "params", "value", "unit", "baseline", "ratio", "goals", "met", "pinned", "ratioPairs", "ratioSpread"} {
		if _, ok := raw[k]; !ok {
			t.Errorf("recorded JSON lacks %q: %s", k, data)
		}
	}
	figs, err := ReadFigures(strings.NewReader(string(data)))
	if err != nil {
		t.Fatal(err)
	}
	got := figs[0]
	if got.Ratio != 0.81 || got.Met == nil || !*got.Met {
		t.Errorf("ratio %v met %v, want the median of the pairs 0.81 (not 600/1000), met", got.Ratio, got.Met)
	}
	if diff := cmp.Diff(&Spread{Pairs: 5, Min: 0.42, Max: 0.9, Q1: 0.67, Q3: 0.85}, got.RatioSpread); diff != "" {
		t.Errorf("ratioSpread (-want +got):\n%s", diff)
	}
	if line := got.Line(); !strings.Contains(line, "(ratio 0.81 (0.42–0.90, 5 pairs))") {
		t.Errorf("Line() = %q, want the median with the min–max of 5 pairs", line)
	}
	if c := got.Cells(); c.Ratio != "0.81 (0.42–0.90, 5 pairs)" {
		t.Errorf("Cells().Ratio = %q", c.Ratio)
	}
	rep := &Report{Figures: figs}
	if md := rep.Markdown(); !strings.Contains(md, PairsNote) {
		t.Errorf("Markdown lacks the note on pair ratios:\n%s", md)
	}
	f.Baseline = nil
	f.Goals = nil
	if err := f.Validate(); err == nil || !strings.Contains(err.Error(), "baseline") {
		t.Errorf("Validate of pairs without a baseline = %v, want an error naming the baseline", err)
	}
}
