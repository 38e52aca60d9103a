package worker_test

import (
	"fmt"
	"testing"
	"time"

	jobv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/job/v1"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/provider/fulfilment"
	"github.com/orderflow/orderflow/pkg/sim/fulfilmentsim"
	"github.com/orderflow/orderflow/services/splitworker/internal/plan"
	"github.com/orderflow/orderflow/services/splitworker/internal/worker"
)

// mugs is an order of n mugs, one parcel each under onePerParcel.
func mugs(n int) []*taskv1.OrderItem {
	var items []*taskv1.OrderItem
	for i := range n {
		items = append(items, item(fmt.Sprintf("M%d", i), "SKU-MUG", 1))
	}
	return items
}

// onePerParcel packs one mug (400 g) per parcel.
var onePerParcel = plan.Options{ParcelMaxGrams: 500, MaxQuantity: 1000}

func TestShipmentsOfOneOrderRunInParallel(t *testing.T) {
	for _, par := range []int{4, 2} {
		t.Run(fmt.Sprint("parallelism ", par), func(t *testing.T) {
			e := newEnv(t, fulfilmentsim.Options{Capacity: 8, MinDuration: 200 * time.Millisecond, MaxDuration: 200 * time.Millisecond})
			e.slots = 4
			e.start(worker.Options{OrderParallelism: par, Plan: onePerParcel})
			task := e.wait(e.submit("bulk", "ORDER-1", mugs(6)...))
			if task.GetStatus() != succeeded || len(task.GetResult().GetShipments()) != 6 {
				t.Fatalf("task = %v with %d shipments, want SUCCEEDED with 6", task.GetStatus(), len(task.GetResult().GetShipments()))
			}
			st := stats(t, e)
			if st.Created != 6 || st.Duplicates != 0 {
				t.Errorf("created %d, duplicates %d; want 6, 0", st.Created, st.Duplicates)
			}
			if want := min(par, e.slots); st.MaxConcurrent != want {
				t.Errorf("max concurrent shipments %d, want %d (min of order parallelism and N)", st.MaxConcurrent, want)
			}
		})
	}
}

func TestCancelStopsNewShipmentsOfAParallelOrder(t *testing.T) {
	e := newEnv(t, fulfilmentsim.Options{Capacity: 8, MinDuration: 300 * time.Millisecond, MaxDuration: 300 * time.Millisecond})
	e.slots = 8
	e.start(worker.Options{OrderParallelism: 2, Plan: onePerParcel})
	job := e.submit("demo", "ORDER-1", mugs(5)...)
	waitFor(t, "two shipments running", func() bool { return stats(t, e).Running == 2 })
	if _, err := e.store.Cancel(t.Context(), "demo", job.GetTaskId(), 10007, "cancelled by member"); err != nil {
		t.Fatal(err)
	}
	if got := e.wait(job); got.GetStatus() != cancelled {
		t.Errorf("status = %v, want CANCELLED", got.GetStatus())
	}
	waitFor(t, "lease released", func() bool {
		return e.rdb.Exists(t.Context(), e.store.LeaseKey("demo", job.GetTaskId())).Val() == 0
	})
	if st := stats(t, e); st.Created != 2 {
		t.Errorf("simulator created %d shipments, want 2 (none started after the cancel)", st.Created)
	}
}

// TestFloodingMemberDoesNotDelayAnother: with one slot, one member's 12
// orders of 3 shipments queue first; another member's 1-shipment order,
// published after them, must finish while most of the first member's
// orders are still processing — neither the worker's handlers nor the
// slot queue let the flood go first.
func TestFloodingMemberDoesNotDelayAnother(t *testing.T) {
	e := newEnv(t, fulfilmentsim.Options{Capacity: 1, MinDuration: 50 * time.Millisecond, MaxDuration: 50 * time.Millisecond})
	e.consume = worker.ConsumeOptions{Prefetch: 32, Concurrency: 4, MemberConcurrency: 2}
	e.start(worker.Options{Plan: onePerParcel})
	var flood []*jobv1.SplitJob
	for i := range 12 {
		flood = append(flood, e.submit("flood", fmt.Sprintf("F-%d", i), mugs(3)...))
	}
	small := e.submit("small", "S-1", mugs(1)...)
	if got := e.wait(small); got.GetStatus() != succeeded {
		t.Fatalf("small order = %v, want SUCCEEDED", got.GetStatus())
	}
	processing := stillProcessing(t, e, "flood", flood)
	if processing < len(flood)/2 {
		t.Errorf("only %d of %d flood orders still processing when the small order finished; want at least half", processing, len(flood))
	}
	for _, j := range flood {
		if got := e.wait(j); got.GetStatus() != succeeded {
			t.Errorf("flood order %s = %v, want SUCCEEDED", j.GetOrderCode(), got.GetStatus())
		}
	}
}

