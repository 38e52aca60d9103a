package taskstore_test

import (
	"cmp"
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/testing/protocmp"

	"github.com/orderflow/orderflow/pkg/engine/lease"
	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

func newTask(t *testing.T, requestID string) *taskv1.Task {
	t.Helper()
	id, err := taskstore.NewID()
	if err != nil {
		t.Fatal(err)
	}
	return &taskv1.Task{TaskId: id, Kind: taskv1.TaskKind_TASK_KIND_ORDER_SPLIT, OrderCode: "O", RequestId: requestID}
}

func succeed(t *taskv1.Task) {
	t.Status = taskv1.TaskStatus_TASK_STATUS_SUCCEEDED
	t.Result = &taskv1.SplitResult{Total: 1, Succeeded: 1}
}

func TestFinishKeepsTTLAndNeverOverwritesTerminal(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	task := newTask(t, "")
	if _, created, err := s.Create(ctx, "alice", task, []byte("job")); err != nil || !created {
		t.Fatalf("Create() = %v, %v; want created", created, err)
	}
	time.Sleep(1100 * time.Millisecond)
	before, _ := s.Remaining(ctx, "alice", task.GetTaskId())
	done, err := s.Finish(ctx, "alice", task.GetTaskId(), nil, succeed)
	if err != nil {
		t.Fatalf("Finish() = %v", err)
	}
	after, _ := s.Remaining(ctx, "alice", task.GetTaskId())
	if after > before || after < before-time.Second {
		t.Errorf("TTL after Finish = %v, before %v; want kept (not reset to %v)", after, before, time.Hour)
	}
	if after > time.Hour-time.Second {
		t.Errorf("TTL after Finish = %v, want below %v: it kept decreasing since creation", after, time.Hour-time.Second)
	}
	if _, err := s.Job(ctx, "alice", task.GetTaskId()); !errors.Is(err, taskstore.ErrNotFound) {
		t.Errorf("Job() after Finish = %v, want ErrNotFound (job dropped when terminal)", err)
	}
	// A later write is refused and the stored result is unchanged.
	cur, err := s.Finish(ctx, "alice", task.GetTaskId(), nil, func(t *taskv1.Task) {
		t.Status = taskv1.TaskStatus_TASK_STATUS_FAILED
		t.ErrorCode = -1
	})
	if !errors.Is(err, taskstore.ErrTerminal) {
		t.Fatalf("second Finish() = %v, want ErrTerminal", err)
	}
	if diff := gocmp.Diff(done, cur, protocmp.Transform()); diff != "" {
		t.Errorf("task after refused write (-want +got):\n%s", diff)
	}
	if _, err := s.Cancel(ctx, "alice", task.GetTaskId(), 10007, "x"); !errors.Is(err, taskstore.ErrTerminal) {
		t.Errorf("Cancel() of a finished task = %v, want ErrTerminal", err)
	}
}

func TestFenceRefusesStaleLeaseHolder(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	task := newTask(t, "")
	if _, _, err := s.Create(ctx, "alice", task, nil); err != nil {
		t.Fatal(err)
	}
	key := s.LeaseKey("alice", task.GetTaskId())
	stale, err := lease.Acquire(ctx, rdb, key, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(150 * time.Millisecond) // the stale holder pauses past its lease
	fresh, err := lease.Acquire(ctx, rdb, key, time.Minute)
	if err != nil {
		t.Fatalf("Acquire after expiry = %v", err)
	}
	_, err = s.Finish(ctx, "alice", task.GetTaskId(), &taskstore.Fence{Key: key, Token: stale.Token}, succeed)
	if !errors.Is(err, taskstore.ErrFenced) {
		t.Fatalf("Finish with a stale lease = %v, want ErrFenced", err)
	}
	if st, _ := s.Status(ctx, "alice", task.GetTaskId()); st != taskv1.TaskStatus_TASK_STATUS_PROCESSING {
		t.Errorf("status after fenced write = %v, want PROCESSING", st)
	}
	if err := stale.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Finish(ctx, "alice", task.GetTaskId(), &taskstore.Fence{Key: key, Token: fresh.Token}, succeed); err != nil {
		t.Errorf("Finish with the current lease = %v, want nil (stale Release must not free it)", err)
	}
}

func TestCreateDedupesRequestIDAndRollbackForgetsIt(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	first := newTask(t, "req-1")
	if _, created, err := s.Create(ctx, "alice", first, nil); err != nil || !created {
		t.Fatalf("Create() = %v, %v", created, err)
	}
	got, created, err := s.Create(ctx, "alice", newTask(t, "req-1"), nil)
	if err != nil || created || got.GetTaskId() != first.GetTaskId() {
		t.Fatalf("Create(same request id) = %v, %v, %v; want the first task, not created", got.GetTaskId(), created, err)
	}
	if _, created, _ := s.Create(ctx, "bob", newTask(t, "req-1"), nil); !created {
		t.Errorf("Create(bob, alice's request id) created = false, want true: request ids are per member")
	}
	if err := s.Rollback(ctx, "alice", first); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, "alice", first.GetTaskId()); !errors.Is(err, taskstore.ErrNotFound) {
		t.Errorf("Get() after Rollback = %v, want ErrNotFound (not expired: it never existed)", err)
	}
	if _, created, _ := s.Create(ctx, "alice", newTask(t, "req-1"), nil); !created {
		t.Errorf("Create() after Rollback created = false, want true")
	}
}

func TestListPagesNewestFirstAcrossEqualTimestamps(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	clk := clock.NewFake(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour, Clock: clk})
	// Three tasks in one millisecond, two in the next, then one each: page
	// boundaries must fall inside the ties too.
	type entry struct {
		id string
		ms int64
	}
	var created []entry
	for _, step := range []time.Duration{0, 0, 0, time.Millisecond, 0, time.Millisecond, time.Millisecond} {
		clk.Advance(step)
		task := newTask(t, "")
		if _, _, err := s.Create(ctx, "alice", task, nil); err != nil {
			t.Fatal(err)
		}
		created = append(created, entry{task.GetTaskId(), clk.Now().UnixMilli()})
	}
	// Newest first; tasks of the same millisecond by id, descending.
	slices.SortFunc(created, func(a, b entry) int {
		if a.ms != b.ms {
			return cmp.Compare(b.ms, a.ms)
		}
		return strings.Compare(b.id, a.id)
	})
	var want []string
	for _, e := range created {
		want = append(want, e.id)
	}
	for _, size := range []int{1, 2, 3, 7, 10} {
		var got []string
		token := ""
		for pages := 0; ; pages++ {
			if pages > len(want) {
				t.Fatalf("List pages of %d never ended", size)
			}
			page, next, err := s.List(ctx, "alice", size, token)
			if err != nil {
				t.Fatalf("List(%d, %q) = %v", size, token, err)
			}
			if len(page) > size {
				t.Errorf("List(%d) returned a page of %d", size, len(page))
			}
			for _, p := range page {
				got = append(got, p.GetTaskId())
			}
			if next == "" {
				break
			}
			token = next
		}
		if diff := gocmp.Diff(want, got); diff != "" {
			t.Errorf("task ids over pages of %d (-want +got):\n%s", size, diff)
		}
	}
	if _, _, err := s.List(ctx, "alice", 2, "garbage"); !errors.Is(err, taskstore.ErrBadToken) {
		t.Errorf("List(bad token) = %v, want ErrBadToken", err)
	}
}

