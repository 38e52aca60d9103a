package ops

import (
	"context"
	"errors"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	errcodev1 "github.com/orderflow/orderflow/pkg/gen/orderflow/errcode/v1"
	opsv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/ops/v1"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/platform/apierr"
	"github.com/orderflow/orderflow/pkg/platform/errmsg"
	"github.com/orderflow/orderflow/pkg/platform/logging"
)

func deadLetter(d taskstore.DeadLetter, t *taskv1.Task) *opsv1.DeadLetter {
	out := &opsv1.DeadLetter{
		MemberId: d.Member, TaskId: d.TaskID, Reason: d.Reason, DeliveryCount: d.Deliveries,
		Time: timestamppb.New(d.Time), ErrorCode: d.ErrorCode,
	}
	if t != nil {
		out.TaskStatus, out.OrderCode = t.GetStatus(), t.GetOrderCode()
		out.Replayable = len(d.Job) > 0 && t.GetStatus() == taskv1.TaskStatus_TASK_STATUS_FAILED
	}
	return out
}

// ListDeadLetters pages through the dead letters, newest first.
func (s *Server) ListDeadLetters(ctx context.Context, req *opsv1.ListDeadLettersRequest) (*opsv1.ListDeadLettersResponse, error) {
	if _, err := s.actor(ctx); err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize(), 20, 100)
	if err != nil {
		return nil, err
	}
	off, err := offsetToken(req.GetPageToken())
	if err != nil {
		return nil, err
	}
	dead, total, err := s.o.Store.DeadLetters(ctx, off, size)
	if err != nil {
		return nil, s.storeErr(ctx, err)
	}
	out := &opsv1.ListDeadLettersResponse{Total: total}
	for _, d := range dead {
		if req.GetReason() != "" && d.Reason != req.GetReason() {
			continue
		}
		t, err := s.o.Store.Get(ctx, d.Member, d.TaskID)
		if err != nil && !errors.Is(err, taskstore.ErrNotFound) && !errors.Is(err, taskstore.ErrExpired) {
			return nil, s.storeErr(ctx, err)
		}
		out.DeadLetters = append(out.DeadLetters, deadLetter(d, t))
	}
	if int64(off+size) < total {
		out.NextPageToken = strconv.Itoa(off + size)
	}
	return out, nil
}

// ReplayDeadLetter reopens a dead-lettered task and republishes its job.
func (s *Server) ReplayDeadLetter(ctx context.Context, req *opsv1.ReplayDeadLetterRequest) (*opsv1.ReplayDeadLetterResponse, error) {
	t, err := s.mutateTask(ctx, "ReplayDeadLetter", req, nil, s.replay)
	if err != nil {
		return nil, err
	}
	return &opsv1.ReplayDeadLetterResponse{Task: t}, nil
}

// replay: outbox entry first (a crash after the reopen is repaired by the
// sweeper), reopen FAILED → PROCESSING with the dead job, publish, then
// drop the outbox entry and the dead letter.
func (s *Server) replay(ctx context.Context, member, id string) (*taskv1.Task, error) {
	d, err := s.o.Store.Dead(ctx, member, id)
	if errors.Is(err, taskstore.ErrNotFound) {
		return nil, apierr.New(codes.NotFound, apierr.ReasonTaskNotFound, "no dead letter recorded for this task")
	}
	if err != nil {
		return nil, s.storeErr(ctx, err)
	}
	if len(d.Job) == 0 {
		return nil, apierr.New(codes.FailedPrecondition, apierr.ReasonTaskFinished, "the dead message could not be decoded, so there is no job to replay; discard it")
	}
	if err := s.o.Store.OutboxAdd(ctx, member, id, s.o.OutboxGrace); err != nil {
		return nil, s.storeErr(ctx, err)
	}
	t, err := s.o.Store.Reopen(ctx, member, id, d.Job)
	if err != nil {
		_ = s.o.Store.OutboxDone(context.WithoutCancel(ctx), member, id)
		return nil, s.storeErr(ctx, err)
	}
	if err := s.publish(ctx, member, id, d.Job); err != nil {
		// The task is PROCESSING with its job and its outbox entry: the
		// sweeper publishes it after the grace.
		s.o.Log.WarnContext(ctx, "replayed job not confirmed; the outbox will republish it")
	} else if err := s.o.Store.OutboxDone(ctx, member, id); err != nil {
		s.o.Log.WarnContext(ctx, "outbox cleanup failed", "err", err)
	}
	if _, err := s.o.Store.ForgetDead(ctx, member, id); err != nil {
		return t, s.storeErr(ctx, err)
	}
	return t, nil
}

// maxRefusals bounds the refusals a replay of every dead letter lists.
const maxRefusals = 100

// ReplayAllDeadLetters replays every replayable dead letter up to limit, listing the refusals.
func (s *Server) ReplayAllDeadLetters(ctx context.Context, req *opsv1.ReplayAllDeadLettersRequest) (*opsv1.ReplayAllDeadLettersResponse, error) {
	out := &opsv1.ReplayAllDeadLettersResponse{}
	valid := func() error {
		if req.GetLimit() < 0 || req.GetLimit() > 1000 {
			return apierr.Field("limit", "must be between 0 and 1000")
		}
		return nil
	}
	err := s.mutate(ctx, "ReplayAllDeadLetters", "dead-letters", req, valid, func(ctx context.Context) error {
		limit := int(req.GetLimit())
		if limit == 0 {
			limit = 1000
		}
		dead, _, err := s.o.Store.DeadLetters(ctx, 0, limit)
		if err != nil {
			return s.storeErr(ctx, err)
		}
		for _, d := range dead {
			if req.GetReason() != "" && d.Reason != req.GetReason() {
				continue
			}
			if _, err := s.replay(logging.WithTask(ctx, d.TaskID), d.Member, d.TaskID); err != nil {
				if c := status.Code(err); c == codes.Unavailable {
					return err
				}
				out.Skipped++
				if len(out.Refused) < maxRefusals {
					out.Refused = append(out.Refused, &opsv1.ReplayRefusal{MemberId: d.Member, TaskId: d.TaskID,
						Reason: apierr.Reason(err), Message: status.Convert(err).Message()})
				}
				continue
			}
			out.Replayed++
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// DiscardDeadLetter drops a dead letter, failing its task with the code if still PROCESSING.
func (s *Server) DiscardDeadLetter(ctx context.Context, req *opsv1.DiscardDeadLetterRequest) (*opsv1.DiscardDeadLetterResponse, error) {
	code := req.GetErrorCode()
	if code == 0 {
		code = int32(errcodev1.ErrorCode_ERROR_CODE_DELIVERY_LIMIT)
	}
	valid := func() error { return validCode(code) }
	t, err := s.mutateTask(ctx, "DiscardDeadLetter", req, valid, func(ctx context.Context, member, id string) (*taskv1.Task, error) {
		ok, err := s.o.Store.ForgetDead(ctx, member, id)
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, apierr.New(codes.NotFound, apierr.ReasonTaskNotFound, "no dead letter recorded for this task")
		}
		t, err := s.fail(ctx, member, id, code, errmsg.Message(errcodev1.ErrorCode(code)))
		switch {
		case errors.Is(err, taskstore.ErrTerminal):
			return t, nil
		case errors.Is(err, taskstore.ErrNotFound), errors.Is(err, taskstore.ErrExpired):
			return nil, nil
		}
		return t, err
	})
	if err != nil {
		return nil, err
	}
	return &opsv1.DiscardDeadLetterResponse{Task: t}, nil
}
