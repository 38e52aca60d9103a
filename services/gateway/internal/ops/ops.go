// Package ops implements the gateway's operations API
// (orderflow.ops.v1.OpsService): the overview of the job queue, tasks in
// flight and the running pool; finding, retrying, failing and cancelling
// any member's task; listing, replaying and discarding dead letters; the
// running pool's holders and waiters, its capacity and the release of a
// dead holder; a member's payment and its tracking. Every call needs the
// admin role or the service-to-service token; every mutation is logged
// with its actor and recorded in the audit stream.
package ops

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	amqp "github.com/rabbitmq/amqp091-go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/orderflow/orderflow/pkg/engine/eventrate"
	"github.com/orderflow/orderflow/pkg/engine/inflight"
	"github.com/orderflow/orderflow/pkg/engine/jobqueue"
	"github.com/orderflow/orderflow/pkg/engine/lease"
	"github.com/orderflow/orderflow/pkg/engine/slotpool"
	"github.com/orderflow/orderflow/pkg/engine/taskstore"
	errcodev1 "github.com/orderflow/orderflow/pkg/gen/orderflow/errcode/v1"
	jobv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/job/v1"
	opsv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/ops/v1"
	reconcilerv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/reconciler/v1"
	taskv1 "github.com/orderflow/orderflow/pkg/gen/orderflow/task/v1"
	"github.com/orderflow/orderflow/pkg/platform/apierr"
	"github.com/orderflow/orderflow/pkg/platform/auth"
	"github.com/orderflow/orderflow/pkg/platform/clock"
	"github.com/orderflow/orderflow/pkg/platform/errmsg"
	"github.com/orderflow/orderflow/pkg/platform/logging"
)

// Publisher sends a message and waits for the broker's confirm.
type Publisher interface {
	Publish(ctx context.Context, exchange, key string, msg amqp.Publishing) error
}

// Channels opens AMQP channels (to read queue counts).
type Channels interface {
	Channel() (*amqp.Channel, error)
}

// Authenticator checks that the caller holds a role.
type Authenticator interface {
	RequireRole(ctx context.Context, role string) (context.Context, error)
}

// SlotPool is the split-workers' running pool as the operations API sees
// it: a *slotpool.Pool, or a *slotpool.Sharded, whose snapshot sums its
// shards, whose capacity is split over them and whose evictions go to the
// shard holding the token.
type SlotPool interface {
	Snapshot(ctx context.Context) (slotpool.Snapshot, error)
	Finished(ctx context.Context, count int) ([]slotpool.Finished, error)
	SetCapacity(ctx context.Context, n int) error
	ResetToConfiguration(ctx context.Context, cfg slotpool.Settings) error
	Evict(ctx context.Context, token, detail string) error
}

// Options are the Server's dependencies.
type Options struct {
	Store    *taskstore.Store
	Pub      Publisher
	Channels Channels
	Queue    jobqueue.Names
	Pool     SlotPool
	// PoolConfig is the split-workers' configured settings of the pool,
	// which ResetSlotPoolToConfiguration writes; nil when the gateway is
	// not told them (the reset is then refused).
	PoolConfig *slotpool.Settings
	// Reconciler answers payment calls (with the service token).
	Reconciler reconcilerv1.ReconcilerServiceClient
	Authn      Authenticator
	Audit      *Audit
	Log        *slog.Logger
	Clock      clock.Clock
	// OutboxGrace is how long a replayed job waits for its confirm before
	// the outbox sweeper republishes it.
	OutboxGrace time.Duration
	// Events reads the split-workers' cluster-wide event counts (the
	// error rates); nil leaves them out of the overview.
	Events *eventrate.Counter
	// InFlight reads the split-workers' reports of the deliveries they
	// hold unacknowledged; nil leaves the unacknowledged counts out.
	InFlight *inflight.Board
}

// Error-rate windows of the overview, in minutes.
var rateWindows = []int{5, 60}

