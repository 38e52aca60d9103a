package clock_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/platform/clock"
)

// TestEveryCallsUntilCancelled: fn runs repeatedly, and never again once
// Every has returned after its context ended.
func TestEveryCallsUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var n atomic.Int32
	done := make(chan struct{})
	go func() {
		clock.Every(ctx, time.Millisecond, func() {
			if n.Add(1) == 3 {
				cancel()
			}
		})
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Every did not return after its context ended")
	}
	got := n.Load()
	time.Sleep(20 * time.Millisecond)
	if got < 3 || n.Load() != got {
		t.Errorf("calls = %d then %d, want at least 3 and none after return", got, n.Load())
	}
}
