// Package tasks implements the gateway's task API: order-split submission
// (validate, record PROCESSING in Redis, publish the job with confirms, and
// only then answer) and reading, listing, cancelling and watching a
// member's tasks.
package tasks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orderflow/orderflow/pkg/engine/amqpbus"
	"github.com/orderflow/orderflow/pkg/engine/jobqueue"
	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	errcodev1 "github.com/orderflow/orderflow/pkg/gen/orderflow/errcode/v1"
	gatewayv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/gateway/v1"
	jobv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/job/v1"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/platform/apierr"
	"github.com/orderflow/orderflow/pkg/platform/auth"
	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/platform/cost"
	"github.com/orderflow/orderflow/pkg/platform/errmsg"
	"github.com/orderflow/orderflow/pkg/platform/logging"
	"github.com/orderflow/orderflow/pkg/platform/redisconn"
	"github.com/orderflow/orderflow/pkg/platform/rules"
)

// Publisher sends a message and waits for the broker's confirm. An error
// wraps amqpbus.ErrNotQueued only when the broker certainly did not queue
// the message; the wait must not end with ctx.
type Publisher interface {
	Publish(ctx context.Context, exchange, key string, msg amqp.Publishing) error
}

// Authenticator resolves the calling member and the roles its token
// grants.
type Authenticator interface {
	Member(ctx context.Context) (string, error)
	Identity(ctx context.Context) (auth.Identity, error)
}

// Options configure a Server.
type Options struct {
	// Rules are the order-split rules with the deployment's caps
	// (required).
	Rules *rules.OrderSplit
	Queue jobqueue.Names
	// OutboxGrace is how long after a submission a sweeper may republish a
	// job whose confirm was never recorded.
	OutboxGrace time.Duration
	// RepairGrace is how long a task may stay PROCESSING with no live
	// lease before its job is published again (see SweepRepair).
	RepairGrace time.Duration
	// RollbackWait bounds the undo of a submission whose create failed
	// with an unknown outcome (DefaultRollbackWait when 0).
	RollbackWait time.Duration
	Clock        clock.Clock
	Registerer   prometheus.Registerer
	// MaxWatches is how many watches one member may hold open on this
	// replica (DefaultMaxWatches when 0); one more is RESOURCE_EXHAUSTED.
	MaxWatches int
	// MaxWatchesTotal is how many watches this replica holds open for all
	// members together (DefaultMaxWatchesTotal when 0); one more is
	// RESOURCE_EXHAUSTED with reason ReasonWatchCapacity and a retry delay.
	MaxWatchesTotal int
	// MaxWatchLifetime ends a watch after this long (DefaultMaxWatchLifetime
	// when 0); the client opens a new one if it still cares.
	MaxWatchLifetime time.Duration
	// WatchResync is how often a watch re-reads its task in case a change
	// notification was lost (taskstore.DefaultResync when 0).
	WatchResync time.Duration
}

// Bounds used when Options leave them 0.
const (
	DefaultMaxWatches       = 8
	DefaultMaxWatchesTotal  = 10000
	DefaultMaxWatchLifetime = 30 * time.Minute
	DefaultRollbackWait     = time.Second
)

// ReasonTooManyWatches is the ErrorInfo reason of a watch refused because
// the member already holds MaxWatches.
const ReasonTooManyWatches = "TOO_MANY_WATCHES"

// ReasonWatchCapacity is the ErrorInfo reason of a watch refused because
// the replica already holds MaxWatchesTotal; its metadata
// retryAfterSeconds (and the REST Retry-After header) is
// WatchCapacityRetryAfter.
const ReasonWatchCapacity = "WATCH_CAPACITY"

// WatchCapacityRetryAfter is the delay a client refused for the replica's
// watch capacity is asked to wait (or to poll GetTask meanwhile).
const WatchCapacityRetryAfter = 10 * time.Second

// Server serves OrderSplitService and TaskService.
type Server struct {
	gatewayv1.UnimplementedOrderSplitServiceServer
	gatewayv1.UnimplementedTaskServiceServer

	store   *taskstore.Store
	hub     *taskstore.Hub
	cleaner *taskstore.Cleaner
	pub     Publisher
	authn   Authenticator
	log     *slog.Logger
	opts    Options
	watches watchCounts

	submitted *prometheus.CounterVec
	// accepted counts the submissions that created a task (accepted or
	// unconfirmed), for the operations charts (Accepted).
	accepted atomic.Int64
}