// Server serves OpsService.
type Server struct {
	opsv1.UnimplementedOpsServiceServer
	o Options
}

var _ opsv1.OpsServiceServer = (*Server)(nil)

// New returns a Server.
func New(o Options) *Server {
	if o.Clock == nil {
		o.Clock = clock.Real{}
	}
	if o.OutboxGrace <= 0 {
		o.OutboxGrace = 30 * time.Second
	}
	return &Server{o: o}
}

// actor authorises the caller, a person with the admin role (no
// service's token is an admin credential), and names them for the log and
// the audit by their member id.
func (s *Server) actor(ctx context.Context) (string, error) {
	ctx, err := s.o.Authn.RequireRole(ctx, auth.RoleAdmin)
	if err != nil {
		return "", err
	}
	id, _ := auth.IdentityFrom(ctx)
	return id.Member, nil
}

// Bounds of an audit event's fields (bytes): a longer value is cut.
const (
	maxAuditTarget = 256
	maxAuditDetail = 4096
	maxAuditResult = 1024
)

// mutate authorises, validates the request (valid, may be nil; a refusal
// is answered and neither logged nor audited), runs fn, logs the outcome
// with the actor and records it in the audit stream, its target, detail
// and result cut to their bounds. A mutation whose audit record cannot be
// written still happened; the failure is logged.
func (s *Server) mutate(ctx context.Context, action, target string, req proto.Message, valid func() error, fn func(ctx context.Context) error) error {
	actor, err := s.actor(ctx)
	if err != nil {
		return err
	}
	if valid != nil {
		if err := valid(); err != nil {
			return err
		}
	}
	detail, _ := protojson.Marshal(req)
	err = fn(slotpool.WithActor(ctx, actor))
	result := "ok"
	if err != nil {
		result = status.Convert(err).Message()
	}
	target, result = clip(target, maxAuditTarget), clip(result, maxAuditResult)
	log := s.o.Log.With("actor", actor, "action", action, "target", target, "detail", clip(string(detail), maxAuditDetail), "result", result)
	if err != nil {
		log.WarnContext(ctx, "operator action failed")
	} else {
		log.InfoContext(ctx, "operator action")
	}
	e := &opsv1.AuditEvent{Time: timestamppb.New(s.o.Clock.Now()), Actor: actor, Action: action, Target: target, Detail: clip(string(detail), maxAuditDetail), Result: result}
	if aerr := s.o.Audit.Record(context.WithoutCancel(ctx), e); aerr != nil {
		log.ErrorContext(ctx, "audit record lost", "err", aerr)
	}
	return err
}

// clip cuts v to at most n bytes, on a rune boundary, ending it with "…"
// when it was cut.
func clip(v string, n int) string {
	if len(v) <= n {
		return v
	}
	const more = "…"
	i := n - len(more)
	for i > 0 && !utf8.RuneStart(v[i]) {
		i--
	}
	return v[:i] + more
}

// storeErr maps task-store errors to API errors.
func (s *Server) storeErr(ctx context.Context, err error) error {
	var claimed *taskstore.ClaimedError
	switch {
	case errors.Is(err, taskstore.ErrNotFound):
		return apierr.New(codes.NotFound, apierr.ReasonTaskNotFound, "task does not exist")
	case errors.Is(err, taskstore.ErrExpired):
		return apierr.New(codes.NotFound, apierr.ReasonTaskExpired, "task has expired")
	case errors.Is(err, taskstore.ErrTerminal):
		return apierr.New(codes.FailedPrecondition, apierr.ReasonTaskFinished, "task has already finished")
	case errors.As(err, &claimed):
		return apierr.New(codes.FailedPrecondition, apierr.ReasonOrderCodeClaimed,
			fmt.Sprintf("order code %s is held by task %s (the order was submitted again), so replaying this task would ship it twice; discard this dead letter", claimed.OrderCode, claimed.Holder),
			"orderCode", claimed.OrderCode, "holderTaskId", claimed.Holder)
	case errors.Is(err, taskstore.ErrNotFailed):
		return apierr.New(codes.FailedPrecondition, apierr.ReasonTaskFinished, "task is not FAILED, so there is nothing to replay")
	case errors.Is(err, errBadToken):
		return apierr.Field("pageToken", "is not a token returned by a previous page")
	case status.Code(err) != codes.Unknown:
		return err
	}
	s.o.Log.ErrorContext(ctx, "operations: store unavailable", "err", err)
	return apierr.New(codes.Unavailable, apierr.ReasonStoreUnavailable, "the task store is unavailable, please retry later")
}

