package taskstore

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
)

// A worker's plan for a task and the member's order-code claims live in the
// member's keyspace beside the task, so one script can check the task, store
// the plan and claim the order code in one Redis Cluster slot. The store
// keeps the plan and the shipment outcomes as opaque bytes; the worker owns
// their encoding.

var (
	// ErrPlanExists means a plan was already stored for the task.
	ErrPlanExists = errors.New("plan already stored")
	// ErrOrderClaimed means another task of the member owns the order code.
	ErrOrderClaimed = errors.New("order code owned by another task")
)

// ClaimedError is ErrOrderClaimed naming the order code and the task that
// holds it.
type ClaimedError struct {
	OrderCode string
	// Holder is the id of the member's task that holds the order code.
	Holder string
}

func (e *ClaimedError) Error() string {
	return fmt.Sprintf("order code %s owned by task %s", e.OrderCode, e.Holder)
}

// Is makes a ClaimedError match ErrOrderClaimed.
func (e *ClaimedError) Is(target error) bool { return target == ErrOrderClaimed }

// outcomePrefix starts the plan hash's shipment outcome fields.
const outcomePrefix = "s:"

// storePlanLua defines the Lua function both savePlanScript and
// leaseStatusScript store a plan with: once, with the member's claim of
// the order code, both expiring with the task: at its very deadline
// (PEXPIRETIME), which a TTL read and set at two commands of a script would
// miss by the script's own run time on a Redis that reads its clock at
// each command (before 7.2).
// store_plan(plan hash, order claim, task hash, plan, task id, "1" to claim)
// returns 1 stored, 2 a plan stored before (and it), 0 the order code owned
// by another task (and its owner), -1 the task gone.
const storePlanLua = `
local function store_plan(planKey, orderKey, taskKey, plan, id, claim)
  local at = redis.call('PEXPIRETIME', taskKey)
  if at <= 0 then return -1, '' end
  local existing = redis.call('HGET', planKey, 'plan')
  if existing then return 2, existing end
  if claim == '1' then
    local owner = redis.call('GET', orderKey)
    if owner and owner ~= id then return 0, owner end
    redis.call('SET', orderKey, id, 'PXAT', at)
  end
  redis.call('HSET', planKey, 'plan', plan)
  redis.call('PEXPIREAT', planKey, at)
  return 1, plan
end
`

// savePlanScript stores a task's plan once (see storePlanLua).
// KEYS[1] plan hash, KEYS[2] order claim (unused without a claim),
// KEYS[3] task hash.
// ARGV[1] plan, ARGV[2] task id, ARGV[3] "1" to claim the order code.
// Returns {1, plan} stored, {2, plan} the plan stored before, {0, owner}
// when another task owns the order code, {-1, ""} when the task is gone.
var savePlanScript = redis.NewScript(storePlanLua + `
-- KEYS plan, order, task | ARGV plan, id, claim | returns {1 saved|2 had one|0 claimed|-1 gone, plan or owner}
local planKey, orderKey, taskKey = KEYS[1], KEYS[2], KEYS[3]
local code, v = store_plan(planKey, orderKey, taskKey, ARGV[1], ARGV[2], ARGV[3])
return {code, v}`)

// SavePlan stores plan for member's task id once, together with the task's
// claim of orderCode (no claim when orderCode is empty); both expire with
// the task. It returns ErrPlanExists when a plan was stored before,
// ErrOrderClaimed when another task owns the order code, and ErrNotFound
// or ErrExpired when the task is gone.
func (s *Store) SavePlan(ctx context.Context, member, id, orderCode string, plan []byte) error {
	claim, orderKey := "1", s.OrderKey(member, orderCode)
	if orderCode == "" {
		claim, orderKey = "0", s.OrderKey(member, "-")
	}
	res, err := savePlanScript.Run(ctx, s.rdb, []string{s.PlanKey(member, id), orderKey, s.TaskKey(member, id)},
		plan, id, claim).Slice()
	if err != nil {
		return fmt.Errorf("store plan of task %s: %w", id, err)
	}
	switch res[0].(int64) {
	case 1:
		return nil
	case 2:
		return ErrPlanExists
	case 0:
		return ErrOrderClaimed
	default:
		return s.missing(ctx, member, id)
	}
}

// holdClaimScript makes sure a task holds the member's claim of its order
// code: it keeps a claim the task holds, takes a free one expiring at the
// task's deadline, and reports the holder of a claim another task took.
// KEYS[1] order claim, KEYS[2] task hash; ARGV[1] task id.
// Returns {1, ""} held, {0, holder} held by another task, {-1, ""} when the
// task is gone.
var holdClaimScript = redis.NewScript(`
-- KEYS order, task | ARGV id | returns {1 held|0 other holder|-1 gone, holder}
local orderKey, taskKey = KEYS[1], KEYS[2]
local at = redis.call('PEXPIRETIME', taskKey)
if at <= 0 then return {-1, ''} end
local holder = redis.call('GET', orderKey)
if holder and holder ~= ARGV[1] then return {0, holder} end
if not holder then redis.call('SET', orderKey, ARGV[1], 'PXAT', at) end
return {1, ''}`)

