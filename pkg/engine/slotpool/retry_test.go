package slotpool

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// TestRetriedEnqueueQueuesTheWaiterOnce: a client whose enqueue reply was
// lost (a reset or stalled connection) runs the script again with the same
// token. The waiter must stay queued once: a second queue entry, left
// behind when the first was granted, made every later grant loop forever
// inside Redis (BUSY for every client) as soon as two slots were free.
// The pool runs on a Redis server of the test's own, so that a looping
// script cannot block the shared one.
func TestRetriedEnqueueQueuesTheWaiterOnce(t *testing.T) {
	srv := testenv.StartRedis(t, false)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 3 * time.Second, MaxRetries: -1})
	t.Cleanup(func() { _ = rdb.Close() })
	p := New(rdb, Options{Name: "retry:pool", Capacity: 1, Lease: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	holder := mustAcquire(t, p, "holder")
	defer holder.Release(ctx, Completed, "")
	lease := time.Minute.Milliseconds()
	for range 2 { // the call and its retry
		if _, err := p.exec(ctx, enqueueOp, "tok-x", "x", lease, lease, "2", "m-1"); err != nil {
			t.Fatal(err)
		}
	}
	if got := pendingJobs(mustSnapshot(t, p)); len(got) != 1 {
		t.Errorf("pending after a retried enqueue = %v, want [x] once", got)
	}
	// Two free slots: x is granted and the pool must find no other waiter.
	if err := p.SetCapacity(ctx, 3); err != nil {
		t.Fatalf("SetCapacity(3) after a retried enqueue = %v (a script looping in Redis?)", err)
	}
	s := mustSnapshot(t, p)
	if len(s.Pending) != 0 || len(s.Holders) != 2 {
		t.Errorf("after the grant: %d pending, %d holders; want 0 and 2 (holder, x)", len(s.Pending), len(s.Holders))
	}
	// A retry that arrives after the grant does not queue the holder again.
	if _, err := p.exec(ctx, enqueueOp, "tok-x", "x", lease, lease, "2", "m-1"); err != nil {
		t.Fatal(err)
	}
	if s := mustSnapshot(t, p); len(s.Pending) != 0 {
		t.Errorf("a holder's retried enqueue queued it again: pending %v", pendingJobs(s))
	}
}

// TestRetriedEnqueueOfAHolderLeavesItAsItIs: the retry of an enqueue that
// was granted at once (nobody waited, a slot was free) finds its token
// holding and leaves it as it is: one holder, counted once for its group,
// with its first grant time and lease.
func TestRetriedEnqueueOfAHolderLeavesItAsItIs(t *testing.T) {
	p := replicas(t, 1, Options{Capacity: 3, Lease: time.Minute})[0]
	ctx := context.Background()
	lease := time.Minute.Milliseconds()
	first, err := p.exec(ctx, enqueueOp, "tok-y", "y", lease, lease, "2", "m-1")
	if err != nil {
		t.Fatal(err)
	}
	if first.status != 1 {
		t.Fatalf("enqueue with free slots: status %d, want 1 (granted at once)", first.status)
	}
	before := mustSnapshot(t, p)
	time.Sleep(5 * time.Millisecond) // a later grant would show in Since
	again, err := p.exec(ctx, enqueueOp, "tok-y", "y", 2*lease, lease, "2", "m-1")
	if err != nil {
		t.Fatal(err)
	}
	if again.status != 1 || again.grantedMs != first.grantedMs {
		t.Errorf("retry answered status %d granted %d, want 1 and the first grant %d", again.status, again.grantedMs, first.grantedMs)
	}
	after := mustSnapshot(t, p)
	if len(after.Holders) != 1 || len(after.Pending) != 0 {
		t.Fatalf("after the retry: %d holders, %d pending; want 1 and 0", len(after.Holders), len(after.Pending))
	}
	if h, h0 := after.Holders[0], before.Holders[0]; !h.Since.Equal(h0.Since) || !h.LeaseUntil.Equal(h0.LeaseUntil) {
		t.Errorf("retry changed the holder: since %v lease %v, was %v and %v", h.Since, h.LeaseUntil, h0.Since, h0.LeaseUntil)
	}
	for _, g := range after.Groups {
		if g.Group == "m-1" && g.Holding != 1 {
			t.Errorf("group m-1 holds %d after the retry, want 1", g.Holding)
		}
	}
}