func TestOutboxClaimsOnlyUnconfirmedProcessingTasks(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	pending, finished, confirmed := newTask(t, ""), newTask(t, ""), newTask(t, "")
	for _, task := range []*taskv1.Task{pending, finished, confirmed} {
		if err := s.OutboxAdd(ctx, "alice", task.GetTaskId(), 0); err != nil {
			t.Fatal(err)
		}
		if _, _, err := s.Create(ctx, "alice", task, []byte("job-"+task.GetTaskId())); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Finish(ctx, "alice", finished.GetTaskId(), nil, succeed); err != nil {
		t.Fatal(err)
	}
	if err := s.OutboxDone(ctx, "alice", confirmed.GetTaskId()); err != nil {
		t.Fatal(err)
	}
	// A submitter that died before creating the task leaves an entry too.
	if err := s.OutboxAdd(ctx, "alice", "never-created-task-xx", 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	got, err := s.OutboxClaim(ctx, 10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	want := []taskstore.OutboxEntry{{Member: "alice", TaskID: pending.GetTaskId(), Job: []byte("job-" + pending.GetTaskId())}}
	if diff := gocmp.Diff(want, got); diff != "" {
		t.Errorf("OutboxClaim() (-want +got):\n%s", diff)
	}
	again, err := s.OutboxClaim(ctx, 10, time.Minute)
	if err != nil || len(again) != 0 {
		t.Errorf("OutboxClaim() right after a claim = %v, %v; want nothing until the retry time", again, err)
	}
}

func TestCreateQueuedRecordsOutboxInTheSameRoundTrip(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t, false)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	s := taskstore.New(rdb, taskstore.Options{Prefix: "q", TTL: time.Hour})
	for _, flush := range []bool{false, true} {
		if flush {
			// After a Redis restart the script cache is empty; the create
			// must still happen exactly once.
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		task := newTask(t, "")
		if _, created, err := s.CreateQueued(ctx, "alice", task, []byte("job"), 0); err != nil || !created {
			t.Fatalf("CreateQueued(flushed=%v) = %v, %v; want created", flush, created, err)
		}
		time.Sleep(2 * time.Millisecond)
		got, err := s.OutboxClaim(ctx, 10, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 1 || got[0].TaskID != task.GetTaskId() || string(got[0].Job) != "job" {
			t.Errorf("OutboxClaim() after CreateQueued(flushed=%v) = %v, want the new task", flush, got)
		}
		if listed, _, err := s.List(ctx, "alice", 10, ""); err != nil || listed[0].GetTaskId() != task.GetTaskId() {
			t.Errorf("List() after CreateQueued(flushed=%v) = %v, %v; want the new task first", flush, listed, err)
		}
	}
}

// TestCreateQueuedIsOneCommandAndARepeatWritesNothing: on a single Redis
// CreateQueued sends one command, the task and its three entries (the
// outbox's, the repair set's and the processing index's) written by one
// script, so none can exist without the others; a repeated request id
// leaves no entry behind for the task it did not create.
func TestCreateQueuedIsOneCommandAndARepeatWritesNothing(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	first := newTask(t, "req-1")
	if _, created, err := s.CreateQueued(ctx, "alice", first, []byte("job"), time.Minute); err != nil || !created {
		t.Fatalf("CreateQueued(first) = %v, %v; want created", created, err)
	}
	var commands []string
	rdb.AddHook(commandNames{&commands})
	again := newTask(t, "req-1")
	got, created, err := s.CreateQueued(ctx, "alice", again, []byte("job"), time.Minute)
	if err != nil || created || got.GetTaskId() != first.GetTaskId() {
		t.Fatalf("CreateQueued(repeated request id) = %v, %v, %v; want the first task, not created", got.GetTaskId(), created, err)
	}
	other := newTask(t, "")
	commands = nil
	if _, created, err := s.CreateQueued(ctx, "alice", other, []byte("job"), time.Minute); err != nil || !created {
		t.Fatalf("CreateQueued(other) = %v, %v; want created", created, err)
	}
	if len(commands) != 1 {
		t.Errorf("CreateQueued sent %v; want one command (one script)", commands)
	}
	for _, c := range []struct {
		task *taskv1.Task
		want bool
	}{{first, true}, {again, false}, {other, true}} {
		checkEntries(t, rdb, s, "alice", c.task.GetTaskId(), c.want)
	}
}

// checkEntries fails t unless member's task id has an entry in each of
// the outbox, the repair set and the processing index (want), or in none.
func checkEntries(t *testing.T, rdb redis.Cmdable, s *taskstore.Store, member, id string, want bool) {
	t.Helper()
	ctx := context.Background()
	in, err := s.InOutbox(ctx, member, id)
	if err != nil {
		t.Fatal(err)
	}
	_, rerr := rdb.ZScore(ctx, s.RepairKey(id), member+"\n"+id).Result()
	_, perr := rdb.ZScore(ctx, s.ProcessingKey(id), member+"\n"+id).Result()
	if in != want || (rerr == nil) != want || (perr == nil) != want {
		t.Errorf("task %s (created %v): in the outbox %v, repair set %v (%v), processing index %v (%v); want each %v",
			id, want, in, rerr == nil, rerr, perr == nil, perr, want)
	}
}

// commandNames is a go-redis hook that records the names of the commands
// sent, one per command of a pipeline.
type commandNames struct{ names *[]string }

func (commandNames) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h commandNames) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		*h.names = append(*h.names, cmd.Name())
		return next(ctx, cmd)
	}
}

func (h commandNames) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			*h.names = append(*h.names, c.Name())
		}
		return next(ctx, cmds)
	}
}

