package app

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/orderflow/orderflow/pkg/engine/eventrate"
	"github.com/orderflow/orderflow/pkg/engine/inflight"
	"github.com/orderflow/orderflow/pkg/engine/slotpool"
	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	errcodev1 "github.com/orderflow/orderflow/pkg/gen/orderflow/errcode/v1"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/platform/auth"
	"github.com/orderflow/orderflow/pkg/platform/errmsg"
	"github.com/orderflow/orderflow/pkg/platform/redisconn"
	"github.com/orderflow/orderflow/pkg/testkit/testenv"
)

func (s *stack) adminToken(t testing.TB, member string) string {
	t.Helper()
	tok, err := auth.Issue(auth.Config{Secret: []byte(s.cfg.JWT.Secret.Reveal())}, member, time.Now(), time.Hour, auth.RoleAdmin)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

var opsRoutes = []struct{ method, path, body string }{
	{"GET", "/v1/ops/overview", ""},
	{"GET", "/v1/ops/rates", ""},
	{"GET", "/v1/ops/tasks/processing", ""},
	{"GET", "/v1/ops/tasks?memberId=alice", ""},
	{"GET", "/v1/ops/members/alice/tasks/AAAAAAAAAAAAAAAAAAAAAA", ""},
	{"POST", "/v1/ops/members/alice/tasks/AAAAAAAAAAAAAAAAAAAAAA:retry", "{}"},
	{"POST", "/v1/ops/members/alice/tasks/AAAAAAAAAAAAAAAAAAAAAA:fail", `{"errorCode":10005}`},
	{"POST", "/v1/ops/members/alice/tasks/AAAAAAAAAAAAAAAAAAAAAA:cancel", "{}"},
	{"GET", "/v1/ops/dead-letters", ""},
	{"POST", "/v1/ops/members/alice/dead-letters/AAAAAAAAAAAAAAAAAAAAAA:replay", "{}"},
	{"POST", "/v1/ops/dead-letters:replay", "{}"},
	{"POST", "/v1/ops/members/alice/dead-letters/AAAAAAAAAAAAAAAAAAAAAA:discard", "{}"},
	{"GET", "/v1/ops/slot-pool", ""},
	{"PUT", "/v1/ops/slot-pool/capacity", `{"capacity":2}`},
	{"POST", "/v1/ops/slot-pool:resetToConfiguration", "{}"},
	{"POST", "/v1/ops/slot-pool/holders/tok:release", "{}"},
	{"GET", "/v1/ops/members/alice/payments/PAY-1", ""},
	{"POST", "/v1/ops/members/alice/payments/PAY-1:cancelTracking", "{}"},
	{"GET", "/v1/ops/payments/PAY-1", ""},
	{"GET", "/v1/ops/stuck-payments", ""},
	{"POST", "/v1/ops/payments/PAY-1:runCheck", "{}"},
	{"POST", "/v1/ops/payments/PAY-1:reschedule", `{"checkTime":"2030-01-01T00:00:00Z"}`},
	{"GET", "/v1/ops/audit", ""},
}

func TestOpsNeedsTheAdminRole(t *testing.T) {
	s := startGateway(t, nil)
	member := s.token(t, "alice")
	for _, r := range opsRoutes {
		if code, body := s.do(t, r.method, r.path, "", r.body); code != http.StatusUnauthorized {
			t.Errorf("%s %s anonymous = %d %v, want 401", r.method, r.path, code, body)
		}
		if code, body := s.do(t, r.method, r.path, member, r.body); code != http.StatusForbidden || reason(body) != "PERMISSION_DENIED" {
			t.Errorf("%s %s as a member = %d %v, want 403 PERMISSION_DENIED", r.method, r.path, code, body)
		}
	}
	if code, body := s.do(t, "GET", "/v1/ops/overview", s.adminToken(t, "root"), ""); code != http.StatusOK {
		t.Errorf("overview as admin = %d %v, want 200", code, body)
	}
	// A service's identity is for the internal listeners only: on the
	// public edge it is no admin credential.
	if code, body := s.do(t, "GET", "/v1/ops/overview", s.cfg.ReconcilerToken.Reveal(), ""); code != http.StatusUnauthorized {
		t.Errorf("overview with the service token = %d %v, want 401", code, body)
	}
	// Refused calls change nothing and are not audited as actions.
	code, body := s.do(t, "GET", "/v1/ops/audit", s.adminToken(t, "root"), "")
	if events, _ := body["events"].([]any); code != http.StatusOK || len(events) != 0 {
		t.Errorf("audit after refused calls = %d %v, want no events", code, body)
	}
}

func TestOpsDeadLetterReplayRetryFailAndAudit(t *testing.T) {
	s := startGateway(t, nil)
	ctx := context.Background()
	admin := s.adminToken(t, "root")
	member := s.token(t, "alice")
	submit := func(code string) string {
		c, body := s.do(t, "POST", "/v1/order-splits", member, `{"orderCode":"`+code+`","items":[{"itemCode":"i1","sku":"SKU-1","quantity":1}]}`)
		if c != http.StatusOK {
			t.Fatalf("submit = %d %v", c, body)
		}
		return body["taskId"].(string)
	}
	dead, stuck := submit("ORD-D"), submit("ORD-S")
	if n := s.queued(t); n != 2 {
		t.Fatalf("queued = %d, want 2", n)
	}

	// Overview and the processing list show both tasks.
	_, ov := s.do(t, "GET", "/v1/ops/overview", admin, "")
	if tasks := ov["tasks"].(map[string]any); tasks["processing"] != "2" {
		t.Errorf("overview tasks = %v, want 2 processing", tasks)
	}
	if q := ov["queue"].(map[string]any); q["ready"] != "2" || q["error"] != "" {
		t.Errorf("overview queue = %v, want 2 ready", q)
	}
	if q, _ := ov["overflowQueue"].(map[string]any); q["name"] != s.names.Overflow || q["ready"] != "0" || q["error"] != "" {
		t.Errorf("overview overflowQueue = %v, want %s with 0 ready", q, s.names.Overflow)
	}
	// Error rates as the split-workers count them (two replicas here).
	rdb, _ := testenv.Redis(t)
	for _, add := range []map[string]int64{
		{eventrate.TaskFinished: 3, eventrate.TaskFailed + "10005": 2, eventrate.DeadLettered: 1},
		{eventrate.TaskFinished: 2, eventrate.TaskFailed + "10005": 1, eventrate.TaskFailed + "-1": 1},
	} {
		if err := eventrate.New(rdb, s.prefix).AddAll(ctx, add); err != nil {
			t.Fatal(err)
		}
	}
	_, ov = s.do(t, "GET", "/v1/ops/overview", admin, "")
	rates, _ := ov["errorRates"].([]any)
	if len(rates) != 2 || ov["errorRatesError"] != "" {
		t.Fatalf("overview errorRates = %v (%v), want two windows", rates, ov["errorRatesError"])
	}
	for _, r := range rates {
		r := r.(map[string]any)
		want := []any{map[string]any{"errorCode": float64(10005), "count": "3"}, map[string]any{"errorCode": float64(-1), "count": "1"}}
		if r["tasksFinished"] != "5" || r["tasksFailed"] != "4" || r["deadLettered"] != "1" || !cmp.Equal(r["failedByCode"], want) {
			t.Errorf("overview error rates = %v, want 5 finished, 4 failed (10005 ×3, -1 ×1), 1 dead-lettered", r)
		}
	}
	// Unacknowledged deliveries as the split-workers report them (two
	// replicas here); the counts of one that stopped reporting have left.
	board := inflight.New(rdb, s.prefix)
	for r, held := range map[string]map[string]int64{
		"sw-1": {inflight.Split: 3, inflight.Dead: 1}, "sw-2": {inflight.Split: 4, inflight.Overflow: 2},
	} {
		if err := board.Report(ctx, r, held, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	if err := board.Report(ctx, "sw-gone", map[string]int64{inflight.Split: 100}, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	time.Sleep(5 * time.Millisecond)
	_, ov = s.do(t, "GET", "/v1/ops/overview", admin, "")
	for name, want := range map[string]string{"queue": "7", "overflowQueue": "2", "deadLetterQueue": "1"} {
		if q := ov[name].(map[string]any); q["unacknowledged"] != want || q["reportingReplicas"] != float64(2) || q["unacknowledgedError"] != "" {
			t.Errorf("overview %s = %v, want %s unacknowledged reported by 2 replicas", name, q, want)
		}
	}
	_, list := s.do(t, "GET", "/v1/ops/tasks/processing?pageSize=1", admin, "")
	if tasks := list["tasks"].([]any); len(tasks) != 1 || list["nextPageToken"] == "" || list["total"] != "2" {
		t.Errorf("processing page 1 = %v, want 1 of 2 with a next token", list)
	}

	// The dead-letter consumer's record, as the split-worker writes it.
	s.deadLetter(t, "alice", dead)
	_, dl := s.do(t, "GET", "/v1/ops/dead-letters", admin, "")
	items, _ := dl["deadLetters"].([]any)
	if len(items) != 1 || items[0].(map[string]any)["replayable"] != true || items[0].(map[string]any)["orderCode"] != "ORD-D" {
		t.Fatalf("dead letters = %v, want the one replayable", dl)
	}
	_, byID := s.do(t, "GET", "/v1/ops/tasks?taskId="+dead, admin, "")
	if ts, _ := byID["tasks"].([]any); len(ts) != 1 || ts[0].(map[string]any)["memberId"] != "alice" {
		t.Errorf("find by id across members = %v, want alice's task", byID)
	}

	code, body := s.do(t, "POST", "/v1/ops/members/alice/dead-letters/"+dead+":replay", admin, "{}")
	if code != http.StatusOK || body["task"].(map[string]any)["status"] != "TASK_STATUS_PROCESSING" {
		t.Fatalf("replay = %d %v, want the task PROCESSING", code, body)
	}
	if n := s.queued(t); n != 3 {
		t.Errorf("queued after replay = %d, want 3 (the job republished)", n)
	}
	if code, body := s.do(t, "POST", "/v1/ops/members/alice/dead-letters/"+dead+":replay", admin, "{}"); code != http.StatusNotFound {
		t.Errorf("second replay = %d %v, want 404 (the dead letter is gone)", code, body)
	}

	// Retry republishes a stuck task's job; fail and cancel end tasks.
	// A split-worker replica working on it is named in its detail.
	// It took the task on its job's second delivery: attempts 2.
	worker := taskstore.New(rdb, taskstore.Options{Prefix: s.prefix, Replica: "splitworker-3.17"})
	c := worker.AcquireLeaseStatus(ctx, "alice", stuck, time.Minute, 2)
	if c.LeaseErr != nil || c.StatusErr != nil {
		t.Fatal(c.LeaseErr, c.StatusErr)
	}
	l := c.Lease
	if _, d := s.do(t, "GET", "/v1/ops/members/alice/tasks/"+stuck, admin, ""); field2(d, "lease", "replica") != "splitworker-3.17" || field2(d, "lease", "token") != l.Token || d["attempts"] != "2" {
		t.Errorf("task detail lease = %v, attempts %v; want token %s of replica splitworker-3.17, attempts 2", d["lease"], d["attempts"], l.Token)
	}
	if err := l.Release(ctx); err != nil {
		t.Fatal(err)
	}
	if code, body := s.do(t, "POST", "/v1/ops/members/alice/tasks/"+stuck+":retry", admin, "{}"); code != http.StatusOK {
		t.Fatalf("retry = %d %v", code, body)
	}
	if n := s.queued(t); n != 4 {
		t.Errorf("queued after retry = %d, want 4", n)
	}
	if code, body := s.do(t, "POST", "/v1/ops/members/alice/tasks/"+stuck+":fail", admin, `{"errorCode":12345}`); code != http.StatusBadRequest || field(body) != "errorCode" {
		t.Errorf("fail with an unknown code = %d %v, want 400 naming errorCode", code, body)
	}
	code, body = s.do(t, "POST", "/v1/ops/members/alice/tasks/"+stuck+":fail", admin, `{"errorCode":10006,"errorMsg":"fulfilment down"}`)
	if code != http.StatusOK || body["task"].(map[string]any)["errorCode"] != float64(10006) {
		t.Errorf("fail = %d %v", code, body)
	}
	if code, body := s.do(t, "POST", "/v1/ops/members/alice/tasks/"+stuck+":cancel", admin, "{}"); code != http.StatusBadRequest || reason(body) != "TASK_ALREADY_FINISHED" {
		t.Errorf("cancel of a failed task = %d %v, want 400 TASK_ALREADY_FINISHED", code, body)
	}
	if code, body := s.do(t, "POST", "/v1/ops/members/alice/tasks/"+dead+":cancel", admin, "{}"); code != http.StatusOK {
		t.Errorf("cancel = %d %v", code, body)
	}
	if code, body := s.do(t, "GET", "/v1/ops/members/alice/tasks/"+dead, admin, ""); code != http.StatusOK || body["task"].(map[string]any)["status"] != "TASK_STATUS_CANCELLED" {
		t.Errorf("detail = %d %v", code, body)
	}

	// Every mutation is in the audit stream with its actor, newest first.
	_, audit := s.do(t, "GET", "/v1/ops/audit?pageSize=10", admin, "")
	events, _ := audit["events"].([]any)
	var actions []string
	for _, e := range events {
		m := e.(map[string]any)
		if m["actor"] != "root" {
			t.Errorf("audit event %v: actor %v, want root", m, m["actor"])
		}
		actions = append(actions, m["action"].(string)+":"+m["result"].(string))
	}
	// The invalid FailTask (400) was refused before it was audited.
	want := []string{"CancelTask:ok", "CancelTask:task has already finished", "FailTask:ok", "RetryTask:ok", "ReplayDeadLetter:no dead letter recorded for this task", "ReplayDeadLetter:ok"}
	if len(actions) != len(want) {
		t.Fatalf("audit = %v, want %v", actions, want)
	}
	for i := range want {
		if actions[i] != want[i] {
			t.Errorf("audit[%d] = %q, want %q", i, actions[i], want[i])
		}
	}
}

func TestOpsSlotPool(t *testing.T) {
	s := startGateway(t, nil)
	ctx := context.Background()
	admin := s.adminToken(t, "root")
	rdb := redisconn.New(s.cfg.Redis)
	defer rdb.Close()
	pool := slotpool.New(rdb, slotpool.Options{Name: s.prefix + ":fulfilment", Capacity: 1, Lease: time.Minute, Replica: "splitworker-7.42"})
	if err := pool.SetCapacity(ctx, 1); err != nil {
		t.Fatal(err)
	}
	slot, err := pool.AcquireClass(ctx, "task-1/1", slotpool.Class{Group: "m-1"})
	if err != nil {
		t.Fatal(err)
	}
	_, body := s.do(t, "GET", "/v1/ops/slot-pool", admin, "")
	holders, _ := body["holders"].([]any)
	if len(holders) != 1 || holders[0].(map[string]any)["token"] != slot.Token || holders[0].(map[string]any)["replica"] != "splitworker-7.42" {
		t.Fatalf("slot pool = %v, want the holder with its replica", body)
	}
	groups, _ := body["stats"].(map[string]any)["groups"].([]any)
	if len(groups) != 1 || groups[0].(map[string]any)["group"] != "m-1" || groups[0].(map[string]any)["holding"] != float64(1) {
		t.Errorf("slot pool groups = %v, want m-1 holding 1", body["stats"])
	}
	if code, body := s.do(t, "PUT", "/v1/ops/slot-pool/capacity", admin, `{"capacity":-1}`); code != http.StatusBadRequest || field(body) != "capacity" {
		t.Errorf("capacity -1 = %d %v, want 400 naming capacity", code, body)
	}
	if code, body := s.do(t, "PUT", "/v1/ops/slot-pool/capacity", admin, `{"capacity":3}`); code != http.StatusOK || body["stats"].(map[string]any)["capacity"] != float64(3) {
		t.Errorf("capacity 3 = %d %v", code, body)
	}
	if code, body := s.do(t, "POST", "/v1/ops/slot-pool/holders/"+slot.Token+":release", admin, `{"reason":"replica gone"}`); code != http.StatusOK || body["stats"].(map[string]any)["inUse"] != float64(0) {
		t.Errorf("release = %d %v, want no slot in use", code, body)
	}
	if code, _ := s.do(t, "POST", "/v1/ops/slot-pool/holders/"+slot.Token+":release", admin, `{}`); code != http.StatusNotFound {
		t.Errorf("second release = %d, want 404", code)
	}
	fin, _ := pool.Finished(ctx, 1)
	if len(fin) != 1 || fin[0].Detail != "released by an operator: replica gone" {
		t.Errorf("finished = %+v, want the release recorded with its reason", fin)
	}
}

// TestOpsSlotPoolSharded runs the operations API on a running pool split
// over 3 shards (ORDERFLOW_SPLITWORKER_FULFILMENT_SHARDS=3, as the
// split-workers): it lists the holders of every shard, sums their counts,
// splits a new capacity over the shards and releases a holder on its shard.
func TestOpsSlotPoolSharded(t *testing.T) {
	s := startGateway(t, func(c *Config) { c.FulfilmentShards = 3 })
	ctx := context.Background()
	admin := s.adminToken(t, "root")
	rdb := redisconn.New(s.cfg.Redis)
	defer rdb.Close()
	pool := slotpool.NewSharded(rdb, slotpool.Options{Name: s.prefix + ":fulfilment", Capacity: 3, Lease: time.Minute}, 3)
	if err := pool.SetCapacity(ctx, 3); err != nil {
		t.Fatal(err)
	}
	var slots []*slotpool.Slot
	for i := range 3 {
		slot, err := pool.AcquireClass(ctx, fmt.Sprintf("task-%d/1", i), slotpool.Class{Group: "m-1"})
		if err != nil {
			t.Fatal(err)
		}
		slots = append(slots, slot)
	}
	_, body := s.do(t, "GET", "/v1/ops/slot-pool", admin, "")
	if holders, _ := body["holders"].([]any); len(holders) != 3 {
		t.Fatalf("slot pool = %v, want the 3 holders of every shard", body)
	}
	if stats := body["stats"].(map[string]any); stats["capacity"] != float64(3) || stats["inUse"] != float64(3) {
		t.Errorf("slot pool stats = %v, want capacity 3 and 3 in use", stats)
	}
	if code, body := s.do(t, "PUT", "/v1/ops/slot-pool/capacity", admin, `{"capacity":7}`); code != http.StatusOK || body["stats"].(map[string]any)["capacity"] != float64(7) {
		t.Errorf("capacity 7 = %d %v", code, body)
	}
	var caps []int
	for _, sh := range pool.Shards() {
		snap, err := sh.Snapshot(ctx)
		if err != nil {
			t.Fatal(err)
		}
		caps = append(caps, snap.Capacity)
	}
	if fmt.Sprint(caps) != "[3 2 2]" {
		t.Errorf("shard capacities after PUT 7 = %v, want [3 2 2]", caps)
	}
	for _, slot := range slots {
		if code, body := s.do(t, "POST", "/v1/ops/slot-pool/holders/"+slot.Token+":release", admin, `{"reason":"replica gone"}`); code != http.StatusOK {
			t.Errorf("release %s = %d %v", slot.JobID, code, body)
		}
		if err := slot.Renew(ctx); !errors.Is(err, slotpool.ErrLost) {
			t.Errorf("Renew() of %s after its release = %v, want ErrLost", slot.JobID, err)
		}
	}
	if code, body := s.do(t, "GET", "/v1/ops/slot-pool", admin, ""); code != http.StatusOK || body["stats"].(map[string]any)["inUse"] != nil && body["stats"].(map[string]any)["inUse"] != float64(0) {
		t.Errorf("slot pool after the releases = %d %v, want none in use", code, body)
	}
}

func TestDevLoginGrantsRolesInDevelopment(t *testing.T) {
	s := startGateway(t, nil)
	code, body := s.do(t, "POST", "/v1/dev/login", "", `{"memberId":"operator","roles":["admin"]}`)
	if code != http.StatusOK {
		t.Fatalf("dev login with roles = %d %v", code, body)
	}
	if code, body := s.do(t, "GET", "/v1/ops/overview", body["token"].(string), ""); code != http.StatusOK {
		t.Errorf("overview with the dev admin token = %d %v, want 200", code, body)
	}
	_, body = s.do(t, "POST", "/v1/dev/login", "", `{"memberId":"demo"}`)
	if code, _ := s.do(t, "GET", "/v1/ops/overview", body["token"].(string), ""); code != http.StatusForbidden {
		t.Errorf("overview with a dev member token = %d, want 403", code)
	}
	if code, body := s.do(t, "POST", "/v1/dev/login", "", `{"memberId":"operator","roles":["Admin!"]}`); code != http.StatusBadRequest {
		t.Errorf("dev login with a malformed role = %d %v, want 400", code, body)
	}
}

// TestOpsDiscardDeadLetter: discarding the dead letter of a task still
// PROCESSING (a replay in progress) fails it with the chosen code and that
// code's public message, and drops the record.
func TestOpsDiscardDeadLetter(t *testing.T) {
	s := startGateway(t, nil)
	ctx := context.Background()
	admin := s.adminToken(t, "root")
	c, body := s.do(t, "POST", "/v1/order-splits", s.token(t, "alice"), `{"orderCode":"ORD-X","items":[{"itemCode":"i1","sku":"SKU-1","quantity":1}]}`)
	if c != http.StatusOK {
		t.Fatalf("submit = %d %v", c, body)
	}
	id := body["taskId"].(string)
	if _, err := s.store.RecordDead(ctx, taskstore.DeadLetter{Member: "alice", TaskID: id, Reason: "delivery_limit", ErrorCode: 10009}); err != nil {
		t.Fatal(err)
	}
	code, got := s.do(t, "POST", "/v1/ops/members/alice/dead-letters/"+id+":discard", admin, `{"errorCode":10006}`)
	task, _ := got["task"].(map[string]any)
	if code != http.StatusOK || task["status"] != "TASK_STATUS_FAILED" || task["errorCode"] != float64(10006) ||
		task["errorMsg"] != errmsg.Message(errcodev1.ErrorCode_ERROR_CODE_FULFILMENT_UNAVAILABLE) {
		t.Fatalf("discard = %d %v, want the task FAILED 10006 with its catalogue message", code, got)
	}
	if code, again := s.do(t, "POST", "/v1/ops/members/alice/dead-letters/"+id+":discard", admin, "{}"); code != http.StatusNotFound {
		t.Errorf("second discard = %d %v, want 404 (record dropped)", code, again)
	}
}

// field2 returns body[a][b] ("" when absent).
func field2(body map[string]any, a, b string) any {
	m, _ := body[a].(map[string]any)
	if m == nil {
		return ""
	}
	return m[b]
}

// TestOpsReplayRefusedWhileAnotherTaskHoldsTheOrderCode: a dead-lettered
// task gave up its order code and the shopper submitted the order again;
// the new task holds the code. Replaying the dead letter (alone or with
// every other) is refused with the reason and the holder named, and the
// task stays FAILED with its dead letter kept for discarding.
func TestOpsReplayRefusedWhileAnotherTaskHoldsTheOrderCode(t *testing.T) {
	s := startGateway(t, nil)
	ctx := context.Background()
	admin := s.adminToken(t, "root")
	member := s.token(t, "alice")
	submit := func() string {
		c, body := s.do(t, "POST", "/v1/order-splits", member, `{"orderCode":"ORD-AGAIN","items":[{"itemCode":"i1","sku":"SKU-1","quantity":1}]}`)
		if c != http.StatusOK {
			t.Fatalf("submit = %d %v", c, body)
		}
		return body["taskId"].(string)
	}
	dead := submit()
	s.deadLetter(t, "alice", dead)
	again := submit()
	if err := s.store.SavePlan(ctx, "alice", again, "ORD-AGAIN", []byte("{}")); err != nil {
		t.Fatal(err)
	}

	code, body := s.do(t, "POST", "/v1/ops/members/alice/dead-letters/"+dead+":replay", admin, "{}")
	details, _ := body["details"].([]any)
	info := map[string]any{}
	for _, d := range details {
		if d := d.(map[string]any); d["reason"] != nil {
			info = d
		}
	}
	meta, _ := info["metadata"].(map[string]any)
	if code != http.StatusBadRequest || info["reason"] != "ORDER_CODE_CLAIMED" || meta["holderTaskId"] != again || meta["orderCode"] != "ORD-AGAIN" {
		t.Errorf("replay = %d %v, want 400 ORDER_CODE_CLAIMED naming the resubmitted task", code, body)
	}

	code, body = s.do(t, "POST", "/v1/ops/dead-letters:replay", admin, "{}")
	refused, _ := body["refused"].([]any)
	if code != http.StatusOK || body["skipped"] != float64(1) || body["replayed"] != float64(0) || len(refused) != 1 {
		t.Fatalf("replay all = %d %v, want 1 skipped, 1 refused", code, body)
	}
	if r := refused[0].(map[string]any); r["taskId"] != dead || r["memberId"] != "alice" || r["reason"] != "ORDER_CODE_CLAIMED" || r["message"] == "" {
		t.Errorf("refusal = %v, want the dead task, ORDER_CODE_CLAIMED and a message", r)
	}

	got, err := s.store.Get(ctx, "alice", dead)
	if err != nil || got.GetStatus() != taskv1.TaskStatus_TASK_STATUS_FAILED {
		t.Errorf("dead task after refused replays = %v, %v; want FAILED", got.GetStatus(), err)
	}
	if _, err := s.store.Dead(ctx, "alice", dead); err != nil {
		t.Errorf("dead letter after refused replays: %v, want kept", err)
	}
	if owner, err := s.store.OrderOwner(ctx, "alice", "ORD-AGAIN"); err != nil || owner != again {
		t.Errorf("order claim = %q, %v; want the resubmitted task's", owner, err)
	}
}

// deadLetter fails member's task 10009 and records its dead letter, as the
// split-worker's dead-letter consumer does.
func (s *stack) deadLetter(t *testing.T, member, id string) {
	t.Helper()
	ctx := context.Background()
	job, err := s.store.Job(ctx, member, id)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.store.Finish(ctx, member, id, nil, func(t *taskv1.Task) {
		t.Status, t.ErrorCode = taskv1.TaskStatus_TASK_STATUS_FAILED, 10009
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.store.RecordDead(ctx, taskstore.DeadLetter{Member: member, TaskID: id, Reason: "delivery_limit", Deliveries: 6, ErrorCode: 10009, Job: job}); err != nil {
		t.Fatal(err)
	}
}