var (
	_ gatewayv1.OrderSplitServiceServer = (*Server)(nil)
	_ gatewayv1.TaskServiceServer       = (*Server)(nil)
)

// New returns a Server.
func New(store *taskstore.Store, pub Publisher, authn Authenticator, log *slog.Logger, opts Options) *Server {
	if opts.Clock == nil {
		opts.Clock = clock.Real{}
	}
	if opts.Rules == nil {
		panic("tasks: Options.Rules is required")
	}
	if opts.OutboxGrace <= 0 {
		opts.OutboxGrace = 30 * time.Second
	}
	if opts.RepairGrace <= 0 {
		opts.RepairGrace = taskstore.DefaultRepairGrace
	}
	if opts.RollbackWait <= 0 {
		opts.RollbackWait = DefaultRollbackWait
	}
	if opts.MaxWatches <= 0 {
		opts.MaxWatches = DefaultMaxWatches
	}
	if opts.MaxWatchesTotal <= 0 {
		opts.MaxWatchesTotal = DefaultMaxWatchesTotal
	}
	if opts.MaxWatchLifetime <= 0 {
		opts.MaxWatchLifetime = DefaultMaxWatchLifetime
	}
	s := &Server{
		store: store, hub: store.NewHub(taskstore.HubOptions{Resync: opts.WatchResync}), cleaner: store.NewOutboxCleaner(4096), pub: pub, authn: authn, log: log, opts: opts,
		submitted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "orderflow_gateway_submissions_total",
			Help: "Order-split submissions by outcome (accepted, unconfirmed, repeated, invalid, unavailable).",
		}, []string{"outcome"}),
	}
	if opts.Registerer != nil {
		opts.Registerer.MustRegister(s.submitted)
	}
	return s
}

// Accepted returns how many submissions this replica has accepted (each
// created a task; a repeated request id is not counted) since it started.
func (s *Server) Accepted() int64 { return s.accepted.Load() }

// CreateOrderSplit validates the order, records the task, publishes the
// job and returns the PROCESSING task. If the broker certainly did not
// queue the job (nack, unroutable, no connection), the task is removed and
// the caller gets UNAVAILABLE. If the outcome is unknown (the confirm timed
// out or the channel dropped after sending), the task is kept, the outbox
// publishes the job again after its grace, and the caller gets the
// PROCESSING task: no task a worker may own is ever removed. If the store
// fails and the task cannot be removed either, the caller gets
// UNAVAILABLE saying the task may exist (outcome=UNKNOWN), to be learnt by
// submitting again with the same request_id.
func (s *Server) CreateOrderSplit(ctx context.Context, req *gatewayv1.CreateOrderSplitRequest) (*gatewayv1.CreateOrderSplitResponse, error) {
	ctx = cost.WithStep(ctx, cost.Submit)
	member, err := s.admit(ctx, req)
	if err != nil {
		return nil, err
	}
	id, err := taskstore.NewID()
	if err != nil {
		return nil, err
	}
	ctx = logging.WithTask(ctx, id)
	priority := req.GetPriority()
	if priority == taskv1.Priority_PRIORITY_UNSPECIFIED {
		priority = taskv1.Priority_PRIORITY_NORMAL
	}
	msg, err := jobqueue.Encode(ctx, &jobv1.SplitJob{
		Priority:   priority,
		TaskId:     id,
		MemberId:   member,
		OrderCode:  req.GetOrderCode(),
		Items:      req.GetItems(),
		SubmitTime: timestamppb.New(s.opts.Clock.Now()),
	})
	if err != nil {
		return nil, err
	}
	task, created, err := s.store.CreateQueued(ctx, member, &taskv1.Task{
		TaskId:    id,
		Kind:      taskv1.TaskKind_TASK_KIND_ORDER_SPLIT,
		OrderCode: req.GetOrderCode(),
		RequestId: req.GetRequestId(),
		Priority:  priority,
	}, msg.Body, s.opts.OutboxGrace)
	if err != nil {
		return nil, s.createFailed(ctx, member, id, req.GetRequestId(), err)
	}
	if !created {
		s.submitted.WithLabelValues("repeated").Inc()
		s.log.InfoContext(ctx, "repeated request id returns earlier task",
			"request_id", req.GetRequestId(), "earlier_task_id", task.GetTaskId())
		return &gatewayv1.CreateOrderSplitResponse{Task: task}, nil
	}
	if err := s.pub.Publish(ctx, s.opts.Queue.Exchange, jobqueue.RoutingKey, msg); err != nil {
		return s.publishFailed(ctx, member, task, err)
	}
	if err := s.cleaner.Done(ctx, member, id); err != nil {
		s.log.WarnContext(ctx, "outbox cleanup failed", "err", err)
	}
	s.submitted.WithLabelValues("accepted").Inc()
	s.accepted.Add(1)
	// Debug: an accepted order is the hot path, and a line per submission
	// would cost a write to the log per request.
	s.log.DebugContext(ctx, "order split accepted", "order_code", req.GetOrderCode(), "items", len(req.GetItems()))
	return &gatewayv1.CreateOrderSplitResponse{Task: task}, nil
}