// HoldClaim makes sure member's task id holds its claim of orderCode
// before work resumes from a stored plan: a free claim is taken again
// (it expires with the task), a claim another task took is a
// *ClaimedError (ErrOrderClaimed). An empty orderCode holds nothing.
// ErrNotFound or ErrExpired when the task is gone.
func (s *Store) HoldClaim(ctx context.Context, member, id, orderCode string) error {
	if orderCode == "" {
		return nil
	}
	res, err := holdClaimScript.Run(ctx, s.rdb, []string{s.OrderKey(member, orderCode), s.TaskKey(member, id)}, id).Slice()
	if err == nil && len(res) != 2 {
		err = fmt.Errorf("unexpected reply %v", res)
	}
	if err != nil {
		return fmt.Errorf("hold order claim of task %s: %w", id, err)
	}
	switch n, _ := res[0].(int64); n {
	case 1:
		return nil
	case 0:
		holder, _ := res[1].(string)
		return &ClaimedError{OrderCode: orderCode, Holder: holder}
	default:
		return s.missing(ctx, member, id)
	}
}

// Plan returns the plan stored for member's task id (nil when there is
// none) and the outcomes recorded with RecordOutcome, by shipment key.
func (s *Store) Plan(ctx context.Context, member, id string) (plan []byte, outcomes map[string][]byte, err error) {
	fields, err := s.rdb.HGetAll(ctx, s.PlanKey(member, id)).Result()
	if err != nil {
		return nil, nil, fmt.Errorf("load plan of task %s: %w", id, err)
	}
	plan, outcomes = planOf(fields)
	return plan, outcomes, nil
}

// planOf splits a plan hash's fields into the plan (nil when there is
// none) and the outcomes by shipment key.
func planOf(fields map[string]string) (plan []byte, outcomes map[string][]byte) {
	outcomes = make(map[string][]byte)
	for f, v := range fields {
		if key, ok := strings.CutPrefix(f, outcomePrefix); ok {
			outcomes[key] = []byte(v)
		}
	}
	if p, ok := fields["plan"]; ok {
		plan = []byte(p)
	}
	return plan, outcomes
}

// recordRequestedScript marks one shipment requested in a task's plan hash
// (expiring at the task's deadline), only while the task is PROCESSING and
// the lease key still holds the writer's token.
// KEYS[1] plan hash, KEYS[2] task hash, KEYS[3] lease key.
// ARGV[1] field, ARGV[2] outcome, ARGV[3] lease token, ARGV[4] the
// PROCESSING status.
// Returns 1 written, -1 when the task is gone, 0 when it is no longer
// PROCESSING, -2 when the lease holds another token.
var recordRequestedScript = redis.NewScript(`
-- KEYS plan, task, lease | ARGV field, outcome, token, PROCESSING | returns 1, 0, -1, -2
local planKey, taskKey, leaseKey = KEYS[1], KEYS[2], KEYS[3]
local at = redis.call('PEXPIRETIME', taskKey)
if at <= 0 then return -1 end
local s = redis.call('HGET', taskKey, 's')
if not s then return -1 end
if s ~= ARGV[4] then return 0 end
if redis.call('GET', leaseKey) ~= ARGV[3] then return -2 end
redis.call('HSET', planKey, ARGV[1], ARGV[2])
redis.call('PEXPIREAT', planKey, at)
return 1`)

// RecordRequested stores outcome for the shipment key of member's task id
// (the mark that the shipment is about to be requested) like
// RecordOutcome, but only under fence and while the task is PROCESSING:
// whoever takes the lease next, or whoever finished the task, read the
// plan hash after the mark, so a shipment is requested only if they know
// it may exist. It returns ErrFenced when the lease is no longer fence's,
// ErrTerminal when the task has ended, and ErrNotFound or ErrExpired when
// it is gone.
func (s *Store) RecordRequested(ctx context.Context, member, id, key string, outcome []byte, fence *Fence) error {
	n, err := s.runScript(ctx, s.work, recordRequestedScript,
		[]string{s.PlanKey(member, id), s.TaskKey(member, id), fence.Key},
		outcomePrefix+key, outcome, fence.Token, int(taskv1.TaskStatus_TASK_STATUS_PROCESSING)).Int()
	if err != nil {
		return fmt.Errorf("mark shipment %s of task %s requested: %w", key, id, err)
	}
	switch n {
	case 1:
		return nil
	case 0:
		return ErrTerminal
	case -2:
		return ErrFenced
	default:
		return s.missing(ctx, member, id)
	}
}

// recordOutcomeScript stores one shipment outcome in a task's plan hash
// expiring at the task's deadline, so a write near the end of the task's
// life never leaves a plan key that does not expire.
// KEYS[1] plan hash, KEYS[2] task hash; ARGV[1] field, ARGV[2] outcome.
// Returns 1 written, -1 when the task is gone.
var recordOutcomeScript = redis.NewScript(`
-- KEYS plan, task | ARGV field, outcome | returns 1 written, -1 gone
local planKey, taskKey = KEYS[1], KEYS[2]
local at = redis.call('PEXPIRETIME', taskKey)
if at <= 0 then return -1 end
redis.call('HSET', planKey, ARGV[1], ARGV[2])
redis.call('PEXPIREAT', planKey, at)
return 1`)

// RecordOutcome stores the outcome of the shipment key of member's task id
// in its plan hash, which expires with the task. It returns ErrNotFound or
// ErrExpired when the task is gone.
func (s *Store) RecordOutcome(ctx context.Context, member, id, key string, outcome []byte) error {
	n, err := s.runScript(ctx, s.work, recordOutcomeScript, []string{s.PlanKey(member, id), s.TaskKey(member, id)},
		outcomePrefix+key, outcome).Int()
	if err != nil {
		return fmt.Errorf("record shipment %s of task %s: %w", key, id, err)
	}
	if n != 1 {
		return s.missing(ctx, member, id)
	}
	return nil
}
