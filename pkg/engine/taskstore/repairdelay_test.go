package taskstore

import (
	"testing"
	"time"
)

// TestRepairDelayIsJitteredAboveItsDoubling: the look after the n-th
// repair is drawn from [d, 3d/2], d = retry × 2^(n−1) with n counted up
// to MaxRepairs, so tasks lost together are not looked at together, no
// task is failed sooner than the doubling allows, and no delay reaches
// retry × 2^MaxRepairs.
func TestRepairDelayIsJitteredAboveItsDoubling(t *testing.T) {
	const retry = 10 * time.Minute
	for n := 1; n <= MaxRepairs+2; n++ {
		d := retry << (min(n, MaxRepairs) - 1)
		seen := map[time.Duration]bool{}
		for range 200 {
			got := repairDelay(retry, n)
			if got < d || got > d+d/2 || got >= retry<<MaxRepairs {
				t.Fatalf("repairDelay(%v, %d) = %v, want within [%v, %v]", retry, n, got, d, d+d/2)
			}
			seen[got] = true
		}
		if len(seen) < 2 {
			t.Errorf("repairDelay(%v, %d) drew only %v in 200 draws, want a spread over [%v, %v]", retry, n, seen, d, d+d/2)
		}
	}
}
