package taskstore_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"

	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// roundTrips counts the commands and pipelines a client sends.
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { r.n.Add(1); return next(ctx, cmd) }
}
func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { r.n.Add(1); return next(ctx, cmds) }
}

// leased creates a PROCESSING task for alice and takes its lease.
func leased(t *testing.T, s *taskstore.Store) (string, taskstore.Claim) {
	t.Helper()
	ctx := context.Background()
	task := newTask(t, "")
	if _, _, err := s.CreateQueued(ctx, "alice", task, []byte("job"), 0); err != nil {
		t.Fatal(err)
	}
	c := s.AcquireLeaseStatus(ctx, "alice", task.GetTaskId(), time.Minute, 1)
	if c.LeaseErr != nil || c.StatusErr != nil {
		t.Fatalf("AcquireLeaseStatus() = %v, %v", c.LeaseErr, c.StatusErr)
	}
	if c.Record == nil {
		t.Fatal("AcquireLeaseStatus() read no record under a taken lease")
	}
	return task.GetTaskId(), c
}

// fenceOf is the fence a worker writes under with claim's lease: from the
// leased record, releasing the lease.
func fenceOf(c taskstore.Claim) *taskstore.Fence {
	return &taskstore.Fence{Key: c.Lease.Key, Token: c.Lease.Token, Record: c.Record, Release: true}
}

func TestFinishFromTheLeasedRecordIsOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	c := s.NewIndexCleaner(16)
	s.CleanIndexWith(c)
	// A first Finish loads the script (a first call costs a NOSCRIPT
	// round trip more).
	warm, wclaim := leased(t, s)
	if _, err := s.Finish(ctx, "alice", warm, &taskstore.Fence{Key: wclaim.Lease.Key, Token: wclaim.Lease.Token}, succeed); err != nil {
		t.Fatal(err)
	}
	id, claim := leased(t, s)
	fence := fenceOf(claim)

	var rt roundTrips
	rdb.AddHook(&rt)
	got, err := s.Finish(ctx, "alice", id, fence, succeed)
	if err != nil {
		t.Fatalf("Finish() = %v", err)
	}
	if n := rt.n.Load(); n != 1 {
		t.Errorf("Finish() took %d round trips, want 1", n)
	}
	if got.GetStatus() != taskv1.TaskStatus_TASK_STATUS_SUCCEEDED {
		t.Errorf("Finish() status = %v", got.GetStatus())
	}
	if !fence.Released() {
		t.Error("Released() = false after a Finish that releases the lease")
	}
	if n, err := rdb.Exists(ctx, claim.Lease.Key).Result(); err != nil || n != 0 {
		t.Errorf("lease key exists = %d, %v after Finish released it", n, err)
	}

	// The index removal waits in the cleaner until it runs.
	refs, _, err := s.Processing(ctx, 0, 10)
	if err != nil || len(refs) != 2 {
		t.Fatalf("Processing() before the cleaner ran = %v, %v; want both finished tasks' entries", refs, err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	cancel()
	if err := c.Run(runCtx); err != nil {
		t.Fatal(err)
	}
	if refs, _, err := s.Processing(ctx, 0, 10); err != nil || len(refs) != 0 {
		t.Errorf("Processing() after the cleaner ran = %v, %v; want none", refs, err)
	}
}

func TestFinishRereadsARecordChangedSinceTheLease(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	id, claim := leased(t, s)

	// Another writer changes the record (not its status) after the lease
	// read it.
	var changed taskv1.Task
	if err := proto.Unmarshal(claim.Record, &changed); err != nil {
		t.Fatal(err)
	}
	changed.ErrorMsg = "changed meanwhile"
	data, err := proto.Marshal(&changed)
	if err != nil {
		t.Fatal(err)
	}
	if err := rdb.HSet(ctx, s.TaskKey("alice", id), "d", data).Err(); err != nil {
		t.Fatal(err)
	}

	fence := fenceOf(claim)
	if _, err := s.Finish(ctx, "alice", id, fence, succeed); err != nil {
		t.Fatalf("Finish() = %v", err)
	}
	got, err := s.Get(ctx, "alice", id)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetErrorMsg() != "changed meanwhile" || got.GetStatus() != taskv1.TaskStatus_TASK_STATUS_SUCCEEDED {
		t.Errorf("stored task = %q %v; want the change kept and SUCCEEDED (not a write from the stale record)", got.GetErrorMsg(), got.GetStatus())
	}
}

func TestFinishKeepsTheLeaseOfAnotherHolder(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	id, claim := leased(t, s)
	if err := rdb.Set(ctx, claim.Lease.Key, "another-holder", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	fence := fenceOf(claim)
	if _, err := s.Finish(ctx, "alice", id, fence, succeed); !errors.Is(err, taskstore.ErrFenced) {
		t.Fatalf("Finish() = %v, want ErrFenced", err)
	}
	if fence.Released() {
		t.Error("Released() = true after a fenced-off Finish")
	}
	if v, err := rdb.Get(ctx, claim.Lease.Key).Result(); err != nil || v != "another-holder" {
		t.Errorf("lease = %q, %v; want the other holder's", v, err)
	}
}

func TestFinishRecordingWritesTheOutcomesWithTheResult(t *testing.T) {
	ctx := context.Background()
	rdb, s, id, claim := plannedTask(t)
	if err := s.RecordOutcome(ctx, "alice", id, "k1", []byte("first")); err != nil {
		t.Fatal(err)
	}
	fence := fenceOf(claim)
	if _, err := s.FinishRecording(ctx, "alice", id, fence, map[string][]byte{"k2": []byte("last")}, succeed); err != nil {
		t.Fatalf("FinishRecording() = %v", err)
	}
	plan, outcomes, err := s.Plan(ctx, "alice", id)
	if err != nil || string(plan) != `{"shipments":2}` {
		t.Fatalf("Plan() = %q, %v", plan, err)
	}
	if string(outcomes["k1"]) != "first" || string(outcomes["k2"]) != "last" {
		t.Errorf("outcomes = %q, want k1 first and k2 last", outcomes)
	}
	if task, plan := deadlines(t, rdb, s, id); task <= 0 || plan != task {
		t.Errorf("the plan expires at %d (ms), the task at %d: want the plan to expire with the task", plan, task)
	}
}