func TestOutboxCleanerRemovesInBatchesAndFlushesOnStop(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	c := s.NewOutboxCleaner(1000)
	var ids []string
	for range 300 {
		task := newTask(t, "")
		if _, _, err := s.CreateQueued(ctx, "alice", task, []byte("job"), 0); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, task.GetTaskId())
	}
	// Queue the removals before the cleaner runs, then stop it at once:
	// stopping must still flush them.
	for _, id := range ids {
		if err := c.Done(ctx, "alice", id); err != nil {
			t.Fatal(err)
		}
	}
	runCtx, cancel := context.WithCancel(ctx)
	cancel()
	if err := c.Run(runCtx); err != nil {
		t.Fatalf("Run() = %v", err)
	}
	time.Sleep(2 * time.Millisecond)
	if got, err := s.OutboxClaim(ctx, 1000, time.Minute); err != nil || len(got) != 0 {
		t.Errorf("OutboxClaim() after the cleaner = %d entries, %v; want none", len(got), err)
	}

	// A running cleaner removes entries as they come.
	runCtx, cancel = context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Run(runCtx) }()
	task := newTask(t, "")
	if _, _, err := s.CreateQueued(ctx, "alice", task, []byte("job"), 0); err != nil {
		t.Fatal(err)
	}
	if err := c.Done(ctx, "alice", task.GetTaskId()); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		in, err := s.InOutbox(ctx, "alice", task.GetTaskId())
		if err != nil {
			t.Fatal(err)
		}
		if !in {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("outbox still has the entry with the cleaner running")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run() = %v", err)
	}
}

