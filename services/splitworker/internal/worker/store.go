package worker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	errcodev1 "github.com/orderflow/orderflow/pkg/gen/orderflow/errcode/v1"
	jobv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/job/v1"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/provider/fulfilment"
	"github.com/orderflow/orderflow/services/splitworker/internal/plan"
)

// The plan, the shipment outcomes and the order-code claim are kept by the
// task store (taskstore.Store.SavePlan, Plan, RecordOutcome) in the
// member's keyspace; the worker owns their JSON encoding.

// outcome is how a shipment ended: a shipment id, or a failure of all its
// items. Before a shipment is requested its outcome is recorded as
// Requested only, so whoever fails the task as a whole knows the shipment
// may exist at the fulfilment system and finds out before reporting.
type outcome struct {
	JobID      string        `json:"jobId,omitempty"`
	ShipmentID string        `json:"shipmentId,omitempty"`
	Failure    *plan.Failure `json:"failure,omitempty"`
	Requested  bool          `json:"requested,omitempty"`
}

// ended reports whether the outcome is final (not only Requested).
func (o outcome) ended() bool { return o.ShipmentID != "" || o.Failure != nil }

// loadPlan returns the task's plan and the recorded outcomes of its
// shipments by idempotency key: the plan stored with the task's lease
// (offered before it, or stored earlier, with its outcomes), or, when there
// is none yet, one built and stored now (with the order-code claim). It
// returns taskstore.ErrOrderClaimed when another task owns the order code,
// and errClaimLost when the task has a stored plan but another task took
// its order code meanwhile (a free claim is taken again before the plan is
// reused).
func (w *Worker) loadPlan(ctx context.Context, job *jobv1.SplitJob, stored storedPlan) (plan.Plan, map[string]outcome, error) {
	member, id := job.GetMemberId(), job.GetTaskId()
	var p plan.Plan
	done := make(map[string]outcome)
	switch {
	case stored.offered == taskstore.OfferClaimed:
		return p, nil, &taskstore.ClaimedError{OrderCode: job.GetOrderCode(), Holder: stored.holder}
	case stored.offered == taskstore.OfferStored:
		w.log.InfoContext(ctx, "plan stored", "shipments", len(stored.built.Shipments), "item_failures", len(stored.built.Failures))
		return stored.built, done, nil
	case stored.plan != nil:
		err := w.store.HoldClaim(ctx, member, id, job.GetOrderCode())
		switch {
		case errors.Is(err, taskstore.ErrOrderClaimed):
			return p, nil, fmt.Errorf("%w: %w", errClaimLost, err)
		case errors.Is(err, taskstore.ErrNotFound), errors.Is(err, taskstore.ErrExpired):
			return p, nil, errGone
		case err != nil:
			return p, nil, err
		}
		w.log.DebugContext(ctx, "reusing stored plan")
		if err := decodeJSON("plan", stored.plan, &p); err != nil {
			return p, nil, err
		}
		for key, v := range stored.outcomes {
			var o outcome
			if err := decodeJSON("shipment outcome", v, &o); err != nil {
				return p, nil, err
			}
			if o.ended() {
				done[key] = o
			}
		}
		return p, done, nil
	}
	p, data, err := w.buildPlan(ctx, job)
	if err != nil {
		return p, nil, err
	}
	err = w.store.SavePlan(ctx, member, id, job.GetOrderCode(), data)
	switch {
	case errors.Is(err, taskstore.ErrNotFound), errors.Is(err, taskstore.ErrExpired):
		return p, nil, errGone
	case errors.Is(err, taskstore.ErrPlanExists):
		// Stored meanwhile by a holder of an older lease; its outcomes
		// are read on the next delivery.
		return p, nil, fmt.Errorf("plan stored concurrently: %w", errRetry)
	case err != nil:
		return p, nil, err
	}
	w.log.InfoContext(ctx, "plan stored", "shipments", len(p.Shipments), "item_failures", len(p.Failures))
	return p, done, nil
}

// buildPlan plans job's order against the catalogue (and, when it orders
// a SKU that needs a settled bill, the member's standing) and encodes the
// plan for the task store.
func (w *Worker) buildPlan(ctx context.Context, job *jobv1.SplitJob) (plan.Plan, []byte, error) {
	var p plan.Plan
	skus, err := w.cat.get(ctx)
	if err != nil {
		return p, nil, fulfilmentErr("read catalogue", err)
	}
	m := fulfilment.Member{MemberID: job.GetMemberId()}
	if skus.NeedsSettlement(job.GetItems()) {
		if m, err = w.fc.Member(ctx, job.GetMemberId()); err != nil {
			return p, nil, fulfilmentErr("read member", err)
		}
	}
	p = plan.Build(job.GetTaskId(), job.GetItems(), skus, m, w.opts.Plan)
	data, err := json.Marshal(p)
	if err != nil {
		return p, nil, permanent(fmt.Errorf("encode plan: %w", err))
	}
	return p, data, nil
}

