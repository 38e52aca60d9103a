package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/engine/slotpool"
	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	errcodev1 "github.com/orderflow/orderflow/pkg/gen/orderflow/errcode/v1"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/provider/fulfilment"
	"github.com/orderflow/orderflow/pkg/sim/fulfilmentsim"
	"github.com/orderflow/orderflow/services/splitworker/internal/worker"
)

// releaseSignal closes released when the first slot it hands out is
// released.
type releaseSignal struct {
	worker.Slots
	once     sync.Once
	released chan struct{}
	stall    func(context.Context)
	stalled  sync.Once
}

func (s *releaseSignal) Acquire(ctx context.Context, jobID string, c slotpool.Class) (worker.Slot, error) {
	slot, err := s.Slots.Acquire(ctx, jobID, c)
	if err != nil {
		return nil, err
	}
	s.stalled.Do(func() { s.stall(ctx) })
	return signalSlot{Slot: slot, s: s}, nil
}

type signalSlot struct {
	worker.Slot
	s *releaseSignal
}

func (s signalSlot) Release(ctx context.Context, completed bool, detail string) error {
	defer s.s.once.Do(func() { close(s.s.released) })
	return s.Slot.Release(ctx, completed, detail)
}

// TestStalledOwnerRequestsNothingForATaskFinishedWithoutIt stalls a worker
// after its slot is granted and before it requests the task's shipment,
// while its task lease lapses, another owner takes the lease and fails
// the task as a whole with no shipment requested (as the dead-letter
// consumer does). The woken worker must not create the shipment: the
// failed task's result would not report it (an orphaned shipment at the
// fulfilment system).
func TestStalledOwnerRequestsNothingForATaskFinishedWithoutIt(t *testing.T) {
	cat := fulfilment.Catalogue{SKUs: []fulfilment.SKU{
		{SKU: "SKU-A", Warehouse: "WH-A", Stock: 100, WeightGrams: 1000},
	}}
	e := newEnv(t, fulfilmentsim.Options{Capacity: 1, MinDuration: 50 * time.Millisecond,
		MaxDuration: 50 * time.Millisecond, Catalogue: &cat})
	job := e.create("member-1", "ORD-LAPSED", item("I1", "SKU-A", 1))
	member, id := job.GetMemberId(), job.GetTaskId()

	takeOver := func(ctx context.Context) {
		// The stalled worker's lease lapses; the next owner takes it and
		// finds no shipment requested.
		if err := e.rdb.Del(ctx, e.store.LeaseKey(member, id)).Err(); err != nil {
			t.Errorf("expire lease: %v", err)
			return
		}
		c := e.store.AcquireLeaseStatus(ctx, member, id, 10*time.Second, 0)
		if c.LeaseErr != nil || c.StatusErr != nil {
			t.Errorf("next owner's AcquireLeaseStatus() = %v, %v", c.LeaseErr, c.StatusErr)
			return
		}
		if _, err := e.store.Finish(ctx, member, id, &taskstore.Fence{Key: c.Lease.Key, Token: c.Lease.Token}, func(t *taskv1.Task) {
			t.Status = taskv1.TaskStatus_TASK_STATUS_FAILED
			t.ErrorCode = int32(errcodev1.ErrorCode_ERROR_CODE_DELIVERY_LIMIT)
		}); err != nil {
			t.Errorf("next owner's Finish() = %v", err)
		}
	}
	slots := &releaseSignal{released: make(chan struct{}), stall: takeOver}
	e.wrapSlots = func(s worker.Slots) worker.Slots { slots.Slots = s; return slots }
	e.start(worker.Options{Lease: 10 * time.Second})
	e.publish(job)

	select {
	case <-slots.released:
	case <-time.After(20 * time.Second):
		t.Fatal("the worker's slot was never released")
	}
	task, err := e.store.Get(context.Background(), member, id)
	if err != nil {
		t.Fatal(err)
	}
	st, err := e.fc.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if got, reported := st.Created, len(task.GetResult().GetShipments()); got != reported {
		t.Errorf("fulfilment created = %d, task %s reports %d shipments; want equal (no orphaned shipment)",
			got, task.GetStatus(), reported)
	}
}