// admit returns the calling member when the submission is valid and the
// caller may ask for its priority.
func (s *Server) admit(ctx context.Context, req *gatewayv1.CreateOrderSplitRequest) (string, error) {
	caller, err := s.authn.Identity(ctx)
	if err != nil {
		return "", err
	}
	if err := validateSplit(req, s.opts.Rules); err != nil {
		s.submitted.WithLabelValues("invalid").Inc()
		return "", err
	}
	if req.GetPriority() == taskv1.Priority_PRIORITY_HIGH && !caller.HasRole(auth.RolePriority) {
		s.submitted.WithLabelValues("invalid").Inc()
		return "", apierr.FieldDenied("priority", "PRIORITY_HIGH needs the "+auth.RolePriority+" role")
	}
	return caller.Member, nil
}

// createFailed answers a submission whose create failed with err, after
// undoing what Redis may have written.
func (s *Server) createFailed(ctx context.Context, member, id, requestID string, err error) error {
	if errors.Is(err, redisconn.ErrNotAnswering) {
		// Refused unsent: Redis is known silent, nothing was written.
		return s.storeUnavailable(ctx, err)
	}
	// Redis may have run the create before the error (a timeout, a
	// failover that cut the replica wait short): undo it, waiting at
	// most RollbackWait so the caller's answer stays prompt. If that
	// fails too, the outbox entry stays and a sweeper publishes the
	// job later, so the task is not stranded — and the caller is told
	// that it may exist. No read-back: it would go to the store that
	// has just failed twice; the caller's retry with its request_id
	// is the read-back.
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.RollbackWait)
	defer cancel()
	if rbErr := s.store.Rollback(bg, member, &taskv1.Task{TaskId: id, RequestId: requestID}); rbErr != nil {
		return s.createOutcomeUnknown(ctx, requestID, err, rbErr)
	}
	s.forget(bg, member, id)
	return s.storeUnavailable(ctx, err)
}