// TestOutboxTimesFollowRedisNotTheReplica gives the submitter and the
// sweeper replicas clocks 30 s off in either direction: a sweeper ahead
// must not republish a submission still inside its grace, and entries of
// a submitter behind must become due after the grace, not 30 s late or
// at once.
func TestOutboxTimesFollowRedisNotTheReplica(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	store := func(skew time.Duration) *taskstore.Store {
		return taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour, Clock: clock.Skewed{By: skew}})
	}
	for _, skew := range []time.Duration{30 * time.Second, -30 * time.Second} {
		submitter, sweeper := store(-skew), store(skew)
		task := newTask(t, "")
		const grace = 500 * time.Millisecond
		if _, _, err := submitter.CreateQueued(ctx, "alice", task, []byte("job"), grace); err != nil {
			t.Fatal(err)
		}
		got, err := sweeper.OutboxClaim(ctx, 10, time.Minute)
		if err != nil || len(got) != 0 {
			t.Errorf("OutboxClaim(sweeper %v, submitter %v) inside the grace = %v, %v; want nothing (the submission is in flight)", skew, -skew, got, err)
		}
		time.Sleep(grace + 100*time.Millisecond)
		got, err = sweeper.OutboxClaim(ctx, 10, time.Minute)
		if err != nil || len(got) != 1 || got[0].TaskID != task.GetTaskId() {
			t.Errorf("OutboxClaim(sweeper %v, submitter %v) after the grace = %v, %v; want the task", skew, -skew, got, err)
		}
		if err := submitter.OutboxDone(ctx, "alice", task.GetTaskId()); err != nil {
			t.Fatal(err)
		}
	}
}

