package taskstore_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/engine/lease"
	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

// slowPipelines counts the pipelines and the single commands sent and
// holds each for a moment, so concurrent callers overlap.
type slowPipelines struct{ pipelines, commands atomic.Int64 }

// trips is the round trips counted.
func (h *slowPipelines) trips() int64 { return h.pipelines.Load() + h.commands.Load() }

func (h *slowPipelines) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h *slowPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.commands.Add(1)
		time.Sleep(20 * time.Millisecond)
		return next(ctx, cmd)
	}
}
func (h *slowPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.pipelines.Add(1)
		time.Sleep(20 * time.Millisecond)
		return next(ctx, cmds)
	}
}

// TestConcurrentCreatesAndReadsShareRoundTrips creates and reads many
// tasks of different members at once: each caller gets its own task (and
// a repeated request id its earlier task), and the calls went to Redis in
// far fewer pipelines than there were callers.
func TestConcurrentCreatesAndReadsShareRoundTrips(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	hook := &slowPipelines{}
	rdb.AddHook(hook)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	const n = 200
	tasks := make([]*taskv1.Task, n)
	for i := range tasks {
		tasks[i] = newTask(t, fmt.Sprintf("req-%d", i%(n/2)))
	}
	member := func(i int) string { return fmt.Sprintf("m%d", i%7) }
	type created struct {
		id      string
		created bool
	}
	got := make([]created, n)
	var wg sync.WaitGroup
	for i, task := range tasks {
		wg.Go(func() {
			// Same member and request id as i-n/2: one of the two creates
			// the task, the other gets it back.
			m := member(i % (n / 2))
			tk, ok, err := s.CreateQueued(ctx, m, task, []byte(fmt.Sprint("job-", i)), time.Minute)
			if err != nil {
				t.Errorf("CreateQueued(%d) = %v", i, err)
				return
			}
			got[i] = created{tk.GetTaskId(), ok}
		})
	}
	wg.Wait()
	// Each create is one pipeline of its own when not batched (a repeated
	// request id then costs single commands, not counted here).
	if pipes := hook.pipelines.Load(); pipes >= n/2 {
		t.Errorf("%d concurrent creates took %d pipelines, want them batched", n, pipes)
	}
	for i := range n / 2 {
		a, b := got[i], got[i+n/2]
		if a.created == b.created || a.id != b.id {
			t.Errorf("creates %d and %d with one request id = %+v, %+v; want one created, the other returning its task", i, i+n/2, a, b)
		}
	}
	hook.pipelines.Store(0)
	hook.commands.Store(0)
	for i := range n / 2 {
		wg.Go(func() {
			want := got[i].id
			tk, err := s.Get(ctx, member(i), want)
			if err != nil || tk.GetTaskId() != want {
				t.Errorf("Get(%s, %s) = %v, %v; want the task", member(i), want, tk.GetTaskId(), err)
			}
		})
	}
	wg.Wait()
	if trips := hook.trips(); trips >= n/4 {
		t.Errorf("%d concurrent reads took %d round trips, want them batched", n/2, trips)
	}
	for i := range n / 2 {
		wg.Go(func() {
			if _, err := s.Get(ctx, member(i)+"-other", got[i].id); !errors.Is(err, taskstore.ErrNotFound) {
				t.Errorf("Get(another member, %s) = %v, want ErrNotFound", got[i].id, err)
			}
		})
	}
	wg.Wait()
}

// TestOneCallerLeavingDoesNotFailItsBatch creates tasks concurrently,
// every other caller gone before it starts: each live caller's task is
// created whoever sent its batch, and a gone caller gets its task or the
// context's error, never another failure.
func TestOneCallerLeavingDoesNotFailItsBatch(t *testing.T) {
	rdb, prefix := testenv.Redis(t)
	rdb.AddHook(&slowPipelines{})
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	const n = 40
	var wg sync.WaitGroup
	for i := range n {
		task := newTask(t, "")
		wg.Go(func() {
			ctx := context.Background()
			if i%2 == 1 {
				ctx = gone
			}
			_, created, err := s.CreateQueued(ctx, "alice", task, []byte("job"), time.Minute)
			switch {
			case i%2 == 0 && (err != nil || !created):
				t.Errorf("CreateQueued(live caller %d) = %v, %v; want created", i, created, err)
			case i%2 == 1 && err != nil && !errors.Is(err, context.Canceled):
				t.Errorf("CreateQueued(gone caller %d) = %v, want created or context.Canceled", i, err)
			}
			if err != nil {
				return
			}
			if _, err := s.Get(context.Background(), "alice", task.GetTaskId()); err != nil {
				t.Errorf("Get(%s) = %v, want the created task", task.GetTaskId(), err)
			}
		})
	}
	wg.Wait()
}

