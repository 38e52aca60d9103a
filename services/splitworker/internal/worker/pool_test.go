package worker_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	jobv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/job/v1"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/provider/fulfilment"
	"github.com/orderflow/orderflow/pkg/sim/fulfilmentsim"
	"github.com/orderflow/orderflow/services/splitworker/internal/worker"
)

// TestThreeReplicasShareTheFulfilmentCap runs three worker replicas on 200
// shipments against a fulfilment system of capacity 4 with a running pool
// of N = 4: the system never sees more than 4 jobs at once, never refuses
// one for capacity, never gets a repeated request, and every shipment is
// created.
func TestThreeReplicasShareTheFulfilmentCap(t *testing.T) { shareTheFulfilmentCap(t, 1) }

// TestThreeReplicasShareTheFulfilmentCapOverShards is the same with the
// running pool split over 2 shards of 2 slots (slotpool.Sharded): the
// system still never sees more than 4 jobs at once.
func TestThreeReplicasShareTheFulfilmentCapOverShards(t *testing.T) { shareTheFulfilmentCap(t, 2) }

func shareTheFulfilmentCap(t *testing.T, shards int) {
	// Every item weighs 15 kg, so each one is its own parcel: 20 orders of
	// 10 items are 200 shipments.
	cat := fulfilment.Catalogue{SKUs: []fulfilment.SKU{
		{SKU: "SKU-HEAVY-A", Warehouse: "WH-A", Stock: 1 << 20, WeightGrams: 15000},
		{SKU: "SKU-HEAVY-B", Warehouse: "WH-B", Stock: 1 << 20, WeightGrams: 15000},
	}}
	e := newEnv(t, fulfilmentsim.Options{Capacity: 4, MinDuration: 5 * time.Millisecond, MaxDuration: 20 * time.Millisecond, Catalogue: &cat})
	e.shards = shards
	for range 3 {
		e.start(worker.Options{Pollers: 8})
	}
	var jobs []*jobv1.SplitJob
	for o := range 20 {
		var items []*taskv1.OrderItem
		for i := range 10 {
			sku := "SKU-HEAVY-A"
			if i%2 == 1 {
				sku = "SKU-HEAVY-B"
			}
			items = append(items, item(fmt.Sprintf("I%02d", i), sku, 1))
		}
		jobs = append(jobs, e.submit("member-"+fmt.Sprint(o%5), fmt.Sprintf("ORD-%02d", o), items...))
	}
	shipments := 0
	for _, job := range jobs {
		task := e.wait(job)
		if task.GetStatus() != taskv1.TaskStatus_TASK_STATUS_SUCCEEDED || task.GetResult().GetFailed() != 0 {
			t.Fatalf("task %s = %v %v, want SUCCEEDED without failures", job.GetTaskId(), task.GetStatus(), task.GetResult().GetFailures())
		}
		shipments += len(task.GetResult().GetShipments())
	}
	st, err := e.fc.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if shipments != 200 || st.Created != 200 {
		t.Errorf("shipments in results = %d, created at the fulfilment system = %d; want 200 and 200", shipments, st.Created)
	}
	if st.MaxConcurrent > 4 {
		t.Errorf("fulfilment maxConcurrent = %d, want ≤ 4", st.MaxConcurrent)
	}
	if st.RejectedOverCapacity != 0 || st.Duplicates != 0 {
		t.Errorf("rejectedOverCapacity = %d, duplicates = %d; want 0 and 0", st.RejectedOverCapacity, st.Duplicates)
	}
	for i := range shards {
		if shards == 1 {
			break
		}
		k := "{" + e.poolName() + ":s" + fmt.Sprint(i) + "}:finished"
		if n, err := e.rdb.XLen(context.Background(), k).Result(); err != nil || n == 0 {
			t.Errorf("shard %d ran %d shipments (%v), want some", i, n, err)
		}
	}
	if st.MaxConcurrent < 2 {
		t.Errorf("fulfilment maxConcurrent = %d; with a backlog the pool should run several jobs at once", st.MaxConcurrent)
	}
}
