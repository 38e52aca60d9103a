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
