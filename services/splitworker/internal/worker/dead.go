package worker

import (
	"context"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/orderflow/orderflow/pkg/engine/amqpbus"
	"github.com/orderflow/orderflow/pkg/engine/eventrate"
	"github.com/orderflow/orderflow/pkg/engine/jobqueue"
	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	errcodev1 "github.com/orderflow/orderflow/pkg/gen/orderflow/errcode/v1"
	jobv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/job/v1"
	"github.com/orderflow/orderflow/pkg/platform/logging"
)

// HandleDead handles a dead-lettered split job: the task it names (when it
// can be identified) fails with 10009 DELIVERY_LIMIT if the job kept
// failing, or with the generic code if it was rejected as malformed. The
// write is made under the task's lease, so it never races a replica still
// working on the task, and reports every shipment that exists: one
// requested without a recorded outcome is found out first (see
// settleRequested).
func (w *Worker) HandleDead(ctx context.Context, d amqp.Delivery) amqpbus.Outcome {
	defer hold(&w.held.dead)()
	if ctx.Err() != nil {
		return w.settled("dlq", w.handBack(ctx, d))
	}
	ctx, job, err := jobqueue.Decode(ctx, d)
	member, id := jobqueue.Identify(d, job)
	ctx = logging.WithTask(ctx, id)
	reason := deathReason(d.Headers)
	if member == "" || !taskstore.ValidID(id) {
		w.log.ErrorContext(ctx, "dead-lettered job names no task; dropped", "reason", reason, "decode_err", err)
		return w.settled("dlq", amqpbus.Ack)
	}
	c, msg := errcodev1.ErrorCode_ERROR_CODE_GENERIC, msgGeneric
	if reason == "delivery_limit" {
		c, msg = errcodev1.ErrorCode_ERROR_CODE_DELIVERY_LIMIT, msgDeliveryLimit
	}
	w.log.WarnContext(ctx, "job dead-lettered; failing its task", "reason", reason, "error_code", int32(c), "decode_err", err)
	if job == nil || job.GetMemberId() == "" {
		job = &jobv1.SplitJob{TaskId: id, MemberId: member}
	}
	// Held in place like a split job while Redis is down or the task's
	// lease is held, and handed back as a copy when held too long: a
	// dead letter is never requeued, since RabbitMQ counts every return
	// against the dead-letter queue's own delivery limit (RabbitMQ 4
	// drops a quorum-queue message past it when there is nowhere to
	// dead-letter it).
	o := w.hold(ctx, d, func() amqpbus.Outcome {
		return w.underLease(ctx, member, id, 0, offered{}, func(_ context.Context, fence *taskstore.Fence, _ storedPlan) amqpbus.Outcome {
			// Record it for operators (list, inspect, replay) before
			// failing the task, so no failed task misses its record; a
			// repeat overwrites it.
			dl := taskstore.DeadLetter{Member: member, TaskID: id, Reason: reason, Deliveries: deliveries(d.Headers), ErrorCode: int32(c)}
			if err == nil {
				dl.Job = d.Body
			}
			added, err := w.store.RecordDead(ctx, dl)
			if err != nil {
				w.log.WarnContext(ctx, "record dead letter; retrying", "err", err)
				return amqpbus.Requeue
			}
			if added {
				w.count(ctx, map[string]int64{eventrate.DeadLettered: 1})
			}
			return w.fail(ctx, job, fence, c, msg)
		})
	})
	if o == amqpbus.Requeue {
		o = w.handBack(ctx, d)
	}
	return w.settled("dlq", o)
}

// deathReason returns why RabbitMQ dead-lettered a message ("rejected",
// "delivery_limit", "expired", ...), from the most recent x-death entry.
func deathReason(h amqp.Table) string {
	if deaths, _ := h["x-death"].([]any); len(deaths) > 0 {
		if t, ok := deaths[0].(amqp.Table); ok {
			if r, ok := t["reason"].(string); ok {
				return r
			}
		}
	}
	r, _ := h["x-first-death-reason"].(string)
	return r
}

// deliveries returns how many times the broker delivered the message before
// it died: the quorum queue's x-delivery-count, or 0 when absent.
func deliveries(h amqp.Table) int64 {
	switch v := h["x-delivery-count"].(type) {
	case int64:
		return v
	case int32:
		return int64(v)
	case int:
		return int64(v)
	}
	return 0
}
