package taskstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// TestStoreOnRedisCluster runs the store's behaviour against a three-master
// Redis Cluster: every multi-key script must keep its keys in one slot
// (CROSSSLOT otherwise), and watchers must get changes published on
// another connection.
func TestStoreOnRedisCluster(t *testing.T) {
	addrs := testenv.StartRedisCluster(t, 3)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)

	clk := clock.NewFake(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC))
	prefix := testenv.Prefix(t)
	store := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour, Clock: clk})

	// The members' keys must land on different masters, or the test would
	// not exercise the cluster.
	masters := map[string]bool{}
	for _, member := range []string{"alice", "bob", "carol", "dave"} {
		node, err := rdb.MasterForKey(ctx, store.TaskKey(member, "x"))
		if err != nil {
			t.Fatal(err)
		}
		masters[node.Options().Addr] = true
	}
	if len(masters) < 2 {
		t.Fatalf("members' keys all on %v: pick members that hash to different slots", masters)
	}

	create := func(t *testing.T, member, requestID string) *taskv1.Task {
		t.Helper()
		id, err := taskstore.NewID()
		if err != nil {
			t.Fatal(err)
		}
		task, created, err := store.Create(ctx, member, &taskv1.Task{TaskId: id, OrderCode: "SO-" + id[:6], RequestId: requestID}, []byte("job-"+id))
		if err != nil || !created {
			t.Fatalf("Create(%s) = created %v, %v; want a new task", id, created, err)
		}
		clk.Advance(time.Millisecond)
		return task
	}
	succeed := func(t *taskv1.Task) {
		t.Status = taskv1.TaskStatus_TASK_STATUS_SUCCEEDED
		t.Result = &taskv1.SplitResult{Total: 2, Succeeded: 2}
	}

	t.Run("a queued create of a repeated request id leaves no entries", func(t *testing.T) {
		first, second := newTask(t, "req-q"), newTask(t, "req-q")
		for _, task := range []*taskv1.Task{first, second} {
			if _, _, err := store.CreateQueued(ctx, "carol", task, []byte("job"), time.Minute); err != nil {
				t.Fatalf("CreateQueued(%s) = %v", task.GetTaskId(), err)
			}
		}
		checkEntries(t, rdb, store, "carol", first.GetTaskId(), true)
		checkEntries(t, rdb, store, "carol", second.GetTaskId(), false)
	})

	t.Run("create dedupes by request id", func(t *testing.T) {
		first := create(t, "alice", "req-1")
		id, _ := taskstore.NewID()
		again, created, err := store.Create(ctx, "alice", &taskv1.Task{TaskId: id, RequestId: "req-1"}, nil)
		if err != nil || created {
			t.Fatalf("Create(repeated request) = created %v, %v; want the earlier task", created, err)
		}
		if again.GetTaskId() != first.GetTaskId() {
			t.Errorf("Create(repeated request) = task %s, want %s", again.GetTaskId(), first.GetTaskId())
		}
		// Another member may use the same request id.
		other := create(t, "bob", "req-1")
		if other.GetTaskId() == first.GetTaskId() {
			t.Errorf("bob's request req-1 returned alice's task")
		}
	})

	t.Run("get", func(t *testing.T) {
		want := create(t, "carol", "")
		got, err := store.Get(ctx, "carol", want.GetTaskId())
		if err != nil {
			t.Fatalf("Get(%q) = %v", want.GetTaskId(), err)
		}
		if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
			t.Errorf("Get(%q) (-want +got):\n%s", want.GetTaskId(), diff)
		}
		if got.GetStatus() != taskv1.TaskStatus_TASK_STATUS_PROCESSING {
			t.Errorf("Get(%q).Status = %v, want PROCESSING", want.GetTaskId(), got.GetStatus())
		}
		job, err := store.Job(ctx, "carol", want.GetTaskId())
		if err != nil || string(job) != "job-"+want.GetTaskId() {
			t.Errorf("Job(%q) = %q, %v; want the job stored at creation", want.GetTaskId(), job, err)
		}
		if _, err := store.Get(ctx, "dave", want.GetTaskId()); !errors.Is(err, taskstore.ErrNotFound) {
			t.Errorf("Get(another member's task) = %v, want ErrNotFound", err)
		}
	})

	t.Run("finish keeps the TTL", func(t *testing.T) {
		task := create(t, "dave", "")
		// Shorten the remaining life: a write that reset the TTL would
		// bring it back to an hour.
		if err := rdb.PExpire(ctx, store.TaskKey("dave", task.GetTaskId()), 50*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
		got, err := store.Finish(ctx, "dave", task.GetTaskId(), nil, succeed)
		if err != nil {
			t.Fatalf("Finish(%q) = %v", task.GetTaskId(), err)
		}
		if got.GetStatus() != taskv1.TaskStatus_TASK_STATUS_SUCCEEDED {
			t.Errorf("Finish(%q).Status = %v, want SUCCEEDED", task.GetTaskId(), got.GetStatus())
		}
		left, err := store.Remaining(ctx, "dave", task.GetTaskId())
		if err != nil || left <= 0 || left > 50*time.Second {
			t.Errorf("Remaining(%q) after Finish = %v, %v; want the kept 50 s or less", task.GetTaskId(), left, err)
		}
		if _, err := store.Job(ctx, "dave", task.GetTaskId()); !errors.Is(err, taskstore.ErrNotFound) {
			t.Errorf("Job(finished task) = %v, want ErrNotFound", err)
		}
	})

	t.Run("terminal status is not overwritten", func(t *testing.T) {
		task := create(t, "alice", "")
		if _, err := store.Finish(ctx, "alice", task.GetTaskId(), nil, succeed); err != nil {
			t.Fatal(err)
		}
		cur, err := store.Cancel(ctx, "alice", task.GetTaskId(), -1, "too late")
		if !errors.Is(err, taskstore.ErrTerminal) {
			t.Fatalf("Cancel(finished task) = %v, want ErrTerminal", err)
		}
		if cur.GetStatus() != taskv1.TaskStatus_TASK_STATUS_SUCCEEDED {
			t.Errorf("Cancel(finished task) returned status %v, want SUCCEEDED", cur.GetStatus())
		}
		got, err := store.Get(ctx, "alice", task.GetTaskId())
		if err != nil || got.GetStatus() != taskv1.TaskStatus_TASK_STATUS_SUCCEEDED || got.GetResult().GetSucceeded() != 2 {
			t.Errorf("Get(%q) = %v, %v; want the first outcome", task.GetTaskId(), got, err)
		}
	})

	t.Run("finish is fenced by the lease in the task's slot", func(t *testing.T) {
		task := create(t, "bob", "")
		lease := store.LeaseKey("bob", task.GetTaskId())
		if err := rdb.Set(ctx, lease, "token-a", time.Minute).Err(); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Finish(ctx, "bob", task.GetTaskId(), &taskstore.Fence{Key: lease, Token: "token-b"}, succeed); !errors.Is(err, taskstore.ErrFenced) {
			t.Fatalf("Finish(stale token) = %v, want ErrFenced", err)
		}
		if _, err := store.Finish(ctx, "bob", task.GetTaskId(), &taskstore.Fence{Key: lease, Token: "token-a"}, succeed); err != nil {
			t.Fatalf("Finish(current token) = %v", err)
		}
	})

	t.Run("plan and order claim share the task's slot", func(t *testing.T) {
		a, b := create(t, "erin", ""), create(t, "erin", "")
		if err := store.SavePlan(ctx, "erin", a.GetTaskId(), "ORDER-C", []byte("plan")); err != nil {
			t.Fatalf("SavePlan() = %v", err)
		}
		if err := store.SavePlan(ctx, "erin", b.GetTaskId(), "ORDER-C", []byte("plan")); !errors.Is(err, taskstore.ErrOrderClaimed) {
			t.Errorf("SavePlan(same order code) = %v, want ErrOrderClaimed", err)
		}
	})

	t.Run("list", func(t *testing.T) {
		const member = "carol-list"
		var ids []string
		for range 3 {
			ids = append(ids, create(t, member, "").GetTaskId())
		}
		page1, next, err := store.List(ctx, member, 2, "")
		if err != nil {
			t.Fatal(err)
		}
		page2, last, err := store.List(ctx, member, 2, next)
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, task := range append(page1, page2...) {
			got = append(got, task.GetTaskId())
		}
		want := []string{ids[2], ids[1], ids[0]}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("List pages (-want +got):\n%s", diff)
		}
		if next == "" || last != "" {
			t.Errorf("List tokens = %q then %q, want one then none", next, last)
		}
	})

	t.Run("watch", func(t *testing.T) {
		task := create(t, "dave", "")
		seen := make(chan taskv1.TaskStatus, 4)
		done := make(chan error, 1)
		hub := store.NewHub(taskstore.HubOptions{})
		hubCtx, stopHub := context.WithCancel(ctx)
		hubDone := make(chan struct{})
		go func() { hub.Run(hubCtx); close(hubDone) }()
		t.Cleanup(func() { stopHub(); <-hubDone })
		go func() {
			done <- hub.Watch(ctx, "dave", task.GetTaskId(), func(t *taskv1.Task) error {
				seen <- t.GetStatus()
				return nil
			})
		}()
		if got := <-seen; got != taskv1.TaskStatus_TASK_STATUS_PROCESSING {
			t.Fatalf("first watched status = %v, want PROCESSING", got)
		}
		if _, err := store.Finish(ctx, "dave", task.GetTaskId(), nil, succeed); err != nil {
			t.Fatal(err)
		}
		select {
		case got := <-seen:
			if got != taskv1.TaskStatus_TASK_STATUS_SUCCEEDED {
				t.Errorf("watched status = %v, want SUCCEEDED", got)
			}
		case <-ctx.Done():
			t.Fatal("the watcher never saw the change")
		}
		if err := <-done; err != nil {
			t.Errorf("Watch = %v, want nil once terminal", err)
		}
	})

	t.Run("rollback", func(t *testing.T) {
		task := create(t, "alice", "req-rollback")
		if err := store.Rollback(ctx, "alice", task); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Get(ctx, "alice", task.GetTaskId()); !errors.Is(err, taskstore.ErrNotFound) {
			t.Errorf("Get(rolled back) = %v, want ErrNotFound", err)
		}
		again := create(t, "alice", "req-rollback")
		if again.GetTaskId() == task.GetTaskId() {
			t.Errorf("the request id still points at the rolled-back task")
		}
	})

	t.Run("expired is told apart from not found", func(t *testing.T) {
		short := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: 300 * time.Millisecond, Clock: clk})
		id, _ := taskstore.NewID()
		if _, _, err := short.Create(ctx, "bob", &taskv1.Task{TaskId: id}, nil); err != nil {
			t.Fatal(err)
		}
		// Redis expires the record on its own clock: wait for it.
		var err error
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
			if _, err = short.Get(ctx, "bob", id); err != nil {
				break
			}
		}
		if !errors.Is(err, taskstore.ErrExpired) {
			t.Errorf("Get(expired) = %v, want ErrExpired", err)
		}
		never, _ := taskstore.NewID()
		if _, err := short.Get(ctx, "bob", never); !errors.Is(err, taskstore.ErrNotFound) {
			t.Errorf("Get(never created) = %v, want ErrNotFound", err)
		}
	})
}

