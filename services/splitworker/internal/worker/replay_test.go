package worker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/engine/jobqueue"
	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	jobv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/job/v1"
	"github.com/orderflow/orderflow/services/splitworker/internal/worker"
)

// deadLetter sends job to the dead-letter queue as RabbitMQ does after its
// delivery limit, and waits for its task to end FAILED 10009.
func (e *env) deadLetter(job *jobv1.SplitJob) {
	e.t.Helper()
	ctx := context.Background()
	msg, err := jobqueue.Encode(ctx, job)
	if err != nil {
		e.t.Fatal(err)
	}
	msg.Headers["x-first-death-reason"] = "delivery_limit"
	if err := e.pub.Publish(ctx, "", e.names.DLQ, msg); err != nil {
		e.t.Fatal(err)
	}
	if got := e.wait(job); got.GetStatus() != failed || got.GetErrorCode() != 10009 {
		e.t.Fatalf("dead-lettered task = %v %d, want FAILED 10009", got.GetStatus(), got.GetErrorCode())
	}
}

// TestReplayAfterResubmitShipsOnce: a task dead-lettered after one of its
// two shipments was created gives up its order code; the shopper submits
// the order again and the new task ships it. Replaying the dead letter
// afterwards is refused (the other task holds the order code), so the
// order is shipped by one task only.
func TestReplayAfterResubmitShipsOnce(t *testing.T) {
	e := newEnv(t, fastSim())
	e.start(worker.Options{})
	ctx := context.Background()
	first := e.create("demo", "ORDER-REPLAY", item("D1", "SKU-DESK", 1), item("D2", "SKU-DESK", 1))
	storeHalfDonePlan(t, e, first)
	e.deadLetter(first)
	dead, err := e.store.Dead(ctx, "demo", first.GetTaskId())
	if err != nil {
		t.Fatal(err)
	}

	second := e.wait(e.submit("demo", "ORDER-REPLAY", item("D1", "SKU-DESK", 1), item("D2", "SKU-DESK", 1)))
	if second.GetStatus() != succeeded {
		t.Fatalf("resubmitted task = %v %d, want SUCCEEDED", second.GetStatus(), second.GetErrorCode())
	}

	_, err = e.store.Reopen(ctx, "demo", first.GetTaskId(), dead.Job)
	var claimed *taskstore.ClaimedError
	if !errors.As(err, &claimed) || claimed.OrderCode != "ORDER-REPLAY" || claimed.Holder != second.GetTaskId() {
		t.Errorf("Reopen(dead-lettered task) = %v, want ErrOrderClaimed naming ORDER-REPLAY and the resubmitted task", err)
	}
	if err == nil {
		e.publish(first)
	}
	if got := e.wait(first); got.GetStatus() != failed {
		t.Errorf("replayed task = %v %d, want FAILED: the order was shipped by the resubmitted task", got.GetStatus(), got.GetErrorCode())
	}
	// SH-1 of the dead-lettered task, recorded by storeHalfDonePlan, is
	// not the simulator's: it created the resubmitted task's two.
	if st := stats(t, e); st.Created != 2 {
		t.Errorf("simulator created %d shipments, want 2 (the resubmitted task's): the order was shipped twice", st.Created)
	}
}

// TestStoredPlanIsNotReusedWithoutTheClaim: a task resuming from its
// stored plan must hold its order code. When another task of the member
// took the code meanwhile, the resuming task fails 10011 and ships
// nothing; when the code is free, it takes it again and ships the rest.
func TestStoredPlanIsNotReusedWithoutTheClaim(t *testing.T) {
	e := newEnv(t, fastSim())
	e.start(worker.Options{})
	ctx := context.Background()

	lost := e.create("demo", "ORDER-LOST", item("D1", "SKU-DESK", 1), item("D2", "SKU-DESK", 1))
	storeHalfDonePlan(t, e, lost)
	other := e.create("demo", "ORDER-LOST", item("D1", "SKU-DESK", 1))
	if err := e.rdb.Set(ctx, e.store.OrderKey("demo", "ORDER-LOST"), other.GetTaskId(), time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
	e.publish(lost)
	if got := e.wait(lost); got.GetStatus() != failed || got.GetErrorCode() != 10011 {
		t.Errorf("task whose claim another task holds = %v %d, want FAILED 10011", got.GetStatus(), got.GetErrorCode())
	}
	if st := stats(t, e); st.Created != 0 {
		t.Errorf("simulator created %d shipments, want 0: a task without its claim shipped", st.Created)
	}
	if owner, err := e.store.OrderOwner(ctx, "demo", "ORDER-LOST"); err != nil || owner != other.GetTaskId() {
		t.Errorf("order claim = %q, %v; want the other task's", owner, err)
	}

	free := e.create("demo", "ORDER-FREE", item("D1", "SKU-DESK", 1), item("D2", "SKU-DESK", 1))
	storeHalfDonePlan(t, e, free)
	if err := e.rdb.Del(ctx, e.store.OrderKey("demo", "ORDER-FREE")).Err(); err != nil {
		t.Fatal(err)
	}
	e.publish(free)
	if got := e.wait(free); got.GetStatus() != succeeded {
		t.Errorf("task whose claim was free = %v %d, want SUCCEEDED", got.GetStatus(), got.GetErrorCode())
	}
	if owner, err := e.store.OrderOwner(ctx, "demo", "ORDER-FREE"); err != nil || owner != free.GetTaskId() {
		t.Errorf("order claim = %q, %v; want the resumed task's", owner, err)
	}
}
