package taskstore_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/platform/redisconn"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// TestStoreFollowsSentinelFailover connects the store through the
// Sentinel configuration to a primary with one replica and three
// Sentinels, promotes the replica with SENTINEL FAILOVER, and checks that
// the client follows: tasks written (and replicated) before the failover
// are readable, and creates and finishes succeed on the new primary,
// including the finish of a task created before.
func TestStoreFollowsSentinelFailover(t *testing.T) {
	group := testenv.StartSentinelGroup(t, "orderflow-test", 1, 3)
	cfg := redisconn.Config{
		SentinelAddrs:  group.Sentinels,
		SentinelMaster: group.Master,
		Addr:           "127.0.0.1:1", // ignored in Sentinel mode
		DialTimeout:    2 * time.Second,
		ReadTimeout:    2 * time.Second,
		WriteTimeout:   2 * time.Second,
		PoolSize:       8,
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("Validate() = %v", err)
	}
	rdb := redisconn.New(cfg)
	t.Cleanup(func() { _ = rdb.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	store := taskstore.New(rdb, taskstore.Options{Prefix: testenv.Prefix(t), TTL: time.Hour})

	const member = "alice"
	create := func(t *testing.T) string {
		t.Helper()
		id, err := taskstore.NewID()
		if err != nil {
			t.Fatal(err)
		}
		if _, created, err := store.Create(ctx, member, &taskv1.Task{TaskId: id, OrderCode: "SO-" + id[:8]}, []byte("job")); err != nil || !created {
			t.Fatalf("Create(%s) = created %v, %v; want a new task", id, created, err)
		}
		return id
	}
	finish := func(t *testing.T, id string) {
		t.Helper()
		got, err := store.Finish(ctx, member, id, nil, func(task *taskv1.Task) {
			task.Status = taskv1.TaskStatus_TASK_STATUS_SUCCEEDED
			task.Result = &taskv1.SplitResult{Total: 1, Succeeded: 1}
		})
		if err != nil || got.GetStatus() != taskv1.TaskStatus_TASK_STATUS_SUCCEEDED {
			t.Fatalf("Finish(%s) = %v, %v; want SUCCEEDED", id, got.GetStatus(), err)
		}
	}
	wantStatus := func(t *testing.T, id string, want taskv1.TaskStatus) {
		t.Helper()
		got, err := store.Get(ctx, member, id)
		if err != nil || got.GetStatus() != want {
			t.Errorf("Get(%s) = %v, %v; want %v", id, got.GetStatus(), err, want)
		}
	}

	first := group.Servers[0].Addr
	if addr, err := group.Primary(ctx); err != nil || addr != first {
		t.Fatalf("Primary() = %q, %v; want %s", addr, err, first)
	}
	var done, open []string
	for i := range 10 {
		id := create(t)
		if i%2 == 0 {
			finish(t, id)
			done = append(done, id)
		} else {
			open = append(open, id)
		}
	}
	// Replication is asynchronous: make sure the replica has every write
	// before promoting it (losing unreplicated writes is another matter).
	if n, err := rdb.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n != 1 {
		t.Fatalf("WAIT 1 = %d, %v; want 1 replica", n, err)
	}

	promoted, err := group.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if promoted == first {
		t.Fatalf("failover kept %s as primary", first)
	}

	for _, id := range done {
		wantStatus(t, id, taskv1.TaskStatus_TASK_STATUS_SUCCEEDED)
	}
	for _, id := range open {
		wantStatus(t, id, taskv1.TaskStatus_TASK_STATUS_PROCESSING)
		finish(t, id) // a write to a replica would fail with READONLY
		wantStatus(t, id, taskv1.TaskStatus_TASK_STATUS_SUCCEEDED)
	}
	var after []string
	for range 5 {
		id := create(t)
		finish(t, id)
		after = append(after, id)
	}

	// The writes landed on the promoted server (Failover has seen the old
	// primary become its replica).
	direct := redis.NewClient(&redis.Options{Addr: promoted})
	t.Cleanup(func() { _ = direct.Close() })
	for _, id := range append(open, after...) {
		if n, err := direct.Exists(ctx, store.TaskKey(member, id)).Result(); err != nil || n != 1 {
			t.Errorf("EXISTS %s on the promoted %s = %d, %v; want 1", store.TaskKey(member, id), promoted, n, err)
		}
	}
}
