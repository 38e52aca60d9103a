package worker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/orderflow/orderflow/pkg/engine/slotpool"
	errcodev1 "github.com/orderflow/orderflow/pkg/gen/orderflow/errcode/v1"
	"github.com/orderflow/orderflow/pkg/platform/backoff"
	"github.com/orderflow/orderflow/pkg/provider/fulfilment"
	"github.com/orderflow/orderflow/services/splitworker/internal/plan"
)

// errSlotLost stops a shipment whose running-pool slot expired.
var errSlotLost = errors.New("running-pool slot lost")

// errAcquireAgain says that a shipment's slot was lost before anything
// that may have started a fulfilment job was requested under it: the
// shipment waits for a slot again.
var errAcquireAgain = errors.New("running-pool slot lost before the request")

// notRequestedError is a failure to confirm the slot right before a
// shipment request; the request was not sent.
type notRequestedError struct{ err error }

func (e notRequestedError) Error() string { return "not requested: " + e.err.Error() }
func (e notRequestedError) Unwrap() error { return e.err }

// ship creates one shipment inside a running-pool slot and waits until the
// fulfilment system has finished it. A business rejection or a failed job
// is an outcome (its items fail); an error means the shipment's fate is
// unknown and the job must be retried with the same idempotency key.
//
// The slot stays held as long as the fulfilment job may run, so the pool
// never grants more than N jobs at the real system: when the wait for the
// job ends early (the shipment timeout, poll errors, a lost task lease, a
// cancelled order), a finisher in the background keeps the slot and polls
// the job until it ends (or ORDERFLOW_SPLITWORKER_JOB_MAX passes) before it
// releases it; a stopping worker, or one that does not know the job's id,
// leaves the slot to its lease instead of freeing it at once. A retry of
// the same shipment finds the same job through its idempotency key.
//
// Every request is sent only once the slot is confirmed still held (see
// Slot.Confirm): a worker stalled after its grant (stopped, paused) for
// longer than the slot's lease finds the slot reclaimed, maybe granted to
// another job, and waits for a slot again instead of sending a job beyond
// N to the fulfilment system.
//
// requested, when not nil, is called once the slot is granted and before
// the shipment is requested; the shipment is not requested when it fails.
// ended, when not nil, is called once nothing runs at the fulfilment
// system for the shipment any more (its job ended or it was rejected),
// before the slot's release: the caller may start its next shipment
// while the release is on its way.
func (w *Worker) ship(ctx context.Context, s plan.Shipment, class slotpool.Class, requested func(context.Context) error, ended func()) (outcome, error) {
	ctx, cancel := context.WithTimeout(ctx, w.opts.ShipmentTimeout)
	defer cancel()
	for {
		out, err := w.shipInSlot(ctx, s, class, requested, ended)
		if !errors.Is(err, errAcquireAgain) {
			return out, err
		}
		w.log.WarnContext(ctx, "running-pool slot lost before the shipment was requested; waiting for a slot again", "shipment", s.Key)
	}
}

// shipInSlot is one grant's part of ship. It returns errAcquireAgain when
// the slot was lost before anything was requested under it.
func (w *Worker) shipInSlot(ctx context.Context, s plan.Shipment, class slotpool.Class, requested func(context.Context) error, ended func()) (outcome, error) {
	slot, err := w.slots.Acquire(ctx, s.Key, class)
	if err != nil {
		return outcome{}, fmt.Errorf("acquire running-pool slot: %w", err)
	}
	if requested != nil {
		if err := requested(ctx); err != nil {
			w.releaseSlot(ctx, slot, s.Key, false, "not requested: "+err.Error())
			return outcome{}, err
		}
	}
	slotCtx, slotCancel := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { slot.KeepAlive(slotCtx, func() { slotCancel(errSlotLost) }) })
	out, mayRun, err := w.runShipment(slotCtx, s, slot)
	slotCancel(nil)
	wg.Wait()

	if err != nil {
		lost := errors.Is(context.Cause(slotCtx), errSlotLost) || errors.Is(err, slotpool.ErrLost)
		switch {
		case lost && !mayRun && ctx.Err() == nil:
			// Reclaimed before any request that may have started a job:
			// nothing runs at the fulfilment system under this grant.
			return outcome{}, errAcquireAgain
		case lost:
			// The pool reclaimed the slot already.
			err = fmt.Errorf("%w: %w", errSlotLost, err)
		case mayRun && out.JobID != "" && !w.isStopping():
			w.finishLater(ctx, slot, s.Key, out.JobID)
		case mayRun:
			w.log.WarnContext(ctx, "shipment may still run; its slot is left to its lease", "shipment", s.Key, "err", err)
		default:
			w.releaseSlot(ctx, slot, s.Key, false, "abandoned: "+err.Error())
		}
		return outcome{}, err
	}
	if ended != nil {
		ended()
	}
	completed, detail := out.Failure == nil, out.ShipmentID
	if out.Failure != nil {
		detail = out.Failure.Msg
	}
	w.releaseSlot(ctx, slot, s.Key, completed, detail)
	label := "completed"
	if out.Failure != nil {
		label = "failed_" + code(out.Failure.Code)
	}
	w.m.shipments.WithLabelValues(label).Inc()
	return out, nil
}

