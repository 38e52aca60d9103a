package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/orderflow/orderflow/pkg/engine/slotpool"
	errcodev1 "github.com/orderflow/orderflow/pkg/gen/orderflow/errcode/v1"
	"github.com/orderflow/orderflow/pkg/provider/fulfilment"
	"github.com/orderflow/orderflow/services/splitworker/internal/plan"
)

// errSlotLost stops a shipment whose running-pool slot expired.
var errSlotLost = errors.New("running-pool slot lost")

// ship creates one shipment inside a running-pool slot and waits until the
// fulfilment system has finished it. A business rejection or a failed job
// is an outcome (its items fail); an error means the shipment's fate is
// unknown and the job must be retried with the same idempotency key.
func (w *Worker) ship(ctx context.Context, s plan.Shipment, class slotpool.Class) (outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, w.opts.ShipmentTimeout)
	defer cancel()
	slot, err := w.slots.Acquire(ctx, s.Key, class)
	if err != nil {
		return outcome{}, fmt.Errorf("acquire running-pool slot: %w", err)
	}
	slotCtx, slotCancel := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { slot.KeepAlive(slotCtx, func() { slotCancel(errSlotLost) }) })
	out, err := w.runShipment(slotCtx, s)
	slotCancel(nil)
	wg.Wait()

	completed, detail := out.Failure == nil, out.ShipmentID
	switch {
	case err != nil:
		completed, detail = false, "abandoned: "+err.Error()
	case out.Failure != nil:
		detail = out.Failure.Msg
	}
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), w.opts.PollMax+time.Second)
	defer rcancel()
	if rerr := slot.Release(rctx, completed, detail); rerr != nil {
		w.log.WarnContext(ctx, "release running-pool slot", "shipment", s.Key, "err", rerr)
	}
	if err != nil {
		if cause := context.Cause(slotCtx); errors.Is(cause, errSlotLost) {
			err = fmt.Errorf("%w: %w", cause, err)
		}
		return outcome{}, err
	}
	label := "completed"
	if out.Failure != nil {
		label = "failed_" + code(out.Failure.Code)
	}
	w.m.shipments.WithLabelValues(label).Inc()
	return out, nil
}

// runShipment requests the shipment (backing off while the system is over
// capacity) and polls its job until it ends.
func (w *Worker) runShipment(ctx context.Context, s plan.Shipment) (outcome, error) {
	req := fulfilment.ShipmentRequest{IdempotencyKey: s.Key, Warehouse: s.Warehouse, Lines: s.Lines}
	var j fulfilment.Job
	err := w.retry(ctx, func() (bool, error) {
		var err error
		j, err = w.fc.CreateShipment(ctx, req)
		return err == nil, err
	})
	var rej *fulfilment.RejectedError
	if errors.As(err, &rej) {
		w.log.InfoContext(ctx, "shipment rejected", "shipment", s.Key, "code", rej.Code, "message", rej.Message)
		c := errcodev1.ErrorCode_ERROR_CODE_FULFILMENT_REJECTED
		if rej.Code == fulfilment.CodeOutOfStock {
			c = errcodev1.ErrorCode_ERROR_CODE_OUT_OF_STOCK
		}
		f := plan.Fail("", c, "")
		return outcome{Failure: &f}, nil
	}
	if err != nil {
		return outcome{}, fmt.Errorf("create shipment: %w", err)
	}
	w.log.DebugContext(ctx, "shipment job running", "shipment", s.Key, "job_id", j.JobID)
	err = w.retry(ctx, func() (bool, error) {
		if j.Done() {
			return true, nil
		}
		select {
		case w.pollers <- struct{}{}:
		case <-ctx.Done():
			return false, ctx.Err()
		}
		next, err := w.fc.Job(ctx, j.JobID)
		<-w.pollers
		if err != nil {
			return false, err
		}
		j = next
		return j.Done(), nil
	})
	if err != nil {
		return outcome{}, fmt.Errorf("poll shipment job %s: %w", j.JobID, err)
	}
	if j.State == fulfilment.JobError {
		w.log.InfoContext(ctx, "shipment job failed", "shipment", s.Key, "job_id", j.JobID,
			"code", j.ErrorCode, "message", j.ErrorMsg)
		f := plan.Fail("", errcodev1.ErrorCode_ERROR_CODE_FULFILMENT_REJECTED, "")
		return outcome{JobID: j.JobID, Failure: &f}, nil
	}
	return outcome{JobID: j.JobID, ShipmentID: j.ShipmentID}, nil
}

// retry calls step until it reports done, sleeping with a growing backoff
// between calls. Over-capacity answers and "not done yet" are retried
// until ctx ends; other transient errors TransientRetries times in a row;
// a business rejection is returned as is and any other error as permanent.
func (w *Worker) retry(ctx context.Context, step func() (bool, error)) error {
	backoff, failures := w.opts.PollInitial, 0
	for {
		done, err := step()
		var rej *fulfilment.RejectedError
		switch {
		case done:
			return nil
		case err == nil, errors.Is(err, fulfilment.ErrOverCapacity):
			failures = 0
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.As(err, &rej):
			return err
		case fulfilment.IsTransient(err):
			failures++
			if failures > w.opts.TransientRetries {
				return err
			}
		default:
			return permanent(err)
		}
		if err := w.sleep(ctx, backoff); err != nil {
			return err
		}
		backoff = min(backoff*3/2, w.opts.PollMax)
	}
}
