package ops

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/orderflow/orderflow/pkg/engine/jobqueue"
	"github.com/orderflow/orderflow/pkg/engine/lease"
	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	errcodev1 "github.com/orderflow/orderflow/pkg/gen/orderflow/errcode/v1"
	jobv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/job/v1"
	opsv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/ops/v1"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/platform/apierr"
	"github.com/orderflow/orderflow/pkg/platform/auth"
	"github.com/orderflow/orderflow/pkg/platform/errmsg"
	"github.com/orderflow/orderflow/pkg/platform/logging"
)

// ListProcessingTasks pages through PROCESSING tasks, oldest first, dropping finished ones.
func (s *Server) ListProcessingTasks(ctx context.Context, req *opsv1.ListProcessingTasksRequest) (*opsv1.ListProcessingTasksResponse, error) {
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
	if req.GetMinAge() != nil && (!req.GetMinAge().IsValid() || req.GetMinAge().AsDuration() < 0) {
		return nil, apierr.Field("minAge", "must be a non-negative duration such as \"300s\"")
	}
	if m := req.GetMemberId(); m != "" && !auth.ValidMemberID(m) {
		return nil, apierr.Field("memberId", "must be a member id")
	}
	cutoff := s.o.Clock.Now().Add(-req.GetMinAge().AsDuration())
	out := &opsv1.ListProcessingTasksResponse{}
	// Filters may skip entries: read whole index pages until this page is
	// full or the index ends.
	for len(out.Tasks) < size {
		refs, total, err := s.o.Store.Processing(ctx, off, size)
		if err != nil {
			return nil, s.storeErr(ctx, err)
		}
		out.Total = total
		if len(refs) == 0 {
			return out, nil
		}
		for i, r := range refs {
			if r.Since.After(cutoff) {
				// Oldest first: nothing further is old enough.
				return out, nil
			}
			if len(out.Tasks) == size {
				out.NextPageToken = strconv.Itoa(off + i)
				return out, nil
			}
			if req.GetMemberId() != "" && r.Member != req.GetMemberId() {
				continue
			}
			t, err := s.o.Store.Get(ctx, r.Member, r.TaskID)
			if err != nil || t.GetStatus() != taskv1.TaskStatus_TASK_STATUS_PROCESSING {
				if _, derr := s.o.Store.DropStale(ctx, r.Member, r.TaskID); derr != nil {
					return nil, s.storeErr(ctx, derr)
				}
				continue
			}
			out.Tasks = append(out.Tasks, &opsv1.TaskSummary{MemberId: r.Member, Task: t})
		}
		off += len(refs)
		if int64(off) >= total {
			return out, nil
		}
	}
	out.NextPageToken = strconv.Itoa(off)
	return out, nil
}

// FindTasks finds tasks by id, by member (their newest) or by order code, in one member or all.
func (s *Server) FindTasks(ctx context.Context, req *opsv1.FindTasksRequest) (*opsv1.FindTasksResponse, error) {
	if _, err := s.actor(ctx); err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize(), 20, 100)
	if err != nil {
		return nil, err
	}
	member, id, code := req.GetMemberId(), req.GetTaskId(), req.GetOrderCode()
	if member != "" && !auth.ValidMemberID(member) {
		return nil, apierr.Field("memberId", "must be a member id")
	}
	if id != "" && !taskstore.ValidID(id) {
		return nil, apierr.Field("taskId", "must be a task id (22 base64url characters)")
	}
	if len(code) > 64 {
		return nil, apierr.Field("orderCode", "must be at most 64 characters")
	}
	var refs []taskstore.Ref
	switch {
	case id != "" && member != "":
		refs = []taskstore.Ref{{Member: member, TaskID: id}}
	case id != "":
		members, err := s.o.Store.FindByID(ctx, id)
		if err != nil {
			return nil, s.storeErr(ctx, err)
		}
		for _, m := range members {
			refs = append(refs, taskstore.Ref{Member: m, TaskID: id})
		}
	case code != "" && member != "":
		owner, err := s.o.Store.OrderOwner(ctx, member, code)
		if err != nil {
			return nil, s.storeErr(ctx, err)
		}
		if owner != "" {
			refs = []taskstore.Ref{{Member: member, TaskID: owner}}
		}
	case code != "":
		if refs, err = s.o.Store.FindByOrderCode(ctx, code, size); err != nil {
			return nil, s.storeErr(ctx, err)
		}
	case member != "":
		tasks, _, err := s.o.Store.List(ctx, member, size, "")
		if err != nil {
			return nil, s.storeErr(ctx, err)
		}
		out := &opsv1.FindTasksResponse{}
		for _, t := range tasks {
			out.Tasks = append(out.Tasks, &opsv1.TaskSummary{MemberId: member, Task: t})
		}
		return out, nil
	default:
		return nil, apierr.Field("taskId", "give a task id, a member id or an order code")
	}
	out := &opsv1.FindTasksResponse{}
	for _, r := range refs {
		t, err := s.o.Store.Get(ctx, r.Member, r.TaskID)
		if errors.Is(err, taskstore.ErrNotFound) || errors.Is(err, taskstore.ErrExpired) {
			continue
		}
		if err != nil {
			return nil, s.storeErr(ctx, err)
		}
		out.Tasks = append(out.Tasks, &opsv1.TaskSummary{MemberId: r.Member, Task: t})
	}
	return out, nil
}