// publishFailed answers a submission whose task was created but whose
// job's publish failed with err: the task is kept when the job may be
// queued or published by a sweeper, else rolled back.
func (s *Server) publishFailed(ctx context.Context, member string, task *taskv1.Task, err error) (*gatewayv1.CreateOrderSplitResponse, error) {
	id := task.GetTaskId()
	if !errors.Is(err, amqpbus.ErrNotQueued) {
		// The broker may have queued the job and a worker may own the
		// task already, so the task stays. Its outbox entry stays too:
		// after the grace a sweeper publishes the job again if the task
		// is still PROCESSING (the worker skips a duplicate). The task
		// is accepted either way, so the caller gets it.
		s.submitted.WithLabelValues("unconfirmed").Inc()
		s.accepted.Add(1)
		s.log.WarnContext(ctx, "split job confirm unknown; task kept for the outbox", "err", err)
		return &gatewayv1.CreateOrderSplitResponse{Task: task}, nil
	}
	// This publish certainly queued nothing. But when it took longer
	// than the outbox grace, a sweeper (of any replica) may have
	// published the job already and a worker run it: the task stays
	// then, as for an unknown outcome.
	bg := context.WithoutCancel(ctx)
	if ok, wErr := s.store.OutboxWithdraw(bg, member, id); !ok {
		s.submitted.WithLabelValues("unconfirmed").Inc()
		s.accepted.Add(1)
		s.log.WarnContext(ctx, "split job not queued by this publish but its outbox entry was taken or due; task kept for the outbox", "err", err, "withdraw_err", wErr)
		return &gatewayv1.CreateOrderSplitResponse{Task: task}, nil
	}
	// The job is in no queue and no sweeper will publish it: undo,
	// even if the caller has gone away.
	if rbErr := s.store.Rollback(bg, member, task); rbErr != nil {
		// The task's repair entry stays, so the repair sweeper
		// publishes the job (or fails the task) after the repair grace;
		// the task is not left PROCESSING forever.
		s.log.ErrorContext(ctx, "publish failed and rollback failed; the repair sweeper will republish", "err", err, "rollback_err", rbErr)
	} else {
		s.forget(bg, member, id)
	}
	s.submitted.WithLabelValues("unavailable").Inc()
	s.log.WarnContext(ctx, "split job not queued by broker; task rolled back", "err", err)
	return nil, apierr.New(codes.Unavailable, apierr.ReasonQueueUnavailable,
		"the task queue is unavailable, please retry later")
}

// forget removes the outbox and repair entries of a task that was not
// created or was rolled back; a failure only means a sweeper will look at
// the task later and find nothing to do.
func (s *Server) forget(ctx context.Context, member, id string) {
	if err := s.store.Forget(ctx, member, id); err != nil {
		s.log.WarnContext(ctx, "outbox cleanup failed", "err", err)
	}
}

func (s *Server) storeUnavailable(ctx context.Context, err error) error {
	s.submitted.WithLabelValues("unavailable").Inc()
	s.log.ErrorContext(ctx, "task store unavailable", "err", err)
	return apierr.New(codes.Unavailable, apierr.ReasonStoreUnavailable,
		"the task store is unavailable, please retry later")
}

// createOutcomeUnknown answers a create the store failed and could not
// undo: the task may exist (it completes through the outbox). The answer
// says so and how to learn the task's id; its ErrorInfo carries
// outcome=UNKNOWN. The store's errors stay in the log.
func (s *Server) createOutcomeUnknown(ctx context.Context, requestID string, err, rbErr error) error {
	s.submitted.WithLabelValues("unavailable").Inc()
	s.log.ErrorContext(ctx, "task store failed during the create and the rollback failed; the task may exist",
		"request_id", requestID, "err", err, "rollback_err", rbErr)
	if requestID == "" {
		return apierr.New(codes.Unavailable, apierr.ReasonStoreUnavailable,
			"the task store failed during the submit, so the task may have been created; "+
				"the request has no request_id, so a retry may start a second task",
			"outcome", "UNKNOWN")
	}
	return apierr.New(codes.Unavailable, apierr.ReasonStoreUnavailable,
		"the task store failed during the submit, so the task may have been created; "+
			"submit again with the same request_id to learn its id",
		"outcome", "UNKNOWN", "request_id", requestID)
}

// GetTask returns one of the caller's tasks.
func (s *Server) GetTask(ctx context.Context, req *gatewayv1.GetTaskRequest) (*gatewayv1.GetTaskResponse, error) {
	ctx = cost.WithStep(ctx, cost.Status)
	member, err := s.authn.Member(ctx)
	if err != nil {
		return nil, err
	}
	t, err := s.store.Get(ctx, member, req.GetTaskId())
	if err != nil {
		return nil, s.taskError(ctx, err)
	}
	return &gatewayv1.GetTaskResponse{Task: t}, nil
}

// taskError maps task-store errors to API errors.
func (s *Server) taskError(ctx context.Context, err error) error {
	switch {
	case errors.Is(err, taskstore.ErrNotFound):
		return apierr.New(codes.NotFound, apierr.ReasonTaskNotFound, "task does not exist or has expired")
	case errors.Is(err, taskstore.ErrExpired):
		return apierr.New(codes.NotFound, apierr.ReasonTaskExpired, "task does not exist or has expired")
	case errors.Is(err, taskstore.ErrBadToken):
		return apierr.Field("pageToken", "is not a token returned by a previous page")
	default:
		return s.storeUnavailable(ctx, err)
	}
}

