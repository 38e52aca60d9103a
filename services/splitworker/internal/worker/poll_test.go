package worker_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/engine/slotpool"
	"github.com/orderflow/orderflow/pkg/sim/fulfilmentsim"
	"github.com/orderflow/orderflow/services/splitworker/internal/worker"
)

// TestJobsOfASteadyLengthAreSeenFinishedNearTheirEnd: once the worker has
// seen a few 220 ms jobs finish, it polls a new one close together around
// 220 ms. On the backoff alone (10 ms growing to 100 ms, each wait drawn
// from its upper half: polls up to 100 ms apart around 220 ms, a little
// later each for the round trips) each such job would be seen finished up
// to about 100 ms after its end (90 ms without the jitter).
func TestJobsOfASteadyLengthAreSeenFinishedNearTheirEnd(t *testing.T) {
	const job = 220 * time.Millisecond
	e := newEnv(t, fulfilmentsim.Options{Capacity: 1, MinDuration: job, MaxDuration: job})
	e.start(worker.Options{OrderParallelism: 1, Plan: onePerParcel,
		PollInitial: 10 * time.Millisecond, PollMax: 100 * time.Millisecond, RequeueBackoff: 10 * time.Millisecond})
	if task := e.wait(e.submit("member-1", "ORDER-1", mugs(12)...)); task.GetStatus() != succeeded {
		t.Fatalf("task = %v, want SUCCEEDED", task.GetStatus())
	}
	seen := e.jobs.seenAfter()
	if len(seen) != 12 {
		t.Fatalf("%d jobs seen finished, want 12", len(seen))
	}
	// The last six jobs: the middle one of them seen finished within
	// 40 ms of its end (a stalled poll may take one of them further).
	late := make([]time.Duration, 0, 6)
	for _, d := range seen[6:] {
		late = append(late, d-job)
	}
	slices.Sort(late)
	if late[3] > 40*time.Millisecond {
		t.Errorf("the last 6 jobs were seen finished %v after their end, want the median within 40ms", late)
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