func pageSize(n int32, def, max int) (int, error) {
	switch {
	case n < 0 || int(n) > max:
		return 0, apierr.Field("pageSize", fmt.Sprintf("must be between 0 and %d", max))
	case n == 0:
		return def, nil
	}
	return int(n), nil
}

func offsetToken(tok string) (int, error) {
	if tok == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(tok)
	if err != nil || n < 0 {
		return 0, apierr.Field("pageToken", "is not a token returned by a previous page")
	}
	return n, nil
}

func ref(member, id string) error {
	if !auth.ValidMemberID(member) {
		return apierr.Field("memberId", "must be a member id")
	}
	if !taskstore.ValidID(id) {
		return apierr.Field("taskId", "must be a task id (22 base64url characters)")
	}
	return nil
}

// GetOverview reads the queue counts, tasks in flight by age, the dead
// letters and the running pool.
func (s *Server) GetOverview(ctx context.Context, _ *opsv1.GetOverviewRequest) (*opsv1.GetOverviewResponse, error) {
	if _, err := s.actor(ctx); err != nil {
		return nil, err
	}
	out := &opsv1.GetOverviewResponse{
		Queue:           s.queueStats(s.o.Queue.Queue),
		DeadLetterQueue: s.queueStats(s.o.Queue.DLQ),
		Time:            timestamppb.New(s.o.Clock.Now()),
	}
	if s.o.Queue.Overflow != "" {
		out.OverflowQueue = s.queueStats(s.o.Queue.Overflow)
	}
	s.unacknowledged(ctx, map[string]*opsv1.QueueStats{
		inflight.Split: out.Queue, inflight.Overflow: out.OverflowQueue, inflight.Dead: out.DeadLetterQueue,
	})
	if s.o.Events != nil {
		ws, err := s.o.Events.Windows(ctx, rateWindows...)
		if err != nil {
			s.o.Log.WarnContext(ctx, "operations: error rates unavailable", "err", err)
			out.ErrorRatesError = "error rates unavailable: the task store did not answer"
		}
		for _, w := range ws {
			out.ErrorRates = append(out.ErrorRates, errorRates(w))
		}
	}
	counts, oldest, err := s.o.Store.ProcessingByAge(ctx, []time.Duration{0, time.Minute, 5 * time.Minute, 30 * time.Minute})
	if err != nil {
		return nil, s.storeErr(ctx, err)
	}
	out.Tasks = &opsv1.TaskStats{Processing: counts[0], OlderThan_1M: counts[1], OlderThan_5M: counts[2], OlderThan_30M: counts[3]}
	if !oldest.IsZero() {
		out.Tasks.OldestCreateTime = timestamppb.New(oldest)
	}
	if out.DeadLetters, err = s.o.Store.DeadLetterCount(ctx); err != nil {
		return nil, s.storeErr(ctx, err)
	}
	if s.o.Pool != nil {
		snap, err := s.o.Pool.Snapshot(ctx)
		if err != nil {
			return nil, s.storeErr(ctx, err)
		}
		out.SlotPool = poolStats(snap)
	}
	// The reconciler's counts are shown when it answers; the rest of the
	// overview does not wait for it.
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if r, err := s.o.Reconciler.GetStats(rctx, &reconcilerv1.GetStatsRequest{}); err != nil {
		out.PaymentsError = "payment reconciler unreachable: " + status.Convert(err).Message()
	} else {
		out.Payments = r.GetStats()
	}
	return out, nil
}

