package benchrec

import (
	"fmt"
	"testing"
	"time"
)

// CurveGroup is the group of cost-curve figures.
const CurveGroup = "cost curves"

// Latencies are one named set of sorted latency samples of a cost-curve
// point ("grant round trip").
type Latencies struct {
	Name   string
	Sorted []time.Duration
}

// RecordCurveLatencies records the p50 and p99 of each set, in ms, as
// figures "<subject> <name> p50" and "... p99" of the cost curves at x
// (labelled xLabel), each its own series with its distribution.
func RecordCurveLatencies(tb testing.TB, subject, params string, x float64, xLabel string, sets ...Latencies) {
	tb.Helper()
	for _, s := range sets {
		for _, q := range []float64{0.5, 0.99} {
			name := fmt.Sprintf("%s %s p%.0f", subject, s.Name, q*100)
			Record(tb, Figure{Group: CurveGroup, Name: name, Params: params,
				Value: In(At(s.Sorted, q), "ms"), Unit: "ms", Better: Lower,
				Curve: &Point{Series: name, X: x, XLabel: xLabel}, Dist: Dist(s.Sorted, "ms")})
		}
	}
}