// ListTasks lists the caller's tasks, newest first.
func (s *Server) ListTasks(ctx context.Context, req *gatewayv1.ListTasksRequest) (*gatewayv1.ListTasksResponse, error) {
	member, err := s.authn.Member(ctx)
	if err != nil {
		return nil, err
	}
	if err := rules.Tasks.PageSize.CheckInt(int64(req.GetPageSize())); err != nil {
		return nil, err
	}
	size := int(req.GetPageSize())
	if size == 0 {
		size = 20
	}
	tasks, next, err := s.store.List(ctx, member, size, req.GetPageToken())
	if err != nil {
		return nil, s.taskError(ctx, err)
	}
	return &gatewayv1.ListTasksResponse{Tasks: tasks, NextPageToken: next}, nil
}

// CancelTask cancels one of the caller's tasks that is still processing.
func (s *Server) CancelTask(ctx context.Context, req *gatewayv1.CancelTaskRequest) (*gatewayv1.CancelTaskResponse, error) {
	member, err := s.authn.Member(ctx)
	if err != nil {
		return nil, err
	}
	ctx = logging.WithTask(ctx, req.GetTaskId())
	t, err := s.store.Cancel(ctx, member, req.GetTaskId(), int32(errcodev1.ErrorCode_ERROR_CODE_TASK_CANCELLED),
		errmsg.Message(errcodev1.ErrorCode_ERROR_CODE_TASK_CANCELLED))
	if errors.Is(err, taskstore.ErrTerminal) {
		return nil, apierr.New(codes.FailedPrecondition, apierr.ReasonTaskFinished,
			"task has already finished", "status", t.GetStatus().String())
	}
	if err != nil {
		return nil, s.taskError(ctx, err)
	}
	s.log.InfoContext(ctx, "task cancelled by member")
	return &gatewayv1.CancelTaskResponse{Task: t}, nil
}

// WatchTask streams the task's state and each change until it is terminal.
func (s *Server) WatchTask(req *gatewayv1.WatchTaskRequest, stream grpc.ServerStreamingServer[gatewayv1.WatchTaskResponse]) error {
	ctx := stream.Context()
	member, err := s.authn.Member(ctx)
	if err != nil {
		return err
	}
	release, err := s.watches.acquire(member, s.opts.MaxWatches, s.opts.MaxWatchesTotal)
	if err != nil {
		return err
	}
	defer release()
	ctx, cancel := context.WithTimeout(ctx, s.opts.MaxWatchLifetime)
	defer cancel()
	err = s.hub.Watch(ctx, member, req.GetTaskId(), func(t *taskv1.Task) error {
		return stream.Send(&gatewayv1.WatchTaskResponse{Task: t})
	})
	if err != nil && ctx.Err() == nil {
		return s.taskError(ctx, err)
	}
	return nil
}

// RunWatches serves the replica's task watches over one shared Redis
// subscription until ctx ends (then open watches end).
func (s *Server) RunWatches(ctx context.Context) { s.hub.Run(ctx) }

// CleanOutbox removes confirmed submissions from the outbox in batches
// until ctx ends. Entries it could not remove are found finished by a
// sweeper later, so a failure is only logged. Its round trips are counted
// as the batched step's (package cost): one batch serves many orders under
// load.
func (s *Server) CleanOutbox(ctx context.Context) {
	if err := s.cleaner.Run(cost.WithStep(ctx, cost.Batched)); err != nil {
		s.log.Warn("outbox cleanup at shutdown failed; a sweeper will drop the entries", "err", err)
	}
}