// GetRates reads the per-minute counts of the last minutes (60 by
// default) and the gauges' peaks the Samplers observed.
func (s *Server) GetRates(ctx context.Context, req *opsv1.GetRatesRequest) (*opsv1.GetRatesResponse, error) {
	if _, err := s.actor(ctx); err != nil {
		return nil, err
	}
	minutes := int(req.GetMinutes())
	if minutes < 0 || minutes > 60 {
		return nil, apierr.Field("minutes", "must be between 0 and 60")
	}
	if minutes == 0 {
		minutes = 60
	}
	if s.o.Events == nil {
		return nil, apierr.New(codes.Unavailable, apierr.ReasonStoreUnavailable, "rates are not kept by this gateway")
	}
	ser, err := s.o.Events.Series(ctx, minutes)
	if err != nil {
		return nil, s.storeErr(ctx, err)
	}
	submitted, finished := ser.Sum(eventrate.TaskSubmitted), ser.Sum(eventrate.TaskFinished)
	failed, dead := ser.Sum(eventrate.TaskFailed), ser.Sum(eventrate.DeadLettered)
	util, late := ser.Gauge(GaugeSlotUtilisation), ser.Gauge(GaugeCheckLateness)
	out := &opsv1.GetRatesResponse{Time: timestamppb.New(ser.End)}
	for i := range minutes {
		p := &opsv1.RateMinute{
			StartTime: timestamppb.New(ser.Start.Add(time.Duration(i) * time.Minute)),
			Submitted: submitted[i], Finished: finished[i], Failed: failed[i], DeadLettered: dead[i],
		}
		if !math.IsNaN(util[i]) {
			p.SlotUtilisation = proto.Float64(util[i])
		}
		if !math.IsNaN(late[i]) {
			p.CheckLatenessSeconds = proto.Float64(late[i])
		}
		out.Points = append(out.Points, p)
	}
	return out, nil
}

// errorRates converts a window of the split-workers' event counts.
func errorRates(w eventrate.Window) *opsv1.ErrorRates {
	r := &opsv1.ErrorRates{
		StartTime: timestamppb.New(w.Start), EndTime: timestamppb.New(w.End),
		TasksFinished: w.Counts[eventrate.TaskFinished], TasksFailed: w.Sum(eventrate.TaskFailed),
		DeadLettered: w.Counts[eventrate.DeadLettered],
	}
	for _, name := range w.Names(eventrate.TaskFailed) {
		c, err := strconv.ParseInt(strings.TrimPrefix(name, eventrate.TaskFailed), 10, 32)
		if err != nil {
			continue
		}
		r.FailedByCode = append(r.FailedByCode, &opsv1.ErrorCodeCount{ErrorCode: int32(c), Count: w.Counts[name]})
	}
	return r
}

// queueStats declares the queue passively: AMQP reports ready messages
// and consumers (not unacknowledged ones, see unacknowledged).
func (s *Server) queueStats(name string) *opsv1.QueueStats {
	st := &opsv1.QueueStats{Name: name}
	ch, err := s.o.Channels.Channel()
	if err != nil {
		st.Error = "broker unreachable: " + err.Error()
		return st
	}
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
	if err != nil {
		st.Error = err.Error()
		return st
	}
	st.Ready, st.Consumers = int64(q.Messages), int64(q.Consumers)
	return st
}

