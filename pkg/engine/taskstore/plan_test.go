package taskstore_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	gocmp "github.com/google/go-cmp/cmp"
	"github.com/redis/go-redis/v9"

	"github.com/orderflow/orderflow/pkg/engine/lease"
	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

func TestSavePlanOnceWithOrderClaim(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	first, second, other := createTask(t, s, "alice", "O"), createTask(t, s, "alice", "O"), createTask(t, s, "bob", "O")

	if plan, outcomes, err := s.Plan(ctx, "alice", first); err != nil || plan != nil || len(outcomes) != 0 {
		t.Fatalf("Plan() before SavePlan = %q, %v, %v; want none", plan, outcomes, err)
	}
	// The plan expires with the task: its script sets the plan's deadline
	// to the task's (PEXPIRETIME), to the millisecond.
	expiresWithTask := func(what string) {
		t.Helper()
		if task, plan := deadlines(t, rdb, s, first); task <= 0 || plan != task {
			t.Errorf("after %s the plan expires at %v (ms), the task at %v; want the same deadline", what, plan, task)
		}
	}
	// The task's remaining TTL differs from the store's TTL, so that a plan
	// TTL taken from anywhere but the task shows.
	if err := rdb.PExpire(ctx, s.TaskKey("alice", first), 30*time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if err := s.SavePlan(ctx, "alice", first, "ORDER-1", []byte("plan-1")); err != nil {
		t.Fatalf("SavePlan(first) = %v", err)
	}
	expiresWithTask("SavePlan")
	claimAt := rdb.Do(ctx, "PEXPIRETIME", s.OrderKey("alice", "ORDER-1")).Val()
	if taskAt := rdb.Do(ctx, "PEXPIRETIME", s.TaskKey("alice", first)).Val(); claimAt != taskAt {
		t.Errorf("the order claim expires at %v (ms), the task at %v; want the same deadline", claimAt, taskAt)
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
	expiresWithTask("RecordOutcome")
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

// TestClaimReleasedWhenTaskEndsWithoutSuccess: a task that ends CANCELLED
// or FAILED tells the shopper to retry, so its order-code claim goes with
// it; a SUCCEEDED task keeps it, and a failure never frees a claim that
// another task owns.
func TestClaimReleasedWhenTaskEndsWithoutSuccess(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	claimed := func(t *testing.T, orderCode string) string {
		t.Helper()
		task := newTask(t, "")
		task.OrderCode = orderCode
		if _, _, err := s.Create(ctx, "alice", task, []byte("job")); err != nil {
			t.Fatal(err)
		}
		if err := s.SavePlan(ctx, "alice", task.GetTaskId(), orderCode, []byte("plan")); err != nil {
			t.Fatalf("SavePlan(%q) = %v", orderCode, err)
		}
		return task.GetTaskId()
	}
	end := map[string]func(id string) error{
		"cancelled": func(id string) error {
			_, err := s.Cancel(ctx, "alice", id, 10007, "task cancelled")
			return err
		},
		"failed": func(id string) error {
			_, err := s.Finish(ctx, "alice", id, nil, func(t *taskv1.Task) {
				t.Status, t.ErrorCode = taskv1.TaskStatus_TASK_STATUS_FAILED, -1
			})
			return err
		},
		"succeeded": func(id string) error {
			_, err := s.Finish(ctx, "alice", id, nil, succeed)
			return err
		},
	}
	tests := []struct {
		name      string
		end       string
		wantClaim bool
	}{
		{"cancelled frees the order code", "cancelled", false},
		{"failed frees the order code", "failed", false},
		{"succeeded keeps the order code", "succeeded", true},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code := "ORDER-" + string(rune('A'+i))
			first := claimed(t, code)
			if err := end[tt.end](first); err != nil {
				t.Fatalf("%s: %v", tt.end, err)
			}
			again := newTask(t, "")
			again.OrderCode = code
			if _, _, err := s.Create(ctx, "alice", again, []byte("job")); err != nil {
				t.Fatal(err)
			}
			err := s.SavePlan(ctx, "alice", again.GetTaskId(), code, []byte("plan"))
			if tt.wantClaim && !errors.Is(err, taskstore.ErrOrderClaimed) {
				t.Errorf("SavePlan(%q) after %s = %v, want ErrOrderClaimed", code, tt.end, err)
			}
			if !tt.wantClaim && err != nil {
				t.Errorf("SavePlan(%q) after %s = %v, want the order code free", code, tt.end, err)
			}
		})
	}

	t.Run("a duplicate's failure keeps the owner's claim", func(t *testing.T) {
		owner := claimed(t, "ORDER-OWNED")
		dup := newTask(t, "")
		dup.OrderCode = "ORDER-OWNED"
		if _, _, err := s.Create(ctx, "alice", dup, []byte("job")); err != nil {
			t.Fatal(err)
		}
		if err := s.SavePlan(ctx, "alice", dup.GetTaskId(), "ORDER-OWNED", []byte("plan")); !errors.Is(err, taskstore.ErrOrderClaimed) {
			t.Fatalf("SavePlan(dup) = %v, want ErrOrderClaimed", err)
		}
		if err := end["failed"](dup.GetTaskId()); err != nil {
			t.Fatal(err)
		}
		third := newTask(t, "")
		third.OrderCode = "ORDER-OWNED"
		if _, _, err := s.Create(ctx, "alice", third, []byte("job")); err != nil {
			t.Fatal(err)
		}
		if err := s.SavePlan(ctx, "alice", third.GetTaskId(), "ORDER-OWNED", []byte("plan")); !errors.Is(err, taskstore.ErrOrderClaimed) {
			t.Errorf("SavePlan(third) = %v, want ErrOrderClaimed: %s still owns the code", err, owner)
		}
	})
}

// TestRecordOutcomeNeverLeavesAPlanWithoutTTL: an outcome written after the
// plan key expired (near the end of the task's life) must not recreate it
// as a key that never expires.
func TestRecordOutcomeNeverLeavesAPlanWithoutTTL(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	task := newTask(t, "")
	if _, _, err := s.Create(ctx, "alice", task, []byte("job")); err != nil {
		t.Fatal(err)
	}
	id := task.GetTaskId()
	if err := s.SavePlan(ctx, "alice", id, "", []byte("plan")); err != nil {
		t.Fatal(err)
	}
	// The plan expired a moment before the task.
	rdb.Del(ctx, s.PlanKey("alice", id))
	err := s.RecordOutcome(ctx, "alice", id, id+"/1", []byte("out"))
	if ttl := rdb.PTTL(ctx, s.PlanKey("alice", id)).Val(); ttl == -1 {
		t.Errorf("plan key recreated without a TTL (RecordOutcome = %v)", err)
	}
	// And when the task itself is gone, nothing is written at all.
	rdb.Del(ctx, s.TaskKey("alice", id), s.PlanKey("alice", id))
	_ = s.RecordOutcome(ctx, "alice", id, id+"/2", []byte("out"))
	if n := rdb.Exists(ctx, s.PlanKey("alice", id)).Val(); n != 0 {
		t.Errorf("RecordOutcome of a gone task created its plan key")
	}
}

// TestRecordRequestedOnlyUnderTheLeaseOfAProcessingTask: the mark that a
// shipment is about to be requested is written only by the lease's holder
// while the task is PROCESSING; a lapsed holder, and anyone after the task
// ended or went, is refused and writes nothing.
func TestRecordRequestedOnlyUnderTheLeaseOfAProcessingTask(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	start := func() (string, *taskstore.Fence) {
		task := newTask(t, "")
		if _, _, err := s.Create(ctx, "alice", task, []byte("job")); err != nil {
			t.Fatal(err)
		}
		id := task.GetTaskId()
		if err := s.SavePlan(ctx, "alice", id, "", []byte("plan")); err != nil {
			t.Fatal(err)
		}
		l, err := s.AcquireLease(ctx, "alice", id, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return id, &taskstore.Fence{Key: l.Key, Token: l.Token}
	}
	tests := []struct {
		name   string
		change func(id string, fence *taskstore.Fence) *taskstore.Fence
		want   error
	}{
		{"holder of a processing task", func(_ string, f *taskstore.Fence) *taskstore.Fence { return f }, nil},
		{"lapsed holder, lease taken by another", func(id string, f *taskstore.Fence) *taskstore.Fence {
			rdb.Del(ctx, f.Key)
			if _, err := s.AcquireLease(ctx, "alice", id, time.Minute); err != nil {
				t.Fatal(err)
			}
			return f
		}, taskstore.ErrFenced},
		{"task cancelled", func(id string, f *taskstore.Fence) *taskstore.Fence {
			if _, err := s.Cancel(ctx, "alice", id, 10007, "task cancelled"); err != nil {
				t.Fatal(err)
			}
			return f
		}, taskstore.ErrTerminal},
		{"task expired", func(id string, f *taskstore.Fence) *taskstore.Fence {
			rdb.Del(ctx, s.TaskKey("alice", id), s.PlanKey("alice", id))
			return f
		}, taskstore.ErrExpired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			id, fence := start()
			fence = tt.change(id, fence)
			err := s.RecordRequested(ctx, "alice", id, id+"/1", []byte("requested"), fence)
			if !errors.Is(err, tt.want) {
				t.Fatalf("RecordRequested() = %v, want %v", err, tt.want)
			}
			_, outcomes, perr := s.Plan(ctx, "alice", id)
			if perr != nil {
				t.Fatal(perr)
			}
			if _, written := outcomes[id+"/1"]; written != (tt.want == nil) {
				t.Errorf("mark written = %v, want %v", written, tt.want == nil)
			}
		})
	}
}

// TestHoldClaim: a task keeps the claim it holds, takes a free one back
// with its own remaining TTL, and is told which task holds a claim it
// lost; a task that is gone holds nothing.
func TestHoldClaim(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	task := newTask(t, "")
	task.OrderCode = "ORD-HOLD"
	if _, _, err := s.Create(ctx, "alice", task, []byte("job")); err != nil {
		t.Fatal(err)
	}
	id, key := task.GetTaskId(), s.OrderKey("alice", "ORD-HOLD")
	if err := s.SavePlan(ctx, "alice", id, "ORD-HOLD", []byte("plan")); err != nil {
		t.Fatal(err)
	}
	if err := s.HoldClaim(ctx, "alice", id, "ORD-HOLD"); err != nil {
		t.Errorf("HoldClaim(held) = %v, want nil", err)
	}

	rdb.Del(ctx, key)
	if err := s.HoldClaim(ctx, "alice", id, "ORD-HOLD"); err != nil {
		t.Errorf("HoldClaim(free) = %v, want nil", err)
	}
	if owner := rdb.Get(ctx, key).Val(); owner != id {
		t.Errorf("claim after HoldClaim(free) = %q, want %q", owner, id)
	}
	if ttl := rdb.PTTL(ctx, key).Val(); ttl <= 50*time.Minute || ttl > time.Hour {
		t.Errorf("claim TTL = %v, want the task's (about 1 h)", ttl)
	}

	rdb.Set(ctx, key, "another-task", time.Hour)
	err := s.HoldClaim(ctx, "alice", id, "ORD-HOLD")
	var claimed *taskstore.ClaimedError
	if !errors.As(err, &claimed) || claimed.Holder != "another-task" || claimed.OrderCode != "ORD-HOLD" {
		t.Errorf("HoldClaim(taken) = %v, want a ClaimedError naming another-task", err)
	}
	if owner := rdb.Get(ctx, key).Val(); owner != "another-task" {
		t.Errorf("claim after HoldClaim(taken) = %q, want it left to another-task", owner)
	}

	if err := s.HoldClaim(ctx, "alice", "AAAAAAAAAAAAAAAAAAAAAA", "ORD-GONE"); !errors.Is(err, taskstore.ErrNotFound) {
		t.Errorf("HoldClaim(missing task) = %v, want ErrNotFound", err)
	}
	if n := rdb.Exists(ctx, s.OrderKey("alice", "ORD-GONE")).Val(); n != 0 {
		t.Errorf("a missing task took a claim")
	}
	if err := s.HoldClaim(ctx, "alice", id, ""); err != nil {
		t.Errorf("HoldClaim(no order code) = %v, want nil", err)
	}
}

// TestTakeTaskStoresAnOfferedPlan takes a task's lease and stores the plan
// offered with it, with the order-code claim, in one round trip, and stores
// nothing where SavePlan would not: a plan stored before is kept (and
// returned), an order code another task owns is reported with its holder,
// a held lease or a task no longer PROCESSING stores nothing.
func TestTakeTaskStoresAnOfferedPlan(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	create := func(orderCode string) string { return createTask(t, s, "alice", orderCode) }
	fresh, planned, held, cancelled, rival, owner := create("O-1"), create("O-2"), create("O-3"), create("O-4"), create("O-5"), create("O-5")
	if err := s.SavePlan(ctx, "alice", planned, "O-2", []byte("earlier")); err != nil {
		t.Fatal(err)
	}
	if err := s.SavePlan(ctx, "alice", owner, "O-5", []byte("owner's")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.AcquireLease(ctx, "alice", held, time.Minute); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Cancel(ctx, "alice", cancelled, 0, ""); err != nil {
		t.Fatal(err)
	}
	_ = s.AcquireLeaseStatus(ctx, "bob", "warm-up", time.Second, 0) // loads the script
	hook := &slowPipelines{}
	rdb.AddHook(hook)
	for _, tc := range []struct {
		name, id, orderCode string
		want                taskstore.Offered
		wantPlan, wantClaim string // "": none
		wantHolder          string
	}{
		{"fresh", fresh, "O-1", taskstore.OfferStored, "offered", fresh, ""},
		{"a plan stored before", planned, "O-2", taskstore.OfferNotStored, "earlier", planned, ""},
		{"lease held", held, "O-3", taskstore.OfferNotStored, "", "", ""},
		{"cancelled", cancelled, "O-4", taskstore.OfferNotStored, "", "", ""},
		{"order code owned by another task", rival, "O-5", taskstore.OfferClaimed, "", owner, owner},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := hook.trips()
			c := s.TakeTask(ctx, "alice", tc.id, time.Minute, 1, taskstore.Offer{Plan: []byte("offered"), OrderCode: tc.orderCode})
			if n := hook.trips() - before; n != 1 {
				t.Errorf("TakeTask took %d round trips, want 1", n)
			}
			if c.Offered != tc.want || c.Holder != tc.wantHolder {
				t.Errorf("TakeTask() offered = %v, holder %q; want %v, %q", c.Offered, c.Holder, tc.want, tc.wantHolder)
			}
			if tc.name != "lease held" && string(c.Plan) != tc.wantPlan {
				t.Errorf("TakeTask() plan = %q, want %q", c.Plan, tc.wantPlan)
			}
			stored, _, err := s.Plan(ctx, "alice", tc.id)
			if err != nil || string(stored) != tc.wantPlan {
				t.Errorf("Plan() after TakeTask = %q, %v; want %q", stored, err, tc.wantPlan)
			}
			if got, _ := rdb.Get(ctx, s.OrderKey("alice", tc.orderCode)).Result(); got != tc.wantClaim {
				t.Errorf("claim of %s = %q, want %q", tc.orderCode, got, tc.wantClaim)
			}
			if tc.want == taskstore.OfferStored {
				if ttl := rdb.PTTL(ctx, s.PlanKey("alice", tc.id)).Val(); ttl <= 0 || ttl > time.Hour {
					t.Errorf("plan TTL = %v, want the task's", ttl)
				}
			}
		})
	}
}

