package benchrec

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// A ratio cell (orderflow against a baseline measured in the same run)
// runs both sides in interleaved repeats rather than once each: a drift in
// the machine's load then hits both sides alike, and the cell's ratio is
// the median of the per-pair ratios, stated with their spread.

// Order returns the order in which Interleave runs n arms over rounds
// rounds, as arm indices round after round: even rounds run the arms
// first to last, odd rounds last to first (A B, B A, A B, …), so arms
// next to each other (a figure and its baseline) are always adjacent and
// neither is always the one that runs first; a linear drift in load then
// biases neither side.
func Order(rounds, n int) []int {
	out := make([]int, 0, rounds*n)
	for r := range rounds {
		for i := range n {
			if r%2 == 1 {
				i = n - 1 - i
			}
			out = append(out, i)
		}
	}
	return out
}

// Interleave runs every arm once per round, rounds times, in Order, and
// returns each arm's results in round order: out[arm][round].
func Interleave(rounds int, arms ...func() Result) [][]Result {
	out := make([][]Result, len(arms))
	for _, i := range Order(rounds, len(arms)) {
		out[i] = append(out[i], arms[i]())
	}
	return out
}

// Rates returns the rate of each result.
func Rates(rs []Result) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = r.Rate()
	}
	return out
}

// PairRatios returns values[i] / bases[i] for the pairs of the two
// series (values and bases measured in the same round), skipping pairs
// whose base is not positive. It panics when the series differ in length.
func PairRatios(values, bases []float64) []float64 {
	if len(values) != len(bases) {
		panic(fmt.Sprintf("benchrec: %d values paired with %d bases", len(values), len(bases)))
	}
	out := make([]float64, 0, len(values))
	for i, v := range values {
		if bases[i] > 0 {
			out = append(out, v/bases[i])
		}
	}
	return out
}

// Median of vs: the middle value, or the mean of the middle two for an
// even count; 0 when vs is empty.
func Median(vs []float64) float64 { return quantile(vs, 0.5) }

// quantile of vs by linear interpolation between order statistics
// (the default of R and NumPy); 0 when vs is empty.
func quantile(vs []float64, q float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	pos := q * float64(len(s)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(s)-1)
	return s[lo] + (pos-float64(lo))*(s[hi]-s[lo])
}

// Spread is the distribution of a figure's per-pair ratios around their
// median (the figure's Ratio).
type Spread struct {
	// Pairs is how many pairs there were.
	Pairs int `json:"pairs"`
	// Min and Max are the lowest and highest per-pair ratio.
	Min float64 `json:"min"`
	Max float64 `json:"max"`
	// Q1 and Q3 are the quartiles (the interquartile range).
	Q1 float64 `json:"q1"`
	Q3 float64 `json:"q3"`
}

// SpreadOf summarises per-pair ratios; nil when there are none.
func SpreadOf(ratios []float64) *Spread {
	if len(ratios) == 0 {
		return nil
	}
	return &Spread{
		Pairs: len(ratios), Min: slices.Min(ratios), Max: slices.Max(ratios),
		Q1: quantile(ratios, 0.25), Q3: quantile(ratios, 0.75),
	}
}

// String renders the spread as the tables show it: "0.65–0.80".
func (s Spread) String() string { return fmt.Sprintf("%.2f–%.2f", s.Min, s.Max) }

// Merge joins the repeats of one arm into one result: operations, errors
// and elapsed time add up, the latencies are merged and sorted, and
// SliceRates are the rate of each repeat (the noise across repeats).
func Merge(rs []Result) Result {
	var out Result
	var lat [][]time.Duration
	for _, r := range rs {
		out.Ops += r.Ops
		out.Errors += r.Errors
		out.Elapsed += r.Elapsed
		lat = append(lat, r.Latencies)
		out.SliceRates = append(out.SliceRates, r.Rate())
		if out.FirstError == nil {
			out.FirstError = r.FirstError
		}
	}
	out.Latencies = slices.Concat(lat...)
	slices.Sort(out.Latencies)
	return out
}