// unacknowledged fills in each queue's deliveries held unacknowledged by
// the split-worker replicas, from their live reports.
func (s *Server) unacknowledged(ctx context.Context, queues map[string]*opsv1.QueueStats) {
	if s.o.InFlight == nil {
		return
	}
	tot, err := s.o.InFlight.Sum(ctx)
	if err != nil {
		s.o.Log.WarnContext(ctx, "operations: unacknowledged counts unavailable", "err", err)
	}
	for name, st := range queues {
		if st == nil {
			continue
		}
		if err != nil {
			st.UnacknowledgedError = "unacknowledged count unavailable: the task store did not answer"
			continue
		}
		st.Unacknowledged, st.ReportingReplicas = tot.Held[name], int32(tot.Replicas)
	}
}

func poolStats(snap slotpool.Snapshot) *opsv1.SlotPoolStats {
	st := &opsv1.SlotPoolStats{Capacity: int32(snap.Capacity), InUse: int32(len(snap.Holders) + len(snap.Orphaned)), Waiting: int32(len(snap.Pending)), Reclaimed: snap.Reclaimed,
		CapacityOrigin: settingOrigin(snap.Origin.Capacity), FairnessOrigin: settingOrigin(snap.Origin.Fairness), WeightsOrigin: settingOrigin(snap.Origin.Weights)}
	var oldest time.Duration
	for _, g := range snap.Groups {
		oldest = max(oldest, g.OldestWait)
		st.Groups = append(st.Groups, &opsv1.SlotGroupStats{Group: g.Group, Weight: int32(g.Weight), Holding: int32(g.Holding),
			Waiting: int32(g.Waiting), WaitingHigh: int32(g.WaitingHigh), OldestWait: durationpb.New(g.OldestWait)})
	}
	st.OldestWait = durationpb.New(oldest)
	return st
}

func settingOrigin(o *slotpool.Origin) *opsv1.SlotSettingOrigin {
	if o == nil {
		return nil
	}
	return &opsv1.SlotSettingOrigin{Source: string(o.Source), Actor: o.Actor, Time: timestamppb.New(o.Time)}
}

// ListProcessingTasks pages through PROCESSING tasks, oldest first.
// Index entries whose task has finished are dropped on the way.
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

// FindTasks finds tasks by id (any member, or the given one), by member
// (their newest tasks) or by order code (any member, or the given one).
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

// GetTaskDetail returns a task with its job, lease, plan, shipment
// outcomes, dead letter and outbox state.
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

// RetryTask publishes a PROCESSING task's stored job again (the worker
// tolerates a duplicate: lease, stored plan, idempotency keys).
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

// ReplayAllDeadLetters replays every replayable dead letter, up to limit;
// the ones it leaves alone are counted and listed with the reason a single
// replay gives.
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

// DiscardDeadLetter drops a dead letter; a task still PROCESSING (a replay
// in progress) is failed with the given code.
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

// GetSlotPool returns the running pool's holders, waiters and recently
// finished jobs.
func (s *Server) GetSlotPool(ctx context.Context, req *opsv1.GetSlotPoolRequest) (*opsv1.GetSlotPoolResponse, error) {
	if _, err := s.actor(ctx); err != nil {
		return nil, err
	}
	n := int(req.GetFinishedCount())
	if n < 0 || n > 200 {
		return nil, apierr.Field("finishedCount", "must be between 0 and 200")
	}
	if n == 0 {
		n = 20
	}
	snap, err := s.o.Pool.Snapshot(ctx)
	if err != nil {
		return nil, s.storeErr(ctx, err)
	}
	fin, err := s.o.Pool.Finished(ctx, n)
	if err != nil {
		return nil, s.storeErr(ctx, err)
	}
	out := &opsv1.GetSlotPoolResponse{Stats: poolStats(snap)}
	for _, h := range snap.Holders {
		out.Holders = append(out.Holders, &opsv1.SlotHolder{JobId: h.JobID, Token: h.Token, Group: h.Group, Since: timestamppb.New(h.Since), LeaseUntil: timestamppb.New(h.LeaseUntil), Replica: h.Replica})
	}
	for _, w := range snap.Pending {
		out.Waiters = append(out.Waiters, &opsv1.SlotWaiter{JobId: w.JobID, Group: w.Group, Priority: w.Priority.String(), Since: timestamppb.New(w.Since), Replica: w.Replica})
	}
	for _, f := range fin {
		out.Finished = append(out.Finished, &opsv1.SlotFinished{JobId: f.JobID, Group: f.Group, Outcome: f.Outcome.String(), Detail: f.Detail, Held: durationpb.New(f.Held), Time: timestamppb.New(f.Time)})
	}
	return out, nil
}

