package taskstore_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// hubEnv is a store whose Redis connections carry a name unique to the
// test (so its pub/sub connections can be counted and killed on the shared
// Redis) and a running Hub.
type hubEnv struct {
	rdb    *redis.Client
	admin  *redis.Client
	name   string
	prefix string
	store  *taskstore.Store
	hub    *taskstore.Hub
	stop   context.CancelFunc
}

func startHub(t *testing.T, resync time.Duration) *hubEnv {
	t.Helper()
	admin, prefix := testenv.Redis(t)
	name := strings.ReplaceAll(prefix, "-", "_")
	rdb := redis.NewClient(&redis.Options{Addr: testenv.RedisAddr(), ClientName: name})
	t.Cleanup(func() { _ = rdb.Close() })
	store := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	hub := store.NewHub(taskstore.HubOptions{Resync: resync})
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { hub.Run(ctx); close(done) }()
	t.Cleanup(func() { stop(); <-done })
	return &hubEnv{rdb: rdb, admin: admin, name: name, prefix: prefix, store: store, hub: hub, stop: stop}
}

// pubsubClients returns the ids of the test's connections that hold
// subscriptions.
func (e *hubEnv) pubsubClients(t *testing.T) []string {
	t.Helper()
	list, err := e.admin.ClientList(context.Background()).Result()
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, line := range strings.Split(list, "\n") {
		f := map[string]string{}
		for _, kv := range strings.Fields(line) {
			k, v, _ := strings.Cut(kv, "=")
			f[k] = v
		}
		if f["name"] == e.name && f["sub"] != "" && f["sub"] != "0" {
			ids = append(ids, f["id"])
		}
	}
	return ids
}

func (e *hubEnv) create(t *testing.T, member string) *taskv1.Task {
	t.Helper()
	task := newTask(t, "")
	got, created, err := e.store.Create(context.Background(), member, task, []byte("job"))
	if err != nil || !created {
		t.Fatalf("Create() = %v, %v; want created", created, err)
	}
	return got
}

// finishUnannounced makes the task SUCCEEDED in Redis without publishing
// the change: a notification the watchers never get.
func (e *hubEnv) finishUnannounced(t *testing.T, member string, task *taskv1.Task) {
	t.Helper()
	done := proto.Clone(task).(*taskv1.Task)
	succeed(done)
	done.UpdateTime = timestamppb.New(time.Now())
	b, err := proto.Marshal(done)
	if err != nil {
		t.Fatal(err)
	}
	status := strconv.Itoa(int(taskv1.TaskStatus_TASK_STATUS_SUCCEEDED))
	if err := e.admin.HSet(context.Background(), e.store.TaskKey(member, task.GetTaskId()), "s", status, "d", b).Err(); err != nil {
		t.Fatal(err)
	}
}

// watchResult is what one Watch saw and returned.
type watchResult struct {
	seen []taskv1.TaskStatus
	err  error
}

// watch starts a Watch and returns a channel of its first status and one
// of its outcome.
func (e *hubEnv) watch(ctx context.Context, member, id string) (first <-chan taskv1.TaskStatus, result <-chan watchResult) {
	firstc := make(chan taskv1.TaskStatus, 1)
	resc := make(chan watchResult, 1)
	go func() {
		var r watchResult
		r.err = e.hub.Watch(ctx, member, id, func(t *taskv1.Task) error {
			if len(r.seen) == 0 {
				firstc <- t.GetStatus()
			}
			r.seen = append(r.seen, t.GetStatus())
			return nil
		})
		resc <- r
	}()
	return firstc, resc
}