// TestHighPriorityOrderShipsFirst: one slot, three normal orders queued;
// a high-priority order of the same member published after them finishes
// while at least two of them are still processing.
func TestHighPriorityOrderShipsFirst(t *testing.T) {
	e := newEnv(t, fulfilmentsim.Options{Capacity: 1, MinDuration: 100 * time.Millisecond, MaxDuration: 100 * time.Millisecond})
	e.start(worker.Options{Plan: onePerParcel})
	var normal []*jobv1.SplitJob
	for i := range 3 {
		normal = append(normal, e.submit("shop", fmt.Sprintf("N-%d", i), mugs(2)...))
	}
	waitFor(t, "normal shipments queued", func() bool { return stats(t, e).Created >= 1 })
	high := e.create("shop", "H-1", mugs(1)...)
	high.Priority = taskv1.Priority_PRIORITY_HIGH
	e.publish(high)
	if got := e.wait(high); got.GetStatus() != succeeded {
		t.Fatalf("high-priority order = %v, want SUCCEEDED", got.GetStatus())
	}
	processing := stillProcessing(t, e, "shop", normal)
	if processing < 2 {
		t.Errorf("%d of 3 normal orders still processing when the high-priority one finished; want at least 2", processing)
	}
	for _, j := range normal {
		e.wait(j)
	}
}

// TestFloodBeyondThePrefetchDoesNotDelayAnother: one member's 200 orders
// stand in the split queue, far more than the worker's prefetch window of
// 8, before another member's order. The worker moves the flood beyond the
// member's backlog to the overflow queue, so the other order is taken off
// the split queue at once and finishes while most of the flood is still
// processing; every flood order still ends SUCCEEDED, each shipment
// created once.
func TestFloodBeyondThePrefetchDoesNotDelayAnother(t *testing.T) {
	const floodSize = 200
	cat := fulfilment.Catalogue{SKUs: []fulfilment.SKU{{SKU: "SKU-MUG", Warehouse: "WH", Stock: 1 << 30, WeightGrams: 400}}}
	e := newEnv(t, fulfilmentsim.Options{Capacity: 2, MinDuration: 20 * time.Millisecond, MaxDuration: 20 * time.Millisecond, Catalogue: &cat})
	e.consume = worker.ConsumeOptions{Prefetch: 8, Concurrency: 2, MemberConcurrency: 2}
	var flood []*jobv1.SplitJob
	for i := range floodSize {
		flood = append(flood, e.submit("flood", fmt.Sprintf("F-%d", i), mugs(1)...))
	}
	small := e.submit("small", "S-1", mugs(1)...)
	e.start(worker.Options{Plan: onePerParcel})
	if got := e.wait(small); got.GetStatus() != succeeded {
		t.Fatalf("small order = %v, want SUCCEEDED", got.GetStatus())
	}
	processing := stillProcessing(t, e, "flood", flood)
	if processing < floodSize/2 {
		t.Errorf("only %d of %d flood orders still processing when the small order finished; want at least half", processing, floodSize)
	}
	for _, j := range flood {
		if got := e.wait(j); got.GetStatus() != succeeded {
			t.Errorf("flood order %s = %v, want SUCCEEDED", j.GetOrderCode(), got.GetStatus())
		}
	}
	if st := stats(t, e); st.Created != floodSize+1 || st.Duplicates != 0 {
		t.Errorf("created %d shipments, %d duplicates; want %d, 0", st.Created, st.Duplicates, floodSize+1)
	}
}

// stillProcessing counts member's jobs whose task is still PROCESSING.
func stillProcessing(t *testing.T, e *env, member string, jobs []*jobv1.SplitJob) int {
	t.Helper()
	n := 0
	for _, j := range jobs {
		task, err := e.store.Get(t.Context(), member, j.GetTaskId())
		if err != nil {
			t.Fatal(err)
		}
		if task.GetStatus() == taskv1.TaskStatus_TASK_STATUS_PROCESSING {
			n++
		}
	}
	return n
}
