package taskstore_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// plannedTask returns a store, alice's PROCESSING task leased by the
// caller and holding a plan, and the lease's claim.
func plannedTask(t *testing.T) (*redis.Client, *taskstore.Store, string, taskstore.Claim) {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	id, claim := leased(t, s)
	if err := s.SavePlan(context.Background(), "alice", id, "O", []byte(`{"shipments":2}`)); err != nil {
		t.Fatal(err)
	}
	return rdb, s, id, claim
}

// deadlines returns when alice's task id and its plan expire (PEXPIRETIME,
// ms; not positive when missing or without expiry).
func deadlines(t *testing.T, rdb *redis.Client, s *taskstore.Store, id string) (task, plan int64) {
	t.Helper()
	ctx := context.Background()
	p := rdb.Pipeline()
	tc := p.Do(ctx, "PEXPIRETIME", s.TaskKey("alice", id))
	pc := p.Do(ctx, "PEXPIRETIME", s.PlanKey("alice", id))
	if _, err := p.Exec(ctx); err != nil {
		t.Fatal(err)
	}
	task, _ = tc.Val().(int64)
	plan, _ = pc.Val().(int64)
	return task, plan
}

// TestPlanExpiresAtTheTasksVeryDeadline: every write to a task's plan
// hash sets the plan's deadline to the task's own, to the millisecond. A
// deadline taken as the task's TTL and set as a TTL at a later command of
// the same script lands later by the time between the two commands on a
// Redis that reads its clock at each command (before 7.2); over 2,000
// writes some cross a millisecond.
func TestPlanExpiresAtTheTasksVeryDeadline(t *testing.T) {
	ctx := context.Background()
	rdb, s, id, claim := plannedTask(t)
	late := 0
	for i := range 2000 {
		var err error
		if i%2 == 0 {
			err = s.RecordOutcome(ctx, "alice", id, fmt.Sprint("k", i), []byte("done"))
		} else {
			err = s.RecordRequested(ctx, "alice", id, fmt.Sprint("k", i), []byte("requested"), fenceOf(claim))
		}
		if err != nil {
			t.Fatal(err)
		}
		if task, plan := deadlines(t, rdb, s, id); task <= 0 || plan != task {
			late++
			if late <= 3 {
				t.Errorf("write %d: the plan expires at %d (ms), the task at %d; want the same deadline", i, plan, task)
			}
		}
	}
	if _, err := s.FinishRecording(ctx, "alice", id, fenceOf(claim), map[string][]byte{"last": []byte("done")}, succeed); err != nil {
		t.Fatal(err)
	}
	if task, plan := deadlines(t, rdb, s, id); task <= 0 || plan != task {
		t.Errorf("after FinishRecording the plan expires at %d (ms), the task at %d; want the same deadline", plan, task)
	}
	if late > 0 {
		t.Errorf("%d of 2,000 plan writes left the plan a deadline other than the task's", late)
	}
}
