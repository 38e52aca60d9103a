package worker_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/orderflow/orderflow/pkg/engine/jobqueue"
	"github.com/orderflow/orderflow/pkg/engine/slotpool"
	jobv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/job/v1"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/sim/fulfilmentsim"
	"github.com/orderflow/orderflow/pkg/testkit/promcheck"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
	"github.com/orderflow/orderflow/services/splitworker/internal/worker"
)

// TestRedisOutageDoesNotSpendDeliveryBudget: a Redis outage several times
// longer than the requeue backoff's whole budget (delivery limit 2 here)
// must not turn accepted orders into 10009: the worker holds the jobs while
// Redis is down and finishes them once it is back.
func TestRedisOutageDoesNotSpendDeliveryBudget(t *testing.T) {
	srv := testenv.StartRedis(t, true)
	e := newEnvOn(t, fastSim(), srv)
	e.start(worker.Options{OutageHold: time.Minute})
	var jobs []*jobv1.SplitJob
	for range 6 {
		jobs = append(jobs, e.create("demo", "", item("M", "SKU-MUG", 1)))
	}
	srv.Kill(t)
	for _, job := range jobs {
		e.publish(job)
	}
	time.Sleep(4 * time.Second)
	srv.Start(t)
	for _, job := range jobs {
		if got := e.wait(job); got.GetStatus() != succeeded {
			t.Errorf("task %s = %v %d %q, want SUCCEEDED", job.GetTaskId(), got.GetStatus(), got.GetErrorCode(), got.GetErrorMsg())
		}
	}
}

// TestRestartsDuringBacklogDoNotSpendDeliveryBudget: stopping a worker
// hands its prefetched and running jobs back without counting a delivery,
// so more rolling restarts than the delivery limit (2 here) during a
// backlog dead-letter nothing.
func TestRestartsDuringBacklogDoNotSpendDeliveryBudget(t *testing.T) {
	e := newEnv(t, fulfilmentsim.Options{Capacity: 1, MinDuration: 150 * time.Millisecond, MaxDuration: 150 * time.Millisecond})
	e.slots = 1
	e.graceful = true
	var jobs []*jobv1.SplitJob
	for range 8 {
		jobs = append(jobs, e.submit("demo", "", item("M", "SKU-MUG", 1)))
	}
	for range 4 {
		_, stop := e.start(worker.Options{})
		time.Sleep(400 * time.Millisecond)
		stop()
	}
	e.start(worker.Options{})
	for _, job := range jobs {
		if got := e.wait(job); got.GetStatus() != succeeded {
			t.Errorf("task %s = %v %d, want SUCCEEDED", job.GetTaskId(), got.GetStatus(), got.GetErrorCode())
		}
	}
}

// TestSlotHeldWhileShipmentOutlivesTheWait: fulfilment jobs that run longer
// than the worker's shipment timeout keep their running-pool slot until
// they end, so the pool never grants more than N jobs at the fulfilment
// system (it refuses none for capacity and never runs more than N).
func TestSlotHeldWhileShipmentOutlivesTheWait(t *testing.T) {
	e := newEnv(t, fulfilmentsim.Options{Capacity: 1, MinDuration: 500 * time.Millisecond, MaxDuration: 500 * time.Millisecond})
	e.slots = 1
	e.start(worker.Options{ShipmentTimeout: 200 * time.Millisecond, OutageHold: time.Minute})
	var jobs []*jobv1.SplitJob
	for range 3 {
		jobs = append(jobs, e.submit("demo", "", item("M", "SKU-MUG", 1)))
	}
	for _, job := range jobs {
		if got := e.wait(job); got.GetStatus() != succeeded {
			t.Errorf("task %s = %v %d, want SUCCEEDED", job.GetTaskId(), got.GetStatus(), got.GetErrorCode())
		}
	}
	st := stats(t, e)
	if st.RejectedOverCapacity != 0 || st.MaxConcurrent > 1 {
		t.Errorf("fulfilment rejectedOverCapacity = %d, maxConcurrent = %d; want 0 and at most N = 1", st.RejectedOverCapacity, st.MaxConcurrent)
	}
	if st.Created != 3 {
		t.Errorf("fulfilment created %d shipments, want 3", st.Created)
	}
}

