package taskstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/testkit/jittertest"
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
		if d+d/2 >= retry<<MaxRepairs {
			t.Fatalf("the look after repair %d may reach %v, want below retry × 2^MaxRepairs", n, d+d/2)
		}
		jittertest.Spread(t, fmt.Sprintf("repairDelay(%v, %d)", retry, n), d, d+d/2, func() time.Duration { return repairDelay(retry, n) })
	}
}
