package slotpool

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestEvictFreesADeadHoldersSlotForTheNextWaiter(t *testing.T) {
	pools := replicas(t, 2, Options{Capacity: 1, Lease: time.Minute})
	p := pools[0]
	bg := context.Background()
	dead := mustAcquire(t, p, "dead-holder")
	ch := acquireAsync(bg, pools[1], "next")
	waitFor(t, "waiter queued", func() bool { return len(mustSnapshot(t, p).Pending) == 1 })

	if err := p.Evict(bg, dead.Token, "holder known dead"); err != nil {
		t.Fatalf("Evict() = %v", err)
	}
	a := <-ch
	if a.err != nil {
		t.Fatalf("waiter after Evict: %v", a.err)
	}
	defer a.slot.Release(bg, Completed, "")
	if err := dead.Renew(bg); !errors.Is(err, ErrLost) {
		t.Errorf("Renew() of the evicted holder = %v, want ErrLost", err)
	}
	fin, err := p.Finished(bg, 5)
	if err != nil || len(fin) == 0 || fin[0].JobID != "dead-holder" || fin[0].Outcome != Failed || fin[0].Detail != "holder known dead" {
		t.Errorf("Finished() = %+v, %v; want the evicted job failed with the reason", fin, err)
	}
	if err := p.Evict(bg, dead.Token, "again"); !errors.Is(err, ErrLost) {
		t.Errorf("Evict() twice = %v, want ErrLost", err)
	}
}
