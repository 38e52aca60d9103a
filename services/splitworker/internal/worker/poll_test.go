package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/engine/slotpool"
	"github.com/orderflow/orderflow/pkg/sim/fulfilmentsim"
	"github.com/orderflow/orderflow/services/splitworker/internal/worker"
)

// TestJobsOfASteadyLengthArePolledNearTheirEnd: once the worker has seen
// a few 200 ms jobs finish, it polls a new one first shortly before 200 ms
// instead of on a backoff from PollInitial (10 ms, growing to 50 ms: eight
// polls per job, the last up to 50 ms after the job ended).
func TestJobsOfASteadyLengthArePolledNearTheirEnd(t *testing.T) {
	e := newEnv(t, fulfilmentsim.Options{Capacity: 1, MinDuration: 200 * time.Millisecond, MaxDuration: 200 * time.Millisecond})
	e.start(worker.Options{OrderParallelism: 1, Plan: onePerParcel})
	job := e.submit("member-1", "ORDER-1", mugs(12)...)
	waitFor(t, "six jobs finished", func() bool { return stats(t, e).Created >= 7 })
	before := e.polls.Load()
	if task := e.wait(job); task.GetStatus() != succeeded {
		t.Fatalf("task = %v, want SUCCEEDED", task.GetStatus())
	}
	polls := e.polls.Load() - before
	if st := stats(t, e); st.Created != 12 {
		t.Fatalf("created %d jobs, want 12", st.Created)
	}
	// The last six jobs: a poll shortly before the end, one after it, and
	// one more for a run slower than the others.
	if polls > 6*3 {
		t.Errorf("the last 6 jobs were polled %d times, want at most 18", polls)
	}
}

// releaseHold makes the first slot's Release wait until the fulfilment
// system has created a second job (or 3 s), and records whether it did.
type releaseHold struct {
	worker.Slots
	e        *env
	once     sync.Once
	mu       sync.Mutex
	overlaps bool
}

func (s *releaseHold) Acquire(ctx context.Context, jobID string, c slotpool.Class) (worker.Slot, error) {
	slot, err := s.Slots.Acquire(ctx, jobID, c)
	if err != nil {
		return nil, err
	}
	return heldSlot{Slot: slot, s: s}, nil
}

type heldSlot struct {
	worker.Slot
	s *releaseHold
}

func (h heldSlot) Release(ctx context.Context, completed bool, detail string) error {
	h.s.once.Do(func() {
		deadline := time.Now().Add(3 * time.Second)
		for time.Now().Before(deadline) {
			if st, err := h.s.e.fc.Stats(ctx); err == nil && st.Created >= 2 {
				h.s.mu.Lock()
				h.s.overlaps = true
				h.s.mu.Unlock()
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})
	return h.Slot.Release(ctx, completed, detail)
}

// TestNextShipmentStartsWhileTheFinishedOnesSlotIsReleased: an order's
// next shipment does not wait for the round trip that gives the previous
// shipment's slot back, only for its job to end, so the order never has
// more than OrderParallelism jobs at the fulfilment system.
func TestNextShipmentStartsWhileTheFinishedOnesSlotIsReleased(t *testing.T) {
	e := newEnv(t, fulfilmentsim.Options{Capacity: 2, MinDuration: 50 * time.Millisecond, MaxDuration: 50 * time.Millisecond})
	hold := &releaseHold{e: e}
	e.wrapSlots = func(s worker.Slots) worker.Slots { hold.Slots = s; return hold }
	e.start(worker.Options{OrderParallelism: 1, Plan: onePerParcel})
	if task := e.wait(e.submit("member-1", "ORDER-1", mugs(2)...)); task.GetStatus() != succeeded {
		t.Fatalf("task = %v, want SUCCEEDED", task.GetStatus())
	}
	hold.mu.Lock()
	overlaps := hold.overlaps
	hold.mu.Unlock()
	if !overlaps {
		t.Error("the second shipment was requested only after the first one's slot was released")
	}
	if st := stats(t, e); st.Created != 2 || st.MaxConcurrent != 1 {
		t.Errorf("created %d, max concurrent %d; want 2, 1 (order parallelism 1)", st.Created, st.MaxConcurrent)
	}
}