// mutatePool is mutate for a change of the running pool: it validates the
// request (valid, may be nil), runs fn and returns the pool's counts after
// it. Pool errors of fn become API errors (storeErr); API errors pass
// through.
func (s *Server) mutatePool(ctx context.Context, action, target string, req proto.Message, valid func() error, fn func(ctx context.Context) error) (*opsv1.SlotPoolStats, error) {
	var stats *opsv1.SlotPoolStats
	err := s.mutate(ctx, action, target, req, valid, func(ctx context.Context) error {
		if err := fn(ctx); err != nil {
			return s.storeErr(ctx, err)
		}
		snap, err := s.o.Pool.Snapshot(ctx)
		if err != nil {
			return s.storeErr(ctx, err)
		}
		stats = poolStats(snap)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return stats, nil
}

// SetSlotCapacity changes N for every replica.
func (s *Server) SetSlotCapacity(ctx context.Context, req *opsv1.SetSlotCapacityRequest) (*opsv1.SetSlotCapacityResponse, error) {
	valid := func() error {
		if req.GetCapacity() < 0 || req.GetCapacity() > 10000 {
			return apierr.Field("capacity", "must be between 0 and 10000")
		}
		return nil
	}
	stats, err := s.mutatePool(ctx, "SetSlotCapacity", "slot-pool", req, valid, func(ctx context.Context) error {
		return s.o.Pool.SetCapacity(ctx, int(req.GetCapacity()))
	})
	if err != nil {
		return nil, err
	}
	return &opsv1.SetSlotCapacityResponse{Stats: stats}, nil
}

// ResetSlotPoolToConfiguration writes the configured N, fairness limits
// and weights whoever set the current ones.
func (s *Server) ResetSlotPoolToConfiguration(ctx context.Context, req *opsv1.ResetSlotPoolToConfigurationRequest) (*opsv1.ResetSlotPoolToConfigurationResponse, error) {
	valid := func() error {
		if s.o.PoolConfig == nil {
			return apierr.New(codes.FailedPrecondition, "SLOT_POOL_NOT_CONFIGURED",
				"the gateway is not told the split-workers' configured pool (set ORDERFLOW_SPLITWORKER_FULFILMENT_SLOTS on the gateway)")
		}
		return nil
	}
	stats, err := s.mutatePool(ctx, "ResetSlotPoolToConfiguration", "slot-pool", req, valid, func(ctx context.Context) error {
		return s.o.Pool.ResetToConfiguration(ctx, *s.o.PoolConfig)
	})
	if err != nil {
		return nil, err
	}
	return &opsv1.ResetSlotPoolToConfigurationResponse{Stats: stats}, nil
}

// ReleaseSlot frees the slot of a holder known to be dead.
func (s *Server) ReleaseSlot(ctx context.Context, req *opsv1.ReleaseSlotRequest) (*opsv1.ReleaseSlotResponse, error) {
	valid := func() error {
		if req.GetToken() == "" || len(req.GetToken()) > 128 {
			return apierr.Field("token", "must be a holder's token")
		}
		if len(req.GetReason()) > 500 {
			return apierr.Field("reason", "must be at most 500 characters")
		}
		return nil
	}
	stats, err := s.mutatePool(ctx, "ReleaseSlot", "slot "+req.GetToken(), req, valid, func(ctx context.Context) error {
		reason := "released by an operator"
		if req.GetReason() != "" {
			reason += ": " + req.GetReason()
		}
		err := s.o.Pool.Evict(ctx, req.GetToken(), reason)
		if errors.Is(err, slotpool.ErrLost) {
			return apierr.New(codes.NotFound, "SLOT_NOT_HELD", "no holder has this token (released or reclaimed already)")
		}
		return err
	})
	if err != nil {
		return nil, err
	}
	return &opsv1.ReleaseSlotResponse{Stats: stats}, nil
}

// GetPayment returns a payment, its member and its pending check from
// the reconciler; with a member id, another member's payment is NOT_FOUND.
func (s *Server) GetPayment(ctx context.Context, req *opsv1.GetPaymentRequest) (*opsv1.GetPaymentResponse, error) {
	if _, err := s.actor(ctx); err != nil {
		return nil, err
	}
	if m := req.GetMemberId(); m != "" && !auth.ValidMemberID(m) {
		return nil, apierr.Field("memberId", "must be a member id")
	}
	if err := orderCode(req.GetOrderCode()); err != nil {
		return nil, err
	}
	r, err := s.o.Reconciler.InspectPayment(ctx, &reconcilerv1.InspectPaymentRequest{OrderCode: req.GetOrderCode()})
	if err != nil {
		return nil, s.reconcilerErr(ctx, err)
	}
	if m := req.GetMemberId(); m != "" && r.GetMemberId() != m {
		return nil, apierr.New(codes.NotFound, apierr.ReasonPaymentNotFound, "payment does not exist")
	}
	return &opsv1.GetPaymentResponse{Payment: r.GetPayment(), MemberId: r.GetMemberId(), Check: r.GetCheck()}, nil
}

// ListStuckPayments pages through the payments whose reconciliation is
// stuck, oldest first.
func (s *Server) ListStuckPayments(ctx context.Context, req *opsv1.ListStuckPaymentsRequest) (*opsv1.ListStuckPaymentsResponse, error) {
	if _, err := s.actor(ctx); err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize(), 20, 100)
	if err != nil {
		return nil, err
	}
	if _, err := offsetToken(req.GetPageToken()); err != nil {
		return nil, err
	}
	r, err := s.o.Reconciler.ListStuckPayments(ctx, &reconcilerv1.ListStuckPaymentsRequest{PageSize: int32(size), PageToken: req.GetPageToken()})
	if err != nil {
		return nil, s.reconcilerErr(ctx, err)
	}
	return &opsv1.ListStuckPaymentsResponse{Payments: r.GetPayments(), NextPageToken: r.GetNextPageToken(), Total: r.GetTotal()}, nil
}

// maxReschedule is how far ahead an operator may move a check.
const maxReschedule = 7 * 24 * time.Hour

// RunPaymentCheck runs an UNPAID payment's due check now.
func (s *Server) RunPaymentCheck(ctx context.Context, req *opsv1.RunPaymentCheckRequest) (*opsv1.RunPaymentCheckResponse, error) {
	r, err := s.reschedule(ctx, "RunPaymentCheck", req, req.GetOrderCode(), nil, true)
	if err != nil {
		return nil, err
	}
	return &opsv1.RunPaymentCheckResponse{MemberId: r.GetMemberId(), Payment: r.GetPayment(), Check: r.GetCheck()}, nil
}

// ReschedulePaymentCheck moves an UNPAID payment's next check.
func (s *Server) ReschedulePaymentCheck(ctx context.Context, req *opsv1.ReschedulePaymentCheckRequest) (*opsv1.ReschedulePaymentCheckResponse, error) {
	r, err := s.reschedule(ctx, "ReschedulePaymentCheck", req, req.GetOrderCode(), req.GetCheckTime(), false)
	if err != nil {
		return nil, err
	}
	return &opsv1.ReschedulePaymentCheckResponse{MemberId: r.GetMemberId(), Payment: r.GetPayment(), Check: r.GetCheck()}, nil
}

// reschedule is the audited mutation of RunPaymentCheck (runNow: the
// check runs now) and ReschedulePaymentCheck (at, required).
func (s *Server) reschedule(ctx context.Context, action string, req proto.Message, code string, at *timestamppb.Timestamp, runNow bool) (*reconcilerv1.RescheduleCheckResponse, error) {
	var out *reconcilerv1.RescheduleCheckResponse
	valid := func() error {
		if err := orderCode(code); err != nil {
			return err
		}
		if runNow {
			return nil
		}
		now := s.o.Clock.Now()
		switch {
		case at == nil:
			return apierr.Field("checkTime", "is required")
		case !at.IsValid():
			return apierr.Field("checkTime", "must be a timestamp such as \"2030-01-02T15:04:05Z\"")
		case at.AsTime().Before(now.Add(-time.Minute)):
			return apierr.Field("checkTime", "must not be in the past (run the check now instead)")
		case at.AsTime().After(now.Add(maxReschedule)):
			return apierr.Field("checkTime", "must be at most 7 days ahead")
		}
		return nil
	}
	err := s.mutate(ctx, action, "payment "+code, req, valid, func(ctx context.Context) error {
		var err error
		out, err = s.o.Reconciler.RescheduleCheck(ctx, &reconcilerv1.RescheduleCheckRequest{OrderCode: code, CheckTime: at})
		if err != nil {
			return s.reconcilerErr(ctx, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// CancelPaymentTracking stops reconciling a member's unpaid payment.
func (s *Server) CancelPaymentTracking(ctx context.Context, req *opsv1.CancelPaymentTrackingRequest) (*opsv1.CancelPaymentTrackingResponse, error) {
	out := &opsv1.CancelPaymentTrackingResponse{}
	valid := func() error { return payRef(req.GetMemberId(), req.GetOrderCode()) }
	err := s.mutate(ctx, "CancelPaymentTracking", req.GetMemberId()+"/"+req.GetOrderCode(), req, valid, func(ctx context.Context) error {
		r, err := s.o.Reconciler.CancelTracking(ctx, &reconcilerv1.CancelTrackingRequest{MemberId: req.GetMemberId(), OrderCode: req.GetOrderCode()})
		if err != nil {
			return s.reconcilerErr(ctx, err)
		}
		out.Payment = r.GetPayment()
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func payRef(member, code string) error {
	if !auth.ValidMemberID(member) {
		return apierr.Field("memberId", "must be a member id")
	}
	return orderCode(code)
}

func orderCode(code string) error {
	if code == "" || len(code) > 32 {
		return apierr.Field("orderCode", "must be 1 to 32 characters")
	}
	return nil
}

// reconcilerErr passes the reconciler's answers through, except that a
// failure to reach it becomes UNAVAILABLE.
func (s *Server) reconcilerErr(ctx context.Context, err error) error {
	switch status.Code(err) {
	case codes.NotFound, codes.InvalidArgument, codes.FailedPrecondition, codes.AlreadyExists:
		return err
	}
	s.o.Log.WarnContext(ctx, "operations: reconciler call failed", "err", err)
	return apierr.New(codes.Unavailable, apierr.ReasonUpstream, "the payment reconciler is unavailable, please retry later")
}

// ListAuditEvents pages through the audit stream, newest first.
func (s *Server) ListAuditEvents(ctx context.Context, req *opsv1.ListAuditEventsRequest) (*opsv1.ListAuditEventsResponse, error) {
	if _, err := s.actor(ctx); err != nil {
		return nil, err
	}
	size, err := pageSize(req.GetPageSize(), 50, 200)
	if err != nil {
		return nil, err
	}
	events, next, err := s.o.Audit.List(ctx, size, req.GetPageToken())
	if err != nil {
		return nil, s.storeErr(ctx, err)
	}
	return &opsv1.ListAuditEventsResponse{Events: events, NextPageToken: next}, nil
}