// releaseSlot frees a slot, recording the job's outcome.
func (w *Worker) releaseSlot(ctx context.Context, slot Slot, key string, completed bool, detail string) {
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), w.opts.PollMax+time.Second)
	defer rcancel()
	if err := slot.Release(rctx, completed, detail); err != nil {
		w.log.WarnContext(ctx, "release running-pool slot", "shipment", key, "err", err)
	}
}

// finishLater keeps slot held in the background while the fulfilment job
// jobID still runs, polling it, and releases it with the job's outcome
// once it ends, after JobMax, or (leaving it to its lease) when the worker
// stops or the slot's lease could not be kept (the pool then keeps the
// slot counted against N for as long as the job may run).
func (w *Worker) finishLater(ctx context.Context, slot Slot, key, jobID string) {
	w.log.InfoContext(ctx, "shipment wait ended early; holding its slot until the job ends", "shipment", key, "job_id", jobID)
	w.finishers.Go(func() {
		fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.opts.JobMax)
		defer cancel()
		go func() {
			select {
			case <-w.stopping:
				cancel()
			case <-fctx.Done():
			}
		}()
		keepCtx, keepCancel := context.WithCancelCause(fctx)
		var kw sync.WaitGroup
		kw.Go(func() { slot.KeepAlive(keepCtx, func() { keepCancel(errSlotLost) }) })
		var j fulfilment.Job
		err := w.retry(keepCtx, func() (bool, error) {
			var err error
			j, err = w.fc.Job(keepCtx, jobID)
			return err == nil && j.Done(), err
		})
		lost := errors.Is(context.Cause(keepCtx), errSlotLost)
		keepCancel(nil)
		kw.Wait()
		switch {
		case err == nil:
			w.releaseSlot(ctx, slot, key, j.State != fulfilment.JobError, "finished after the wait ended: "+string(j.State))
		case lost:
			// Freeing it now would let another job in while this one
			// may still run.
			w.log.WarnContext(ctx, "running-pool slot lost while its job may still run; left to the pool", "shipment", key, "job_id", jobID)
		case w.isStopping():
			// Left to its lease, as a crash would.
		default:
			w.releaseSlot(ctx, slot, key, false, "job did not end within the job limit: "+err.Error())
		}
	})
}

// isStopping reports whether Run's context has ended.
func (w *Worker) isStopping() bool {
	select {
	case <-w.stopping:
		return true
	default:
		return false
	}
}

