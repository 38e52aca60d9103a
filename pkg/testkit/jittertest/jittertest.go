// Package jittertest checks jittered delays in tests: every draw of a
// delay function lies in its documented range, and the draws spread over
// it rather than all being equal (replicas would then retry in lockstep).
package jittertest

import (
	"testing"
	"time"
)

// Draws is how many times Spread calls a delay function.
const Draws = 200

// Spread calls draw Draws times and fails t unless every delay lies in
// [lo, hi] and the delays are not all equal. name says which delay it is
// in the failure.
func Spread(t testing.TB, name string, lo, hi time.Duration, draw func() time.Duration) {
	t.Helper()
	seen := map[time.Duration]bool{}
	for range Draws {
		d := draw()
		if d < lo || d > hi {
			t.Fatalf("%s = %v, want within [%v, %v]", name, d, lo, hi)
		}
		seen[d] = true
	}
	if len(seen) < 2 {
		t.Errorf("%s drew only %v in %d draws, want a spread over [%v, %v]", name, seen, Draws, lo, hi)
	}
}
