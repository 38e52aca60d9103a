package reconcile

import (
	"fmt"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/testkit/jittertest"
)

// TestRetryDelayIsJitteredWithinItsBackoff: the wait before a check retry
// is drawn from [d/2, d] of RetryBase doubling per retry up to RetryMax,
// not d itself, and never exceeds RetryMax.
func TestRetryDelayIsJitteredWithinItsBackoff(t *testing.T) {
	s := &Service{opts: Options{RetryBase: 2 * time.Second, RetryMax: 20 * time.Second}}
	for retries, d := range map[int]time.Duration{1: 2 * time.Second, 2: 4 * time.Second, 3: 8 * time.Second, 4: 16 * time.Second, 5: 20 * time.Second, 40: 20 * time.Second} {
		jittertest.Spread(t, fmt.Sprintf("retryDelay(%d)", retries), d/2, d, func() time.Duration { return s.retryDelay(retries) })
	}
}
