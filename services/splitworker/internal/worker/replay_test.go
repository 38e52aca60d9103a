package worker_test

import (
	"context"
	"errors"
	"testing"

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
