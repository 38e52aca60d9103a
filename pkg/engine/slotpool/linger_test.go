package slotpool

import (
	"context"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// TestSubscriptionClosesWhenItsLingerEnds: the grant subscription is
// closed once no waiter has been registered for the linger, not a whole
// receive timeout later (it used to outlive the linger by up to the
// linger again, which read as a leaked subscription after a failover).
func TestSubscriptionClosesWhenItsLingerEnds(t *testing.T) {
	rdb, prefix := testenv.Redis(t)
	const linger = 600 * time.Millisecond
	n := newNotifier(rdb, prefix+":granted", prefix+":granted:r1", linger)
	if _, err := n.register(context.Background(), "w1", "job", Class{}); err != nil {
		t.Fatal(err)
	}
	// The reader's first wait starts now; the waiter leaves a little
	// later, so the linger ends partway through that wait.
	time.Sleep(100 * time.Millisecond)
	n.unregister("w1")
	left := time.Now()

	deadline := left.Add(linger + 250*time.Millisecond)
	for {
		n.mu.Lock()
		open := n.ps != nil
		n.mu.Unlock()
		if !open {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("subscription still open %s after the last waiter left, want closed within the linger %s", time.Since(left).Round(time.Millisecond), linger)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d := time.Since(left); d < linger {
		t.Fatalf("subscription closed %s after the last waiter left, before its linger %s", d, linger)
	}
}