// SweepOutbox republishes, every interval until ctx ends, the jobs of
// tasks whose publication was never confirmed (their submitter died).
func (s *Server) SweepOutbox(ctx context.Context, interval time.Duration) {
	clock.Every(ctx, interval, func() {
		entries, err := s.store.OutboxClaim(ctx, 100, s.opts.OutboxGrace)
		if err != nil {
			s.log.WarnContext(ctx, "outbox sweep failed", "err", err)
			return
		}
		for _, e := range entries {
			ectx := logging.WithTask(ctx, e.TaskID)
			msg := jobqueue.Message(ectx, e.Member, e.TaskID, e.Job)
			if err := s.pub.Publish(ectx, s.opts.Queue.Exchange, jobqueue.RoutingKey, msg); err != nil {
				s.log.WarnContext(ectx, "outbox republish failed; will retry", "err", err)
				continue
			}
			if err := s.store.OutboxDone(ectx, e.Member, e.TaskID); err != nil {
				s.log.WarnContext(ectx, "outbox cleanup failed", "err", err)
			}
			s.log.InfoContext(ectx, "republished job from outbox")
		}
	})
}

// SweepRepair looks, every interval until ctx ends, for tasks PROCESSING
// past the repair grace with no live lease (their job is gone: dropped by
// the broker, or lost with a Redis restart), and publishes each one's
// stored job again; the worker skips a duplicate. A task that has been
// republished taskstore.MaxRepairs times, or has no stored job, is failed
// with 10009 instead, so nothing stays PROCESSING until its TTL.
func (s *Server) SweepRepair(ctx context.Context, interval time.Duration) {
	clock.Every(ctx, interval, func() {
		entries, err := s.store.RepairClaim(ctx, 100, s.opts.RepairGrace)
		if err != nil {
			s.log.WarnContext(ctx, "repair sweep failed", "err", err)
			return
		}
		for _, e := range entries {
			s.repair(logging.WithTask(ctx, e.TaskID), e)
		}
	})
}

func (s *Server) repair(ctx context.Context, e taskstore.RepairEntry) {
	if len(e.Job) == 0 || e.Repairs > taskstore.MaxRepairs {
		_, err := s.store.Finish(ctx, e.Member, e.TaskID, nil, func(t *taskv1.Task) {
			t.Status = taskv1.TaskStatus_TASK_STATUS_FAILED
			t.ErrorCode = int32(errcodev1.ErrorCode_ERROR_CODE_DELIVERY_LIMIT)
			t.ErrorMsg = errmsg.Message(errcodev1.ErrorCode(t.ErrorCode))
		})
		if err != nil && !errors.Is(err, taskstore.ErrTerminal) {
			s.log.WarnContext(ctx, "repair could not fail a task whose job is lost; will retry", "err", err)
			return
		}
		s.log.ErrorContext(ctx, "task failed: its job was lost and republishing did not help", "repairs", e.Repairs-1)
		_ = s.store.RepairDone(ctx, e.Member, e.TaskID)
		return
	}
	msg := jobqueue.Message(ctx, e.Member, e.TaskID, e.Job)
	if err := s.pub.Publish(ctx, s.opts.Queue.Exchange, jobqueue.RoutingKey, msg); err != nil {
		s.log.WarnContext(ctx, "repair republish failed; will retry", "err", err)
		return
	}
	s.log.WarnContext(ctx, "republished the job of a task left PROCESSING with no worker", "repairs", e.Repairs)
}

// watchCounts counts each member's open watches, and all of them, on this
// replica.
type watchCounts struct {
	mu    sync.Mutex
	n     map[string]int
	total int
}

// acquire takes one of member's max watch places and one of the replica's
// total; release gives them back. Over either cap it returns the
// RESOURCE_EXHAUSTED error the caller gets.
func (w *watchCounts) acquire(member string, max, total int) (release func(), err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n == nil {
		w.n = make(map[string]int)
	}
	if w.n[member] >= max {
		return nil, apierr.New(codes.ResourceExhausted, ReasonTooManyWatches,
			fmt.Sprintf("at most %d open watches per member; close one first", max))
	}
	if w.total >= total {
		secs := strconv.Itoa(int(WatchCapacityRetryAfter / time.Second))
		return nil, apierr.New(codes.ResourceExhausted, ReasonWatchCapacity,
			"this replica holds all the watches it serves; poll the task or retry after "+secs+"s", "retryAfterSeconds", secs)
	}
	w.n[member]++
	w.total++
	return func() {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.total--
		if w.n[member]--; w.n[member] <= 0 {
			delete(w.n, member)
		}
	}, nil
}
