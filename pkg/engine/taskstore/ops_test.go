package taskstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

func TestProcessingIndexFollowsTheTask(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	clk := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour, Clock: clk})
	old, young, rolled := newTask(t, ""), newTask(t, "r1"), newTask(t, "")
	if _, _, err := s.CreateQueued(ctx, "alice", old, []byte("j"), time.Minute); err != nil {
		t.Fatal(err)
	}
	clk.Advance(10 * time.Minute)
	if _, _, err := s.Create(ctx, "bob", young, []byte("j")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Create(ctx, "bob", rolled, []byte("j")); err != nil {
		t.Fatal(err)
	}
	if err := s.Rollback(ctx, "bob", rolled); err != nil {
		t.Fatal(err)
	}
	// A repeated request id adds nothing.
	if _, created, err := s.Create(ctx, "bob", newTask(t, "r1"), []byte("j")); err != nil || created {
		t.Fatalf("Create(repeat) = %v, %v", created, err)
	}
	refs, total, err := s.Processing(ctx, 0, 10)
	if err != nil {
		t.Fatal(err)
	}
	if total != 2 || len(refs) != 2 || refs[0].TaskID != old.GetTaskId() || refs[0].Member != "alice" || refs[1].TaskID != young.GetTaskId() {
		t.Fatalf("Processing() = %+v (total %d), want alice's then bob's task", refs, total)
	}
	counts, oldest, err := s.ProcessingByAge(ctx, []time.Duration{0, 5 * time.Minute, time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if counts[0] != 2 || counts[1] != 1 || counts[2] != 0 || !oldest.Equal(clk.Now().Add(-10*time.Minute).Truncate(time.Millisecond)) {
		t.Errorf("ProcessingByAge() = %v, %v; want [2 1 0], created 10m ago", counts, oldest)
	}
	if _, err := s.Finish(ctx, "alice", old.GetTaskId(), nil, succeed); err != nil {
		t.Fatal(err)
	}
	if refs, total, _ := s.Processing(ctx, 0, 10); total != 1 || refs[0].TaskID != young.GetTaskId() {
		t.Errorf("Processing() after Finish = %+v (total %d), want only bob's task", refs, total)
	}
}

func TestDeadLetterReplayReopensTheTask(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	task := newTask(t, "")
	if _, _, err := s.Create(ctx, "alice", task, []byte("job-1")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Reopen(ctx, "alice", task.GetTaskId(), []byte("job-1")); !errors.Is(err, taskstore.ErrNotFailed) {
		t.Errorf("Reopen(PROCESSING) = %v, want ErrNotFailed", err)
	}
	if _, err := s.Finish(ctx, "alice", task.GetTaskId(), nil, func(t *taskv1.Task) {
		t.Status, t.ErrorCode = taskv1.TaskStatus_TASK_STATUS_FAILED, 10009
	}); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{true, false} {
		// A repeat (a redelivered dead letter) replaces the record.
		if added, err := s.RecordDead(ctx, taskstore.DeadLetter{Member: "alice", TaskID: task.GetTaskId(), Reason: "delivery_limit", Deliveries: 6, ErrorCode: 10009, Job: []byte("job-1")}); err != nil || added != want {
			t.Fatalf("RecordDead() #%d = %v, %v; want %v", i+1, added, err, want)
		}
	}
	dead, total, err := s.DeadLetters(ctx, 0, 10)
	if err != nil || total != 1 || len(dead) != 1 || dead[0].Reason != "delivery_limit" || dead[0].Deliveries != 6 || string(dead[0].Job) != "job-1" {
		t.Fatalf("DeadLetters() = %+v, %d, %v", dead, total, err)
	}
	got, err := s.Reopen(ctx, "alice", task.GetTaskId(), dead[0].Job)
	if err != nil || got.GetStatus() != taskv1.TaskStatus_TASK_STATUS_PROCESSING || got.GetErrorCode() != 0 {
		t.Fatalf("Reopen() = %v, %v; want PROCESSING without error", got, err)
	}
	if job, err := s.Job(ctx, "alice", task.GetTaskId()); err != nil || string(job) != "job-1" {
		t.Errorf("Job() after Reopen = %q, %v", job, err)
	}
	if _, total, _ := s.Processing(ctx, 0, 10); total != 1 {
		t.Errorf("Processing() total after Reopen = %d, want 1", total)
	}
	if ok, err := s.ForgetDead(ctx, "alice", task.GetTaskId()); !ok || err != nil {
		t.Errorf("ForgetDead() = %v, %v", ok, err)
	}
	if _, err := s.Dead(ctx, "alice", task.GetTaskId()); !errors.Is(err, taskstore.ErrNotFound) {
		t.Errorf("Dead() after ForgetDead = %v, want ErrNotFound", err)
	}
}

func TestFindAcrossMembers(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	task := newTask(t, "")
	if _, _, err := s.Create(ctx, "carol", task, []byte("j")); err != nil {
		t.Fatal(err)
	}
	other := newTask(t, "")
	if _, _, err := s.Create(ctx, "dave", other, []byte("j")); err != nil {
		t.Fatal(err)
	}
	if err := s.SavePlan(ctx, "carol", task.GetTaskId(), "ORD-*1", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if err := s.SavePlan(ctx, "dave", other.GetTaskId(), "ORD-11", []byte("{}")); err != nil {
		t.Fatal(err)
	}
	if owner, err := s.OrderOwner(ctx, "dave", "ORD-11"); err != nil || owner != other.GetTaskId() {
		t.Errorf("OrderOwner() = %q, %v; want dave's task", owner, err)
	}
	members, err := s.FindByID(ctx, task.GetTaskId())
	if err != nil || len(members) != 1 || members[0] != "carol" {
		t.Errorf("FindByID() = %v, %v; want [carol]", members, err)
	}
	refs, err := s.FindByOrderCode(ctx, "ORD-*1", 10)
	if err != nil || len(refs) != 1 || refs[0].Member != "carol" || refs[0].TaskID != task.GetTaskId() {
		t.Errorf("FindByOrderCode(glob characters taken literally) = %+v, %v", refs, err)
	}
}

// TestReopenTakesTheOrderClaim: a reopened task holds its order code as a
// new one does; one whose code another task holds stays FAILED and the
// refusal names the holder.
func TestReopenTakesTheOrderClaim(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	failTask := func() *taskv1.Task {
		task := newTask(t, "")
		if _, _, err := s.Create(ctx, "alice", task, []byte("job")); err != nil {
			t.Fatal(err)
		}
		if err := s.SavePlan(ctx, "alice", task.GetTaskId(), task.GetOrderCode(), []byte("plan")); err != nil && !errors.Is(err, taskstore.ErrOrderClaimed) {
			t.Fatal(err)
		}
		if _, err := s.Finish(ctx, "alice", task.GetTaskId(), nil, func(t *taskv1.Task) {
			t.Status, t.ErrorCode = taskv1.TaskStatus_TASK_STATUS_FAILED, 10009
		}); err != nil {
			t.Fatal(err)
		}
		return task
	}
	first := failTask()
	if owner, err := s.OrderOwner(ctx, "alice", "O"); err != nil || owner != "" {
		t.Fatalf("OrderOwner() after FAILED = %q, %v; want the claim released", owner, err)
	}
	if _, err := s.Reopen(ctx, "alice", first.GetTaskId(), []byte("job")); err != nil {
		t.Fatalf("Reopen() = %v", err)
	}
	if owner, err := s.OrderOwner(ctx, "alice", "O"); err != nil || owner != first.GetTaskId() {
		t.Errorf("OrderOwner() after Reopen = %q, %v; want the reopened task", owner, err)
	}

	second := failTask() // its plan is refused the claim; it fails holding none
	got, err := s.Reopen(ctx, "alice", second.GetTaskId(), []byte("job"))
	var claimed *taskstore.ClaimedError
	if !errors.As(err, &claimed) || !errors.Is(err, taskstore.ErrOrderClaimed) || claimed.OrderCode != "O" || claimed.Holder != first.GetTaskId() {
		t.Fatalf("Reopen(code held by another task) = %v, want ErrOrderClaimed naming O and %s", err, first.GetTaskId())
	}
	if got.GetStatus() != taskv1.TaskStatus_TASK_STATUS_FAILED {
		t.Errorf("Reopen(code held by another task) task = %v, want FAILED", got.GetStatus())
	}
	if st, err := s.Status(ctx, "alice", second.GetTaskId()); err != nil || st != taskv1.TaskStatus_TASK_STATUS_FAILED {
		t.Errorf("Status() after refused Reopen = %v, %v; want FAILED", st, err)
	}
}