// TestQueuedCreateOnClusterNeverLeavesATaskWithoutRepairEntry: on a Redis
// Cluster the outbox and repair entries live on another master than the
// task. With the outbox's master down, a queued create must not
// leave the task stored without its repair entry (a task no repair would
// ever find, PROCESSING for good once the caller's rollback fails too).
func TestQueuedCreateOnClusterNeverLeavesATaskWithoutRepairEntry(t *testing.T) {
	c := testenv.StartRedisClusterOn(t, 3, 0, 5*time.Second, nil)
	rdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ReadTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	prefix := testenv.Prefix(t)
	store := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	id, _ := taskstore.NewID()
	repairKey := store.RepairKey(id)
	outboxNode, err := c.SlotOwner(ctx, 0, repairKey)
	if err != nil {
		t.Fatal(err)
	}
	member := ""
	for _, m := range []string{"alice", "bob", "carol", "dave", "erin", "frank"} {
		if n, err := c.SlotOwner(ctx, 0, store.TaskKey(m, "x")); err == nil && n != outboxNode {
			member = m
			break
		}
	}
	if member == "" {
		t.Fatal("every member's tasks on the outbox's master")
	}
	// Load the cluster's slot map and the scripts first.
	if err := rdb.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return n.Ping(ctx).Err() }); err != nil {
		t.Fatal(err)
	}
	// A task of the same outbox shard, so its master has the script.
	warm, _ := taskstore.NewID()
	for store.RepairKey(warm) != repairKey {
		warm, _ = taskstore.NewID()
	}
	if _, _, err := store.CreateQueued(ctx, member, &taskv1.Task{TaskId: warm, OrderCode: "SO-w", RequestId: "warm"}, []byte("job"), time.Minute); err != nil {
		t.Fatalf("CreateQueued before the fault = %v", err)
	}

	// Killed (a stopped one would still apply what its socket holds), then
	// started again from its AOF.
	c.Servers[outboxNode].Kill(t)
	_, _, cerr := store.CreateQueued(ctx, member, &taskv1.Task{TaskId: id, OrderCode: "SO-" + id[:6], RequestId: "r1"}, []byte("job"), time.Minute)
	c.Servers[outboxNode].Start(t)
	if cerr == nil {
		t.Fatal("CreateQueued with the outbox's master stopped succeeded")
	}
	_, gerr := store.Get(ctx, member, id)
	var zerr error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		// CLUSTERDOWN until the restarted master is back in the cluster.
		if _, zerr = rdb.ZScore(ctx, repairKey, member+"\n"+id).Result(); zerr == nil || errors.Is(zerr, redis.Nil) {
			break
		}
	}
	t.Logf("create: %v; get: %v; repair entry: %v", cerr, gerr, zerr)
	if gerr == nil && errors.Is(zerr, redis.Nil) {
		t.Errorf("CreateQueued failed (%v) but stored the task without its repair entry", cerr)
	}
}
