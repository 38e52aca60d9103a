package taskstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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
// 4×..., each up to half as much again at random) rather than every
// retry, which failed healthy tasks whose job was still on its way to a
// worker.
func TestRepairWaitsLongerAfterEachRepublish(t *testing.T) {
	rdb, prefix := testenv.Redis(t)
	const grace, retry = 50 * time.Millisecond, 200 * time.Millisecond
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
	for n, d := range []time.Duration{retry, 2 * retry, 4 * retry} {
		// The n+1-th repair makes the task due again after [d, 3d/2].
		before := serverTime(t, rdb).Truncate(time.Millisecond)
		claim(n + 1)
		due := repairDue(t, rdb, s.RepairKey(task.GetTaskId()), "alice", task.GetTaskId())
		after := serverTime(t, rdb)
		if due.Sub(before) < d || due.Sub(after) > d+d/2 {
			t.Fatalf("after repair %d the task is due %v to %v later, want within [%v, %v]", n+1, due.Sub(after), due.Sub(before), d, d+d/2)
		}
		time.Sleep(due.Sub(serverTime(t, rdb)) - retry/4)
		claim(0) // not due yet
		time.Sleep(due.Sub(serverTime(t, rdb)) + retry/4)
	}
	claim(4)
}

// TestTasksLostTogetherAreLookedAtAgainAtSpreadTimes: the jobs of tasks
// created together and lost together (a broker dropping a queue) are
// republished together once, but their next looks are spread over
// [retry, 1.5 × retry], not all due at the same instant.
func TestTasksLostTogetherAreLookedAtAgainAtSpreadTimes(t *testing.T) {
	rdb, prefix := testenv.Redis(t)
	const grace, retry = 50 * time.Millisecond, time.Minute
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour, RepairGrace: grace})
	ctx := context.Background()
	const n = 20
	var tasks []string
	for range n {
		task := newTask(t, "")
		if _, created, err := s.CreateQueued(ctx, "alice", task, []byte("job"), time.Minute); err != nil || !created {
			t.Fatalf("CreateQueued() = %v, %v, want created", created, err)
		}
		tasks = append(tasks, task.GetTaskId())
	}
	time.Sleep(3 * grace)
	before := serverTime(t, rdb).Truncate(time.Millisecond)
	if got, err := s.RepairClaim(ctx, 100, retry); err != nil || len(got) != n {
		t.Fatalf("RepairClaim() = %d entries, %v, want %d", len(got), err, n)
	}
	after := serverTime(t, rdb)
	dues := map[time.Time]bool{}
	for _, id := range tasks {
		due := repairDue(t, rdb, s.RepairKey(id), "alice", id)
		if due.Sub(before) < retry || due.Sub(after) > retry+retry/2 {
			t.Errorf("task %s due again %v after its repair, want within [%v, %v]", id, due.Sub(after), retry, retry+retry/2)
		}
		dues[due] = true
	}
	if len(dues) < n/2 {
		t.Errorf("%d tasks repaired together are due again at %d distinct times, want them spread", n, len(dues))
	}
}

// serverTime is the Redis server time, which repair entries are scored by.
func serverTime(t *testing.T, rdb redis.UniversalClient) time.Time {
	t.Helper()
	now, err := rdb.Time(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	return now
}

// repairDue is when member's task id is due for its next repair look.
func repairDue(t *testing.T, rdb redis.UniversalClient, key, member, id string) time.Time {
	t.Helper()
	score, err := rdb.ZScore(context.Background(), key, member+"\n"+id).Result()
	if err != nil {
		t.Fatalf("ZScore(%s) = %v", id, err)
	}
	return time.UnixMilli(int64(score))
}