func waitFirst(t *testing.T, first <-chan taskv1.TaskStatus) {
	t.Helper()
	select {
	case got := <-first:
		if got != taskv1.TaskStatus_TASK_STATUS_PROCESSING {
			t.Fatalf("first watched status = %v, want PROCESSING", got)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the watch never showed the task's current state")
	}
}

func waitResult(t *testing.T, result <-chan watchResult, within time.Duration) watchResult {
	t.Helper()
	select {
	case r := <-result:
		return r
	case <-time.After(within):
		t.Fatalf("the watch did not end within %v", within)
		return watchResult{}
	}
}

func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still %s", what, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHubSharesOneSubscription opens 30 watches on 10 tasks and checks
// that the process holds one pub/sub connection with one subscription per
// task, that every watch gets its task's terminal state, and that the
// subscriptions go once the watches end.
func TestHubSharesOneSubscription(t *testing.T) {
	e := startHub(t, time.Hour)
	ctx := context.Background()
	const tasks, perTask = 10, 3
	var created []*taskv1.Task
	var results []<-chan watchResult
	for i := 0; i < tasks; i++ {
		task := e.create(t, "alice")
		created = append(created, task)
		for j := 0; j < perTask; j++ {
			first, res := e.watch(ctx, "alice", task.GetTaskId())
			waitFirst(t, first)
			results = append(results, res)
		}
	}
	if got := e.hub.Subscriptions(); got != tasks {
		t.Errorf("Subscriptions() = %d, want %d (one per task, not per watch)", got, tasks)
	}
	if ids := e.pubsubClients(t); len(ids) != 1 {
		t.Errorf("pub/sub connections = %d (%v), want 1 for %d watches", len(ids), ids, tasks*perTask)
	}
	chans, err := e.admin.PubSubChannels(ctx, e.prefix+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(chans) != tasks {
		t.Errorf("channels subscribed on Redis = %d, want %d", len(chans), tasks)
	}

	for _, task := range created {
		if _, err := e.store.Finish(ctx, "alice", task.GetTaskId(), nil, succeed); err != nil {
			t.Fatal(err)
		}
	}
	for i, res := range results {
		r := waitResult(t, res, 20*time.Second)
		want := []taskv1.TaskStatus{taskv1.TaskStatus_TASK_STATUS_PROCESSING, taskv1.TaskStatus_TASK_STATUS_SUCCEEDED}
		if r.err != nil || fmt.Sprint(r.seen) != fmt.Sprint(want) {
			t.Errorf("watch %d saw %v and returned %v; want %v and nil", i, r.seen, r.err, want)
		}
	}
	eventually(t, "subscriptions after every watch ended", func() (bool, string) {
		n := e.hub.Subscriptions()
		return n == 0, fmt.Sprintf("%d", n)
	})
}

// TestWatchSurvivesLostSubscription kills the Hub's pub/sub connection
// while the task becomes terminal unannounced; the watch re-reads the task
// once the subscription is back and ends with the terminal state, long
// before its timer (an hour) would have re-read it.
func TestWatchSurvivesLostSubscription(t *testing.T) {
	e := startHub(t, time.Hour)
	ctx := context.Background()
	task := e.create(t, "bob")
	first, res := e.watch(ctx, "bob", task.GetTaskId())
	waitFirst(t, first)
	ids := e.pubsubClients(t)
	if len(ids) != 1 {
		t.Fatalf("pub/sub connections = %v, want 1", ids)
	}
	e.finishUnannounced(t, "bob", task)
	id, _ := strconv.ParseInt(ids[0], 10, 64)
	if err := e.admin.ClientKillByFilter(ctx, "ID", strconv.FormatInt(id, 10)).Err(); err != nil {
		t.Fatalf("CLIENT KILL ID %d: %v", id, err)
	}
	r := waitResult(t, res, 20*time.Second)
	if r.err != nil || r.seen[len(r.seen)-1] != taskv1.TaskStatus_TASK_STATUS_SUCCEEDED {
		t.Fatalf("watch saw %v and returned %v; want it to end on SUCCEEDED", r.seen, r.err)
	}
	// The replica is subscribed again on a new connection for new watches.
	other := e.create(t, "bob")
	first, res = e.watch(ctx, "bob", other.GetTaskId())
	waitFirst(t, first)
	if ids2 := e.pubsubClients(t); len(ids2) != 1 || ids2[0] == ids[0] {
		t.Errorf("pub/sub connections after the kill = %v, want one new one (was %v)", ids2, ids)
	}
	if _, err := e.store.Finish(ctx, "bob", other.GetTaskId(), nil, succeed); err != nil {
		t.Fatal(err)
	}
	if r := waitResult(t, res, 20*time.Second); r.err != nil || len(r.seen) != 2 {
		t.Errorf("watch after reconnect saw %v and returned %v; want PROCESSING, SUCCEEDED and nil", r.seen, r.err)
	}
}

// TestWatchRereadsOnTimer: a change that is never published, and a task
// record that expires, still end the watch at the next timed re-read.
func TestWatchRereadsOnTimer(t *testing.T) {
	e := startHub(t, 200*time.Millisecond)
	ctx := context.Background()

	t.Run("unannounced terminal state", func(t *testing.T) {
		task := e.create(t, "carol")
		first, res := e.watch(ctx, "carol", task.GetTaskId())
		waitFirst(t, first)
		e.finishUnannounced(t, "carol", task)
		r := waitResult(t, res, 20*time.Second)
		if r.err != nil || r.seen[len(r.seen)-1] != taskv1.TaskStatus_TASK_STATUS_SUCCEEDED {
			t.Errorf("watch saw %v and returned %v; want it to end on SUCCEEDED", r.seen, r.err)
		}
	})
	t.Run("expired record", func(t *testing.T) {
		task := e.create(t, "carol")
		first, res := e.watch(ctx, "carol", task.GetTaskId())
		waitFirst(t, first)
		// The record goes as at its TTL; the seen marker stays.
		if err := e.admin.Del(ctx, e.store.TaskKey("carol", task.GetTaskId())).Err(); err != nil {
			t.Fatal(err)
		}
		if r := waitResult(t, res, 20*time.Second); !errors.Is(r.err, taskstore.ErrExpired) {
			t.Errorf("watch of an expired task returned %v (saw %v), want ErrExpired", r.err, r.seen)
		}
	})
}

// TestHubStopEndsWatches: when the Hub stops (the replica shuts down), its
// open watches end with ErrHubStopped and new ones are refused.
func TestHubStopEndsWatches(t *testing.T) {
	e := startHub(t, time.Hour)
	ctx := context.Background()
	task := e.create(t, "dan")
	first, res := e.watch(ctx, "dan", task.GetTaskId())
	waitFirst(t, first)
	e.stop()
	if r := waitResult(t, res, 20*time.Second); !errors.Is(r.err, taskstore.ErrHubStopped) {
		t.Errorf("open watch after stop returned %v, want ErrHubStopped", r.err)
	}
	eventually(t, "a new watch after stop", func() (bool, string) {
		err := e.hub.Watch(ctx, "dan", task.GetTaskId(), func(*taskv1.Task) error { return nil })
		return errors.Is(err, taskstore.ErrHubStopped), fmt.Sprint(err)
	})
}
