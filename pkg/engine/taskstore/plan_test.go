package taskstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"

	"github.com/orderflow/orderflow/pkg/engine/lease"
	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

func TestSavePlanOnceWithOrderClaim(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	create := func(member string) string {
		task := newTask(t, "")
		if _, _, err := s.Create(ctx, member, task, []byte("job")); err != nil {
			t.Fatal(err)
		}
		return task.GetTaskId()
	}
	first, second, other := create("alice"), create("alice"), create("bob")

	if plan, outcomes, err := s.Plan(ctx, "alice", first); err != nil || plan != nil || len(outcomes) != 0 {
		t.Fatalf("Plan() before SavePlan = %q, %v, %v; want none", plan, outcomes, err)
	}
	if err := s.SavePlan(ctx, "alice", first, "ORDER-1", []byte("plan-1")); err != nil {
		t.Fatalf("SavePlan(first) = %v", err)
	}
	tests := []struct {
		name, member, id, orderCode string
		want                        error
	}{
		{"plan stored before", "alice", first, "ORDER-1", taskstore.ErrPlanExists},
		{"order code owned by another task of the member", "alice", second, "ORDER-1", taskstore.ErrOrderClaimed},
		{"task that never existed", "alice", "AAAAAAAAAAAAAAAAAAAAAA", "ORDER-9", taskstore.ErrNotFound},
		{"another member's task is not found", "bob", first, "ORDER-2", taskstore.ErrNotFound},
		{"same order code of another member", "bob", other, "ORDER-1", nil},
		{"no order code claims nothing", "alice", second, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := s.SavePlan(ctx, tt.member, tt.id, tt.orderCode, []byte("plan-x")); !errors.Is(err, tt.want) {
				t.Errorf("SavePlan(%s, %s, %q) = %v, want %v", tt.member, tt.id, tt.orderCode, err, tt.want)
			}
		})
	}

	if err := s.RecordOutcome(ctx, "alice", first, first+"/1", []byte("out-1")); err != nil {
		t.Fatalf("RecordOutcome() = %v", err)
	}
	plan, outcomes, err := s.Plan(ctx, "alice", first)
	if err != nil {
		t.Fatal(err)
	}
	if string(plan) != "plan-1" {
		t.Errorf("Plan() = %q, want the first plan kept", plan)
	}
	if diff := gocmp.Diff(map[string][]byte{first + "/1": []byte("out-1")}, outcomes); diff != "" {
		t.Errorf("Plan() outcomes (-want +got):\n%s", diff)
	}
	taskTTL, _ := s.Remaining(ctx, "alice", first)
	if ttl := rdb.PTTL(ctx, s.PlanKey("alice", first)).Val(); ttl <= 0 || ttl > taskTTL {
		t.Errorf("plan PTTL = %v, want within the task's %v", ttl, taskTTL)
	}
}

func TestAcquireLeaseIsTheFenceOfFinish(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	task := newTask(t, "")
	if _, _, err := s.Create(ctx, "alice", task, []byte("job")); err != nil {
		t.Fatal(err)
	}
	l, err := s.AcquireLease(ctx, "alice", task.GetTaskId(), time.Minute)
	if err != nil {
		t.Fatalf("AcquireLease() = %v", err)
	}
	if _, err := s.AcquireLease(ctx, "alice", task.GetTaskId(), time.Minute); !errors.Is(err, lease.ErrHeld) {
		t.Errorf("second AcquireLease() = %v, want lease.ErrHeld", err)
	}
	if _, err := s.Finish(ctx, "alice", task.GetTaskId(), &taskstore.Fence{Key: l.Key, Token: "stale"}, succeed); !errors.Is(err, taskstore.ErrFenced) {
		t.Errorf("Finish(stale token) = %v, want ErrFenced", err)
	}
	if _, err := s.Finish(ctx, "alice", task.GetTaskId(), &taskstore.Fence{Key: l.Key, Token: l.Token}, succeed); err != nil {
		t.Errorf("Finish(lease's token) = %v", err)
	}
}