// createTask creates a PROCESSING task of member for orderCode and
// returns its id.
func createTask(t *testing.T, s *taskstore.Store, member, orderCode string) string {
	t.Helper()
	task := newTask(t, "")
	task.OrderCode = orderCode
	if _, _, err := s.Create(context.Background(), member, task, []byte("job")); err != nil {
		t.Fatal(err)
	}
	return task.GetTaskId()
}

// replyLengths records the length of each array reply of the pipelines
// it sees.
type replyLengths struct {
	mu   sync.Mutex
	lens []int
}

func (h *replyLengths) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *replyLengths) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *replyLengths) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.mu.Lock()
		defer h.mu.Unlock()
		for _, c := range cmds {
			if v, ok := c.(*redis.Cmd); ok {
				if a, ok := v.Val().([]any); ok {
					h.lens = append(h.lens, len(a))
				}
			}
		}
		return err
	}
}

// A plan TakeTask stores is not sent back: the caller has it.
func TestTakeTaskDoesNotSendAStoredOfferBack(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := taskstore.New(rdb, taskstore.Options{Prefix: prefix, TTL: time.Hour})
	id := createTask(t, s, "alice", "O-1")
	hook := &replyLengths{}
	rdb.AddHook(hook)
	offered := []byte(strings.Repeat("p", 2000))
	c := s.TakeTask(ctx, "alice", id, time.Minute, 1, taskstore.Offer{Plan: offered, OrderCode: "O-1"})
	if c.Offered != taskstore.OfferStored || string(c.Plan) != string(offered) || len(c.Outcomes) != 0 {
		t.Fatalf("TakeTask() = offered %v, plan of %d bytes, %d outcomes; want stored, the offer, none", c.Offered, len(c.Plan), len(c.Outcomes))
	}
	hook.mu.Lock()
	defer hook.mu.Unlock()
	if len(hook.lens) != 1 || hook.lens[0] != 6 {
		t.Errorf("script replies of %v values, want one of 6 (the plan hash not read back)", hook.lens)
	}
}