// recordOutcome stores a finished shipment's outcome in the plan hash
// (which expires with the task); errGone when the task is gone.
func (w *Worker) recordOutcome(ctx context.Context, member, id, key string, o outcome) error {
	data, err := json.Marshal(o)
	if err != nil {
		return permanent(fmt.Errorf("encode shipment outcome: %w", err))
	}
	err = w.store.RecordOutcome(ctx, member, id, key, data)
	if errors.Is(err, taskstore.ErrNotFound) || errors.Is(err, taskstore.ErrExpired) {
		return errGone
	}
	return err
}

// markRequested records that shipment key is about to be requested, under
// the task's lease (fence) and only while the task is PROCESSING. Whoever
// takes the lease next, or fails the task (settleRequested), reads the
// outcomes after the mark and finds the shipment out, so its result
// reports it. A worker whose lease lapsed (stalled, paused, starved of CPU)
// is refused (taskstore.ErrFenced) and sends nothing: without the fence it
// could create a shipment after another owner had finished the task
// without it (a whole-task failure reports only the shipments that exist),
// leaving it at the fulfilment system with no task to report it. A task
// that has ended gives errCancelled or errGone.
func (w *Worker) markRequested(ctx context.Context, member, id, key string, fence *taskstore.Fence) error {
	data, err := json.Marshal(outcome{Requested: true})
	if err != nil {
		return permanent(fmt.Errorf("encode shipment outcome: %w", err))
	}
	err = w.store.RecordRequested(ctx, member, id, key, data, fence)
	switch {
	case errors.Is(err, taskstore.ErrNotFound), errors.Is(err, taskstore.ErrExpired):
		return errGone
	case errors.Is(err, taskstore.ErrTerminal):
		if st, serr := w.store.Status(ctx, member, id); serr == nil && st == taskv1.TaskStatus_TASK_STATUS_CANCELLED {
			return errCancelled
		}
		return errGone
	}
	return err
}

// fulfilmentErr passes transient fulfilment errors on (to requeue) and
// marks the others permanent.
func fulfilmentErr(what string, err error) error {
	if fulfilment.IsTransient(err) {
		return fmt.Errorf("%s: %w", what, err)
	}
	return permanent(fmt.Errorf("%s: %w", what, err))
}

// settleRequested finds out, before the task fails as a whole, what
// became of each shipment requested from the fulfilment system whose
// outcome was not recorded (the worker that requested it died, lost Redis
// or gave up waiting): it repeats the request with the same idempotency
// key inside a running-pool slot, which returns the existing job, waits for
// the job to end and records its outcome, so the failure reports every
// shipment that exists. Shipments never requested are not started.
func (w *Worker) settleRequested(ctx context.Context, job *jobv1.SplitJob) error {
	member, id := job.GetMemberId(), job.GetTaskId()
	stored, outcomes, err := w.store.Plan(ctx, member, id)
	if err != nil || stored == nil {
		return err
	}
	var p plan.Plan
	if json.Unmarshal(stored, &p) != nil {
		return nil
	}
	for _, s := range p.Shipments {
		var o outcome
		if v, ok := outcomes[s.Key]; !ok || json.Unmarshal(v, &o) != nil || o.ended() || !o.Requested {
			continue
		}
		w.log.InfoContext(ctx, "shipment requested without a recorded outcome; finding it out before failing the task", "shipment", s.Key)
		out, err := w.ship(ctx, s, w.class(job), nil, nil)
		if err == nil {
			err = w.recordOutcome(ctx, member, id, s.Key, out)
		}
		if err != nil {
			return fmt.Errorf("shipment %s: %w", s.Key, err)
		}
	}
	return nil
}

// partialResult reports the shipments that exist when a task fails as a
// whole after some of them were created: the result lists those shipments,
// and every item not in one of them fails with the task's code and
// message. It returns nil when no shipment exists (or the plan cannot be
// read, which the failure itself may be about).
func (w *Worker) partialResult(ctx context.Context, job *jobv1.SplitJob, c errcodev1.ErrorCode, msg string) *taskv1.SplitResult {
	stored, outcomes, err := w.store.Plan(ctx, job.GetMemberId(), job.GetTaskId())
	if err != nil || stored == nil {
		return nil
	}
	var p plan.Plan
	if json.Unmarshal(stored, &p) != nil {
		return nil
	}
	done := make(map[string]outcome)
	created := false
	for key, v := range outcomes {
		var o outcome
		if json.Unmarshal(v, &o) != nil {
			return nil
		}
		if !o.ended() {
			continue
		}
		done[key] = o
		created = created || o.ShipmentID != ""
	}
	if !created {
		return nil
	}
	var shipped []plan.Shipment
	for _, s := range p.Shipments {
		if _, ok := done[s.Key]; ok {
			shipped = append(shipped, s)
			continue
		}
		for _, l := range s.Lines {
			p.Failures = append(p.Failures, plan.Failure{ItemCode: l.ItemCode, Code: int32(c), Msg: msg})
		}
	}
	p.Shipments = shipped
	return result(p, done)
}