// GetTaskDetail returns a task with its job, lease, plan, outcomes, dead letter and outbox state.
func (s *Server) GetTaskDetail(ctx context.Context, req *opsv1.GetTaskDetailRequest) (*opsv1.GetTaskDetailResponse, error) {
	if _, err := s.actor(ctx); err != nil {
		return nil, err
	}
	member, id := req.GetMemberId(), req.GetTaskId()
	if err := ref(member, id); err != nil {
		return nil, err
	}
	t, err := s.o.Store.Get(ctx, member, id)
	if err != nil {
		return nil, s.storeErr(ctx, err)
	}
	out := &opsv1.GetTaskDetailResponse{MemberId: member, Task: t, ShipmentOutcomes: map[string]string{}}
	if job, err := s.o.Store.Job(ctx, member, id); err == nil {
		out.JobJson = jobJSON(job)
	} else if !errors.Is(err, taskstore.ErrNotFound) {
		return nil, s.storeErr(ctx, err)
	}
	tok, left, err := s.o.Store.LeaseHolder(ctx, member, id)
	if err != nil {
		return nil, s.storeErr(ctx, err)
	}
	if tok != "" {
		out.Lease = &opsv1.TaskLease{Token: tok, Remaining: durationpb.New(left), Replica: lease.OwnerOf(tok)}
	}
	plan, outcomes, err := s.o.Store.Plan(ctx, member, id)
	if err != nil {
		return nil, s.storeErr(ctx, err)
	}
	out.PlanJson = string(plan)
	for k, v := range outcomes {
		out.ShipmentOutcomes[k] = string(v)
	}
	if d, err := s.o.Store.Dead(ctx, member, id); err == nil {
		out.DeadLetter = deadLetter(d, t)
	} else if !errors.Is(err, taskstore.ErrNotFound) {
		return nil, s.storeErr(ctx, err)
	}
	if out.InOutbox, err = s.o.Store.InOutbox(ctx, member, id); err != nil {
		return nil, s.storeErr(ctx, err)
	}
	if out.Attempts, err = s.o.Store.Attempts(ctx, member, id); err != nil {
		return nil, s.storeErr(ctx, err)
	}
	return out, nil
}

// jobJSON renders a stored SplitJob for reading; an undecodable one is
// described instead.
func jobJSON(b []byte) string {
	var j jobv1.SplitJob
	if err := proto.Unmarshal(b, &j); err != nil {
		return fmt.Sprintf("{\"undecodable\": %q}", err.Error())
	}
	out, _ := protojson.Marshal(&j)
	return string(out)
}

// taskRequest is a request naming a member's task.
type taskRequest interface {
	proto.Message
	GetMemberId() string
	GetTaskId() string
}