// runShipment requests the shipment (backing off while the system is over
// capacity) and polls its job until it ends. Each request is sent only
// after slot.Confirm. On an error, mayRun reports whether a fulfilment job
// may exist for the shipment (the outcome then carries its id when it is
// known).
func (w *Worker) runShipment(ctx context.Context, s plan.Shipment, slot Slot) (out outcome, mayRun bool, err error) {
	req := fulfilment.ShipmentRequest{IdempotencyKey: s.Key, Warehouse: s.Warehouse, Lines: s.Lines}
	var j fulfilment.Job
	err = w.retry(ctx, func() (bool, error) {
		if err := slot.Confirm(ctx); err != nil {
			return false, notRequestedError{err}
		}
		var err error
		j, err = w.fc.CreateShipment(ctx, req)
		// Only an over-capacity answer, or a request that never left
		// (no connection could be made), says for certain that no job
		// was created.
		mayRun = mayRun || !(errors.Is(err, fulfilment.ErrOverCapacity) || errors.Is(err, fulfilment.ErrNotSent))
		return err == nil, err
	})
	var rej *fulfilment.RejectedError
	if errors.As(err, &rej) {
		w.log.InfoContext(ctx, "shipment rejected", "shipment", s.Key, "code", rej.Code, "message", rej.Message)
		c := errcodev1.ErrorCode_ERROR_CODE_FULFILMENT_REJECTED
		if rej.Code == fulfilment.CodeOutOfStock {
			// The plan's stock was out of date: later plans read it again.
			c = errcodev1.ErrorCode_ERROR_CODE_OUT_OF_STOCK
			w.cat.drop()
		}
		f := plan.Fail("", c, "")
		return outcome{Failure: &f}, false, nil
	}
	if err != nil {
		return outcome{}, mayRun, fmt.Errorf("create shipment: %w", err)
	}
	w.log.DebugContext(ctx, "shipment job running", "shipment", s.Key, "job_id", j.JobID)
	created := w.opts.Clock.Now()
	var near time.Time
	if d := w.pace.near(); d > 0 {
		near = created.Add(d)
	}
	running := created // when a poll last found the job running
	err = w.retryNear(ctx, near, func() (bool, error) {
		if j.Done() {
			return true, nil
		}
		select {
		case w.pollers <- struct{}{}:
		case <-ctx.Done():
			return false, ctx.Err()
		}
		sent := w.opts.Clock.Now()
		next, err := w.fc.Job(ctx, j.JobID)
		<-w.pollers
		if err != nil {
			return false, err
		}
		j = next
		if !j.Done() {
			running = sent
			return false, nil
		}
		w.pace.observe(running.Sub(created))
		return true, nil
	})
	if err != nil {
		return outcome{JobID: j.JobID}, true, fmt.Errorf("poll shipment job %s: %w", j.JobID, err)
	}
	if j.State == fulfilment.JobError {
		w.log.InfoContext(ctx, "shipment job failed", "shipment", s.Key, "job_id", j.JobID,
			"code", j.ErrorCode, "message", j.ErrorMsg)
		f := plan.Fail("", errcodev1.ErrorCode_ERROR_CODE_FULFILMENT_REJECTED, "")
		return outcome{JobID: j.JobID, Failure: &f}, false, nil
	}
	return outcome{JobID: j.JobID, ShipmentID: j.ShipmentID}, false, nil
}

// retry calls step until it reports done, sleeping with a growing backoff
// between calls (PollInitial growing by half each time up to PollMax, each
// pause drawn from [d/2, d] of that so replicas do not poll or retry the
// fulfilment system in lockstep). Over-capacity answers and "not done yet" are retried
// until ctx ends; other transient errors TransientRetries times in a row;
// a business rejection, or a request not sent because its slot could not
// be confirmed, is returned as is and any other error as permanent.
func (w *Worker) retry(ctx context.Context, step func() (bool, error)) error {
	return w.retryNear(ctx, time.Time{}, step)
}

// retryNear is retry whose backoff, when near is set, is cut short so
// that step is called at near (exactly: a job's expected end is its own),
// and starts again from half of PollInitial there (see jobPace).
func (w *Worker) retryNear(ctx context.Context, near time.Time, step func() (bool, error)) error {
	next, failures := w.opts.PollInitial, 0
	for {
		done, err := step()
		var rej *fulfilment.RejectedError
		var notRequested notRequestedError
		switch {
		case done:
			return nil
		case err == nil, errors.Is(err, fulfilment.ErrOverCapacity):
			failures = 0
		case errors.As(err, &notRequested):
			return err
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
		wait := backoff.Jitter(next)
		next = min(next*3/2, w.opts.PollMax)
		if !near.IsZero() {
			if left := near.Sub(w.opts.Clock.Now()); left < wait {
				half := max(time.Millisecond, w.opts.PollInitial/2)
				wait, next, near = left, half, time.Time{}
				if left <= 0 { // near passed during the last call
					wait, next = backoff.Jitter(half), min(half*3/2, w.opts.PollMax)
				}
			}
		}
		if err := w.sleep(ctx, wait); err != nil {
			return err
		}
	}
}
