package taskstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

func TestRepairClaimHandsOutTaskWithoutWorker(t *testing.T) {
	rdb, prefix := testenv.Redis(t)
	const grace = 50 * time.Millisecond
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour, RepairGrace: grace})
	ctx := context.Background()
	task := newTask(t, "")
	if _, created, err := s.CreateQueued(ctx, "alice", task, []byte("job-1"), time.Minute); err != nil || !created {
		t.Fatalf("CreateQueued() = %v, %v, want created", created, err)
	}
	if got, err := s.RepairClaim(ctx, 10, time.Minute); err != nil || len(got) != 0 {
		t.Fatalf("RepairClaim() within the grace = %+v, %v, want nothing", got, err)
	}
	time.Sleep(3 * grace)
	got, err := s.RepairClaim(ctx, 10, time.Minute)
	if err != nil || len(got) != 1 {
		t.Fatalf("RepairClaim() after the grace = %+v, %v, want one entry", got, err)
	}
	if e := got[0]; e.Member != "alice" || e.TaskID != task.GetTaskId() || string(e.Job) != "job-1" || e.Repairs != 1 {
		t.Errorf("RepairClaim() = %+v, want alice's %s with job-1, repair 1", e, task.GetTaskId())
	}
	if again, err := s.RepairClaim(ctx, 10, time.Minute); err != nil || len(again) != 0 {
		t.Errorf("RepairClaim() again = %+v, %v, want nothing until the retry delay", again, err)
	}
}

// TestRepairWaitsLongerAfterEachRepublish: a republished job may wait in a
// backlog, or in the prefetch of a stopped worker, with no lease on its
// task; a task is failed after MaxRepairs looks with no worker, so the
// looks after a republish are spaced further apart each time (retry, 2×,
// 4×...) rather than every retry, which failed healthy tasks whose job
// was still on its way to a worker.
func TestRepairWaitsLongerAfterEachRepublish(t *testing.T) {
	rdb, prefix := testenv.Redis(t)
	const grace, retry = 50 * time.Millisecond, 400 * time.Millisecond
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour, RepairGrace: grace})
	ctx := context.Background()
	task := newTask(t, "")
	if _, created, err := s.CreateQueued(ctx, "alice", task, []byte("job-1"), time.Minute); err != nil || !created {
		t.Fatalf("CreateQueued() = %v, %v, want created", created, err)
	}
	time.Sleep(3 * grace)
	claim := func(wantRepairs int) {
		t.Helper()
		got, err := s.RepairClaim(ctx, 10, retry)
		if err != nil {
			t.Fatalf("RepairClaim() error = %v", err)
		}
		n := 0
		if len(got) == 1 {
			n = got[0].Repairs
		}
		if len(got) > 1 || n != wantRepairs {
			t.Fatalf("RepairClaim() = %+v, want repair %d (0: nothing due)", got, wantRepairs)
		}
	}
	claim(1)
	time.Sleep(retry + retry/4)
	claim(2) // due one retry after the first repair
	time.Sleep(retry + retry/4)
	claim(0) // due two retries after the second
	time.Sleep(retry)
	claim(3)
	time.Sleep(2*retry + retry/4)
	claim(0) // due four retries after the third
	time.Sleep(2 * retry)
	claim(4)
}
