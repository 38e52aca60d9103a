package worker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/engine/slotpool"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/provider/fulfilment"
	"github.com/orderflow/orderflow/pkg/sim/fulfilmentsim"
	"github.com/orderflow/orderflow/services/splitworker/internal/worker"
)

// stallingSlots hands out its first grant only after stall has run, as if
// the worker had been stopped (SIGSTOP) between the grant and its
// fulfilment request: nothing of the worker runs meanwhile, so nothing
// renews the slot's lease.
type stallingSlots struct {
	worker.Slots
	once  sync.Once
	stall func(context.Context)
}

func (s *stallingSlots) Acquire(ctx context.Context, jobID string, c slotpool.Class) (worker.Slot, error) {
	slot, err := s.Slots.Acquire(ctx, jobID, c)
	if err == nil {
		s.once.Do(func() { s.stall(ctx) })
	}
	return slot, err
}

// TestStallBetweenGrantAndRequestSendsNothingBeyondN stalls a worker
// after its slot is granted and before it requests the shipment, until
// the pool has reclaimed the slot and granted it to another replica, whose
// job then runs at the fulfilment system (N = 1). The woken worker must
// not send its request while it no longer holds a slot: the fulfilment
// system never runs more than one job and refuses none for capacity, and
// the worker waits for a slot again and ships.
func TestStallBetweenGrantAndRequestSendsNothingBeyondN(t *testing.T) {
	cat := fulfilment.Catalogue{SKUs: []fulfilment.SKU{
		{SKU: "SKU-A", Warehouse: "WH-A", Stock: 100, WeightGrams: 1000},
	}}
	e := newEnv(t, fulfilmentsim.Options{Capacity: 1, MinDuration: 600 * time.Millisecond,
		MaxDuration: 600 * time.Millisecond, Catalogue: &cat})
	e.slotLease = 300 * time.Millisecond

	// The other replica: a pool handle of its own on the same running pool.
	rdb := redis.NewClient(&redis.Options{Addr: e.redisAddr})
	t.Cleanup(func() { _ = rdb.Close() })
	other := slotpool.New(rdb, slotpool.Options{Name: e.poolName(), Capacity: 1, Lease: 2 * time.Second})
	var rivals sync.WaitGroup
	t.Cleanup(rivals.Wait)
	stall := func(ctx context.Context) {
		// Granted once the stalled worker's lease is reclaimed.
		rs, err := other.Acquire(ctx, "rival")
		if err != nil {
			t.Errorf("other replica's Acquire() = %v", err)
			return
		}
		j, err := e.fc.CreateShipment(ctx, fulfilment.ShipmentRequest{IdempotencyKey: "rival", Warehouse: "WH-A",
			Lines: []fulfilment.ShipmentLine{{ItemCode: "R1", SKU: "SKU-A", Quantity: 1}}})
		if err != nil {
			t.Errorf("other replica's CreateShipment() = %v", err)
			_ = rs.Release(context.Background(), slotpool.Failed, "")
			return
		}
		rivals.Go(func() {
			defer func() { _ = rs.Release(context.Background(), slotpool.Completed, "") }()
			for !j.Done() {
				time.Sleep(20 * time.Millisecond)
				if j, err = e.fc.Job(context.Background(), j.JobID); err != nil {
					t.Errorf("other replica's Job() = %v", err)
					return
				}
			}
		})
	}
	e.wrapSlots = func(s worker.Slots) worker.Slots { return &stallingSlots{Slots: s, stall: stall} }
	e.start(worker.Options{})

	task := e.wait(e.submit("member-1", "ORD-STALL", item("I1", "SKU-A", 1)))
	if task.GetStatus() != taskv1.TaskStatus_TASK_STATUS_SUCCEEDED || len(task.GetResult().GetShipments()) != 1 {
		t.Fatalf("task = %v %v, want SUCCEEDED with one shipment", task.GetStatus(), task.GetResult())
	}
	st, err := e.fc.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if st.RejectedOverCapacity != 0 || st.MaxConcurrent > 1 {
		t.Errorf("fulfilment rejectedOverCapacity = %d, maxConcurrent = %d; want 0 and ≤ 1", st.RejectedOverCapacity, st.MaxConcurrent)
	}
	if st.Created != 2 {
		t.Errorf("fulfilment created = %d, want 2 (the other replica's job and the worker's)", st.Created)
	}
}
