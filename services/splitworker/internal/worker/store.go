package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	jobv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/job/v1"
	"github.com/orderflow/orderflow/pkg/provider/fulfilment"
	"github.com/orderflow/orderflow/services/splitworker/internal/plan"
)

// The worker's keys share the task's hash tag {m:<member>}, so one script
// can touch the task, its plan and the member's order claims.

// PlanKey is the hash holding task id's plan: field "plan" is the plan as
// JSON, field "s:<idempotency key>" the outcome of each finished shipment.
func (w *Worker) PlanKey(member, id string) string {
	return w.opts.Prefix + ":{m:" + member + "}:plan:" + id
}

// OrderKey holds the id of the task that owns member's order code.
func (w *Worker) OrderKey(member, orderCode string) string {
	return w.opts.Prefix + ":{m:" + member + "}:order:" + orderCode
}

// errDuplicateOrder means another task owns the order code.
var errDuplicateOrder = errors.New("order code owned by another task")

// outcome is how a shipment ended: a shipment id, or a failure of all its
// items.
type outcome struct {
	JobID      string        `json:"jobId,omitempty"`
	ShipmentID string        `json:"shipmentId,omitempty"`
	Failure    *plan.Failure `json:"failure,omitempty"`
}

// savePlanScript stores a task's plan once, with the member's claim of the
// order code, both expiring with the task.
// KEYS[1] plan hash, KEYS[2] order claim, KEYS[3] task hash.
// ARGV[1] plan JSON, ARGV[2] task id, ARGV[3] "1" to claim the order code.
// Returns {1, plan} stored, {2, plan} the plan stored before, {0, owner}
// when another task owns the order code, {-1, ""} when the task is gone.
var savePlanScript = redis.NewScript(`
local ttl = redis.call('PTTL', KEYS[3])
if ttl <= 0 then return {-1, ''} end
local existing = redis.call('HGET', KEYS[1], 'plan')
if existing then return {2, existing} end
if ARGV[3] == '1' then
  local owner = redis.call('GET', KEYS[2])
  if owner and owner ~= ARGV[2] then return {0, owner} end
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ttl)
end
redis.call('HSET', KEYS[1], 'plan', ARGV[1])
redis.call('PEXPIRE', KEYS[1], ttl)
return {1, ARGV[1]}`)

// loadPlan returns the task's stored plan and the recorded outcomes of its
// shipments by idempotency key, or builds and stores the plan (with the
// order-code claim) when there is none yet. It returns errDuplicateOrder
// when another task owns the order code.
func (w *Worker) loadPlan(ctx context.Context, job *jobv1.SplitJob) (plan.Plan, map[string]outcome, error) {
	member, id := job.GetMemberId(), job.GetTaskId()
	var p plan.Plan
	done := make(map[string]outcome)
	fields, err := w.rdb.HGetAll(ctx, w.PlanKey(member, id)).Result()
	if err != nil {
		return p, nil, fmt.Errorf("load plan: %w", err)
	}
	if data, ok := fields["plan"]; ok {
		w.log.DebugContext(ctx, "reusing stored plan")
		if err := decodeJSON("plan", []byte(data), &p); err != nil {
			return p, nil, err
		}
		for f, v := range fields {
			key, ok := strings.CutPrefix(f, "s:")
			if !ok {
				continue
			}
			var o outcome
			if err := decodeJSON("shipment outcome", []byte(v), &o); err != nil {
				return p, nil, err
			}
			done[key] = o
		}
		return p, done, nil
	}
	cat, err := w.fc.Catalogue(ctx)
	if err != nil {
		return p, nil, fulfilmentErr("read catalogue", err)
	}
	m := fulfilment.Member{MemberID: member}
	if needsSettlement(cat, job) {
		if m, err = w.fc.Member(ctx, member); err != nil {
			return p, nil, fulfilmentErr("read member", err)
		}
	}
	p = plan.Build(id, job.GetItems(), cat, m, w.opts.Plan)
	data, err := json.Marshal(p)
	if err != nil {
		return p, nil, permanent(fmt.Errorf("encode plan: %w", err))
	}
	claim, orderKey := "1", w.OrderKey(member, job.GetOrderCode())
	if job.GetOrderCode() == "" {
		claim, orderKey = "0", w.OrderKey(member, "-")
	}
	res, err := savePlanScript.Run(ctx, w.rdb, []string{w.PlanKey(member, id), orderKey, w.store.TaskKey(member, id)},
		data, id, claim).Slice()
	if err != nil {
		return p, nil, fmt.Errorf("store plan: %w", err)
	}
	switch res[0].(int64) {
	case -1:
		return p, nil, errGone
	case 0:
		return p, nil, errDuplicateOrder
	case 2:
		// Stored meanwhile by a holder of an older lease; its outcomes
		// are read on the next delivery.
		return p, nil, fmt.Errorf("plan stored concurrently: %w", errRetry)
	}
	w.log.InfoContext(ctx, "plan stored", "shipments", len(p.Shipments), "item_failures", len(p.Failures))
	return p, done, nil
}

// needsSettlement reports whether the job orders a SKU that requires a
// settled bill, so the member's standing must be read.
func needsSettlement(cat fulfilment.Catalogue, job *jobv1.SplitJob) bool {
	settle := make(map[string]bool)
	for _, k := range cat.SKUs {
		if k.SettlementRequired {
			settle[k.SKU] = true
		}
	}
	for _, it := range job.GetItems() {
		if settle[it.GetSku()] {
			return true
		}
	}
	return false
}

// recordOutcome stores a finished shipment's outcome in the plan hash
// (whose TTL it keeps).
func (w *Worker) recordOutcome(ctx context.Context, member, id, key string, o outcome) error {
	data, err := json.Marshal(o)
	if err != nil {
		return permanent(fmt.Errorf("encode shipment outcome: %w", err))
	}
	if err := w.rdb.HSet(ctx, w.PlanKey(member, id), "s:"+key, data).Err(); err != nil {
		return fmt.Errorf("record shipment %s: %w", key, err)
	}
	return nil
}

// fulfilmentErr passes transient fulfilment errors on (to requeue) and
// marks the others permanent.
func fulfilmentErr(what string, err error) error {
	if fulfilment.IsTransient(err) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return permanent(fmt.Errorf("%s: %w", what, err))
}