// TestReadsAreOneRoundTrip reads a task that exists, one that has
// expired and one that never existed, with Get (the status API's read) and
// Status (the split-worker's check): each read is one round trip to Redis
// and tells the three apart.
func TestReadsAreOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	live, gone := newTask(t, ""), newTask(t, "")
	for _, task := range []*taskv1.Task{live, gone} {
		if _, _, err := s.CreateQueued(ctx, "alice", task, []byte("job"), -1); err != nil {
			t.Fatal(err)
		}
	}
	// An expired task: its hash is gone, its "seen" marker stays.
	if err := rdb.Del(ctx, s.TaskKey("alice", gone.GetTaskId())).Err(); err != nil {
		t.Fatal(err)
	}
	never, err := taskstore.NewID()
	if err != nil {
		t.Fatal(err)
	}
	// Once, so that Redis has Status's script (a restarted Redis costs one
	// more round trip per script, once).
	if _, err := s.Status(ctx, "alice", live.GetTaskId()); err != nil {
		t.Fatal(err)
	}
	hook := &slowPipelines{}
	rdb.AddHook(hook)
	reads := map[string]func(id string) error{
		"Get": func(id string) error {
			got, err := s.Get(ctx, "alice", id)
			if err == nil && got.GetTaskId() != id {
				return fmt.Errorf("task %q", got.GetTaskId())
			}
			return err
		},
		"Status": func(id string) error {
			st, err := s.Status(ctx, "alice", id)
			if err == nil && st != taskv1.TaskStatus_TASK_STATUS_PROCESSING {
				return fmt.Errorf("status %v", st)
			}
			return err
		},
	}
	for name, read := range reads {
		for _, tc := range []struct {
			name, id string
			want     error
		}{
			{"live", live.GetTaskId(), nil},
			{"expired", gone.GetTaskId(), taskstore.ErrExpired},
			{"never created", never, taskstore.ErrNotFound},
		} {
			t.Run(name+"/"+tc.name, func(t *testing.T) {
				before := hook.trips()
				if err := read(tc.id); !errors.Is(err, tc.want) || (tc.want == nil && err != nil) {
					t.Fatalf("%s(%s) = %v, want %v", name, tc.name, err, tc.want)
				}
				if n := hook.trips() - before; n != 1 {
					t.Errorf("%s(%s) took %d round trips, want 1", name, tc.name, n)
				}
			})
		}
	}
}