// TestOutboxWithdrawOnlyBeforeASweeperTookTheEntry: a submitter whose
// publish failed may withdraw its outbox entry (and roll the task back)
// only while no sweeper can have republished the job: not once the entry
// was claimed, even though a claim pushes its time into the future again,
// and not once it is due.
func TestOutboxWithdrawOnlyBeforeASweeperTookTheEntry(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	fresh, claimed, due := newTask(t, ""), newTask(t, ""), newTask(t, "")
	for task, grace := range map[*taskv1.Task]time.Duration{fresh: time.Minute, claimed: 0, due: 0} {
		if _, _, err := s.CreateQueued(ctx, "alice", task, []byte("job"), grace); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(5 * time.Millisecond)
	// A sweeper takes the entries due now (claimed and due), and pushes
	// them a minute ahead; then the due one is due again.
	if got, err := s.OutboxClaim(ctx, 10, time.Minute); err != nil || len(got) != 2 {
		t.Fatalf("OutboxClaim() = %v, %v; want the two due entries", got, err)
	}
	if err := s.OutboxDone(ctx, "alice", due.GetTaskId()); err != nil {
		t.Fatal(err)
	}
	if err := s.OutboxAdd(ctx, "alice", due.GetTaskId(), 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	for task, want := range map[*taskv1.Task]bool{fresh: true, claimed: false, due: false} {
		ok, err := s.OutboxWithdraw(ctx, "alice", task.GetTaskId())
		if err != nil || ok != want {
			t.Errorf("OutboxWithdraw(%s) = %v, %v; want %v", task.GetTaskId(), ok, err, want)
		}
	}
	if ok, err := s.OutboxWithdraw(ctx, "alice", fresh.GetTaskId()); err != nil || ok {
		t.Errorf("OutboxWithdraw of a withdrawn entry = %v, %v; want false", ok, err)
	}
}

// TestRetriedCreateIsStillTheCreate: a client that lost the reply of a
// create with a request id runs the script again (go-redis retries on a
// reset or timed-out connection). That run must report the task created,
// not "repeated request id": the gateway publishes the job only for a
// created task, and a repeat of its own create left the task PROCESSING
// with no job and no outbox entry.
func TestRetriedCreateIsStillTheCreate(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	task := newTask(t, "req-1")
	for i := range 2 {
		got, created, err := s.CreateQueued(ctx, "alice", proto.Clone(task).(*taskv1.Task), []byte("job"), time.Minute)
		if err != nil || !created || got.GetTaskId() != task.GetTaskId() {
			t.Errorf("run %d of the same create = %v, created %v, %v; want the task, created", i+1, got.GetTaskId(), created, err)
		}
	}
	other := newTask(t, "req-1")
	if got, created, err := s.CreateQueued(ctx, "alice", other, []byte("job"), time.Minute); err != nil || created || got.GetTaskId() != task.GetTaskId() {
		t.Errorf("another task with the same request id = %v, created %v, %v; want the first task, not created", got.GetTaskId(), created, err)
	}
}