// mutateTask is mutate for an action on the task a request names: it
// checks the reference and the rest of the request (valid, may be nil),
// runs fn with the task id in the log context and returns the task fn
// produced. Task-store errors of fn become API errors (storeErr); API
// errors pass through.
func (s *Server) mutateTask(ctx context.Context, action string, req taskRequest, valid func() error, fn func(ctx context.Context, member, id string) (*taskv1.Task, error)) (*taskv1.Task, error) {
	member, id := req.GetMemberId(), req.GetTaskId()
	var t *taskv1.Task
	check := func() error {
		if err := ref(member, id); err != nil {
			return err
		}
		if valid != nil {
			return valid()
		}
		return nil
	}
	err := s.mutate(ctx, action, member+"/"+id, req, check, func(ctx context.Context) error {
		ctx = logging.WithTask(ctx, id)
		var err error
		if t, err = fn(ctx, member, id); err != nil {
			return s.storeErr(ctx, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return t, nil
}

// RetryTask publishes a PROCESSING task's stored job again (the worker tolerates a duplicate).
func (s *Server) RetryTask(ctx context.Context, req *opsv1.RetryTaskRequest) (*opsv1.RetryTaskResponse, error) {
	t, err := s.mutateTask(ctx, "RetryTask", req, nil, func(ctx context.Context, member, id string) (*taskv1.Task, error) {
		t, err := s.o.Store.Get(ctx, member, id)
		if err != nil {
			return nil, err
		}
		if t.GetStatus() != taskv1.TaskStatus_TASK_STATUS_PROCESSING {
			return nil, apierr.New(codes.FailedPrecondition, apierr.ReasonTaskFinished, "task has already finished; only a PROCESSING task is retried", "status", t.GetStatus().String())
		}
		job, err := s.o.Store.Job(ctx, member, id)
		if err != nil {
			return nil, err
		}
		return t, s.publish(ctx, member, id, job)
	})
	if err != nil {
		return nil, err
	}
	return &opsv1.RetryTaskResponse{Task: t}, nil
}

func (s *Server) publish(ctx context.Context, member, id string, job []byte) error {
	if err := s.o.Pub.Publish(ctx, s.o.Queue.Exchange, jobqueue.RoutingKey, jobqueue.Message(ctx, member, id, job)); err != nil {
		s.o.Log.WarnContext(ctx, "operations: publish failed", "err", err)
		return apierr.New(codes.Unavailable, apierr.ReasonQueueUnavailable, "the task queue is unavailable, please retry later")
	}
	return nil
}

// fail finishes a PROCESSING task as FAILED with code and msg.
func (s *Server) fail(ctx context.Context, member, id string, code int32, msg string) (*taskv1.Task, error) {
	return s.o.Store.Finish(ctx, member, id, nil, func(t *taskv1.Task) {
		t.Status, t.ErrorCode, t.ErrorMsg = taskv1.TaskStatus_TASK_STATUS_FAILED, code, msg
	})
}

// FailTask fails a PROCESSING task with a catalogue code.
func (s *Server) FailTask(ctx context.Context, req *opsv1.FailTaskRequest) (*opsv1.FailTaskResponse, error) {
	valid := func() error {
		if err := validCode(req.GetErrorCode()); err != nil {
			return err
		}
		if len(req.GetErrorMsg()) > 500 {
			return apierr.Field("errorMsg", "must be at most 500 characters")
		}
		return nil
	}
	t, err := s.mutateTask(ctx, "FailTask", req, valid, func(ctx context.Context, member, id string) (*taskv1.Task, error) {
		msg := req.GetErrorMsg()
		if msg == "" {
			msg = "failed by an operator"
		}
		return s.fail(ctx, member, id, req.GetErrorCode(), msg)
	})
	if err != nil {
		return nil, err
	}
	return &opsv1.FailTaskResponse{Task: t}, nil
}

// validCode accepts -1 and the catalogue's codes.
func validCode(c int32) error {
	if _, ok := errcodev1.ErrorCode_name[c]; !ok || c == 0 {
		return apierr.Field("errorCode", "must be -1 or a code of the error catalogue (10001-10011)")
	}
	return nil
}

// CancelTask cancels a PROCESSING task (10007).
func (s *Server) CancelTask(ctx context.Context, req *opsv1.CancelTaskRequest) (*opsv1.CancelTaskResponse, error) {
	t, err := s.mutateTask(ctx, "CancelTask", req, nil, func(ctx context.Context, member, id string) (*taskv1.Task, error) {
		return s.o.Store.Cancel(ctx, member, id, int32(errcodev1.ErrorCode_ERROR_CODE_TASK_CANCELLED),
			errmsg.Message(errcodev1.ErrorCode_ERROR_CODE_TASK_CANCELLED))
	})
	if err != nil {
		return nil, err
	}
	return &opsv1.CancelTaskResponse{Task: t}, nil
}