// TestAcquireLeaseStatusIsOneRoundTrip takes a task's lease and reads its
// status and plan in one round trip: a free lease is taken (and is a lease
// that renews and releases) with the task's stored plan and outcomes, a
// held one is reported held with the status read all the same (and no
// plan), and a task that never existed is reported as such. A lease taken
// records the delivery as the task's attempts; a lease found held leaves
// them.
func TestAcquireLeaseStatusIsOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	planned, fresh := newTask(t, ""), newTask(t, "")
	for _, task := range []*taskv1.Task{planned, fresh} {
		if _, _, err := s.CreateQueued(ctx, "alice", task, []byte("job"), -1); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.SavePlan(ctx, "alice", planned.GetTaskId(), "", []byte(`{"plan":1}`)); err != nil {
		t.Fatal(err)
	}
	if err := s.RecordOutcome(ctx, "alice", planned.GetTaskId(), "ship-1", []byte(`{"out":1}`)); err != nil {
		t.Fatal(err)
	}
	never, err := taskstore.NewID()
	if err != nil {
		t.Fatal(err)
	}
	// Once, so that Redis has the script (see TestReadsAreOneRoundTrip).
	other, err := taskstore.NewID()
	if err != nil {
		t.Fatal(err)
	}
	if c := s.AcquireLeaseStatus(ctx, "bob", other, time.Second, 1); !errors.Is(c.StatusErr, taskstore.ErrNotFound) {
		t.Fatalf("AcquireLeaseStatus(never created) = %v, want ErrNotFound", c.StatusErr)
	}
	hook := &slowPipelines{}
	rdb.AddHook(hook)
	processing := taskv1.TaskStatus_TASK_STATUS_PROCESSING
	for _, tc := range []struct {
		name, id     string
		wantLease    error
		wantSt       taskv1.TaskStatus
		wantErr      error
		wantPlan     string
		wantOutcomes map[string]string
		delivery     int64
		wantAttempts int64
	}{
		{"free, plan stored", planned.GetTaskId(), nil, processing, nil, `{"plan":1}`, map[string]string{"ship-1": `{"out":1}`}, 2, 2},
		{"held", planned.GetTaskId(), lease.ErrHeld, processing, nil, "", nil, 3, 2},
		{"free, no plan yet", fresh.GetTaskId(), nil, processing, nil, "", map[string]string{}, 1, 1},
		{"never created", never, nil, 0, taskstore.ErrNotFound, "", nil, 1, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := hook.trips()
			c := s.AcquireLeaseStatus(ctx, "alice", tc.id, time.Minute, tc.delivery)
			if n := hook.trips() - before; n != 1 {
				t.Errorf("AcquireLeaseStatus(%s) took %d round trips, want 1", tc.name, n)
			}
			if got, err := s.Attempts(ctx, "alice", tc.id); err != nil || got != tc.wantAttempts {
				t.Errorf("Attempts(%s) = %d, %v; want %d", tc.name, got, err, tc.wantAttempts)
			}
			if n := rdb.Exists(ctx, s.TaskKey("alice", never)).Val(); n != 0 {
				t.Errorf("task key of a task never created: exists = %d after AcquireLeaseStatus, want 0", n)
			}
			if !errors.Is(c.LeaseErr, tc.wantLease) || (tc.wantLease == nil && c.LeaseErr != nil) {
				t.Fatalf("AcquireLeaseStatus(%s) lease error = %v, want %v", tc.name, c.LeaseErr, tc.wantLease)
			}
			if c.Status != tc.wantSt || !errors.Is(c.StatusErr, tc.wantErr) || (tc.wantErr == nil && c.StatusErr != nil) {
				t.Errorf("AcquireLeaseStatus(%s) status = %v, %v; want %v, %v", tc.name, c.Status, c.StatusErr, tc.wantSt, tc.wantErr)
			}
			if string(c.Plan) != tc.wantPlan || (tc.wantPlan == "") != (c.Plan == nil) {
				t.Errorf("AcquireLeaseStatus(%s) plan = %q, want %q", tc.name, c.Plan, tc.wantPlan)
			}
			got := map[string]string(nil)
			if c.Outcomes != nil {
				got = map[string]string{}
				for k, v := range c.Outcomes {
					got[k] = string(v)
				}
			}
			if diff := cmp.Diff(tc.wantOutcomes, got); diff != "" {
				t.Errorf("AcquireLeaseStatus(%s) outcomes (-want +got):\n%s", tc.name, diff)
			}
			if c.LeaseErr != nil {
				return
			}
			if c.Lease.Key != s.LeaseKey("alice", tc.id) {
				t.Errorf("lease key = %q, want %q", c.Lease.Key, s.LeaseKey("alice", tc.id))
			}
			if err := c.Lease.Renew(ctx); err != nil {
				t.Errorf("Renew() = %v", err)
			}
			if tc.id != planned.GetTaskId() {
				if err := c.Lease.Release(ctx); err != nil {
					t.Errorf("Release() = %v", err)
				}
				if n := rdb.Exists(ctx, c.Lease.Key).Val(); n != 0 {
					t.Errorf("lease key after Release: exists = %d, want 0", n)
				}
			}
		})
	}
}

// heldPipelines holds the first pipeline until release is closed and
// counts the pipelines that reached Redis after it.
type heldPipelines struct {
	first   atomic.Bool
	held    chan struct{} // closed once the first pipeline is held
	release chan struct{}
	after   atomic.Int64 // commands sent in later pipelines
}

func (h *heldPipelines) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *heldPipelines) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *heldPipelines) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if h.first.CompareAndSwap(false, true) {
			close(h.held)
			<-h.release
		} else {
			h.after.Add(int64(len(cmds)))
		}
		return next(ctx, cmds)
	}
}