// TestDeadLetterHeldThroughARedisOutageIsNeverRequeued: a dead-lettered
// job met by a Redis outage longer than the hold is handed back to the
// dead-letter queue as a copy, never requeued (RabbitMQ counts every return
// of a quorum-queue message, and from 4.0 drops a message of a queue
// without a dead-letter exchange past its delivery limit, leaving its task
// PROCESSING). Once Redis is back the task fails 10009 with the job's
// death reason and delivery count kept.
func TestDeadLetterHeldThroughARedisOutageIsNeverRequeued(t *testing.T) {
	srv := testenv.StartRedis(t, true)
	e := newEnvOn(t, fastSim(), srv)
	reg := prometheus.NewRegistry()
	e.reg = reg
	e.start(worker.Options{OutageHold: 300 * time.Millisecond})
	job := e.create("demo", "", item("M", "SKU-MUG", 1))
	msg, err := jobqueue.Encode(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	msg.Headers["x-first-death-reason"] = "delivery_limit"
	msg.Headers["x-delivery-count"] = int64(3)
	srv.Kill(t)
	if err := e.pub.Publish(context.Background(), "", e.names.DLQ, msg); err != nil {
		t.Fatal(err)
	}
	time.Sleep(6 * time.Second)
	srv.Start(t)
	got := e.wait(job)
	if got.GetStatus() != failed || got.GetErrorCode() != 10009 {
		t.Errorf("task = %v %d, want FAILED 10009", got.GetStatus(), got.GetErrorCode())
	}
	if n := counter(t, reg, "orderflow_splitworker_deliveries_total", map[string]string{"queue": "dlq", "settlement": "requeue"}); n != 0 {
		t.Errorf("dead-letter deliveries requeued = %v, want 0", n)
	}
	if n := counter(t, reg, "orderflow_splitworker_handed_back_total", nil); n == 0 {
		t.Errorf("dead-letter deliveries handed back = 0, want the held one handed back")
	}
	dl, err := e.store.Dead(context.Background(), "demo", job.GetTaskId())
	if err != nil {
		t.Fatal(err)
	}
	if dl.Reason != "delivery_limit" || dl.Deliveries != 3 {
		t.Errorf("dead letter = reason %q, %d deliveries; want delivery_limit, 3", dl.Reason, dl.Deliveries)
	}
}

// counter returns the value of the counter name with the labels (0 when
// there is none).
func counter(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	fams := make(map[string]*dto.MetricFamily, len(mfs))
	for _, mf := range mfs {
		fams[mf.GetName()] = mf
	}
	v, _ := promcheck.Value(fams, name, labels)
	return v
}

// givingUpSlots hands out slots whose lease, once the shipment's wait has
// ended and a finisher keeps the slot, cannot be kept: the finisher's
// KeepAlive gives up at once, as it does when no renewal gets through.
type givingUpSlots struct{ worker.Slots }

func (s givingUpSlots) Acquire(ctx context.Context, jobID string, c slotpool.Class) (worker.Slot, error) {
	slot, err := s.Slots.Acquire(ctx, jobID, c)
	if err != nil {
		return nil, err
	}
	return &givingUpSlot{Slot: slot}, nil
}

type givingUpSlot struct {
	worker.Slot
	calls atomic.Int32
}

func (s *givingUpSlot) KeepAlive(ctx context.Context, lost func()) {
	if s.calls.Add(1) == 1 {
		s.Slot.KeepAlive(ctx, lost)
		return
	}
	lost()
}

// TestSlotKeptWhenFinisherLosesItsLease: a finisher whose slot's lease
// could not be kept while the job still runs leaves the slot to the pool
// instead of freeing it, so no other job gets in next to it (N = 1, the
// fulfilment system refuses a second job).
func TestSlotKeptWhenFinisherLosesItsLease(t *testing.T) {
	e := newEnv(t, fulfilmentsim.Options{Capacity: 1, MinDuration: 2 * time.Second, MaxDuration: 2 * time.Second})
	e.slots = 1
	e.wrapSlots = func(s worker.Slots) worker.Slots { return givingUpSlots{s} }
	e.start(worker.Options{ShipmentTimeout: 500 * time.Millisecond, OutageHold: time.Minute})
	// The second task waits for the slot while the first one's wait ends.
	jobs := []*jobv1.SplitJob{e.submit("demo", "", item("M", "SKU-MUG", 1))}
	time.Sleep(250 * time.Millisecond)
	jobs = append(jobs, e.submit("demo", "", item("M", "SKU-MUG", 1)))
	for _, job := range jobs {
		if got := e.wait(job); got.GetStatus() != succeeded {
			t.Errorf("task %s = %v %d, want SUCCEEDED", job.GetTaskId(), got.GetStatus(), got.GetErrorCode())
		}
	}
	if st := stats(t, e); st.RejectedOverCapacity != 0 || st.MaxConcurrent > 1 {
		t.Errorf("fulfilment rejectedOverCapacity = %d, maxConcurrent = %d; want 0 and at most N = 1", st.RejectedOverCapacity, st.MaxConcurrent)
	}
}

// TestRefusedShipmentFreesItsSlot: a shipment request whose connection the
// fulfilment system refused never reached it, so its running-pool slot is
// freed at once, not left to its lease and then held for the job limit as
// if a job might run: with N = 1, an order held through the outage
// finishes as soon as the system is back.
func TestRefusedShipmentFreesItsSlot(t *testing.T) {
	e := newEnv(t, fastSim())
	e.slots, e.jobLimit = 1, time.Minute // a reclaimed slot stays taken for a minute, as in the service
	e.start(worker.Options{OutageHold: time.Minute, CatalogueMaxAge: time.Hour})
	// A first order has the worker read (and keep) the catalogue, so the
	// next one gets as far as requesting its shipment.
	if got := e.wait(e.submit("demo", "", item("M", "SKU-MUG", 1))); got.GetStatus() != succeeded {
		t.Fatalf("first order = %v, want SUCCEEDED", got.GetStatus())
	}
	e.simDown()
	job := e.submit("demo", "", item("M", "SKU-MUG", 1))
	time.Sleep(time.Second) // its shipment refused again and again meanwhile
	e.simUp()
	done := make(chan *taskv1.Task, 1)
	go func() { done <- e.wait(job) }()
	select {
	case got := <-done:
		if got.GetStatus() != succeeded {
			t.Errorf("order held through the outage = %v %d, want SUCCEEDED", got.GetStatus(), got.GetErrorCode())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("order held through the outage not done 10 s after the system came back: its slot is still taken")
	}
}
