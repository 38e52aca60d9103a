package worker_test

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/orderflow/orderflow/pkg/engine/jobqueue"
	jobv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/job/v1"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/provider/fulfilment"
	"github.com/orderflow/orderflow/pkg/sim/fulfilmentsim"
	"github.com/orderflow/orderflow/services/splitworker/internal/plan"
	"github.com/orderflow/orderflow/services/splitworker/internal/worker"
)

var (
	succeeded = taskv1.TaskStatus_TASK_STATUS_SUCCEEDED
	failed    = taskv1.TaskStatus_TASK_STATUS_FAILED
	cancelled = taskv1.TaskStatus_TASK_STATUS_CANCELLED
)

func fastSim() fulfilmentsim.Options {
	return fulfilmentsim.Options{Capacity: 8, MinDuration: 10 * time.Millisecond, MaxDuration: 30 * time.Millisecond}
}

func stats(t testing.TB, e *env) fulfilment.Stats {
	t.Helper()
	st, err := e.fc.Stats(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// ignoreIDs drops the generated shipment ids from comparisons.
var ignoreIDs = protocmp.IgnoreFields(&taskv1.Shipment{}, "shipment_id")

func TestHappyPathDemoOrder(t *testing.T) {
	e := newEnv(t, fastSim())
	e.start(worker.Options{})
	job := e.submit("demo", "ORDER-1", demoOrder()...)
	task := e.wait(job)

	want := &taskv1.SplitResult{
		Total: 6, Succeeded: 4, Failed: 2,
		Failures: []*taskv1.ItemFailure{
			{ItemCode: "A4", ErrorCode: 10002, ErrorMsg: "unknown SKU: SKU-NOPE"},
			{ItemCode: "A5", ErrorCode: 10004, ErrorMsg: "out of stock: 1 of SKU-LAST-ONE available"},
		},
		Shipments: []*taskv1.Shipment{
			{Warehouse: "WH-BEIJING", WeightGrams: 19200, Lines: []*taskv1.ShipmentLine{
				{ItemCode: "A2", Sku: "SKU-RICE-10KG", Quantity: 1}, {ItemCode: "A6", Sku: "SKU-OIL-5L", Quantity: 2}}},
			{Warehouse: "WH-SHANGHAI", WeightGrams: 2500, Lines: []*taskv1.ShipmentLine{
				{ItemCode: "A3", Sku: "SKU-KETTLE", Quantity: 1}, {ItemCode: "A1", Sku: "SKU-TEA-500G", Quantity: 2}}},
		},
	}
	if task.GetStatus() != succeeded {
		t.Fatalf("status = %v (%d %q), want SUCCEEDED", task.GetStatus(), task.GetErrorCode(), task.GetErrorMsg())
	}
	if diff := cmp.Diff(want, task.GetResult(), protocmp.Transform(), ignoreIDs); diff != "" {
		t.Errorf("result mismatch (-want +got):\n%s", diff)
	}
	for _, s := range task.GetResult().GetShipments() {
		if s.GetShipmentId() == "" {
			t.Errorf("shipment %v has no shipment id", s)
		}
	}
	if st := stats(t, e); st.Created != 2 || st.Duplicates != 0 {
		t.Errorf("simulator created %d (duplicates %d), want 2 (0)", st.Created, st.Duplicates)
	}
	// Every shipment's outcome is recorded, the last one's with the
	// result, and names the shipment the result reports.
	_, outcomes, err := e.store.Plan(context.Background(), job.GetMemberId(), job.GetTaskId())
	if err != nil {
		t.Fatal(err)
	}
	ids := map[string]bool{}
	for _, s := range task.GetResult().GetShipments() {
		ids[s.GetShipmentId()] = true
	}
	if len(outcomes) != 2 {
		t.Fatalf("recorded outcomes = %q, want 2", outcomes)
	}
	for key, raw := range outcomes {
		var o struct{ ShipmentID string }
		if err := json.Unmarshal(raw, &o); err != nil || !ids[o.ShipmentID] {
			t.Errorf("outcome of %s = %s, want one of the result's shipments %v", key, raw, ids)
		}
	}
}

func TestItemFailures(t *testing.T) {
	tests := []struct {
		name      string
		member    string
		errorRate float64
		items     []*taskv1.OrderItem
		failures  []*taskv1.ItemFailure
		code      int32
	}{
		{
			name:   "bill unpaid sets the result code",
			member: "member-unpaid",
			items:  []*taskv1.OrderItem{item("G", "SKU-GIFT-CARD", 1), item("M", "SKU-MUG", 1), item("Q", "SKU-MUG", 0)},
			failures: []*taskv1.ItemFailure{
				{ItemCode: "G", ErrorCode: 10001, ErrorMsg: "bill unpaid: please settle it in the settlement centre"},
				{ItemCode: "Q", ErrorCode: 10003, ErrorMsg: "invalid quantity: 0 is not within 1..1000"},
			},
			code: 10001,
		},
		{
			name:      "failed shipment jobs fail their items",
			member:    "demo",
			errorRate: 1,
			items:     []*taskv1.OrderItem{item("M", "SKU-MUG", 1), item("T", "SKU-TEA-500G", 1), item("S", "SKU-SOFA", 1)},
			failures: []*taskv1.ItemFailure{
				{ItemCode: "S", ErrorCode: 10008, ErrorMsg: "item is heavier than the largest parcel: 45000 g over the 20000 g limit"},
				{ItemCode: "T", ErrorCode: 10005, ErrorMsg: "the warehouse could not ship the item"},
				{ItemCode: "M", ErrorCode: 10005, ErrorMsg: "the warehouse could not ship the item"},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := fastSim()
			opts.ErrorRate = tt.errorRate
			e := newEnv(t, opts)
			e.start(worker.Options{})
			task := e.wait(e.submit(tt.member, "ORDER-1", tt.items...))
			if task.GetStatus() != succeeded {
				t.Fatalf("status = %v, want SUCCEEDED", task.GetStatus())
			}
			res := task.GetResult()
			if diff := cmp.Diff(tt.failures, res.GetFailures(), protocmp.Transform()); diff != "" {
				t.Errorf("failures mismatch (-want +got):\n%s", diff)
			}
			if res.GetErrorCode() != tt.code {
				t.Errorf("result error code = %d, want %d", res.GetErrorCode(), tt.code)
			}
			if got, want := res.GetFailed(), int32(len(tt.failures)); got != want || res.GetSucceeded() != res.GetTotal()-want {
				t.Errorf("failed/succeeded/total = %d/%d/%d, want %d failed", got, res.GetSucceeded(), res.GetTotal(), want)
			}
		})
	}
}

func TestDuplicateOrderFailsTask(t *testing.T) {
	e := newEnv(t, fastSim())
	e.start(worker.Options{})
	first := e.wait(e.submit("demo", "ORDER-DUP", item("M", "SKU-MUG", 1)))
	second := e.wait(e.submit("demo", "ORDER-DUP", item("M", "SKU-MUG", 1)))
	other := e.wait(e.submit("someone-else", "ORDER-DUP", item("M", "SKU-MUG", 1)))
	if first.GetStatus() != succeeded || other.GetStatus() != succeeded {
		t.Errorf("first, other member = %v, %v, want SUCCEEDED", first.GetStatus(), other.GetStatus())
	}
	if second.GetStatus() != failed || second.GetErrorCode() != 10010 || second.GetErrorMsg() != "the order was already submitted" {
		t.Errorf("second = %v %d %q, want FAILED 10010", second.GetStatus(), second.GetErrorCode(), second.GetErrorMsg())
	}
	if st := stats(t, e); st.Created != 2 {
		t.Errorf("simulator created %d, want 2", st.Created)
	}
}

func TestCorruptPlanFailsWithGenericCode(t *testing.T) {
	e := newEnv(t, fastSim())
	e.start(worker.Options{})
	job := e.create("demo", "ORDER-1", item("M", "SKU-MUG", 1))
	if err := e.rdb.HSet(context.Background(), e.store.PlanKey("demo", job.GetTaskId()), "plan", "{not json").Err(); err != nil {
		t.Fatal(err)
	}
	e.publish(job)
	task := e.wait(job)
	if task.GetStatus() != failed || task.GetErrorCode() != -1 || task.GetErrorMsg() != "processing error, please retry later" {
		t.Errorf("task = %v %d %q, want FAILED -1 with the generic message", task.GetStatus(), task.GetErrorCode(), task.GetErrorMsg())
	}
}

func TestTTLKeptAfterCompletion(t *testing.T) {
	e := newEnv(t, fastSim())
	e.start(worker.Options{})
	ctx := context.Background()
	job := e.create("demo", "ORDER-1", item("M", "SKU-MUG", 1))
	time.Sleep(50 * time.Millisecond)
	before, _ := e.store.Remaining(ctx, "demo", job.GetTaskId())
	e.publish(job)
	if task := e.wait(job); task.GetStatus() != succeeded {
		t.Fatalf("status = %v, want SUCCEEDED", task.GetStatus())
	}
	after, _ := e.store.Remaining(ctx, "demo", job.GetTaskId())
	time.Sleep(50 * time.Millisecond)
	later, _ := e.store.Remaining(ctx, "demo", job.GetTaskId())
	if !(before < time.Hour && after <= before && later < after && later > 0) {
		t.Errorf("PTTL before/after/later = %v/%v/%v, want < 1h, kept and decreasing", before, after, later)
	}
	planTTL := e.rdb.PTTL(ctx, e.store.PlanKey("demo", job.GetTaskId())).Val()
	if planTTL <= 0 || planTTL > after {
		t.Errorf("plan PTTL = %v, want within the task's %v", planTTL, after)
	}
}

func TestTerminalTaskNotOverwritten(t *testing.T) {
	e := newEnv(t, fastSim())
	e.start(worker.Options{})
	ctx := context.Background()

	job := e.create("demo", "ORDER-C", item("M", "SKU-MUG", 1))
	if _, err := e.store.Cancel(ctx, "demo", job.GetTaskId(), 10007, "cancelled"); err != nil {
		t.Fatal(err)
	}
	e.publish(job)

	done := e.wait(e.submit("demo", "ORDER-D", item("M", "SKU-MUG", 1)))
	e.publish(&jobv1.SplitJob{SchemaVersion: 1, TaskId: done.GetTaskId(), MemberId: "demo", OrderCode: "ORDER-D",
		Items: []*taskv1.OrderItem{item("X", "SKU-NOPE", 1)}})
	// A marker task published last: once it is done, the queue is drained.
	e.wait(e.submit("demo", "ORDER-E", item("M", "SKU-MUG", 1)))

	if got := e.wait(job); got.GetStatus() != cancelled {
		t.Errorf("cancelled task status = %v, want CANCELLED", got.GetStatus())
	}
	again := e.wait(&jobv1.SplitJob{TaskId: done.GetTaskId(), MemberId: "demo"})
	if !proto.Equal(done, again) {
		t.Errorf("finished task changed after a duplicate job:\nbefore %v\nafter  %v", done, again)
	}
	if st := stats(t, e); st.Created != 2 || st.Duplicates != 0 {
		t.Errorf("simulator created %d (duplicates %d), want 2 (0)", st.Created, st.Duplicates)
	}
}

func TestCancelBetweenShipments(t *testing.T) {
	e := newEnv(t, fulfilmentsim.Options{Capacity: 8, MinDuration: 300 * time.Millisecond, MaxDuration: 300 * time.Millisecond})
	e.start(worker.Options{OrderParallelism: 1})
	ctx := context.Background()
	job := e.submit("demo", "ORDER-1", item("D1", "SKU-DESK", 1), item("D2", "SKU-DESK", 1), item("D3", "SKU-DESK", 1))
	waitFor(t, "first shipment running", func() bool { return stats(t, e).Running == 1 })
	if _, err := e.store.Cancel(ctx, "demo", job.GetTaskId(), 10007, "cancelled by member"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "lease released", func() bool {
		return e.rdb.Exists(ctx, e.store.LeaseKey("demo", job.GetTaskId())).Val() == 0
	})
	if st := stats(t, e); st.Created != 1 {
		t.Errorf("simulator created %d shipments, want 1 (stopped after the cancel)", st.Created)
	}
	if got := e.wait(job); got.GetStatus() != cancelled {
		t.Errorf("status = %v, want CANCELLED", got.GetStatus())
	}
}

func TestRedeliveryAfterWorkerKilledCreatesEachShipmentOnce(t *testing.T) {
	e := newEnv(t, fulfilmentsim.Options{Capacity: 8, MinDuration: 300 * time.Millisecond, MaxDuration: 300 * time.Millisecond})
	_, kill := e.start(worker.Options{})
	job := e.submit("demo", "ORDER-1", demoOrder()...)
	waitFor(t, "a shipment running", func() bool { return stats(t, e).Running > 0 })
	kill()
	e.start(worker.Options{})
	task := e.wait(job)
	if task.GetStatus() != succeeded || len(task.GetResult().GetShipments()) != 2 {
		t.Fatalf("task = %v with %d shipments, want SUCCEEDED with 2", task.GetStatus(), len(task.GetResult().GetShipments()))
	}
	st := stats(t, e)
	if st.Created != 2 {
		t.Errorf("simulator created %d shipments, want 2 (the plan's count)", st.Created)
	}
	if st.Duplicates < 1 {
		t.Errorf("simulator saw %d duplicate requests, want the redelivery to repeat one", st.Duplicates)
	}
}

func TestTwoWorkersProcessTaskOnce(t *testing.T) {
	e := newEnv(t, fulfilmentsim.Options{Capacity: 8, MinDuration: 100 * time.Millisecond, MaxDuration: 100 * time.Millisecond})
	e.start(worker.Options{LeaseWait: 5 * time.Second, OrderParallelism: 1})
	e.start(worker.Options{LeaseWait: 5 * time.Second, OrderParallelism: 1})
	job := e.submit("demo", "ORDER-1", demoOrder()...)
	e.publish(job) // the same job twice, as a republished outbox entry would be
	if task := e.wait(job); task.GetStatus() != succeeded {
		t.Fatalf("status = %v, want SUCCEEDED", task.GetStatus())
	}
	// Let the second delivery settle.
	waitFor(t, "both deliveries settled", func() bool { return queueDepth(t, e.names.Queue) == 0 })
	time.Sleep(200 * time.Millisecond)
	if st := stats(t, e); st.Created != 2 || st.Duplicates != 0 || st.MaxConcurrent > 1 {
		t.Errorf("simulator created %d, duplicates %d, max concurrent %d; want 2, 0, 1 (one replica, shipments in turn)",
			st.Created, st.Duplicates, st.MaxConcurrent)
	}
}

func TestLeaseHeldElsewhereIsWaitedFor(t *testing.T) {
	e := newEnv(t, fastSim())
	ctx := context.Background()
	job := e.create("demo", "ORDER-1", item("M", "SKU-MUG", 1))
	// A replica that died holding the lease: it expires after 700ms.
	if err := e.rdb.Set(ctx, e.store.LeaseKey("demo", job.GetTaskId()), "someone-else", 700*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	e.start(worker.Options{LeaseWait: 300 * time.Millisecond})
	e.publish(job)
	if task := e.wait(job); task.GetStatus() != succeeded {
		t.Errorf("status = %v (%d), want SUCCEEDED once the stale lease expired", task.GetStatus(), task.GetErrorCode())
	}
}

func TestPoisonMessagesFailTheirTask(t *testing.T) {
	e := newEnv(t, fastSim())
	e.start(worker.Options{})

	// The publisher's headers name the task of a body that does not decode.
	garbage := e.create("demo", "ORDER-1", item("M", "SKU-MUG", 1))
	e.publishRaw(jobqueue.Message(context.Background(), "demo", garbage.GetTaskId(), []byte("\xff\xff not protobuf")))

	future := e.create("demo", "ORDER-2", item("M", "SKU-MUG", 1))
	future.SchemaVersion = 99
	body, err := proto.Marshal(future)
	if err != nil {
		t.Fatal(err)
	}
	e.publishRaw(jobqueue.Message(context.Background(), "demo", future.GetTaskId(), body))

	for _, job := range []*jobv1.SplitJob{garbage, future} {
		task := e.wait(job)
		if task.GetStatus() != failed || task.GetErrorCode() != -1 {
			t.Errorf("task %s = %v %d, want FAILED -1", job.GetTaskId(), task.GetStatus(), task.GetErrorCode())
		}
	}
	if st := stats(t, e); st.Created != 0 {
		t.Errorf("simulator created %d shipments, want 0", st.Created)
	}
}

func TestDeliveryLimitFailsTask(t *testing.T) {
	e := newEnv(t, fastSim())
	if err := e.fc.FailCatalogue(context.Background(), 1000); err != nil {
		t.Fatal(err)
	}
	e.start(worker.Options{})
	task := e.wait(e.submit("demo", "ORDER-1", item("M", "SKU-MUG", 1)))
	if task.GetStatus() != failed || task.GetErrorCode() != 10009 || task.GetErrorMsg() != "processing failed repeatedly, please retry later" {
		t.Errorf("task = %v %d %q, want FAILED 10009", task.GetStatus(), task.GetErrorCode(), task.GetErrorMsg())
	}
}

// queueDepth returns the messages ready in a queue.
func queueDepth(t *testing.T, queue string) int {
	t.Helper()
	q, err := bareChannel(t).QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	return q.Messages
}

// TestOrderCodeFreeAgainAfterCancelOrFailure: cancelled and failed tasks
// tell the shopper to retry, so the same order code submitted again starts
// a new task that runs instead of failing 10010.
func TestOrderCodeFreeAgainAfterCancelOrFailure(t *testing.T) {
	e := newEnv(t, fulfilmentsim.Options{Capacity: 8, MinDuration: 300 * time.Millisecond, MaxDuration: 300 * time.Millisecond})
	e.start(worker.Options{OrderParallelism: 1})
	ctx := context.Background()

	cancelledJob := e.submit("demo", "ORDER-AGAIN", item("D1", "SKU-DESK", 1), item("D2", "SKU-DESK", 1))
	waitFor(t, "first shipment running", func() bool { return stats(t, e).Running == 1 })
	if _, err := e.store.Cancel(ctx, "demo", cancelledJob.GetTaskId(), 10007, "task cancelled"); err != nil {
		t.Fatal(err)
	}
	if got := e.wait(e.submit("demo", "ORDER-AGAIN", item("M", "SKU-MUG", 1))); got.GetStatus() != succeeded {
		t.Errorf("resubmitted after cancel = %v %d, want SUCCEEDED", got.GetStatus(), got.GetErrorCode())
	}

	corrupt := e.create("demo", "ORDER-BROKEN", item("M", "SKU-MUG", 1))
	if err := e.rdb.HSet(ctx, e.store.PlanKey("demo", corrupt.GetTaskId()), "plan", "{not json").Err(); err != nil {
		t.Fatal(err)
	}
	// The corrupt task claims the code the way a real plan would.
	if err := e.rdb.Set(ctx, e.prefix+":{m:demo}:order:ORDER-BROKEN", corrupt.GetTaskId(), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	e.publish(corrupt)
	if got := e.wait(corrupt); got.GetStatus() != failed || got.GetErrorCode() != -1 {
		t.Fatalf("corrupt task = %v %d, want FAILED -1", got.GetStatus(), got.GetErrorCode())
	}
	if got := e.wait(e.submit("demo", "ORDER-BROKEN", item("M", "SKU-MUG", 1))); got.GetStatus() != succeeded {
		t.Errorf("resubmitted after FAILED -1 = %v %d, want SUCCEEDED", got.GetStatus(), got.GetErrorCode())
	}
}

// storeHalfDonePlan stores for job (items D1 and D2, one SKU-DESK each)
// the plan of a shipment per item, the first one created as SH-1.
func storeHalfDonePlan(t *testing.T, e *env, job *jobv1.SplitJob) {
	t.Helper()
	ctx := context.Background()
	id := job.GetTaskId()
	p := plan.Plan{Total: 2, Shipments: []plan.Shipment{
		{Key: id + "/1", Warehouse: "WH-GUANGZHOU", Lines: []fulfilment.ShipmentLine{{ItemCode: "D1", SKU: "SKU-DESK", Quantity: 1}}},
		{Key: id + "/2", Warehouse: "WH-GUANGZHOU", Lines: []fulfilment.ShipmentLine{{ItemCode: "D2", SKU: "SKU-DESK", Quantity: 1}}},
	}}
	data, _ := json.Marshal(p)
	if err := e.store.SavePlan(ctx, "demo", id, job.GetOrderCode(), data); err != nil {
		t.Fatal(err)
	}
	if err := e.store.RecordOutcome(ctx, "demo", id, id+"/1", []byte(`{"jobId":"J1","shipmentId":"SH-1"}`)); err != nil {
		t.Fatal(err)
	}
}

// TestRedeliveryResumesFromTheStoredPlan: a job whose task already has a
// stored plan with one shipment done (the plan read with the task's lease)
// creates only the other shipment and reports both.
func TestRedeliveryResumesFromTheStoredPlan(t *testing.T) {
	e := newEnv(t, fastSim())
	e.start(worker.Options{})
	job := e.create("demo", "ORDER-RESUME", item("D1", "SKU-DESK", 1), item("D2", "SKU-DESK", 1))
	storeHalfDonePlan(t, e, job)
	e.publish(job)
	got := e.wait(job)
	if got.GetStatus() != succeeded {
		t.Fatalf("task = %v %d, want SUCCEEDED", got.GetStatus(), got.GetErrorCode())
	}
	var ids []string
	for _, sh := range got.GetResult().GetShipments() {
		ids = append(ids, sh.GetShipmentId())
	}
	if len(ids) != 2 || !slices.Contains(ids, "SH-1") {
		t.Errorf("result shipments = %v, want SH-1 and one new", ids)
	}
	if st := stats(t, e); st.Created != 1 {
		t.Errorf("simulator created %d shipments, want 1 (the one not done)", st.Created)
	}
}

// TestWholeTaskFailureReportsShipmentsThatExist: a task dead-lettered after
// some of its shipments were created fails 10009 and still reports those
// shipments; the items of the others fail with the task's code.
func TestWholeTaskFailureReportsShipmentsThatExist(t *testing.T) {
	e := newEnv(t, fastSim())
	e.start(worker.Options{})
	ctx := context.Background()
	job := e.create("demo", "ORDER-PART", item("D1", "SKU-DESK", 1), item("D2", "SKU-DESK", 1))
	storeHalfDonePlan(t, e, job)
	msg, err := jobqueue.Encode(ctx, job)
	if err != nil {
		t.Fatal(err)
	}
	msg.Headers["x-first-death-reason"] = "delivery_limit"
	if err := e.pub.Publish(ctx, "", e.names.DLQ, msg); err != nil {
		t.Fatal(err)
	}
	got := e.wait(job)
	if got.GetStatus() != failed || got.GetErrorCode() != 10009 {
		t.Fatalf("task = %v %d, want FAILED 10009", got.GetStatus(), got.GetErrorCode())
	}
	res := got.GetResult()
	if len(res.GetShipments()) != 1 || res.GetShipments()[0].GetShipmentId() != "SH-1" {
		t.Errorf("result shipments = %v, want the created SH-1", res.GetShipments())
	}
	if len(res.GetFailures()) != 1 || res.GetFailures()[0].GetItemCode() != "D2" || res.GetFailures()[0].GetErrorCode() != 10009 {
		t.Errorf("result failures = %v, want D2 with 10009", res.GetFailures())
	}
	if res.GetSucceeded() != 1 || res.GetFailed() != 1 {
		t.Errorf("succeeded, failed = %d, %d, want 1, 1", res.GetSucceeded(), res.GetFailed())
	}
}

// TestDeadLetterReportsAShipmentRequestedButNotRecorded: a worker dies
// after the fulfilment system accepted one of the task's shipments and
// before it recorded the outcome; the job then reaches the dead-letter
// queue. The task fails 10009 and reports that shipment (no shipment is
// left that no task reports), and the dead-letter consumer starts no new
// one.
func TestDeadLetterReportsAShipmentRequestedButNotRecorded(t *testing.T) {
	e := newEnv(t, fulfilmentsim.Options{Capacity: 8, MinDuration: 400 * time.Millisecond, MaxDuration: 400 * time.Millisecond})
	_, kill := e.start(worker.Options{OrderParallelism: 1})
	job := e.submit("demo", "ORDER-1", demoOrder()...)
	waitFor(t, "the first shipment running", func() bool { return stats(t, e).Running > 0 })
	kill()
	// The job ran out of deliveries: it leaves the split queue for the
	// dead-letter queue.
	ch := bareChannel(t)
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		q, err := ch.QueueDeclarePassive(e.names.Queue, true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		if q.Messages > 0 { // the job, and maybe the stopping worker's copy
			time.Sleep(300 * time.Millisecond)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("split queue holds %d jobs, want the one back", q.Messages)
		}
	}
	if _, err := ch.QueuePurge(e.names.Queue, false); err != nil {
		t.Fatal(err)
	}
	msg, err := jobqueue.Encode(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	msg.Headers["x-first-death-reason"] = "delivery_limit"
	if err := e.pub.Publish(context.Background(), "", e.names.DLQ, msg); err != nil {
		t.Fatal(err)
	}
	e.start(worker.Options{OrderParallelism: 1})
	got := e.wait(job)
	if got.GetStatus() != failed || got.GetErrorCode() != 10009 {
		t.Fatalf("task = %v %d, want FAILED 10009", got.GetStatus(), got.GetErrorCode())
	}
	st := stats(t, e)
	if st.Created != 1 {
		t.Errorf("simulator created %d shipments, want 1 (the dead-letter consumer starts none)", st.Created)
	}
	if n := len(got.GetResult().GetShipments()); n != int(st.Created) {
		t.Errorf("result reports %d shipments, the fulfilment system created %d; want every created shipment reported (result %v)",
			n, st.Created, got.GetResult())
	}
}