// TestAHeldPipelineHoldsUpOnlyItsOwnCallers reads while one pipeline is
// held in flight (a slow or stuck round trip): the later reads are sent
// and answered without waiting for it, in the other pipelines, and the
// held read is answered once its pipeline returns.
func TestAHeldPipelineHoldsUpOnlyItsOwnCallers(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	hook := &heldPipelines{held: make(chan struct{}), release: make(chan struct{})}
	rdb.AddHook(hook)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	id := func() string {
		id, err := taskstore.NewID()
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	var wg sync.WaitGroup
	held := id()
	wg.Go(func() {
		if _, err := s.Get(ctx, "alice", held); !errors.Is(err, taskstore.ErrNotFound) {
			t.Errorf("Get(held) = %v, want ErrNotFound", err)
		}
	})
	select {
	case <-hook.held:
	case <-time.After(10 * time.Second):
		t.Fatal("the first read never reached Redis")
	}
	const n = 20 // a read is two commands
	var answered atomic.Int64
	for i := range n {
		later := id()
		wg.Go(func() {
			if _, err := s.Get(ctx, "alice", later); !errors.Is(err, taskstore.ErrNotFound) {
				t.Errorf("Get(later %d) = %v, want ErrNotFound", i, err)
			}
			answered.Add(1)
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for answered.Load() < n && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	sent, done := hook.after.Load()/2, answered.Load()
	close(hook.release)
	wg.Wait()
	if sent < n || done < n {
		t.Errorf("while one pipeline was held, %d of %d later reads were sent and %d answered; want all (they waited for it)", sent, n, done)
	}
}

// TestConcurrentTaskWorkSharesRoundTrips works many tasks at once as
// split-workers do (take the task, mark a shipment requested, record one
// outcome, finish with the last): every step of every task is done, under
// its own lease, also after Redis's script cache was emptied, and the
// steps went to Redis in far fewer round trips than there were calls.
func TestConcurrentTaskWorkSharesRoundTrips(t *testing.T) {
	ctx := context.Background()
	srv := testenv.StartRedis(t, false) // its script cache is flushed
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 200})
	defer rdb.Close()
	s := taskstore.New(rdb, taskstore.Options{Prefix: "w", TTL: time.Hour})
	hook := &slowPipelines{}
	rdb.AddHook(hook)
	// Checked without the hook's pauses.
	plain := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer plain.Close()
	check := taskstore.New(plain, taskstore.Options{Prefix: "w", TTL: time.Hour})
	const n = 100
	for _, flush := range []bool{true, false} {
		tasks := make([]*taskv1.Task, n)
		for i := range tasks {
			tasks[i] = newTask(t, "")
			if _, _, err := check.CreateQueued(ctx, "alice", tasks[i], []byte("job"), -1); err != nil {
				t.Fatal(err)
			}
		}
		if flush {
			if err := rdb.ScriptFlush(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		hook.pipelines.Store(0)
		hook.commands.Store(0)
		var wg sync.WaitGroup
		for _, task := range tasks {
			wg.Go(func() {
				id := task.GetTaskId()
				c := s.TakeTask(ctx, "alice", id, time.Minute, 1, taskstore.Offer{Plan: []byte(`{"plan":1}`)})
				if c.LeaseErr != nil || c.StatusErr != nil || c.Offered != taskstore.OfferStored {
					t.Errorf("TakeTask(%s) = %v, %v, offer %v; want the lease and the plan stored", id, c.LeaseErr, c.StatusErr, c.Offered)
					return
				}
				fence := &taskstore.Fence{Key: c.Lease.Key, Token: c.Lease.Token, Record: c.Record, Release: true}
				if err := s.RecordRequested(ctx, "alice", id, id+"/1", []byte("requested"), fence); err != nil {
					t.Errorf("RecordRequested(%s) = %v", id, err)
				}
				if err := s.RecordOutcome(ctx, "alice", id, id+"/1", []byte("shipped")); err != nil {
					t.Errorf("RecordOutcome(%s) = %v", id, err)
				}
				if _, err := s.FinishRecording(ctx, "alice", id, fence, map[string][]byte{id + "/2": []byte("shipped too")}, succeed); err != nil {
					t.Errorf("FinishRecording(%s) = %v", id, err)
				}
			})
		}
		wg.Wait()
		// After a flush each script's first batch finds it missing, and
		// its callers run it again on their own, loading it. Each finish
		// also removes its task from the processing index on its own
		// here (the split-worker batches those with a Cleaner).
		if trips := hook.trips(); !flush && trips >= 2*n {
			t.Errorf("%d tasks' 4 steps and index removals took %d round trips, want the steps batched", n, trips)
		}
		for _, task := range tasks {
			id := task.GetTaskId()
			got, err := check.Get(ctx, "alice", id)
			if err != nil || got.GetStatus() != taskv1.TaskStatus_TASK_STATUS_SUCCEEDED {
				t.Errorf("Get(%s) = %v, %v; want SUCCEEDED", id, got.GetStatus(), err)
			}
			plan, outcomes, err := check.Plan(ctx, "alice", id)
			want := map[string]string{id + "/1": "shipped", id + "/2": "shipped too"}
			gotOut := map[string]string{}
			for k, v := range outcomes {
				gotOut[k] = string(v)
			}
			if err != nil || string(plan) != `{"plan":1}` || !cmp.Equal(gotOut, want) {
				t.Errorf("Plan(%s) = %s, %v, %v; want the plan and %v", id, plan, gotOut, err, want)
			}
			if n := plain.Exists(ctx, s.LeaseKey("alice", id)).Val(); n != 0 {
				t.Errorf("lease of %s still held after its finish", id)
			}
		}
	}
}
