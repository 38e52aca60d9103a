package reconcile

import (
	"testing"
	"time"
)

// TestRetryDelayIsJitteredWithinItsBackoff: the wait before a check retry
// is drawn from [d/2, d] of RetryBase doubling per retry up to RetryMax,
// not d itself, and never exceeds RetryMax.
func TestRetryDelayIsJitteredWithinItsBackoff(t *testing.T) {
	s := &Service{opts: Options{RetryBase: 2 * time.Second, RetryMax: 20 * time.Second}}
	for retries, d := range map[int]time.Duration{1: 2 * time.Second, 2: 4 * time.Second, 3: 8 * time.Second, 4: 16 * time.Second, 5: 20 * time.Second, 40: 20 * time.Second} {
		seen := map[time.Duration]bool{}
		for range 200 {
			got := s.retryDelay(retries)
			if got < d/2 || got > d {
				t.Fatalf("retryDelay(%d) = %v, want within [%v, %v]", retries, got, d/2, d)
			}
			seen[got] = true
		}
		if len(seen) < 2 {
			t.Errorf("retryDelay(%d) drew only %v in 200 draws, want a spread over [%v, %v]", retries, seen, d/2, d)
		}
	}
}
